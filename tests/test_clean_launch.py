"""training/launch.py: torchrun's launcher with our line last. A worker's bad value ends in one line that
quotes the worker's error, and SIGTERM to the launcher stops the workers with a checkpoint and ends in one
line; neither prints a traceback, and no file of the user's changes."""
import os
import re
import signal
import subprocess
import sys
import time

from tests.conftest import REPO, TINY, TRAIN_SCRIPT, run_env
from tests.test_kill import logged_iters, wait_until
from tests.test_stops import STOP_S, last_line, tree_digests
import pytest

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests


def launch(args, cwd):
    env = {**run_env(), "PYTHONPATH": REPO}
    return subprocess.Popen([sys.executable, "-m", "training.launch", "--standalone", "--nproc_per_node=2",
                             TRAIN_SCRIPT, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_workers_bad_value_ends_in_one_line_quoting_it(workdir):
    before = tree_digests(workdir)
    proc = launch([*TINY, "--n_layer=-1", f"--out_dir={os.path.join(workdir, 'out-bad')}"], workdir)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    assert re.fullmatch(r"launch failed: rank [01] exited with code 1: error: invalid n_layer=-1; must be in \[1, 65536\]",
                        last_line(err)), err[-3000:]
    assert tree_digests(workdir) == before


def test_sigterm_to_the_launcher_stops_the_workers_with_a_checkpoint_and_ends_in_one_line(workdir):
    out = os.path.join(workdir, "out-launch-stop")
    proc = launch([*TINY, "--tp=2", "--max_iters=100000", "--eval_interval=100000", "--eval_iters=1",
                   f"--out_dir={out}"], workdir)
    assert wait_until(lambda: len(logged_iters(out)) > 2, proc), proc.communicate()[1][-3000:]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, err = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 143, err[-3000:]
    assert took <= STOP_S, (took, err[-3000:])
    assert last_line(err) == "launch stopped by SIGTERM: the workers were told to stop (their stop lines are above)"
    assert "stopped by SIGTERM at iter " in stdout and os.path.exists(os.path.join(out, "ckpt.pt")), stdout[-2000:]


def test_an_option_torchrun_refuses_is_one_line_before_any_worker(tmp_path):
    env = {**run_env(), "PYTHONPATH": REPO}
    cases = [(["--nnodes=abc"], "invalid literal for int() with base 10: 'abc' (--nnodes=abc,"),
             (["--nproc_per_node=two"], "Unsupported nproc_per_node value: two"),
             (["--nnodes=1", "--rdzv_endpoint=host:port"], "rendezvous endpoint 'host:port'")]
    procs = [subprocess.Popen([sys.executable, "-m", "training.launch", *args, TRAIN_SCRIPT, *TINY], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for args, _ in cases]
    for proc, (args, want) in zip(procs, cases):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and "Traceback" not in out + err, (args, err[-3000:])
        assert last_line(err).startswith("launch refused: a torchrun option is not valid: ") and want in last_line(err)
        assert "Starting" not in err and os.listdir(tmp_path) == [], err  # no worker, no file
