"""Smoke test of bench/tp_latency.py and bench/profile_policy.py on CPU at a tiny shape: every
workload gets a positive time for the policy and its no-sync floor, the collectives counted per row
match the policy, and --merge writes the table and the PNG. The PyTorch-TP reference is checked
to compute the same function at tp=2 as at tp=1, with a KV cache equal to a full forward."""
import json
import subprocess
import sys

import torch

from parallel.launch import run_on_gloo
from tests.conftest import REPO
import pytest

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests
TINY = ["--sizes", "tiny", "--seq_len", "16", "--warmup", "1", "--repeats", "1", "--rounds", "1", "--n_tracks", "4,2"]


def run(*args):
    subprocess.run([sys.executable, *args], cwd=REPO, check=True, capture_output=True, text=True, timeout=300)


def test_tiny_latency_rows_and_merge(tmp_path):
    run("-m", "bench.tp_latency", *TINY, "--policies", "baseline;grouped:2", "--out_dir", str(tmp_path))
    rows = json.load(open(tmp_path / "tp_latency_tp1.json"))["rows"]
    ours = [r for r in rows if r["policy"] != "torch_tp"]
    assert len(ours) == 2 * 2 * 5 * 2  # n_tracks x policies x workloads x (policy, floor), eager on CPU
    assert all(isinstance(r["ms"], float) and r["ms"] > 0 for r in rows)
    # tp=1 issues no real collective, but comm counts the model's sync points all the same
    assert {r["fwd"] for r in ours if r["policy"] == "baseline"} == {4}  # tiny: 2 layers
    assert {r["fwd"] for r in ours if r["policy"] == "grouped:2"} == {1}
    assert {r["workload"] for r in rows if r["policy"] == "torch_tp"} == {"train_b8", "prefill_b1", "prefill_b8",
                                                                          "decode_b1", "decode_b8"}
    meta = json.load(open(tmp_path / "tp_latency_tp1.json"))["meta"]
    assert meta["host_launch_us"] > 0 and meta["commit"]
    run("-m", "bench.tp_latency", "--merge", "--out_dir", str(tmp_path))
    table = (tmp_path / "tp_latency.md").read_text()
    assert "### tiny decode_b1 eager" in table and "| 2 | grouped:2 | 1 |" in table
    assert (tmp_path / "tp_latency.png").stat().st_size > 0


def test_tiny_compiled_mode_rows(tmp_path):
    """--modes compiled: ours decodes with a StaticKVCache through torch.compile(fullgraph=True), once
    per --compile_mode entry; aot_eager traces without code generation, so CPU runs it in seconds."""
    run("-m", "bench.tp_latency", *TINY, "--policies", "baseline;grouped:2", "--workloads", "decode_b1,prefill_b1",
        "--modes", "eager,compiled", "--compile_backend", "aot_eager", "--compile_mode", "default,coordinate-descent",
        "--no_bias", "--no_torch_tp", "--out_dir", str(tmp_path))
    result = json.load(open(tmp_path / "tp_latency_tp1.json"))
    rows = result["rows"]
    assert result["meta"]["bias"] is False
    for mode in ("compiled", "compiled/coordinate-descent"):
        compiled = [r for r in rows if r["mode"] == mode]
        assert len(compiled) == 2 * 2 * 2 * 2  # n_tracks x policies x workloads x (policy, floor)
        assert all(isinstance(r["ms"], float) and r["ms"] > 0 for r in compiled), [r["ms"] for r in compiled]
    assert "### tiny decode_b1 compiled/coordinate-descent" in (tmp_path / "tp_latency_tp1.md").read_text()


def test_tp_comm_times_each_mode_at_tp2_with_decode_not_applicable(tmp_path):
    """--tp_comm off,sp,async_tp on 2 gloo ranks: rows of plain TP and sequence parallelism side by side, its
    collectives a reduce-scatter and an all-gather per sync point; decode's sp rows read n/a (one token), async_tp's
    hold their one-line reason off CUDA, and the run goes on to write both modes' tables."""
    from bench.common import ASYNC_TP_NEEDS
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                    "bench.tp_latency", *TINY[:-2], "--n_tracks", "2", "--policies", "baseline;grouped:2",
                    "--workloads", "prefill_b1,decode_b1,train_b8", "--tp_comm", "off,sp,async_tp",
                    "--out_dir", str(tmp_path)], cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    rows = json.load(open(tmp_path / "tp_latency_tp2.json"))["rows"]
    by = {(r["policy"], r["tp_comm"], r["floor"], r["workload"]): r for r in rows}
    assert {r["tp_comm"] for r in rows if r["policy"] == "torch_tp"} == {"off"}
    for policy in ("baseline", "grouped:2"):
        for floor in (False, True):
            for workload in ("prefill_b1", "train_b8"):
                off, sp = (by[(policy, c, floor, workload)] for c in ("off", "sp"))
                assert isinstance(off["ms"], float) and isinstance(sp["ms"], float)
                assert sp["fwd"] == 2 * off["fwd"] and sp["variant"].startswith(f"{policy} sp")
                assert by[(policy, "async_tp", floor, workload)]["ms"] == ASYNC_TP_NEEDS
            assert isinstance(by[(policy, "off", floor, "decode_b1")]["ms"], float)
            assert by[(policy, "sp", floor, "decode_b1")]["ms"] == by[(policy, "async_tp", floor, "decode_b1")]["ms"] \
                == "n/a: one token"
    table = (tmp_path / "tp_latency_tp2.md").read_text()
    assert "### tiny prefill_b1 eager sp\n" in table and "## TP communication (--tp_comm)" in table
    assert "| tiny | decode_b1 | eager | 2 | 2 | baseline |" in table


def test_tiny_profile_reports_each_policy(tmp_path):
    run("-m", "bench.profile_policy", "--size", "tiny", "--seq_len", "16", "--calls", "2", "--workload", "decode_b1",
        "--policies", "baseline;spd", "--out_dir", str(tmp_path))
    text = (tmp_path / "profile_tiny_n4_decode_b1_eager_tp1.txt").read_text()
    assert "## baseline" in text and "## spd" in text and text.count("wall ") == 2


def _torch_tp_worker(rank, world):
    from bench import tp_latency
    from model.generate import KVCache
    sharded = tp_latency.torch_tp_model("tiny", 64, 16, "cpu", world)
    single = tp_latency.torch_tp_model("tiny", 64, 16, "cpu", 1)  # same seed: the full weights
    idx = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = sharded(idx)
        reference, _ = single(idx)
        cache = KVCache(sharded.config.n_layer)
        sharded(idx[:, :-1], kv_cache=cache)
        decoded, _ = sharded(idx[:, -1:], kv_cache=cache)
        fwd, bwd = tp_latency.count_torch_collectives(lambda: sharded(idx))
    train_fwd, train_bwd = tp_latency.count_torch_collectives(lambda: sharded(idx, idx)[1].backward())
    return dict(vs_single=(full - reference).abs().max().item(), decode=(decoded - full).abs().max().item(),
                fwd=fwd, bwd=bwd, train_fwd=train_fwd, train_bwd=train_bwd)


def test_torch_tp_reference_is_tensor_parallel_and_exact():
    for r in run_on_gloo(_torch_tp_worker, 2):
        assert r["vs_single"] < 1e-5 and r["decode"] < 1e-5
        # tiny has 2 layers: Megatron's 2 all-reduces per layer forward, none in a no-grad call;
        # backward at least 2 per layer (DTensor's separate q/k/v each all-reduce their input grad)
        assert (r["fwd"], r["bwd"], r["train_fwd"]) == (4, 0, 4) and r["train_bwd"] >= 4


def test_nccl_by_position_finds_the_wait_of_the_first_all_reduce():
    from types import SimpleNamespace
    from bench import profile_policy

    def kernel(name, start, us):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start), device_time=us)
    calls = []
    for c in range(3):  # per call: a GEMM, then 3 all-reduces of which the first waits 40 us for the peer
        t = 1000 * c
        calls += [kernel("nvjet_gemm", t, 5.0), kernel("ncclDevKernel_AllReduce", t + 10, 50.0 + c),
                  kernel("ncclDevKernel_AllReduce", t + 100, 10.0), kernel("ncclDevKernel_AllReduce", t + 200, 12.0)]
    positions = profile_policy.nccl_by_position(calls[::-1], 3)  # any event order
    assert positions == [51.0, 10.0, 12.0]
    text = profile_policy.nccl_position_report([positions])
    assert "rank 0: first 51.0; the other 2: median 11.0, max 12.0" in text
    assert profile_policy.nccl_by_position(calls[:-1], 3) is None  # calls of unequal counts: no positions
