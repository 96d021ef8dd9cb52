"""experiments/char_sweep/pareto.py joins compare_runs' seed statistics with train_throughput's timed rows."""
import json

from experiments.char_sweep import pareto


def cell(policy, syncs, mean, n_tracks=2):
    stat = {"mean": mean, "std": 0.01}
    return {"setting": ["shakespeare_char", 6, 384, n_tracks, 5000], "label": f"w384 n{n_tracks}", "policy": policy,
            "syncs": syncs, "seeds": [1337, 1338], "final_val": stat, "best_val": stat}


def test_pareto_front_and_missing_rows(tmp_path):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"stats": {"cells": [cell("baseline", 12, 1.17), cell("grouped:3", 2, 1.19),
                                                     cell("ladder", 12, 1.22), cell("spd", 6, 1.18)]}}))
    rows = [{"group": "tp2", "mode": "compiled-graphs", "n_tracks": 2, "policy": p, "ms": ms, "error": None}
            for p, ms in (("baseline", 10.0), ("grouped:3", 8.0), ("ladder", 9.0))]
    rows.append({"group": "tp2", "mode": "compiled", "n_tracks": 2, "policy": "spd", "ms": 7.0, "error": None})
    bench = tmp_path / "tt.json"
    bench.write_text(json.dumps({"meta": {"n_layer": 6, "n_embd": 384}, "rows": rows}))
    out = tmp_path / "p.png"
    assert pareto.main(["--stats", str(stats), "--throughput", str(bench), "--out", str(out)]) == 0
    md = (tmp_path / "p.md").read_text()
    front = {line.split("|")[2].strip(): line.rstrip().endswith("yes |") for line in md.splitlines()
             if line.startswith("| w384")}
    # ladder is slower than grouped:3 and worse in loss than both: off the front
    assert front == {"baseline": True, "grouped:3": True, "ladder": False}
    assert "No timed row for: w384 n2 spd" in md and out.stat().st_size > 0


def test_pareto_without_a_matching_shape_is_an_error(tmp_path, capsys):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"stats": {"cells": [cell("baseline", 12, 1.17)]}}))
    bench = tmp_path / "tt.json"
    bench.write_text(json.dumps({"meta": {"n_layer": 6, "n_embd": 768}, "rows": []}))
    assert pareto.main(["--stats", str(stats), "--throughput", str(bench), "--out", str(tmp_path / "p.png")]) == 1
    assert "every cell has another shape" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_bench_char_shapes_are_the_config_files():
    """The Pareto plot joins loss (the config files) with time (train_throughput's --size char*): same shapes."""
    import os

    from bench import train_throughput
    from training.config import read_config_file
    from experiments.char_sweep import run as char_sweep
    from tests.conftest import REPO

    for width, path in char_sweep.CHAR_CONFIGS.items():
        cfg = read_config_file(os.path.join(REPO, path))
        assert train_throughput.SIZES[f"char{width}"] == (cfg["n_layer"], cfg["n_head"], cfg["n_embd"],
                                                           char_sweep.vocab_size(cfg["dataset"]), cfg["block_size"])
