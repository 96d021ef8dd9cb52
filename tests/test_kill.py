"""Kill test: SIGKILL a CPU training run 6 times at seeded random moments, half of them while a
checkpoint is being written. After every kill the checkpoint on disk loads (weights_only, complete),
and the run, resumed each time, logs exactly the training losses of an uninterrupted run.

The run evaluates and checkpoints every iteration. It runs through a launcher that makes torch.save
write its bytes in 10 slices with a pause after each (the bytes are the same: only slower), so a
checkpoint write lasts long enough to be hit. The uninterrupted reference runs meanwhile.
"""
import os
import random
import shutil
import signal
import subprocess
import time

import pytest

from training.checkpoint import RESUME_KEYS, read_checkpoint
from tests.conftest import (REPO, TINY, TRAIN_SCRIPT, eval_records, process_alive, read_metrics, run_env, run_train,
                            start_train, train_command, train_losses)

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

ITERS = 60
KILLS = 6  # each kill is a trainer start (seconds of CPU importing torch); 3 of them in a write
ARGS = [*TINY, "--eval_interval=1", "--eval_iters=1", "--dropout=0.1", f"--max_iters={ITERS}"]

LAUNCHER = """\
import io, os, runpy, sys, time
sys.path.insert(0, {repo!r})
import torch

_save = torch.save

def slow_save(obj, f, *args, **kwargs):  # the same bytes, written in 10 slices 10 ms apart
    if isinstance(f, (str, os.PathLike)):
        return _save(obj, f, *args, **kwargs)
    buffer = io.BytesIO()
    _save(obj, buffer, *args, **kwargs)
    data = buffer.getvalue()
    step = -(-len(data) // 10)
    for i in range(0, len(data), step):
        f.write(data[i:i + step])
        f.flush()
        time.sleep(0.01)

torch.save = slow_save
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def temp_files(out):
    try:
        return [n for n in os.listdir(out) if n.startswith(".tmp-")]
    except FileNotFoundError:
        return []


def logged_iters(out):
    try:
        return [r["iter"] for r in read_metrics(out) if r["type"] == "train"]
    except FileNotFoundError:
        return []


def wait_until(predicate, proc, timeout=60, poll=0.002):
    """True once predicate() holds; False if the run ended first."""
    deadline = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            return False
        assert time.time() < deadline, "timed out waiting for the run"
        time.sleep(poll)
    return True


def test_sigkill_at_random_moments_then_resume_is_exact(workdir, tmp_path):
    launcher = tmp_path / "slow_save_launcher.py"
    launcher.write_text(LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT))
    ref, out = os.path.join(workdir, "out-kill-ref"), os.path.join(workdir, "out-kill")
    reference = start_train([*ARGS, f"--out_dir={ref}"], workdir)
    rng = random.Random(16)
    ckpt = os.path.join(out, "ckpt.pt")
    kills_in_write = resumes = 0
    for k in range(KILLS):
        resume = os.path.exists(ckpt)
        resumes += resume
        proc = start_train([*ARGS, f"--out_dir={out}"] + (["--init_from=resume"] if resume else []), workdir,
                           script=str(launcher))
        start_logged = len(logged_iters(out))
        # Let it train a little (a new training log line), then kill it: during a checkpoint write
        # (even k, after 0-5 more completed writes), or after a random delay of up to 1.5 s (odd k).
        assert wait_until(lambda: len(logged_iters(out)) > start_logged, proc), proc.communicate()[1][-3000:]
        if k % 2 == 0:
            for _ in range(rng.randrange(6)):
                wait_until(lambda: temp_files(out), proc)
                wait_until(lambda: not temp_files(out), proc)
            assert wait_until(lambda: temp_files(out), proc), "the run ended before the kill"
        else:
            time.sleep(rng.uniform(0.0, 1.5))
        assert proc.poll() is None, "the run ended before the kill: raise ITERS"
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        kills_in_write += bool(temp_files(out))  # a write cut short leaves its temp file
        if os.path.exists(ckpt):  # what is on disk after the kill loads, complete
            saved = read_checkpoint(ckpt, RESUME_KEYS)
            assert saved["iter_num"] <= max(logged_iters(out)) + 1
            best = os.path.join(out, "ckpt_best.pt")
            if os.path.exists(best):
                read_checkpoint(best, RESUME_KEYS)
    assert kills_in_write >= KILLS // 2 - 1, f"only {kills_in_write} kills hit a checkpoint write"

    final = start_train([*ARGS, f"--out_dir={out}", "--init_from=resume"], workdir)
    _, err = final.communicate(timeout=240)
    assert final.returncode == 0, err[-3000:]
    _, err = reference.communicate(timeout=240)
    assert reference.returncode == 0, err[-3000:]

    want = train_losses(ref)
    assert sorted(want) == list(range(ITERS))
    records = [r for r in read_metrics(out) if r["type"] == "train"]
    assert {r["iter"] for r in records} == set(range(ITERS))
    for r in records:  # every line logged, by the killed runs too, is the uninterrupted run's
        assert r["loss"] == want[r["iter"]], f"iter {r['iter']}: {r['loss']!r} != {want[r['iter']]!r}"
    assert eval_records(out)[ITERS]["val_loss"] == eval_records(ref)[ITERS]["val_loss"]
    assert len([r for r in read_metrics(out) if r["type"] == "resume"]) == resumes + 1
    assert temp_files(out) == []  # the resumed run removed the temp files of cut writes
    assert read_checkpoint(ckpt, RESUME_KEYS)["iter_num"] == ITERS


# ----------------------------------------------------------------------------- nothing lost (issue 28)
# Each case below asserts that the checkpoints already on disk are untouched, still load, and still give the
# val loss logged when they were written (recomputed from their weights).
STOP_ITERS = 30
STOP_ARGS = [*TINY, "--dropout=0.1", f"--max_iters={STOP_ITERS}"]


def checkpoint_val_loss(path, data_dir):
    """(iter_num, val loss recomputed from the checkpoint's weights on the fixed eval batches)."""
    from contextlib import nullcontext

    import training.step as trs
    from training.checkpoint import load_weights
    from training.config import TrainConfig
    from model.gpt import GPT, GPTConfig
    from parallel.mesh import Mesh
    saved = read_checkpoint(path, RESUME_KEYS)
    model = GPT(GPTConfig(**saved["model_args"]))
    load_weights(model, saved, path)
    mesh = Mesh(rank=0, world_size=1, tp=1, dp=1, tp_rank=0, dp_rank=0, tp_group=None, dp_group=None, device="cpu")
    losses, _ = trs.estimate_loss(model, model, data_dir, TrainConfig(**saved["config"]), mesh, nullcontext())
    return saved["iter_num"], losses["val"]


def assert_checkpoints_intact(out, workdir, digests=None):
    """ckpt.pt and ckpt_best.pt of out load, hold the bytes they had (digests), and give their logged val loss
    (ckpt.pt: when it was written at an eval)."""
    evals = eval_records(out)
    for name in ("ckpt.pt", "ckpt_best.pt"):
        path = os.path.join(out, name)
        if digests is not None:
            assert digest(path) == digests[name], f"{name} changed"
        it, val = checkpoint_val_loss(path, os.path.join(workdir, "data", "syn"))
        if it in evals:
            assert abs(val - evals[it]["val_loss"]) <= 1e-5 * abs(val), (name, it, val, evals[it]["val_loss"])
        if name == "ckpt_best.pt":
            assert it in evals and evals[it]["val_loss"] == min(r["val_loss"] for i, r in evals.items() if i <= it)


def digest(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def digests(out):
    return {name: digest(os.path.join(out, name)) for name in ("ckpt.pt", "ckpt_best.pt")}


def error_lines(err):
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error: ")]


@pytest.fixture(scope="module")
def stop_reference_run(workdir):
    """The uninterrupted run the stopped runs must match, started (not awaited): wait() returns its out_dir. The
    first test runs its own processes meanwhile, on the second core."""
    out = os.path.join(workdir, "out-stop-ref")
    proc = start_train([*STOP_ARGS, f"--out_dir={out}"], workdir)
    done = []

    def wait():
        if not done:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err[-3000:]
            done.append(out)
        return out
    yield wait
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def stop_reference(stop_reference_run):
    return stop_reference_run()


@pytest.mark.gate  # the default tier runs it: pytest.ini
def test_sigint_then_sigterm_stop_with_a_checkpoint_and_resume_exactly(workdir, stop_reference_run):
    out = os.path.join(workdir, "out-stop")
    ckpt = os.path.join(out, "ckpt.pt")
    for signum, code, after in ((signal.SIGINT, 130, 7), (signal.SIGTERM, 143, 17)):
        resume = ["--init_from=resume"] if os.path.exists(ckpt) else []
        proc = start_train([*STOP_ARGS, f"--out_dir={out}", *resume], workdir)
        assert wait_until(lambda: max(logged_iters(out), default=-1) >= after, proc), proc.communicate()[1][-3000:]
        before = digest(os.path.join(out, "ckpt_best.pt"))
        proc.send_signal(signum)
        stdout, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err[-3000:]
        assert error_lines(err) == []
        name = signal.Signals(signum).name
        (line,) = [s for s in stdout.splitlines() if s.startswith("stopped by")]
        assert line.startswith(f"stopped by {name} at iter ") and "--init_from=resume" in line
        stopped_at = int(line.split("at iter ")[1].split(":")[0])
        assert read_checkpoint(ckpt, RESUME_KEYS)["iter_num"] == stopped_at == max(logged_iters(out)) + 1
        assert digest(os.path.join(out, "ckpt_best.pt")) == before  # no eval: the best is the earlier one
        assert [r["signal"] for r in read_metrics(out) if r["type"] == "stop"][-1] == name
        assert_checkpoints_intact(out, workdir)
    run_train([*STOP_ARGS, f"--out_dir={out}", "--init_from=resume"], workdir)
    stop_reference = stop_reference_run()  # ran beside the stops
    want = train_losses(stop_reference)
    assert train_losses(out) == want and sorted(want) == list(range(STOP_ITERS))
    assert eval_records(out)[STOP_ITERS]["val_loss"] == eval_records(stop_reference)[STOP_ITERS]["val_loss"]


def test_second_sigint_exits_at_once(workdir, stop_reference):
    out = os.path.join(workdir, "out-stop-twice")
    shutil.copytree(stop_reference, out)  # a finished run, resumed for more iterations
    before = digests(out)
    # the second SIGINT comes 50 ms after the first: during the last step or the stop checkpoint's write,
    # which the launcher slows down (10 slices 10 ms apart)
    launcher = os.path.join(workdir, "slow_save_twice.py")
    with open(launcher, "w") as f:
        f.write(LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT))
    proc = start_train([*STOP_ARGS, f"--out_dir={out}", "--init_from=resume", f"--max_iters={STOP_ITERS + 10000}",
                        "--eval_interval=10000"], workdir, script=launcher)
    assert wait_until(lambda: max(logged_iters(out), default=-1) > STOP_ITERS + 2, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    (line,) = error_lines(err)
    assert "second SIGINT" in line and "one written before, if any, is intact" in line  # there may be none
    assert digest(os.path.join(out, "ckpt_best.pt")) == before["ckpt_best.pt"]
    assert_checkpoints_intact(out, workdir)  # ckpt.pt: the old one, or a whole new one
    assert read_checkpoint(os.path.join(out, "ckpt.pt"), RESUME_KEYS)["iter_num"] >= STOP_ITERS


def test_sigint_to_torchrun_stops_every_rank_after_the_same_step(workdir):
    # Ctrl-C: SIGINT to the whole process group (torchrun and its workers; torchrun forwards it once more)
    out = os.path.join(workdir, "out-stop-tp2")
    proc = subprocess.Popen(train_command([*STOP_ARGS, f"--out_dir={out}", "--tp=2", "--max_iters=400"], nproc=2),
                            cwd=workdir, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert wait_until(lambda: max(logged_iters(out), default=-1) >= 6, proc, timeout=120)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, err = proc.communicate(timeout=90)
    (line,) = [s for s in stdout.splitlines() if s.startswith("stopped by SIGINT at iter ")]
    stopped_at = int(line.split("at iter ")[1].split(":")[0])
    assert read_checkpoint(os.path.join(out, "ckpt.pt"), RESUME_KEYS)["iter_num"] == stopped_at
    assert "second SIGINT" not in err  # torchrun's forwarded copy is not a second Ctrl-C
    assert_checkpoints_intact(out, workdir)  # (resuming at tp=2 is tests/test_train.py's)


def test_a_rank_that_loses_its_peer_says_so(workdir):
    out = os.path.join(workdir, "out-peer")
    proc = start_train([*STOP_ARGS, f"--out_dir={out}", "--max_iters=100000"], workdir, nproc=2)  # dp=2
    assert wait_until(lambda: os.path.exists(os.path.join(out, "ckpt_best.pt")), proc, timeout=120)
    before = digests(out)
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2, workers
    ranks = {}
    for pid in workers:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        ranks[int(env[b"RANK"])] = int(pid)
    os.kill(ranks[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode != 0
    assert "error: rank 0: lost contact with rank 1" in err, err[-3000:]
    assert not [line for line in err.splitlines() if "train_reduced_sync.py\", line" in line]  # none of our tracebacks
    ckpt_changed = digest(os.path.join(out, "ckpt.pt")) != before["ckpt.pt"]
    assert_checkpoints_intact(out, workdir, None if ckpt_changed else before)


def test_fresh_start_over_a_run_is_refused_and_overwrite_moves_it_aside(workdir, stop_reference):
    out = os.path.join(workdir, "out-fresh-over")
    shutil.copytree(stop_reference, out)
    before = digests(out)
    with open(os.path.join(out, "log.txt"), "rb") as f:
        log_before = f.read()
    proc = run_train([*STOP_ARGS, f"--out_dir={out}", "--max_iters=5"], workdir, check=False)
    (line,) = error_lines(proc.stderr)
    assert proc.returncode == 1 and "already holds a run" in line and "--overwrite=True" in line
    assert "--init_from=resume" in line
    with open(os.path.join(out, "log.txt"), "rb") as f:
        assert f.read() == log_before
    assert_checkpoints_intact(out, workdir, before)

    # orphans of killed writes (a checkpoint, config.json) are removed by the next start that takes the lock
    orphans = [os.path.join(out, ".tmp-abc123-ckpt.pt.partial-write"),
               os.path.join(out, ".tmp-xyz-config.json.partial-write")]
    for p in orphans:
        open(p, "wb").close()
    user_file = os.path.join(out, ".tmp-user-notes")  # a user's own file, whatever its name, is never ours
    with open(user_file, "w") as f:
        f.write("mine")
    run_train([*STOP_ARGS, f"--out_dir={out}", "--max_iters=5", "--overwrite=True"], workdir)
    assert temp_files(out) == [".tmp-user-notes"] and open(user_file).read() == "mine"
    os.remove(user_file)
    (aside,) = [n for n in os.listdir(out) if n.startswith("replaced-")]
    aside = os.path.join(out, aside)
    assert sorted(os.listdir(aside)) == ["ckpt.pt", "ckpt_best.pt", "config.json", "log.txt", "metrics.jsonl"]
    assert_checkpoints_intact(aside, workdir, before)  # the old run, whole, beside the new one
    assert read_checkpoint(os.path.join(out, "ckpt.pt"), RESUME_KEYS)["iter_num"] == 5


def test_two_trainers_on_one_out_dir(workdir, stop_reference):
    out = os.path.join(workdir, "out-two")
    first = start_train([*STOP_ARGS, f"--out_dir={out}", "--max_iters=100000"], workdir)  # stopped below
    assert wait_until(lambda: os.path.exists(os.path.join(out, "ckpt_best.pt")), first)
    seconds = [start_train([*STOP_ARGS, f"--out_dir={out}", *extra], workdir)
               for extra in (["--init_from=resume"], ["--overwrite=True"])]
    for second in seconds:
        _, err = second.communicate(timeout=120)
        (line,) = error_lines(err)
        assert second.returncode == 1 and "in use by another trainer" in line, err
    assert first.poll() is None, "the first run ended before the second ones were refused"
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 143, err[-3000:]
    assert not [n for n in os.listdir(out) if n.startswith("replaced-")]
    iters = [r["iter"] for r in read_metrics(out) if r["type"] == "train"]
    assert iters == list(range(len(iters))) and len(iters) > STOP_ITERS  # one run's log alone, not interleaved
    want = train_losses(stop_reference)  # the schedule ends at lr_decay_iters=20: the first 30 iters agree
    assert {i: loss for i, loss in train_losses(out).items() if i < STOP_ITERS} == want
    assert_checkpoints_intact(out, workdir)


FULL_DISK_LAUNCHER = """\
import resource, runpy, signal, sys
sys.path.insert(0, {repo!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def test_full_disk_during_a_checkpoint_keeps_the_old_ones(workdir, stop_reference):
    # RLIMIT_FSIZE: no file may grow past `limit` bytes, like a disk that fills up: the logs still fit,
    # the next checkpoint does not (torch.save's writer fails in the middle of it)
    out = os.path.join(workdir, "out-full")
    shutil.copytree(stop_reference, out)
    before = digests(out)
    limit = os.path.getsize(os.path.join(out, "ckpt.pt")) // 2
    launcher = os.path.join(workdir, "full_disk_launcher.py")
    with open(launcher, "w") as f:
        f.write(FULL_DISK_LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT, limit=limit))
    proc = run_train([*STOP_ARGS, f"--out_dir={out}", "--init_from=resume", f"--max_iters={STOP_ITERS + 5}"], workdir,
                     check=False, script=launcher)
    assert proc.returncode == 1
    (line,) = error_lines(proc.stderr)
    assert os.path.join(out, "ckpt.pt") in line and "MiB free" in line and "intact" in line, line
    assert temp_files(out) == []
    assert_checkpoints_intact(out, workdir, before)


SIGNAL_IN_SETUP_LAUNCHER = """\
import os, runpy, signal, sys
sys.path.insert(0, {repo!r})
import training.run_dir as run_dir
_claim = run_dir.claim

def claim(*args, **kwargs):  # the signal comes while the run is being set up, just before out_dir is made
    os.kill(os.getpid(), signal.SIGTERM)
    return _claim(*args, **kwargs)

run_dir.claim = claim
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def test_a_signal_during_setup_stops_at_once(workdir):
    out = os.path.join(workdir, "out-setup-signal")
    launcher = os.path.join(workdir, "signal_in_setup_launcher.py")
    with open(launcher, "w") as f:
        f.write(SIGNAL_IN_SETUP_LAUNCHER.format(repo=REPO, script=TRAIN_SCRIPT))
    proc = run_train([*STOP_ARGS, f"--out_dir={out}"], workdir, check=False, script=launcher)
    assert proc.returncode == 143
    assert error_lines(proc.stderr) == ["error: SIGTERM before training began: stopped, nothing to save"]
    assert not os.path.exists(out)


def test_workers_stop_when_torchrun_is_killed(workdir):
    """kill -9 of torchrun: its workers notice their launcher is gone, stop together after a step with a
    checkpoint (as on SIGTERM) and exit, instead of training on as orphans."""
    out = os.path.join(workdir, "out-orphans")
    proc = start_train([*STOP_ARGS, f"--out_dir={out}", "--max_iters=100000"], workdir, nproc=2)  # dp=2
    assert wait_until(lambda: os.path.exists(os.path.join(out, "ckpt_best.pt")), proc, timeout=120)
    workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                              text=True).stdout.split()]
    assert len(workers) == 2, workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)

    deadline = time.time() + 60
    while any(process_alive(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(process_alive(pid) for pid in workers), "workers outlived torchrun"
    _, err = proc.communicate(timeout=30)
    assert "its launcher (pid" in err and "is gone: stopping" in err, err[-2000:]
    assert any(r["type"] == "stop" for r in read_metrics(out))  # stopped after a step, with a checkpoint
    assert_checkpoints_intact(out, workdir)
