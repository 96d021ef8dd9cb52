"""Every command line of the repository (a file with a `__main__` block outside tests/) is guarded: its main
runs under a shared wrapper (cli_guard.guarded; the trainer's report_fatal, the prepare scripts'
data.prepare_utils.run; training.launch ends torchrun's failures itself), and a bad option is refused in one
line naming it, with exit code 2 (1 for the scripts that take no options), no traceback, and no file of the
tree changed; --help prints and exits 0. The list is discovered, so an entry point added without a guard fails here.

The default tier checks the bad option in a process of its own per command forked from one that imported torch once
(FORK_RUNNER: runpy runs the module or file as `python -m` and `python file.py` do), seconds instead of half a minute
of 33 interpreters importing torch; the slow tier checks it in fresh interpreters, as a user runs them."""
import json
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


def module_name(path):
    """The module a package file runs as (python -m), or None for a top-level script or a data/<name>/prepare.py,
    run as a file (nanoGPT's usage; data/debian_large/stage.py, no prepare script, runs as a module)."""
    top = path.split("/")[0]
    as_module = top in ("bench", "experiments", "training", "analysis") or (top == "data" and not path.endswith("/prepare.py"))
    return path[:-3].replace("/", ".") if as_module else None


def command(path):
    """How the docs run it: a package module with -m, a top-level script or a prepare script as a file."""
    module = module_name(path)
    return [sys.executable, "-m", module] if module else [sys.executable, path]


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
        f"{path}: its __main__ block calls none of {GUARDS}: run its main through cli_guard.guarded"


@pytest.mark.slow
def test_help_exits_0_at_every_entry_point():
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda path: (path, subprocess.run(
            command(path) + ["--help"], cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL)), [p for p, _ in entry_points()]))
    problems = [f"{path}: rc {proc.returncode}, stderr {proc.stderr[-400:]!r}" for path, proc in results
                if proc.returncode != 0 or "Traceback" in proc.stderr or not proc.stdout.strip()]
    assert not problems, "\n".join(problems)


BAD_OPTION = "--no_such_option_x=1"


def bad_option_problems(results):
    """The (path, exit code, stderr) whose bad option was not refused in one line naming it, with exit code 1 or 2."""
    problems = []
    for path, returncode, stderr in results:
        lines = [line for line in stderr.splitlines() if line.strip() and "Warning" not in line
                 and not line.startswith("  warnings.warn")]
        # the one line names the option, or what the command requires first (argparse checks that first)
        if returncode not in (1, 2) or "Traceback" in stderr or len(lines) != 1 \
                or not ("no_such_option_x" in lines[0] or "arguments are required" in lines[0]):
            problems.append(f"{path}: rc {returncode}, stderr {stderr[-600:]!r}")
    return problems


@pytest.mark.slow
def test_a_bad_option_is_one_line_at_every_entry_point():
    """Each command in a fresh interpreter, as a user runs it (the default tier's check below forks them)."""
    before = tree_state()
    env = {**run_env(), "NCCL_NVLS_ENABLE": "0"}

    def run(path):
        proc = subprocess.run(command(path) + [BAD_OPTION], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
        return path, proc.returncode, proc.stderr

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, [p for p, _ in entry_points()]))
    problems = bad_option_problems(results)
    assert not problems, "\n".join(problems)
    assert tree_state() == before  # nothing written, nothing removed


# Runs each command of argv[1] (JSON [[module or null, path], ...], cwd: the repository) with the arguments after
# argv[2] in a child forked from this process, two at a time: stdin /dev/null, stdout and stderr to the files <n>.out
# and <n>.err in the folder argv[2], the module
# by runpy.run_module (what python -m runs) with the folder on sys.path, a file by runpy.run_path with its own folder
# on sys.path (what python file.py runs); the exit as the interpreter's (SystemExit's code, or its message on stderr
# and 1; an exception's traceback and 1; then the atexit functions). Prints {n: exit code} as JSON.
FORK_RUNNER = r"""
import atexit, json, os, runpy, sys, traceback
import torch  # what most entry points import first: once here, not in each command's process
commands, out, args = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
base_path = [p for p in sys.path if p not in ("", os.getcwd())]


def run(n, module, path):
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, name in ((1, f"{n}.out"), (2, f"{n}.err")):
        os.dup2(os.open(os.path.join(out, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    try:
        if module:
            sys.path[:], sys.argv = [os.getcwd(), *base_path], [module, *args]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.path[:], sys.argv = [os.path.dirname(os.path.realpath(path)), *base_path], [path, *args]
            runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = 0 if e.code is None else e.code
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


running, codes = {}, {}
for n, (module, path) in enumerate(commands):
    if len(running) == 2:
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        run(n, module, path)
    running[pid] = n
while running:
    pid, status = os.wait()
    codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
print(json.dumps(codes))
"""


def test_a_bad_option_is_one_line_at_every_entry_point_forked(tmp_path):
    """The bad option at every entry point, each command in a process of its own forked from one that imported
    torch once (FORK_RUNNER); the slow tier's test above runs the same check in fresh interpreters."""
    before = tree_state()
    paths = [p for p, _ in entry_points()]
    proc = subprocess.run([sys.executable, "-c", FORK_RUNNER, json.dumps([[module_name(p), p] for p in paths]),
                           str(tmp_path), BAD_OPTION], cwd=REPO, env={**run_env(), "NCCL_NVLS_ENABLE": "0"},
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.splitlines()[-1])
    assert sorted(map(int, codes)) == list(range(len(paths)))  # every command ran
    results = [(path, codes[str(n)], (tmp_path / f"{n}.err").read_text()) for n, path in enumerate(paths)]
    problems = bad_option_problems(results)
    assert not problems, "\n".join(problems)
    assert tree_state() == before  # nothing written, nothing removed
