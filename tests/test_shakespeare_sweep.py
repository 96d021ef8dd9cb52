"""experiments/shakespeare_sweep/run.sh refuses, before writing anything, a sweep dir that already holds the
runs it would train (the stored sweep is a record: its phase 2 used to overwrite the stored sensitivity
tables before the trainer refused the runs), and answers --help with its header."""
import hashlib
import os
import subprocess

from tests.conftest import REPO

SWEEP = os.path.join(REPO, "experiments", "shakespeare_sweep")


def snapshot():
    out = {}
    for root, _, files in os.walk(SWEEP):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), SWEEP)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_stored_sweep_is_refused_before_any_write():
    before = snapshot()
    proc = subprocess.run(["bash", "experiments/shakespeare_sweep/run.sh"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr == ("error: experiments/shakespeare_sweep/runs/baseline_24sync already holds a run; give a new "
                           "SWEEP_DIR: bash experiments/shakespeare_sweep/run.sh DIR\n"), proc.stderr
    assert snapshot() == before


def test_help_prints_the_header():
    proc = subprocess.run(["bash", "experiments/shakespeare_sweep/run.sh", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc
    assert "bash experiments/shakespeare_sweep/run.sh [SWEEP_DIR]" in proc.stdout and "Phase 2" in proc.stdout
    assert not os.path.exists(os.path.join(REPO, "--help"))


def test_bad_arguments_are_one_line_and_make_nothing(tmp_path):
    """`run.sh --bad` became a folder name and then mkdir's error (issue 70)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    for argv, env, says in (
            (["--bad"], {}, "error: unknown argument(s) --bad; usage: bash experiments/shakespeare_sweep/run.sh"),
            (["a", "b"], {}, "error: unknown argument(s) a b;"),
            ([str(a_file)], {}, f"error: SWEEP_DIR {a_file} exists and is not a folder;"),
            ([str(tmp_path / "new")], {"ITERS": "0"}, "error: ITERS=0: must be an integer >= 1"),
            ([str(tmp_path / "new")], {"PROGRESS_EVERY": "x"}, "error: PROGRESS_EVERY=x: must be an integer >= 1")):
        proc = subprocess.run(["bash", "experiments/shakespeare_sweep/run.sh", *argv], cwd=REPO, capture_output=True,
                              text=True, timeout=60, env={**os.environ, **env})
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert proc.stderr.startswith(says) and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not os.path.exists(os.path.join(REPO, "--bad")) and not os.path.exists(tmp_path / "new")
    assert a_file.read_text() == "kept"
