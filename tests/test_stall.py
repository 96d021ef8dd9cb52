"""A stalled rank is named (issue 70, training/stall.py): a 2-process CPU run (gloo) whose rank 1 is stopped
(SIGSTOP) ends within its stall_timeout with one line naming rank 1, and the checkpoints stay intact."""
import os
import signal
import subprocess
import time

import pytest

from tests.conftest import TINY, Started, process_alive as running, read_metrics, run_env, train_command
from tests.test_kill import assert_checkpoints_intact, digest, digests

LIMIT = 6  # stall_timeout, seconds


def worker_pids(launcher):
    """{rank: pid} of torchrun's workers."""
    ranks = {}
    for pid in subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True).stdout.split():
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        ranks[int(env[b"RANK"])] = int(pid)
    return ranks


def train_iters(out):
    try:
        return [r["iter"] for r in read_metrics(out) if r["type"] == "train"]
    except FileNotFoundError:
        return []


@pytest.mark.slow
@pytest.mark.gate  # the only test of its kind: the default tier runs it
def test_a_stopped_rank_is_named_within_the_stall_timeout(workdir):
    out = os.path.join(workdir, "out-stall")
    run = Started(train_command([*TINY, f"--out_dir={out}", "--max_iters=100000", f"--stall_timeout={LIMIT}"],
                                nproc=2), os.path.join(workdir, "stall-logs"), cwd=workdir, env=run_env())
    ranks = {}
    try:
        deadline = time.time() + 180
        while not (os.path.exists(os.path.join(out, "ckpt_best.pt")) and max(train_iters(out), default=0) >= 7):
            assert run.proc.poll() is None and time.time() < deadline, "the run ended or did not start"
            time.sleep(0.1)
        ranks = worker_pids(run.proc.pid)
        assert sorted(ranks) == [0, 1], ranks
        before = digests(out)
        os.kill(ranks[1], signal.SIGSTOP)
        stopped = time.monotonic()
        while running(ranks[0]) and time.monotonic() - stopped < 4 * LIMIT + 30:
            time.sleep(0.1)
        took = time.monotonic() - stopped
        assert not running(ranks[0]), "rank 0 still waits for the stopped rank 1"
        os.kill(ranks[1], signal.SIGKILL)  # torchrun sent it SIGTERM, which waits while it is stopped
        result = run.result(timeout=60)
    finally:
        for pid in ranks.values():
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        run.close()
    # gloo's own timeout is 30 minutes; ours comes after LIMIT s of waiting, checked every LIMIT/10 s (+ a loaded
    # machine's delays)
    assert LIMIT <= took <= 3 * LIMIT, took
    print(f"rank 0 ended {took:.1f} s after rank 1 stopped (stall_timeout={LIMIT})")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert lines and lines[0].startswith("error: rank 1 did not arrive: rank 0 waited "), result.stderr[-3000:]
    assert f"(stall_timeout={LIMIT})" in lines[0] and lines[0].endswith("the last checkpoint is intact")
    assert len(lines) == 1  # one line, not one per rank (torchrun's summary then quotes it)
    assert "Traceback" not in result.stderr.split(lines[0])[0]  # nothing of ours before it
    changed = digest(os.path.join(out, "ckpt.pt")) != before["ckpt.pt"]
    assert_checkpoints_intact(out, workdir, None if changed else before)
