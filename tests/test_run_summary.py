"""Issue 42: the end-of-run summary (at most 4 lines on stdout, the 'summary' record last in metrics.jsonl) for a
finished run and for one stopped by SIGTERM; the run conditions in the layout record (device name, processes,
CPU cores, load average); compare_runs.py's timing caveat and its speed ratios only between runs of one device
and layout, with old runs (no conditions, a 'done' record) still loading."""
import json
import os
import re
import signal
import subprocess

import pytest

import analysis.compare as compare_runs
import analysis.plots
from tests.conftest import TINY, read_metrics, run_trains, start_train

from experiments import runner

ITERS = 10
SUMMARY_KEYS = {"type", "finished", "stopped_by", "iter", "trained_iters", "seconds", "tokens", "passes", "final_val",
                "final_iter", "best_val", "best_iter", "syncs_per_fwd", "ckpt", "load_avg_end"}


def summary_block(stdout):
    """The last 4 lines of a run's stdout, which must be the summary block."""
    lines = stdout.strip().splitlines()[-4:]
    assert lines[0].startswith("summary: "), stdout[-2000:]
    assert [line.split(":")[0] for line in lines[1:3]] == ["val loss", "syncs per forward (measured)"]
    assert lines[3].startswith(("checkpoint ", "no checkpoint written")), lines[3]
    return lines


@pytest.fixture(scope="module")
def two_runs(workdir):
    """Two finished tiny CPU runs: baseline and spd, the same seed. Returns {policy: (out_dir, stdout)}."""
    outs = {policy: os.path.join(workdir, f"out-summary-{policy}") for policy in ("baseline", "spd")}
    procs = run_trains([[*TINY, f"--max_iters={ITERS}", f"--sync_policy={policy}", f"--out_dir={out}"]
                        for policy, out in outs.items()], workdir)  # at once: independent runs
    return {policy: (out, proc.stdout) for (policy, out), proc in zip(outs.items(), procs)}


def test_finished_run_ends_with_the_summary_block_and_record(two_runs):
    out, stdout = two_runs["baseline"]
    first, val, syncs, nxt = summary_block(stdout)
    records = read_metrics(out)
    evals = {r["iter"]: r for r in records if r["type"] == "eval"}
    last = records[-1]
    assert last["type"] == "summary" and set(last) == SUMMARY_KEYS
    assert (last["finished"], last["stopped_by"], last["iter"], last["trained_iters"]) == (True, None, ITERS, ITERS)
    assert last["tokens"] == ITERS * 4 * 4 * 32  # grad accumulation x batch x block
    best_iter = min(evals, key=lambda i: (evals[i]["val_loss"], i))
    assert (last["final_iter"], last["final_val"]) == (ITERS, evals[ITERS]["val_loss"])
    assert (last["best_iter"], last["best_val"]) == (best_iter, evals[best_iter]["val_loss"])
    assert last["syncs_per_fwd"] == evals[ITERS]["syncs_per_fwd"] and last["ckpt"] == os.path.join(out, "ckpt.pt")
    assert isinstance(last["load_avg_end"], list) and len(last["load_avg_end"]) == 3
    assert first.startswith(f"summary: finished at iter {ITERS} ({ITERS} iterations in this process, ")
    assert f"{last['tokens']:,} tokens seen" in first
    assert val == (f"val loss: final {last['final_val']:.4f} (iter {ITERS}), "
                   f"best {last['best_val']:.4f} (iter {best_iter})")
    assert syncs == f"syncs per forward (measured): {last['syncs_per_fwd']}"
    # a sample.py command that ends in seconds (not sample.py's default 10 x 500 tokens)
    assert re.fullmatch(rf"checkpoint {re.escape(out)}/ckpt\.pt; next: python sample\.py --out_dir={re.escape(out)} "
                        rf"--num_samples=\d --max_new_tokens=\d{{1,3}}; python compare_runs\.py {re.escape(out)} "
                        rf"<other out_dirs>", nxt), nxt
    assert "done:" not in stdout and not any(r["type"] == "done" for r in records)
    # the conditions of the timings, in the layout record and in config.json
    (layout,) = [r for r in records if r["type"] == "layout"]
    assert layout["device_type"] == "cpu" and layout["device_name"] and layout["world_size"] == 1
    assert layout["cpu_cores"] == len(os.sched_getaffinity(0)) and len(layout["load_avg_start"]) == 3
    with open(os.path.join(out, "config.json")) as f:
        derived = json.load(f)["derived"]
    assert (derived["device_name"], derived["cpu_cores"]) == (layout["device_name"], layout["cpu_cores"])
    # the code that ran: the checkout's commit, marked when its tracked files differ from it
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert derived["code"] == layout["code"]
    assert re.fullmatch(re.escape(head) + r"(\+changes( unknown)?)?", layout["code"]), layout["code"]
    assert runner.finished(out, ITERS) == "complete"


def test_stopped_run_ends_with_the_summary_block_and_record(workdir):
    out = os.path.join(workdir, "out-summary-stopped")
    proc = start_train([*TINY, "--max_iters=100000", f"--out_dir={out}"], workdir)
    stdout = ""
    for line in proc.stdout:  # wait for the first step after the iteration-5 eval, then SIGTERM
        stdout += line
        if line.startswith("iter 6:"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, err = proc.communicate(timeout=120)
    stdout += rest
    assert proc.returncode == 143, err[-3000:]
    first, val, syncs, nxt = summary_block(stdout)
    last = read_metrics(out)[-1]
    assert last["type"] == "summary" and set(last) == SUMMARY_KEYS
    stopped = last["iter"]
    assert (last["finished"], last["stopped_by"]) == (False, "SIGTERM") and stopped >= 7
    assert last["final_iter"] == 5 * ((stopped - 1) // 5) and last["ckpt"] == os.path.join(out, "ckpt.pt")
    assert first.startswith(f"summary: stopped by SIGTERM at iter {stopped} ({stopped} iterations in this process")
    assert val.startswith(f"val loss: final {last['final_val']:.4f} (iter {last['final_iter']}), best ")
    assert "python sample.py" in nxt and "python compare_runs.py" in nxt
    (line,) = [line for line in stdout.splitlines() if line.startswith(f"stopped by SIGTERM at iter {stopped}")]
    size = os.path.getsize(os.path.join(out, "ckpt.pt")) / 1e9  # the stop line says what its checkpoint took
    assert re.search(rf"ckpt\.pt \({size:.2f} GB in [0-9.]+ s: [0-9.]+ s gathering, [0-9.]+ s writing\); continue", line)
    stop = [r for r in read_metrics(out) if r["type"] == "stop"][-1]
    assert stop["checkpoint"]["bytes"] == os.path.getsize(os.path.join(out, "ckpt.pt"))
    assert runner.finished(out, 100000) is None  # stopped: to be resumed, not complete


def test_two_cpu_runs_print_the_timing_caveat(two_runs, tmp_path, capsys, monkeypatch):
    figures = []
    monkeypatch.setattr(analysis.plots, "save_figure", lambda fig, path: figures.append(fig))
    dirs = [two_runs["baseline"][0], two_runs["spd"][0]]
    assert compare_runs.main([*dirs, "--out", str(tmp_path / "x.png")]) == 0
    lines = capsys.readouterr().out.splitlines()
    caveat = [n for n, line in enumerate(lines) if line.startswith("timing: the timing measures the machine, "
                                                                   "not the policy (on CPU: ")]
    ratios = [n for n, line in enumerate(lines) if " tok/s (time per token x" in line]
    assert len(caveat) == 1 and ratios and all(n > caveat[0] for n in ratios)
    assert lines[ratios[0]].startswith("speed vs baseline (") and "world 1 = dp 1 x tp 1" in lines[ratios[0]]
    right = figures[0].axes[2]
    assert "the timing measures the machine, not the policy" in right.get_title()


# ---------------------------------------------------------------- hand-written run dirs
def write_run(root, name, policy, tok_per_s, layout=None, end=None, seed=1):
    run = os.path.join(root, name)
    os.makedirs(run)
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"sync_policy": policy, "seed": seed}, f)
    records = [{"type": "layout", "world_size": 8, "dp": 2, "tp": 4, **(layout or {})},
               {"type": "eval", "iter": 0, "val_loss": 4.0, "syncs_per_fwd": 4, "time": 0.0},
               {"type": "train", "iter": 0, "loss": 4.0, "time_ms": 1.0, "tok_per_s": tok_per_s},
               {"type": "eval", "iter": 10, "val_loss": 3.0, "syncs_per_fwd": 4, "time": 10.0}]
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        for r in records + ([end] if end else []):
            f.write(json.dumps(r) + "\n")
    return run


H200 = {"device_type": "cuda", "device_name": "NVIDIA H200", "cpu_cores": 16, "load_avg_start": [1.0, 1.0, 1.0]}


def test_ratios_only_on_one_device_and_layout(tmp_path, capsys):
    a = write_run(tmp_path, "base", "baseline", 1000.0, H200, {"type": "summary", "finished": True, "iter": 10,
                                                               "load_avg_end": [2.0, 1.0, 1.0]})
    b = write_run(tmp_path, "g", "grouped:2", 1250.0, H200)
    assert compare_runs.load_run(a)["finished"] is True and compare_runs.load_run(b)["finished"] is None
    assert compare_runs.main([a, b, "--out", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    assert "grouped:2 x1.25 tok/s (time per token x0.80)" in out and "measures the machine" not in out
    # another device: no ratio, one line saying so
    c = write_run(tmp_path, "g-h100", "grouped:2", 1250.0, {**H200, "device_name": "NVIDIA H100"})
    assert compare_runs.main([a, c, "--out", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    assert " tok/s (time per token" not in out
    assert [line for line in out.splitlines() if "differ in device or layout" in line] == [
        "timing: the runs differ in device or layout, so no speed ratio between them (NVIDIA H200, world 8 = dp 2 "
        "x tp 4: base; NVIDIA H100, world 8 = dp 2 x tp 4: g-h100)"]
    # a load average above the cores: the caveat, even on a GPU
    d = write_run(tmp_path, "g-loaded", "grouped:2", 1250.0, {**H200, "load_avg_start": [20.5, 9.0, 9.0]})
    assert compare_runs.main([a, d, "--out", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    assert ("timing: the timing measures the machine, not the policy (load average above the CPU cores: "
            "g-loaded (20.5 > 16))") in out


def test_old_runs_load_with_conditions_unknown(tmp_path, capsys):
    """Runs logged before issue 42: a layout record without device or load, a 'done' record at the end."""
    a = write_run(tmp_path, "old-base", "baseline", 1000.0, end={"type": "done", "iter": 10, "seconds": 5.0,
                                                                 "final_val": 3.0, "best_val": 3.0})
    b = write_run(tmp_path, "old-g", "grouped:2", 2000.0)
    run = compare_runs.load_run(a)
    assert (run["device"], run["cores"], run["load"], run["finished"]) == (None, None, None, True)
    assert compare_runs.main([a, b, "--out", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    assert "timing: conditions unknown (no device or layout logged" in out and "old-base, old-g" in out
    assert " tok/s (time per token" not in out
    assert runner.finished(a, 10) == "complete"
