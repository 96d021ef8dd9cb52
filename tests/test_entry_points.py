"""Every command line of the repository (a file with a `__main__` block outside tests/) is guarded: its main
runs under a shared wrapper (training.cli.guarded; the trainer's report_fatal, the prepare scripts'
data.prepare_utils.run; training.launch ends torchrun's failures itself), and a bad option is refused in one
line naming it, with exit code 2 (1 for the scripts that take no options), no traceback, and no file of the
tree changed; --help prints and exits 0. The list is discovered, so an entry point added without a guard fails here."""
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import REPO, run_env

GUARDS = ("guarded(", "report_fatal(", "run(main", "check_no_arguments(", 'sys.exit(f"error: ')
OWN_GUARD = {  # entry points that end every failure in one line themselves (their tests: test_launch.py)
    "training/launch.py": "torchrun's SignalException and ChildFailedError, each ended in one line",
}


def entry_points():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    found = []
    for path in files.split():
        if path.startswith("tests/") or not os.path.isfile(os.path.join(REPO, path)):
            continue
        with open(os.path.join(REPO, path)) as f:
            source = f.read()
        if 'if __name__ == "__main__":' in source:
            found.append((path, source[source.index('if __name__ == "__main__":'):]))
    return found


def command(path):
    """How the docs run it: a package module with -m, a top-level or data/ script as a file."""
    top = path.split("/")[0]
    if top in ("bench", "experiments", "training", "analysis"):
        return [sys.executable, "-m", path[:-3].replace("/", ".")]
    return [sys.executable, path]


def tree_state():
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout


def test_the_list_is_every_command_line():
    paths = [p for p, _ in entry_points()]
    assert len(paths) >= 30, paths  # the scripts, bench.*, experiments.*, data/*/prepare.py, training.*
    for expected in ("train_reduced_sync.py", "sample.py", "bench/tp_latency.py", "bench/step_model.py",
                     "experiments/docs_study/run.py", "data/debian_docs/prepare.py", "training/launch.py"):
        assert expected in paths


@pytest.mark.parametrize("path, block", entry_points(), ids=lambda v: v if v.endswith(".py") else "")
def test_every_main_runs_under_a_guard(path, block):
    assert path in OWN_GUARD or any(g in block for g in GUARDS), \
        f"{path}: its __main__ block calls none of {GUARDS}: run its main through training.cli.guarded"


@pytest.mark.slow
def test_help_exits_0_at_every_entry_point():
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda path: (path, subprocess.run(
            command(path) + ["--help"], cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL)), [p for p, _ in entry_points()]))
    problems = [f"{path}: rc {proc.returncode}, stderr {proc.stderr[-400:]!r}" for path, proc in results
                if proc.returncode != 0 or "Traceback" in proc.stderr or not proc.stdout.strip()]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.gate  # the default tier runs it: pytest.ini
def test_a_bad_option_is_one_line_at_every_entry_point():
    before = tree_state()
    env = {**run_env(), "NCCL_NVLS_ENABLE": "0"}

    def run(path):
        proc = subprocess.run(command(path) + ["--no_such_option_x=1"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
        return path, proc

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, [p for p, _ in entry_points()]))
    problems = []
    for path, proc in results:
        lines = [line for line in proc.stderr.splitlines() if line.strip() and "Warning" not in line
                 and not line.startswith("  warnings.warn")]
        # the one line names the option, or what the command requires first (argparse checks that first)
        if proc.returncode not in (1, 2) or "Traceback" in proc.stderr or len(lines) != 1 \
                or not ("no_such_option_x" in lines[0] or "arguments are required" in lines[0]):
            problems.append(f"{path}: rc {proc.returncode}, stderr {proc.stderr[-600:]!r}")
    assert not problems, "\n".join(problems)
    assert tree_state() == before  # nothing written, nothing removed
