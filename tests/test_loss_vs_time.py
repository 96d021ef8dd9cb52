"""analysis.loss_vs_time on hand-made inputs: the saving is 1 - ms / baseline ms of the same n_tracks, the gap
is the stats file's at the largest budget <= --iters, and a loss taken from another n_tracks is marked."""
import json

from analysis import loss_vs_time


def cell(policy, budget, gap, half, n_tracks=4):
    return {"setting": ["d", 12, 768, n_tracks, budget], "policy": policy, "tokens": budget * 32768,
            "final_val": {"gap": gap, "gap_ci": half} if gap is not None else {}}


def row(policy, n_tracks, ms, async_grad="off"):
    return {"group": "tp2", "async_grad": async_grad, "error": None, "policy": policy, "n_tracks": n_tracks,
            "mode": "compiled-graphs", "ms": ms}


def test_table_pairs_each_time_with_its_gap(tmp_path, capsys):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"stats": {"cells": [
        cell("baseline", 640, None, None), cell("spd", 320, -1.0, 0.5), cell("spd", 640, -0.5, 0.25),
        cell("spd", 1280, 9.0, 1.0), cell("parallel", 320, -2.0, 1.0)]}}))
    times = tmp_path / "t.json"
    times.write_text(json.dumps({"rows": [row("baseline", 2, 20.0), row("spd", 2, 18.0), row("parallel", 2, 19.0),
                                          row("spd", 2, 10.0, async_grad="on"), row("grouped:4", 2, 15.0)]}))
    out = tmp_path / "fig"
    assert loss_vs_time.main(["--stats", str(stats), "--iters", "640", "--times", str(times), "--out", str(out)]) == 0
    table = (tmp_path / "fig.md").read_text()
    assert "| spd | 2 | 18.00 (20.00) | +10.0% | -0.50% ± 0.25 | 640 it (21.0M tokens), n_tracks 4 (borrowed) |" in table
    assert "| parallel | 2 | 19.00 (20.00) | +5.0% | -2.00% ± 1.00 | 320 it (10.5M tokens), n_tracks 4 |" in table  # same at any n_tracks
    assert "grouped:4" not in table and "+50.0%" not in table  # no loss cell; the async row is not the default
    assert (tmp_path / "fig.png").stat().st_size > 10_000
