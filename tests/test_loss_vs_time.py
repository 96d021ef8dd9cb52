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


def test_against_the_strongest_baseline_takes_each_side_fastest_row(tmp_path):
    """Rows of several modes and tp_comm settings: 'same' pairs each with the baseline row of its own mode and
    tp_comm; 'strongest' takes each policy's fastest row and the baseline's fastest (here with sequence parallelism)."""
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"stats": {"cells": [cell("baseline", 640, None, None), cell("grouped:4", 640, 1.5, 1.0)]}}))

    def tp4(policy, ms, tp_comm, mode="compiled-graphs"):
        return dict(row(policy, 4, ms), tp=4, tp_comm=tp_comm, mode=mode)
    times = tmp_path / "t.json"
    times.write_text(json.dumps({"rows": [
        tp4("baseline", 16.0, "off"), tp4("baseline", 15.0, "sp"), tp4("baseline", 40.0, "off", "compiled"),
        tp4("grouped:4", 12.0, "off"), tp4("grouped:4", 13.0, "sp"), tp4("grouped:4", 30.0, "off", "compiled"),
        dict(tp4("baseline", 1.0, "chunked"), error="RuntimeError: ..."),  # a failed row is no baseline
        dict(tp4("baseline", 14.0, "sp"), async_grad="on"),  # SP's row again (the model turns it off there)
        dict(tp4("grouped:4", 13.5, "off"), async_grad="on")]}))  # plain TP + async_grad: a mode, not the fastest
    for against, expected in (("same", ["| grouped:4 | 4 | 12.00 (16.00) | +25.0% |", "| grouped:4 | 4 | 13.00 (15.00) |",
                                        "| grouped:4 | 4 | 30.00 (40.00) | +25.0% |"]),
                              ("strongest", ["| grouped:4 | 4 | 12.00 (15.00) | +20.0% | +1.50% ± 1.00 | 640 it (21.0M "
                                             "tokens), n_tracks 4 | compiled-graphs / compiled-graphs, sp |"])):
        out = tmp_path / against
        assert loss_vs_time.main(["--stats", str(stats), "--iters", "640", "--times", str(times), "--out", str(out),
                                  "--against", against]) == 0
        table = (tmp_path / f"{against}.md").read_text()
        assert all(line in table for line in expected) and table.count("| grouped:4 |") == len(expected), table


def test_the_budget_study_stats_give_the_cosine_cell_of_one_width(tmp_path, capsys):
    """experiments/large_budgets/stats.json (a list of rows): --width picks that width's cosine val cell (not WSD, not
    a per-domain metric), --schedule wsd its largest WSD branch; one seed has no interval; without --width, or at a
    width it lacks, one error line."""
    import pytest

    def large(policy, width=768, schedule="cosine", metric="val", gap=2.0, ci=1.5, seeds=(1, 2)):
        return {"width": width, "schedule": schedule, "metric": metric, "policy": policy, "tokens": 302_000_000,
                "tokens_per_param": 2.44, "n_tracks": 4, "seeds": list(seeds), "gap": gap, "gap_ci95": ci}
    stats = tmp_path / "large.json"
    stats.write_text(json.dumps([large("spd"), large("spd", schedule="WSD", gap=-5.0), large("spd", metric="val_code", gap=7.0),
                                 large("spd", width=256, gap=3.0), large("parallel", gap=0.5, ci=None, seeds=(1,))]))
    times = tmp_path / "t.json"
    times.write_text(json.dumps({"rows": [row("baseline", 4, 20.0), row("spd", 4, 18.0), row("parallel", 4, 19.0)]}))
    out = tmp_path / "fig"
    assert loss_vs_time.main(["--stats", str(stats), "--width", "768", "--times", str(times), "--out", str(out)]) == 0
    table = (tmp_path / "fig.md").read_text()
    assert "| spd | 4 | 18.00 (20.00) | +10.0% | +2.00% ± 1.50 | 302.0M tokens (2.44 per parameter, 2 seeds), n_tracks 4 |" in table
    assert "| parallel | 4 | 19.00 (20.00) | +5.0% | +0.50% | 302.0M tokens (2.44 per parameter, 1 seed), n_tracks 4 |" in table
    # --schedule wsd: the WSD branches' largest budget of the width (stats.json calls that schedule "runs")
    branches = [dict(large("spd", schedule="runs", gap=g), tokens=t, tokens_per_param=t / 123.6e6)
                for g, t in ((-4.8, 75_497_472), (-1.8, 150_994_944))]
    stats.write_text(json.dumps(json.loads(stats.read_text()) + branches))
    assert loss_vs_time.main(["--stats", str(stats), "--width", "768", "--schedule", "wsd", "--times", str(times),
                              "--out", str(tmp_path / "wsd")]) == 0
    table = (tmp_path / "wsd.md").read_text()
    assert "| spd | 4 | 18.00 (20.00) | +10.0% | -1.80% ± 1.50 | 151.0M tokens (1.22 per parameter, 2 seeds, WSD " \
           "branch), n_tracks 4 |" in table and "| parallel |" not in table, table
    for argv, message in ((["--iters", "640"], "give --width (one of 256, 768)"),
                          (["--width", "384"], "no cosine cell at width 384; widths: 256, 768"),
                          (["--width", "256", "--schedule", "wsd"], "no wsd cell at width 256; widths: 256, 768")):
        with pytest.raises(SystemExit):
            loss_vs_time.main(["--stats", str(stats), "--times", str(times), "--out", str(out)] + argv)
        assert message in capsys.readouterr().err


def test_plain_tp_with_async_grad_can_be_the_strongest_baseline(tmp_path):
    """--against strongest counts plain TP with --tp_async_grad on as one of the baseline's modes (bench.comm_table
    does too): here it is the fastest, and the row names it."""
    times = tmp_path / "t.json"
    times.write_text(json.dumps({"rows": [dict(row("baseline", 2, 20.0), tp=2), dict(row("baseline", 2, 18.0), tp=2,
                                                                                     async_grad="on"),
                                          dict(row("spd", 2, 15.0), tp=2)]}))
    saving = loss_vs_time.measured_savings([str(times)], "strongest")
    assert [(p, round(s, 6), ms, base, names) for p, _, s, ms, base, _, names in saving] == [
        ("spd", round(100 * (1 - 15 / 18), 6), 15.0, 18.0, ("compiled-graphs", "compiled-graphs, async_grad"))]


def test_out_is_never_written_over_without_force(tmp_path, capsys):
    """A second run to the same --out stops with one line naming the files, and leaves them as they were; --force
    replaces them."""
    import pytest
    stats, times, out = tmp_path / "stats.json", tmp_path / "t.json", tmp_path / "fig"
    stats.write_text(json.dumps({"stats": {"cells": [cell("baseline", 640, None, None), cell("spd", 640, -0.5, 0.25)]}}))
    times.write_text(json.dumps({"rows": [row("baseline", 4, 20.0), row("spd", 4, 18.0)]}))
    argv = ["--stats", str(stats), "--iters", "640", "--times", str(times), "--out", str(out)]
    assert loss_vs_time.main(argv) == 0
    (tmp_path / "fig.md").write_text("kept")
    with pytest.raises(SystemExit):
        loss_vs_time.main(argv)
    assert "fig.png and " in capsys.readouterr().err and (tmp_path / "fig.md").read_text() == "kept"
    assert loss_vs_time.main(argv + ["--force"]) == 0
    assert (tmp_path / "fig.md").read_text().startswith("# Loss gap")
