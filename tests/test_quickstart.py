"""scripts/quickstart.sh writes only into its own out-quickstart/ (issue 42): the two demo runs land in
out-quickstart/baseline and out-quickstart/grouped4, a rerun replaces them (no replaced-* folders, no
growth), and a config's own out_dir is left alone, so the configs still run by hand afterwards.

The script runs for real (2 processes, compare_runs.py) on a tiny model and the synthetic dataset, in a
copy of the repository so that the real out-quickstart/ is never touched; QUICKSTART_SKIP_SETUP=1 skips
the venv, pip and Shakespeare preparation, which tests/test_env.py covers."""
import glob
import os
import shutil
import subprocess
import sys

from tests.conftest import REPO, run_env, write_markov_text
import pytest

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

# conftest's TINY model with 4 layers, so that grouped:4 (the second run's policy) has a group to sync
TINY_QUICKSTART = ["--dataset=syn", "--data_dir=data", "--n_layer=4", "--n_head=4", "--n_embd=32", "--block_size=32",
                   "--batch_size=4", "--n_tracks=2", "--gradient_accumulation_steps=2", "--device=cpu",
                   "--max_iters=4", "--lr_decay_iters=4", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=2",
                   "--log_interval=1"]
CONFIG_OUT = "out-shakespeare-baseline-24sync"  # the first config's own out_dir


def copy_repo(dst):
    """The files the quickstart runs: the top-level scripts and the packages they import."""
    for name in os.listdir(REPO):
        if name.endswith(".py"):
            shutil.copy(os.path.join(REPO, name), dst)
    for name in ("model", "parallel", "training", "analysis", "config", "scripts"):
        shutil.copytree(os.path.join(REPO, name), os.path.join(dst, name),
                        ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(dst, "data"))
    for path in glob.glob(os.path.join(REPO, "data", "*.py")):
        shutil.copy(path, os.path.join(dst, "data"))


def du(path):
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def quickstart(repo):
    env = run_env()
    env.update(QUICKSTART_SKIP_SETUP="1", PATH=os.path.dirname(sys.executable) + os.pathsep + env["PATH"])
    proc = subprocess.run(["bash", os.path.join(repo, "scripts", "quickstart.sh"), *TINY_QUICKSTART], cwd="/",
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"STDOUT:\n{proc.stdout[-4000:]}\nSTDERR:\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.gate  # the default tier runs it: pytest.ini
def test_quickstart_writes_and_replaces_only_its_own_out_dirs(tmp_path):
    repo = str(tmp_path)
    copy_repo(repo)
    write_markov_text(os.path.join(repo, "data", "syn"))
    own = os.path.join(repo, CONFIG_OUT)  # a run of the config by hand, before the quickstart
    os.makedirs(own)
    with open(os.path.join(own, "log.txt"), "w") as f:
        f.write("the config's own run\n")

    out = quickstart(repo)
    assert "removing the previous quickstart runs" not in out
    for name in ("baseline", "grouped4"):
        assert os.path.isfile(os.path.join(repo, "out-quickstart", name, "log.txt"))
        assert os.path.isfile(os.path.join(repo, "out-quickstart", name, "ckpt.pt"))
    assert "baseline" in out and "grouped:4" in out  # compare_runs.py's table of the two runs
    assert os.path.isfile(os.path.join(repo, "out-quickstart", "compare_runs.png"))
    first = du(os.path.join(repo, "out-quickstart"))

    out = quickstart(repo)
    assert "removing the previous quickstart runs in out-quickstart/" in out
    assert not [root for root, dirs, _ in os.walk(repo) for d in dirs if d.startswith("replaced-")]
    second = du(os.path.join(repo, "out-quickstart"))
    assert abs(second - first) <= 0.1 * first, (first, second)

    assert os.listdir(own) == ["log.txt"]
    with open(os.path.join(own, "log.txt")) as f:
        assert f.read() == "the config's own run\n"
    assert sorted(n for n in os.listdir(repo) if n.startswith("out-")) == ["out-quickstart", CONFIG_OUT]
