"""The studies' tables are what their commands print from the stored run logs, byte for byte: each command
that EXPERIMENT_SUMMARY.md gives for a table (compare_runs.py, experiments/docs_study/run.py) runs on a copy
of the records (the run logs linked, the outputs written anew) and must write the stored files exactly.
Figures are written too but not compared."""
import glob
import os
import shlex
import sys

import pytest

from tests.conftest import REPO, Started
from tests.doc_text import code_blocks, command_lines, read

ONE = "experiments/docs_study/one_budget"
BUDGETS = "experiments/docs_study/budgets"
SIZES = "experiments/docs_study/sizes"
WIDTHS = [f"{SIZES}/w{w}" for w in (256, 384, 512)]
CHAR = "experiments/char_sweep"
BPE = "experiments/shakespeare_sweep"
# (command as EXPERIMENT_SUMMARY.md gives it, the stored file its stdout is, stored files it writes)
COMMANDS = [
    (f"python compare_runs.py {ONE}/runs/d768-* --markdown --stats --trend {ONE}/trend.png "
     f"--stats-json {ONE}/stats.json --out compare_runs.png", f"{ONE}/compare_runs.md", [f"{ONE}/stats.json"]),
    ("python -m experiments.docs_study.run report", None, [f"{ONE}/gpu_seconds.md"]),
    (f"python compare_runs.py {BPE}/runs/* --markdown --stats --stats-json {BPE}/stats.json "
     f"--out {BPE}/compare_runs.png", f"{BPE}/compare_runs.md", [f"{BPE}/stats.json"]),
    (f"python compare_runs.py {CHAR}/runs/* --markdown --stats --trend {CHAR}/trend.png "
     f"--stats-json {CHAR}/stats.json --out {CHAR}/compare_runs.png", f"{CHAR}/compare_runs.md", [f"{CHAR}/stats.json"]),
    ("python -m experiments.docs_study.run budgets", None,
     [f"{BUDGETS}/budget_table.md", f"{BUDGETS}/stats.json", f"{BUDGETS}/wsd_check.md",
      f"{BUDGETS}/rerun_check.md"]),
    # the fits across widths and the planner's held-out check, and each width's tables, from every width's runs
    ("python -m experiments.docs_study.run sizes", None,
     [f"{SIZES}/size_table.md", f"{SIZES}/heldout.md", f"{SIZES}/size_fit.json"]
     + [f"{w}/{name}" for w in WIDTHS for name in ("budget_table.md", "stats.json")]
     + [f"{w}/rerun_check.md" for w in WIDTHS[:2]]),  # the widths with trunks trained twice (earlier/)
    # the same budget and WSD tables from compare_runs.py itself: checked below as parts of its stdout
    (f"python compare_runs.py {BUDGETS}/runs/d768-b* --budgets budget.png --versus '{ONE}/runs/d768-*'", None, []),
]
STUDIES = (ONE, BUDGETS, CHAR, BPE, *WIDTHS)
READ_ONLY = ("runs", "earlier", "stopped", "gpu-call-*.log")  # the inputs: linked, never written


def records_copy(root):
    """root/experiments/...: each study folder with its inputs linked to the repository's and no outputs."""
    for study in STUDIES:
        os.makedirs(os.path.join(root, study))
        for pattern in READ_ONLY:
            for path in glob.glob(os.path.join(REPO, study, pattern)):
                os.symlink(path, os.path.join(root, study, os.path.basename(path)))


def summary_commands():
    return {" ".join(line.split()) for block in code_blocks(read("EXPERIMENT_SUMMARY.md")) for line in command_lines(block)}


def start(command, cwd, output):
    """The command started in cwd (a records_copy), its stdout and stderr going to files in output."""
    words = shlex.split(command)
    assert words[0] == "python"
    # compare_runs.py expands quoted globs itself, sorted, as the shell does
    argv = [sys.executable, os.path.join(REPO, words[1]), *words[2:]] if words[1].endswith(".py") else \
        [sys.executable, *words[1:]]
    env = dict(os.environ, PYTHONPATH=REPO, MPLBACKEND="Agg")
    return Started(argv, output, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def started(request, tmp_path_factory):
    """{command: (its folder, Started)} of the commands this session tests, each in a records_copy of its own, all
    started at the module's first test: each spends seconds of one core importing numpy and matplotlib, and they run
    beside each other instead of one after another. Each test reads its own."""
    commands = {item.callspec.params["command"] for item in request.session.items
                if getattr(item, "module", None) is request.module and hasattr(item, "callspec")}
    runs = {}
    for command, _, _ in COMMANDS:
        if command in commands:
            cwd = str(tmp_path_factory.mktemp("study"))
            records_copy(cwd)
            runs[command] = cwd, start(command, cwd, str(tmp_path_factory.mktemp("study_output")))
    yield runs
    for _, run in runs.values():
        run.close()


@pytest.mark.parametrize("command,stdout_file,written", COMMANDS, ids=[c[0].split()[2] + "-" + c[0].split()[-1]
                                                                        for c in COMMANDS])
def test_summary_command_regenerates_its_tables_byte_for_byte(started, command, stdout_file, written):
    assert command in summary_commands(), f"EXPERIMENT_SUMMARY.md no longer gives: {command}"
    cwd, run = started[command]
    proc = run.result(timeout=120)
    assert proc.returncode == 0, f"{command}:\n{proc.stderr[-2000:]}"
    stdout = proc.stdout
    produced = {stdout_file: stdout} if stdout_file else {}
    for path in written:
        with open(os.path.join(cwd, path), encoding="utf-8") as f:
            produced[path] = f.read()
    if "--budgets" in command:  # its budget and WSD tables are the ones docs_study.run budgets stored
        for path in (f"{BUDGETS}/budget_table.md", f"{BUDGETS}/wsd_check.md"):
            with open(os.path.join(REPO, path), encoding="utf-8") as f:
                table = f.read()
            assert table.strip() in stdout, f"{command}: its table differs from {path}"
    for path, text in produced.items():
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            stored = f.read()
        assert text == stored, f"{command}: {path} differs from what it prints now (regenerate it and commit)"
