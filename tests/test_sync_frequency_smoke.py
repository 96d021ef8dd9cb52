"""Smoke test of bench/sync_frequency.py: the smallest settings run in seconds on CPU, and the
report has a row for every sync interval N and every model, with real (positive) numbers."""
import json

import pytest

from bench import sync_frequency

TINY = ["--device", "cpu", "--width", "16", "--rows", "4", "--gpt_batch", "1", "--seq_len", "8",
        "--ops", "1", "--repeats", "1", "--warmup", "1", "--small_size", "16", "--big_size", "32",
        "--pending", "2", "--pending_big", "1", "--item_trials", "2", "--seconds_per_timing", "0.01"]


def test_tiny_run_has_every_model_and_interval(tmp_path):
    res = sync_frequency.main(TINY + ["--out_dir", str(tmp_path)])
    assert res["device"] == "cpu" and "no-op" in res["sync"]
    assert set(res["sync_every"]) == set(sync_frequency.MODELS)
    for name in sync_frequency.MODELS:
        rates = res["sync_every"][name]["ops_per_s"]
        assert list(rates) == [str(n) for n in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
        assert all(r > 0 for r in rates.values())
        assert res["sync_every"][name]["speedup_vs_1"]["1"] == pytest.approx(1.0)
    pending = res["item"]["pending"]
    assert (pending["small"]["matmuls"], pending["big"]["matmuls"], pending["big"]["size"]) == (2, 1, 32)
    assert pending["small"]["item_us"] > 0 and pending["big"]["item_us"] > 0 and res["item"]["sync_idle_us"] >= 0
    assert res["matmul_sizes"]["big"]["size"] == 32 and res["matmul_sizes"]["small"]["async_us"] > 0

    md = (tmp_path / "sync_frequency_cpu.md").read_text()
    for name in sync_frequency.MODELS:
        assert f"## {name}:" in md
    table_rows = [line for line in md.splitlines() if line.startswith("| 256 |")]
    assert len(table_rows) == len(sync_frequency.MODELS)
    assert "not ours" in md and "4,346" in md and "CPU control" in md
    assert "--width 16" in md  # the exact command line
    assert "right after launching 1 32^2 matmuls" in md
    saved = json.loads((tmp_path / "sync_frequency_cpu.json").read_text())
    assert saved["sync_every"]["mlp3"]["ops_per_s"]["256"] == res["sync_every"]["mlp3"]["ops_per_s"]["256"]


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(SystemExit):
        sync_frequency.main(TINY + ["--ops", "0", "--out_dir", str(tmp_path)])
    with pytest.raises(SystemExit):
        sync_frequency.main(TINY + ["--width", "12", "--out_dir", str(tmp_path)])
