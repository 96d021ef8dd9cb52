"""bench/gpu_suite.sh, dry (GPU_SUITE_DRY=1): every mode plans at least one step, every step runs a
script or module (-m) that exists, bench scripts run as modules, and the step limits of a one-call mode
add up to at most the device tool's 10 minutes."""
import os
import shlex
import subprocess

import pytest

from tests.conftest import REPO

MODES = ["tp1", "tp2", "tp4", "train2", "decode2", "decode2b", "decode4", "gemm1", "check2", "pareto2", "comm4", "comm2"]


def planned_steps(mode, tmp_path):
    env = dict(os.environ, GPU_SUITE_DRY="1")
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", mode, str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line.split(" ", 3)[1:] for line in proc.stdout.splitlines() if line.startswith("step ")]


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_plans_runnable_steps(mode, tmp_path):
    steps = planned_steps(mode, tmp_path)
    assert steps, f"{mode} plans no step"
    for limit, name, command in steps:
        argv = [a for a in shlex.split(command) if not a.startswith("CUDA_VISIBLE_DEVICES=")]
        scripts = [a for a in argv if a.endswith(".py")]
        modules = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m"]
        ours = [m for m in modules if os.path.isdir(os.path.join(REPO, m.split(".")[0]))]  # not pytest
        scripts += [m.replace(".", os.sep) + ".py" for m in ours]
        assert scripts and all(os.path.exists(os.path.join(REPO, s)) for s in scripts), (name, command)
        assert not any(s.startswith("bench" + os.sep) for s in argv), ("run bench scripts as modules", command)
    if mode == "comm2":  # its two steps run at once, one per pair of GPUs
        assert len(steps) == 2 and all(int(limit) <= 600 for limit, _, _ in steps)
    elif mode not in ("tp1", "tp2", "tp4"):  # the old latency suites run as several calls by PARTS
        assert sum(int(limit) for limit, _, _ in steps) <= 600, (mode, [(l, n) for l, n, _ in steps])


@pytest.mark.parametrize("size, model", [("124m", "124m"), ("medium", "medium"), ("large", "large"), ("large2", "large"),
                                         ("async124m", "124m"), ("asyncprof", "124m"), ("asynclarge", "large")])
def test_comm2_runs_one_size_on_the_first_pair(size, model, tmp_path):
    """comm2 with one SIZE is a 2-GPU call: that size's invocation alone, on GPUs 0 and 1; any other SIZE is refused."""
    env = dict(os.environ, GPU_SUITE_DRY="1")
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", "comm2", str(tmp_path), size], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    steps = [line.split(" ", 3) for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert proc.returncode == 0 and [name for _, _, name, _ in steps] == [f"comm2_{size}"], proc
    assert steps[0][3].startswith("CUDA_VISIBLE_DEVICES=0,1 ") and f"--size {model} " in steps[0][3]
    bad = subprocess.run(["bash", "bench/gpu_suite.sh", "comm2", str(tmp_path), "xl"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "comm2 size 'xl' is not one of 124m, medium, large, large2, async124m, asyncprof, asynclarge" in bad.stderr


def test_comm2_large2_times_what_large_left_beside_plain_tp(tmp_path):
    """large2 is the rest of large at tp=2: parallel and spd beside the baseline in plain TP alone (its faster mode)."""
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", "comm2", str(tmp_path), "large2"], cwd=REPO,
                          env=dict(os.environ, GPU_SUITE_DRY="1"), capture_output=True, text=True, timeout=60)
    command = next(line for line in proc.stdout.splitlines() if line.startswith("step "))
    assert "--policies baseline,parallel,spd " in command and "--baseline_tp_comm" not in command, command


@pytest.mark.parametrize("size, policies, extra", [
    ("asyncprof", "baseline,grouped:4", "--peak_memory_reorder off --warmup 10 --iters 30 --profile tp2"),
    ("asynclarge", "baseline", "")])
def test_comm2_async_steps_time_plain_tp_with_and_without_async_grad(size, policies, extra, tmp_path):
    """asyncprof: baseline and grouped:4 in plain TP beside --tp_async_grad on, every row with inductor's peak-memory
    reordering off and profiled; asynclarge: the baseline's pair at large, as the trainer compiles it."""
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", "comm2", str(tmp_path), size], cwd=REPO,
                          env=dict(os.environ, GPU_SUITE_DRY="1"), capture_output=True, text=True, timeout=60)
    command = next(line for line in proc.stdout.splitlines() if line.startswith("step "))
    assert f"--policies {policies} --tp2_n_tracks 2 --tp_async_grad off,on" in command, command
    assert ("--profile" in command) == bool(extra) and extra in command, command
    assert "--profile" in command or "--peak_memory_reorder" not in command, command


def test_unknown_mode_is_refused(tmp_path):
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", "tp3", str(tmp_path)], cwd=REPO,
                          env=dict(os.environ, GPU_SUITE_DRY="1"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not one of" in proc.stderr


@pytest.mark.parametrize("args, code", [([], 2), (["tp2"], 2), (["--help"], 0)])
def test_usage_names_every_mode(args, code):
    """Without a mode and an out dir, or with --help, one usage line names every mode (exit 2 for a missing
    argument, on stderr; 0 for --help)."""
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", *args], cwd=REPO,
                          env=dict(os.environ, GPU_SUITE_DRY="1"), capture_output=True, text=True, timeout=60)
    line = proc.stdout if code == 0 else proc.stderr
    assert proc.returncode == code and line.startswith("usage: bash bench/gpu_suite.sh MODE OUT_DIR"), proc
    assert line.count("\n") == 1 and all(mode in line for mode in MODES), line
