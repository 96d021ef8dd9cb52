"""The command lines answer a bad request before they import torch (issue 69): torch's import takes seconds, tens
on a loaded machine, and a missing config file or a bad option should not wait for it. Each command runs in a fresh
interpreter under -X importtime, and the test finds no torch module among its imports; without torch each takes
about 0.1 s, so these process-level checks stay in the default tier."""
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_env

TORCH = re.compile(r"^import time:.*\|\s+torch(\.|$)", re.M)

REFUSED = [  # (command, exit code, the start of its one line)
    (["train_reduced_sync.py", "config/nope.py"], 1, "error: config file not found: config/nope.py"),
    (["train_reduced_sync.py", "--no_such_key=1"], 1, "error: unknown config key 'no_such_key'"),
    (["train_reduced_sync.py", "--tp=3"], 1, "error: tp=3 does not divide the world size 1"),
    (["sample.py", "--out_dir=no-such-run"], 1, "error: no-such-run/ckpt.pt not found"),
    (["sample.py", "--no_such_option"], 2, "error: unrecognized arguments: --no_such_option"),
    (["sample.py", "--compile_mode=fast"], 2, "error: argument --compile_mode: invalid choice: 'fast'"),
    (["compare_runs.py", "no-such-run"], 1, "error: no-such-run: not a directory"),
    (["-m", "analysis.plan", "--no_such_option"], 2, "error: unrecognized arguments: --no_such_option"),
]


def run(args):
    """(exit code, stdout, stderr without the importtime lines, whether torch was imported)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=REPO, env=run_env(), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
    return proc.returncode, proc.stdout, stderr, bool(TORCH.search(proc.stderr))


@pytest.mark.parametrize("args, code, line", REFUSED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_refused_in_one_line_before_torch(args, code, line):
    returncode, _, stderr, torch_imported = run(args)
    assert returncode == code and len(stderr.splitlines()) == 1 and stderr.startswith(line), (returncode, stderr)
    assert not torch_imported, f"{' '.join(args)} imported torch before refusing the request"


def test_torch_imports_are_found():
    returncode, _, _, torch_imported = run(["-c", "import torch"])
    assert returncode == 0 and torch_imported


def test_trainer_help_before_torch():
    returncode, stdout, stderr, torch_imported = run(["train_reduced_sync.py", "--help"])
    assert returncode == 0 and stdout.startswith("usage: python train_reduced_sync.py") and not stderr
    assert not torch_imported


def test_launch_help_says_what_it_adds_then_points_to_torchrun():
    """python -m training.launch --help: a screen on what the wrapper changes, not torchrun's 150 lines."""
    for args in (["--help"], ["--standalone", "-h"]):  # the second through torchrun's own parser
        returncode, stdout, stderr, torch_imported = run(["-m", "training.launch", *args])
        lines = stdout.splitlines()
        assert returncode == 0 and not stderr.strip() and lines[0].startswith("usage: python -m training.launch")
        assert len(lines) <= 20 and "launch failed: rank R exited with code C" in stdout
        assert lines[-1].startswith("The options are torchrun's own") and "torchrun --help" in lines[-1]
        assert "--rdzv-backend" not in stdout  # torchrun's option list is not printed
        assert torch_imported == (args != ["--help"])  # the plain --help answers before torch's import
