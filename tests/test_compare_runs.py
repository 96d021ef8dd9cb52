"""compare_runs.py on hand-written run dirs: table, baseline statistics, log.txt fallback, PNG, errors."""
import json
import os

import pytest

import analysis.compare as compare_runs
import analysis.plots
def write_run(root, name, policy, val_losses, syncs, seed=1337, tok_per_s=(1000.0, 3000.0, 2000.0),
              as_log=False):
    run = os.path.join(root, name)
    os.makedirs(run)
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"sync_policy": policy, "seed": seed}, f)
    evals = [{"type": "eval", "iter": 10 * i, "train_loss": v + 0.1, "val_loss": v, "syncs_per_fwd": syncs}
             for i, v in enumerate(val_losses)]
    train = [{"type": "train", "iter": i, "loss": 3.0, "time_ms": 10.0, "tok_per_s": t} for i, t in enumerate(tok_per_s)]
    if as_log:
        with open(os.path.join(run, "log.txt"), "w") as f:
            for e in evals:
                f.write(f"step {e['iter']}: train loss {e['train_loss']:.4f}, val loss {e['val_loss']:.4f}, "
                        f"syncs/fwd {syncs}\n")
            for t in train:
                f.write(f"iter {t['iter']}: loss 3.0000, time 10.00ms, tok/s {t['tok_per_s']:,.0f}, mfu n/a\n")
    else:
        with open(os.path.join(run, "metrics.jsonl"), "w") as f:
            for r in evals + train:
                f.write(json.dumps(r) + "\n")
    return run


def test_table_against_mean_of_baselines(tmp_path, capsys):
    write_run(tmp_path, "base-s1", "baseline", [4.0, 3.0, 2.0], 24, seed=1)
    write_run(tmp_path, "base-s2", "baseline", [4.0, 3.0, 2.2], 24, seed=2)
    write_run(tmp_path, "grouped", "grouped:2", [4.0, 2.9, 2.31], 6, as_log=True)  # log.txt only
    png = tmp_path / "plot.png"
    assert compare_runs.main([str(tmp_path / "base-*"), str(tmp_path / "grouped"), "--out", str(png)]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("base-", "grouped"))}
    # run, policy, syncs/fwd, final iter, final val, best val, Δ final, Δ best, tok/s: one run gets no verdict
    assert lines["grouped"] == ["grouped", "grouped:2", "6", "20", "2.3100", "2.3100", "+10.00%", "+10.00%", "2,000"]
    assert lines["base-s1"][6] == "-4.76%" and lines["base-s2"][6] == "+4.76%"
    assert lines["base-s1"][8] == "2,000"  # median of the logged tok/s
    assert "tie" not in out and "2 x" not in out
    assert "final val: mean of 2 baseline run(s): 2.1000, std 0.1414 = 6.73% (run-to-run noise)" in out
    assert png.stat().st_size > 10_000


def test_markdown_and_no_baseline_shows_no_delta(tmp_path, capsys):
    a = write_run(tmp_path, "a", "spd", [3.0, 2.0], 12)
    b = write_run(tmp_path, "b", "grouped:4", [3.0, 2.5], 3)
    assert compare_runs.main([a, b, "--markdown", "--out", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    assert "| run | policy | syncs/fwd |" in out
    assert "| b | grouped:4 | 3 | 10 | 2.5000 | 2.5000 | — | — | 2,000 |" in out
    assert "baseline: no 'baseline' run in this setting, so its Δ columns show —" in out


def test_resumed_run_later_lines_win(tmp_path):
    run = write_run(tmp_path, "r", "baseline", [3.0, 2.0], 4)
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"type": "resume", "iter": 10}) + "\n")
        f.write(json.dumps({"type": "eval", "iter": 10, "val_loss": 1.5, "syncs_per_fwd": 4}) + "\n")
    summary = compare_runs.load_run(run)
    assert summary["curve"] == [(0, 3.0), (10, 1.5)] and summary["best_val"] == 1.5


@pytest.mark.parametrize("make, message", [
    (lambda root: str(root / "missing"), "not a directory"),
    (lambda root: os.makedirs(root / "empty") or str(root / "empty"), "no config.json"),
    (lambda root: str(root / "nothing-*"), "no run directory matches"),
])
def test_clear_errors(tmp_path, capsys, make, message):
    assert compare_runs.main([make(tmp_path), "--out", str(tmp_path / "x.png")]) == 1
    assert message in capsys.readouterr().err


def test_run_without_metrics(tmp_path, capsys):
    run = tmp_path / "new"
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert compare_runs.main([str(run), "--out", str(tmp_path / "x.png")]) == 1
    assert "no metrics.jsonl or log.txt" in capsys.readouterr().err


def test_each_setting_has_its_own_baseline(tmp_path, capsys):
    """A wider model's baseline is no reference for a narrower one: Δ and 'vs noise' use the run's setting."""
    def run(name, policy, width, val, seed):
        path = write_run(tmp_path, name, policy, [4.0, val], 12, seed=seed)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump({"sync_policy": policy, "seed": seed, "n_embd": width, "n_tracks": 2}, f)
    run("w1-base-s1", "baseline", 192, 1.30, 1)
    run("w1-base-s2", "baseline", 192, 1.32, 2)
    run("w1-spd", "spd", 192, 1.441, 1)
    run("w2-base-s1", "baseline", 384, 1.10, 1)
    run("w2-base-s2", "baseline", 384, 1.12, 2)
    run("w2-spd", "spd", 384, 1.121, 1)
    os.makedirs(tmp_path / "w3")
    run("w3/spd", "spd", 768, 1.42, 1)  # a setting without a baseline run: no Δ (not the other widths' 1.21)
    assert compare_runs.main([str(tmp_path / "w[12]-*"), str(tmp_path / "w3/spd"), "--out",
                              str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("w1-", "w2-", "spd"))}
    assert lines["w1-spd"][6:8] == ["+10.00%", "+10.00%"]  # 1.441 vs 1.31
    assert lines["w2-spd"][6:8] == ["+0.99%", "+0.99%"]  # 1.121 vs 1.11
    assert lines["spd"][6:8] == ["—", "—"]
    assert "baseline (w192 n2) final val: mean of 2 baseline run(s): 1.3100" in out
    assert "baseline (w384 n2) best val: mean of 2 baseline run(s): 1.1100" in out
    assert "baseline (w768 n2): no 'baseline' run in this setting, so its Δ columns show —" in out


def test_single_seed_plots_show_no_spread_or_trend(tmp_path, monkeypatch):
    """Issue 30: one seed per policy. The final-val panel's y-range covers ±margin around the baseline (two
    points 0.5% apart do not fill it), a wall-clock panel exists, iteration 0 is left out of the curves, and
    the trend plot joins no single seeds and claims no error bars."""
    figures = []
    monkeypatch.setattr(analysis.plots, "save_figure", lambda fig, path: figures.append(fig))
    runs = []
    for name, policy, final, syncs in (("base", "baseline", 2.0, 24), ("g4", "grouped:4", 2.01, 3),
                                       ("spd", "spd", 1.995, 12)):
        run = write_run(tmp_path, name, policy, [10.8, 3.0, final], syncs)
        with open(os.path.join(run, "metrics.jsonl"), "a") as f:  # eval times: 0, 5 and 10 s (iter 10: 30 s)
            for i, v in enumerate([10.8, 3.0, final]):
                f.write(json.dumps({"type": "eval", "iter": 10 * i, "val_loss": v, "syncs_per_fwd": syncs,
                                    "time": 1000.0 + (5 if policy == "baseline" else 15) * i}) + "\n")
        runs.append(run)
    assert compare_runs.load_run(runs[1])["time_curve"] == [(0.0, 10.8), (15.0, 3.0), (30.0, 2.01)]
    assert compare_runs.main([*runs, "--out", str(tmp_path / "x.png"), "--trend", str(tmp_path / "t.png")]) == 0
    left, middle, right = figures[0].axes
    low, high = left.get_ylim()
    assert low <= 2.0 * 0.99 and high >= 2.0 * 1.01 and "ONE seed" in left.get_title()
    assert "time" in right.get_title() and max(max(line.get_xdata()) for line in right.lines) == 30.0
    assert all(min(line.get_xdata()) > 0 for line in middle.lines)  # no iteration 0
    assert all(max(line.get_ydata()) < 10 for ax in (middle, right) for line in ax.lines)
    for ax in figures[1].axes:
        assert "no error bars" in ax.get_title()
        data = [line for line in ax.lines if any(y != 0 for y in line.get_ydata())]  # the y = 0 rule aside
        assert data and all(line.get_linestyle() == "None" for line in data)
