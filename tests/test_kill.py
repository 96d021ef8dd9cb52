"""Kill test: SIGKILL a CPU training run 10 times at seeded random moments, half of them while a
checkpoint is being written. After every kill the checkpoint on disk loads (weights_only, complete),
and the run, resumed each time, logs exactly the training losses of an uninterrupted run.

The run evaluates and checkpoints every iteration. It runs through a launcher that makes torch.save
write its bytes in 10 slices with a pause after each (the bytes are the same: only slower), so a
checkpoint write lasts long enough to be hit. The uninterrupted reference runs meanwhile.
"""
import os
import random
import signal
import time

from checkpoint import RESUME_KEYS, read_checkpoint
from tests.conftest import REPO, TINY, TRAIN_SCRIPT, eval_records, read_metrics, start_train, train_losses

ITERS = 60
KILLS = 10
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
