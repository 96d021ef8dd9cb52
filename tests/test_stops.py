"""Issue 40: stops and refusals a user meets, each as a real process. Every case: the exit code, one last line
(no traceback) that names what happened, and no file of the user's changed (sha256 before and after).

A SIGTERM/SIGINT stops the trainer within STOP_S seconds in every phase reachable on CPU: the rendezvous of a
rank launched by hand whose peers never come, the data checks, training, and a checkpoint write (slowed down by
tests/test_kill.py's launcher so that the signal lands in it).
"""
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

from tests.conftest import REPO, TINY, TRAIN_SCRIPT, run_env, run_train, run_trains, start_train
from tests.test_kill import LAUNCHER, logged_iters, temp_files, wait_until
import pytest

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

STOP_S = 5.0
ARGS = [*TINY, "--max_iters=100000", "--eval_interval=100000", "--eval_iters=1"]

SLOW_DATA_LAUNCHER = """\
import os, runpy, sys, time
sys.path.insert(0, {repo!r})
import data.loader

def slow_check(*args, **kwargs):  # a large dataset's token check: chunk after chunk, for a minute
    open({marker!r}, "w").close()
    for _ in range(600):
        time.sleep(0.1)

data.loader.check_token_ids = slow_check
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def tree_digests(root):
    """sha256 of every file under root: what the user owns there."""
    out = {}
    for base, _, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def last_line(text):
    lines = [line for line in text.splitlines() if line.strip()]
    assert "Traceback" not in text, text[-3000:]
    return lines[-1] if lines else ""


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_time(proc, signum):
    """Send signum; (seconds until the process exited, stdout, stderr)."""
    t0 = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    return time.monotonic() - t0, out, err


def test_signal_during_rendezvous_stops_at_once_and_says_what_it_waited_for(workdir):
    """RANK=0 WORLD_SIZE=2 by hand, no other rank: it says what it waits for (after 5 s), and SIGTERM stops it."""
    before = tree_digests(workdir)
    port = free_port()
    env = {**run_env(), "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    out = os.path.join(workdir, "out-rdzv")
    proc = subprocess.Popen([sys.executable, TRAIN_SCRIPT, *ARGS, f"--out_dir={out}"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, seen = [], threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("waiting for 1 of 2 ranks"):
                seen.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert seen.wait(60), "".join(lines)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    took = time.monotonic() - t0
    reader.join(10)
    err = "".join(lines)
    assert proc.returncode == 143 and took <= STOP_S, (proc.returncode, took, err)
    assert lines[0].startswith(f"waiting for 1 of 2 ranks at 127.0.0.1:{port} (timeout in ")
    assert last_line(err) == (f"error: SIGTERM while waiting for 1 of 2 ranks at 127.0.0.1:{port}: stopped, "
                              f"nothing to save")
    assert not os.path.exists(out) and tree_digests(workdir) == before


def test_signal_during_data_checks_stops_at_once(workdir, tmp_path):
    before = tree_digests(workdir)
    marker = str(tmp_path / "checking")
    launcher = tmp_path / "slow_data.py"
    launcher.write_text(SLOW_DATA_LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT, marker=marker))
    out = os.path.join(workdir, "out-data-signal")
    proc = start_train([*ARGS, f"--out_dir={out}"], workdir, script=str(launcher))
    assert wait_until(lambda: os.path.exists(marker), proc), proc.communicate()[1][-3000:]
    took, _, err = stop_time(proc, signal.SIGINT)
    assert proc.returncode == 130 and took <= STOP_S, (took, err)
    assert last_line(err) == "error: SIGINT before training began: stopped, nothing to save"
    assert not os.path.exists(out) and tree_digests(workdir) == before


SLOW_FIRST_EVAL_LAUNCHER = """\
import runpy, sys, time
sys.path.insert(0, {repo!r})
import training.step
_estimate_loss = training.step.estimate_loss

def slow_first_eval(*args, **kwargs):  # the first eval of --compile=True: compiling, minutes on a large model
    if not slow_first_eval.done:
        slow_first_eval.done = True
        open({marker!r}, "w").close()
        time.sleep(60)
    return _estimate_loss(*args, **kwargs)

slow_first_eval.done = False
training.step.estimate_loss = slow_first_eval
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def test_signal_before_the_first_step_is_done_stops_at_once(workdir, tmp_path):
    """The first eval and step compile the model (--compile=True: minutes): a signal then stops at once, not after
    the compile; there is nothing new to save before the first step."""
    marker = str(tmp_path / "first-eval")
    launcher = tmp_path / "slow_first_eval.py"
    launcher.write_text(SLOW_FIRST_EVAL_LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT, marker=marker))
    out = os.path.join(workdir, "out-first-eval-signal")
    proc = start_train([*ARGS, f"--out_dir={out}", "--eval_interval=5"], workdir, script=str(launcher))
    assert wait_until(lambda: os.path.exists(marker), proc), proc.communicate()[1][-3000:]
    took, stdout, err = stop_time(proc, signal.SIGTERM)
    assert proc.returncode == 143 and took <= STOP_S, (took, err)
    assert last_line(err) == "error: SIGTERM before training began: stopped, nothing to save", err
    assert not os.path.exists(os.path.join(out, "ckpt.pt")) and "Traceback" not in stdout + err


def test_signal_during_training_and_during_a_checkpoint_write_stops_with_a_checkpoint(workdir, tmp_path):
    launcher = tmp_path / "slow_save.py"
    launcher.write_text(LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT))
    data_before = tree_digests(os.path.join(workdir, "data"))
    for phase, extra in (("training", []), ("checkpoint write", ["--eval_interval=1"])):
        out = os.path.join(workdir, f"out-signal-{phase.split()[0]}")
        proc = start_train([*ARGS, f"--out_dir={out}", *extra], workdir, script=str(launcher))
        assert wait_until(lambda: len(logged_iters(out)) > 2, proc), proc.communicate()[1][-3000:]
        if extra:  # the signal lands while ckpt.pt's temp file is being written
            assert wait_until(lambda: temp_files(out), proc, poll=0.0005)
        took, stdout, err = stop_time(proc, signal.SIGTERM)
        assert proc.returncode == 143 and took <= STOP_S, (phase, took, err[-3000:])
        assert "Traceback" not in err and not [s for s in err.splitlines() if s.startswith("error:")], err
        # the stop line, then the run's summary block, whose last line names the checkpoint
        lines = stdout.strip().splitlines()
        assert lines[-5].startswith("stopped by SIGTERM at iter ") and "--init_from=resume" in lines[-5], lines[-6:]
        assert lines[-4].startswith("summary: stopped by SIGTERM") and lines[-1].startswith("checkpoint "), lines[-6:]
        assert temp_files(out) == []
    assert tree_digests(os.path.join(workdir, "data")) == data_before


def test_resume_refuses_another_data_order_and_notes_tp_async_grad_at_tp1(workdir):
    out = os.path.join(workdir, "out-resume-data")
    args = [*TINY, "--max_iters=2", "--eval_interval=2", "--eval_iters=1", f"--out_dir={out}"]
    proc = run_train([*args, "--tp_async_grad=True"], workdir)
    assert proc.stdout.count("note: tp_async_grad=True does nothing at tp=1") == 1, proc.stdout
    before = tree_digests(workdir)
    cases = (("data_order", "passes", "'random'"), ("seed", "7", "1337"))
    procs = run_trains([[*args, "--init_from=resume", "--max_iters=4", f"--{key}={value}"] for key, value, _ in cases],
                       workdir, check=False)
    for (key, value, saved), proc in zip(cases, procs):
        line = last_line(proc.stderr)
        assert proc.returncode == 1 and line.startswith(f"error: {out}/ckpt.pt was trained with {key}={saved}, "
                                                        f"this resume has {key}="), proc.stderr
        assert f"--{key}={saved}" in line
    assert tree_digests(workdir) == before


def test_resume_under_torchrun_names_the_checkpoints_n_tracks(workdir):
    out = os.path.join(workdir, "out-tracks1")
    args = [*TINY, "--max_iters=2", "--eval_interval=2", "--eval_iters=1", f"--out_dir={out}"]
    run_train([*args, "--n_tracks=1"], workdir)
    before = tree_digests(workdir)
    proc = run_train([*args, "--n_tracks=2", "--tp=2", "--init_from=resume", "--max_iters=4"], workdir, nproc=2,
                     check=False)
    assert proc.returncode != 0
    (line,) = {s for s in proc.stderr.splitlines() if s.startswith("error: ")}
    assert line == (f"error: {out}/ckpt.pt has n_tracks=1 (the checkpoint's architecture, kept when resuming; "
                    f"requested n_tracks=2), but this launch splits the model over tp=2 (world size 2), which does "
                    f"not divide n_tracks=1: layouts of 2 processes that fit it: tp=1 (dp=2); relaunch with --tp=1, "
                    f"or --tp=auto --n_tracks=1")
    assert tree_digests(workdir) == before


def test_help_says_how_to_stop_and_what_a_resume_keeps():
    proc = subprocess.run([sys.executable, TRAIN_SCRIPT, "--help"], capture_output=True, text=True, env=run_env())
    assert proc.returncode == 0
    assert "pkill -TERM -P <torchrun pid>" in proc.stdout and "python -m training.launch" in proc.stdout
    assert "dataset, seed, batch_size, block_size, gradient_accumulation_steps, data_order" in proc.stdout


SLOW_IMPORT_LAUNCHER = """\
import builtins, runpy, sys, time
_import = builtins.__import__

def slow_import(name, *args, **kwargs):  # 'import torch' of a cold disk: the signal lands inside it
    if name == "torch" and not slow_import.done:
        slow_import.done = True
        open({marker!r}, "w").close()
        time.sleep(60)
    return _import(name, *args, **kwargs)

slow_import.done = False
builtins.__import__ = slow_import
sys.path.insert(0, {repo!r})
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def test_signal_while_importing_stops_at_once_in_one_line(workdir, tmp_path):
    """Ctrl-C in the first seconds (import torch): the stop line, not a KeyboardInterrupt traceback."""
    before = tree_digests(workdir)
    # SIG_IGN: SIGINT as a shell's background job (`python train_reduced_sync.py ... &`) inherits it
    for sig, code, inherited in ((signal.SIGINT, 130, signal.SIG_DFL), (signal.SIGTERM, 143, signal.SIG_DFL),
                                 (signal.SIGINT, 130, signal.SIG_IGN)):
        marker = str(tmp_path / f"importing-{code}-{int(inherited)}")
        launcher = tmp_path / f"slow_import_{code}.py"
        launcher.write_text(SLOW_IMPORT_LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT, marker=marker))
        out = os.path.join(workdir, f"out-import-signal-{code}")
        proc = subprocess.Popen([sys.executable, str(launcher), *ARGS, f"--out_dir={out}"], cwd=workdir, env=run_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, inherited))
        assert wait_until(lambda: os.path.exists(marker), proc), proc.communicate()[1][-3000:]
        took, _, err = stop_time(proc, sig)
        assert proc.returncode == code and took <= STOP_S, (took, err)
        assert last_line(err) == f"error: {sig.name} before training began: stopped, nothing to save"
        assert len(err.strip().splitlines()) == 1 and not os.path.exists(out)
    assert tree_digests(workdir) == before


def test_signal_while_a_config_file_runs_names_it(workdir, tmp_path):
    """Config files are Python: one that sleeps (or loops) was stopped as 'SIGTERM before training began', with
    nothing about the config (issue 70)."""
    marker = tmp_path / "running"
    config = tmp_path / "slow_config.py"
    config.write_text(f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(60)\n")
    before = tree_digests(workdir)
    proc = start_train([str(config), *ARGS, f"--out_dir={os.path.join(workdir, 'out-config-signal')}"], workdir)
    assert wait_until(lambda: marker.exists(), proc), proc.communicate()[1][-3000:]
    took, _, err = stop_time(proc, signal.SIGTERM)
    assert proc.returncode == 143 and took <= STOP_S, (took, err)
    assert last_line(err) == f"error: SIGTERM while running the config file {config}: stopped, nothing to save"
    assert tree_digests(workdir) == before


def test_signal_while_sample_imports_is_one_line(tmp_path):
    """Ctrl-C during sample.py's imports was a KeyboardInterrupt traceback (issue 70). The checkpoint exists (its
    bytes are never read): sample.py answers a missing one before the imports."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ckpt.pt").write_bytes(b"never read")
    for sig, code, line in ((signal.SIGINT, 130, "stopped (Ctrl-C)"), (signal.SIGTERM, 143, "stopped (SIGTERM)")):
        marker = str(tmp_path / f"importing-{code}")
        launcher = tmp_path / f"slow_import_{code}.py"
        launcher.write_text(SLOW_IMPORT_LAUNCHER.format(repo=REPO, script=os.path.join(REPO, "sample.py"),
                                                        marker=marker))
        proc = subprocess.Popen([sys.executable, str(launcher), "--out_dir=run"], cwd=tmp_path, env=run_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert wait_until(lambda: os.path.exists(marker), proc), proc.communicate()[1][-3000:]
        took, out, err = stop_time(proc, sig)
        assert proc.returncode == code and took <= STOP_S, (took, err)
        assert err.strip() == line and out == "", err
