"""Launching the trainer as a user does (issue 30): 8 processes under torchrun on CPU (gloo) with tp='auto',
an impossible layout, and --help. About 40 s on 2 cores, most of it 9 processes importing torch. And the tests'
own launcher (parallel/launch.py): a gloo job that hangs outside a collective, where gloo's timeout does not
reach, is killed at its deadline instead of holding the test run until CI's limit."""
import json
import os
import subprocess
import sys
import time

import pytest

from parallel.launch import run_on_gloo
from training.config import VALID_KEYS
from tests.conftest import TRAIN_SCRIPT, read_metrics, run_env, run_train, run_trains, train_command, train_losses

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

# 4 tracks, 2 micro-steps per iteration: 8 processes make dp 2 x tp 4, one micro-step per replica.
# warmup_iters=0 and a large learning rate so the weights move within the 3 iterations compared.
TINY_8 = ["--dataset=syn", "--data_dir=data", "--n_layer=1", "--n_head=4", "--n_embd=16", "--n_tracks=4", "--block_size=8",
          "--batch_size=2", "--gradient_accumulation_steps=2", "--max_iters=3", "--eval_interval=3",
          "--eval_iters=2", "--log_interval=1", "--learning_rate=1e-2", "--warmup_iters=0", "--lr_decay_iters=3",
          "--min_lr=1e-3", "--device=cpu"]


@pytest.mark.gate  # the default tier runs it: pytest.ini
def test_eight_processes_choose_dp2_tp4_and_match_one_process(workdir):
    out8, out1 = os.path.join(workdir, "out-launch-8"), os.path.join(workdir, "out-launch-1")
    # the one-process reference beside the eight (run_trains: independent runs at once)
    run_trains([[*TINY_8, f"--out_dir={out8}"], [*TINY_8, f"--out_dir={out1}"]], workdir, nproc=[8, 1], timeout=300)
    with open(os.path.join(out8, "log.txt")) as f:
        first = f.readline()
    assert first.startswith("layout: world 8 = dp 2 x tp 4 (tp='auto': the largest divisor of n_tracks=4 "
                            "that divides world size 8), 1 micro-step per replica"), first
    with open(os.path.join(out8, "config.json")) as f:
        config = json.load(f)
    assert (config["tp"], config["derived"]["dp"], config["derived"]["tp_requested"]) == (4, 2, "auto")
    layout = [r for r in read_metrics(out8) if r["type"] == "layout"]
    assert [(r["world_size"], r["dp"], r["tp"]) for r in layout] == [(8, 2, 4)]
    # the function does not depend on the layout: the same losses as one process (float32 sums in
    # another order: rel 1e-4, as tests/test_train.py allows across tp)
    losses8, losses1 = train_losses(out8), train_losses(out1)
    assert sorted(losses8) == [0, 1, 2]
    for it in losses1:
        assert abs(losses8[it] - losses1[it]) <= 1e-4 * abs(losses1[it]), (it, losses8[it], losses1[it])
    val8 = [r["val_loss"] for r in read_metrics(out8) if r["type"] == "eval"]
    val1 = [r["val_loss"] for r in read_metrics(out1) if r["type"] == "eval"]
    assert len(val8) == 2 and val8[1] < val8[0]  # it trained
    assert all(abs(a - b) <= 1e-4 * b for a, b in zip(val8, val1))


def test_impossible_layout_is_the_last_line_torchrun_prints(workdir):
    """1 track and 1 micro-step on 2 processes: dp 2 cannot split the accumulation. The one-line error is
    printed by rank 0 and is also the root cause in torchrun's failure summary, its last lines."""
    out = os.path.join(workdir, "out-launch-bad")
    args = [*TINY_8, "--n_tracks=1", "--gradient_accumulation_steps=1", f"--out_dir={out}"]
    proc = subprocess.run(train_command(args, nproc=2), cwd=workdir, env=run_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    message = ("error: world 2 = dp 2 x tp 1 (tp='auto': the largest divisor of n_tracks=1 that divides world "
               "size 2): gradient_accumulation_steps=1 (the total over the data-parallel replicas) cannot be split "
               "over dp=2 replicas; use --gradient_accumulation_steps=2 --batch_size=1 (the same 2 sequences per "
               "iteration)")
    assert proc.returncode == 1
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip().strip("=")]  # borders aside
    assert lines[-1] == f"traceback : {message}", proc.stdout[-3000:]
    assert proc.stdout.count(f"\n{message}\n") + proc.stdout.startswith(f"{message}\n") == 1  # printed once
    assert not os.path.exists(out)
    # one process: the same kind of message is the whole output
    proc = run_train(["--dataset=syn", "--data_dir=data", "--tp=2", f"--out_dir={out}"], workdir, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["error: tp=2 does not divide the world size 1 (processes); use --tp=auto or "
                                        "one of [1], or launch a multiple of 2 processes (torchrun --nproc_per_node=N)"]


def test_help_lists_every_key():
    proc = subprocess.run([sys.executable, TRAIN_SCRIPT, "--help"], env=run_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""
    keys = [line.split()[0] for line in proc.stdout.splitlines() if line[:2] == "  " and line[2] != " "]
    assert keys == list(VALID_KEYS)


def _rank_1_hangs(rank, world_size):
    if rank == 1:
        time.sleep(3600)
    return rank


def test_a_gloo_job_past_its_deadline_is_killed_and_named():
    t0 = time.monotonic()
    # a short deadline: rank 0 may still be starting when it passes (then it is named too, and killed as well)
    with pytest.raises(TimeoutError, match=r"_rank_1_hangs on 2 gloo ranks ran past its deadline of 5 s; "
                                           r"killed, ranks \[.*1\] were still running"):
        run_on_gloo(_rank_1_hangs, 2, deadline_s=5)
    assert time.monotonic() - t0 < 60  # killed at the deadline, not after the hour's sleep
