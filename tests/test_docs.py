"""
The documents stay checkable (issue 27): in README.md, TRAINING_INSTRUCTIONS.md and EXPERIMENT_SUMMARY.md,
- every repository path they name exists (placeholders such as <name> and globs are matched as patterns);
- every --flag in their command lines is one the named script accepts: a config key for the trainer, an
  argparse option (found in the script's source) for the other scripts;
- every `tail` of a log/metrics file follows an out_dir that a config launched in the same block writes to
  (in a block that launches nothing, some config's out_dir), and a tail never uses -f on a log that a
  resume rewrites;
- nothing is cited from a shared/ folder, which a reader of this repository does not have;
- the README and docs/ cite no issue number and no § of another file (a reader cannot open either), and the
  counts the README states (tests, syncs per policy, configs per family) are the repository's;
- a summary table introduced by a paragraph that cites one results file holds only numbers of that file.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from training.config import VALID_KEYS, read_config_file
from model.sync_policy import parse_sync_policy
from tests.conftest import REPO

GUIDES = ("README.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))))
DOCS = (*GUIDES, "TRAINING_INSTRUCTIONS.md", "EXPERIMENT_SUMMARY.md")
TOP_DIRS = ("config", "data", "experiments", "bench", "tests", "scripts", "model", "parallel", ".ci", "shared")
PATH = re.compile(r"(?<![\w./$-])((?:%s)/[\w./*<>{}$-]*)" % "|".join(re.escape(d) for d in TOP_DIRS))
ROOT_FILE = re.compile(r"(?<![\w./$*<>-])([\w-]+\.(?:py|sh|md|txt|ini))(?![\w.-])")
GENERATED = (".bin", ".pt", ".pkl")  # what prepare scripts and training write: ignored by git, never stored
# files named in the docs that live outside this repository (other projects, other machines)
ELSEWHERE = {"openai_public.py", "conf.py", "LICENSE.txt", "vocab.bpe", "encoder.json", "log.txt",
             "config.json", "metrics.jsonl", "KINDS.md", "METHOD.md", "meta.pkl", "prepare.py"}
FENCE = re.compile(r"```(?:bash|sh)?\n(.*?)```", re.S)


def read(doc):
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        return f.read()


def code_blocks(text):
    return FENCE.findall(text)


def inline_code(text):
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def command_lines(block):
    """Shell lines of a code block with continuations joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    for line in joined.splitlines():
        line = re.sub(r"\s#.*$", "", line).strip()
        if line and not line.startswith("#"):
            yield line


def git_ignored(path):
    """True for what the repository ignores (downloads, build outputs): named in the docs, never stored."""
    return subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0


def as_pattern(path):
    """A doc path as a glob: <placeholders> and {a,b} become *, a trailing slash is dropped."""
    path = re.sub(r"<[^>]*>|\$?\{[^}]*\}|\$\w+", "*", path).rstrip("/.")
    return path.replace("**", "*")


@pytest.mark.parametrize("doc", DOCS)
def test_named_paths_exist(doc):
    text = read(doc)
    spans = inline_code(text) + [line for b in code_blocks(text) for line in command_lines(b)]
    # markdown links and images, relative to the document's folder
    links = [os.path.normpath(os.path.join(os.path.dirname(doc), link)) for link in re.findall(r"\]\(([^)#:]+)\)", text)]
    missing = []
    for span in spans + links:
        for path in PATH.findall(span) + ROOT_FILE.findall(span):
            if path in ELSEWHERE or path.endswith(GENERATED) or git_ignored(path):
                continue
            pattern = as_pattern(path)
            if "/" not in pattern:  # a bare file name: anywhere in the repository
                pattern = os.path.join("**", pattern)
            if not glob.glob(os.path.join(REPO, pattern), recursive=True):
                missing.append(path)
    assert not missing, f"{doc} names paths that do not exist: {sorted(set(missing))}"


def script_options(script):
    """The --options a script's argparse accepts, read from its source."""
    with open(os.path.join(REPO, script), encoding="utf-8") as f:
        source = f.read()
    # a thin command line (compare_runs.py) parses its options in the module whose main it runs
    for module in re.findall(r"^from ([\w.]+) import main$", source, re.M):
        with open(os.path.join(REPO, *module.split(".")) + ".py", encoding="utf-8") as f:
            source += f.read()
    return set(re.findall(r"""["'](--[\w-]+)["']""", source))


def module_file(module):
    """The repository file that `python -m module` runs, or None."""
    path = module.replace(".", "/") + ".py"
    return path if os.path.isfile(os.path.join(REPO, path)) else None


def script_of(words):
    """The repository file a command line runs (a script, or the module after -m) and the index of the word
    that names it; (None, None) if none."""
    for i, w in enumerate(words):
        if w.endswith(".py") and os.path.isfile(os.path.join(REPO, w)):
            return w, i
        if w == "-m" and i + 1 < len(words) and module_file(words[i + 1]):
            return module_file(words[i + 1]), i + 1
    return None, None


def flags(words):
    return [w.split("=", 1)[0] for w in words if w.startswith("--")]


@pytest.mark.parametrize("doc", DOCS)
def test_command_line_flags_are_accepted(doc):
    bad = []
    for block in code_blocks(read(doc)):
        for line in command_lines(block):
            try:
                words = shlex.split(line.replace("$OUT", "OUT"))
            except ValueError:
                continue
            script, at = script_of(words)
            if not script or not any(w in ("python", "python3", "torchrun") or w.startswith("--nproc")
                                     for w in words[:3]):
                continue
            after = words[at + 1:]
            if script == "train_reduced_sync.py":
                unknown = [f for f in flags(after) if f[2:] not in VALID_KEYS and f != "--help"]
            else:
                accepted = script_options(script)
                unknown = [f for f in flags(after) if f not in accepted]
                if script == "experiments/char_sweep/run.py":  # --set KEY=VALUE passes trainer keys through
                    unknown = [f for f in unknown if f[2:] not in VALID_KEYS]
            bad += [f"{script} {f}" for f in unknown]
    assert not bad, f"{doc}: flags the named script does not accept: {bad}"


@pytest.mark.parametrize("doc", DOCS)
def test_tail_follows_a_launched_out_dir(doc):
    every_config = {read_config_file(p)["out_dir"] for p in glob.glob(os.path.join(REPO, "config", "*.py"))}
    problems = []
    for block in code_blocks(read(doc)):
        lines = list(command_lines(block))
        out_dirs = set()
        for line in lines:
            for config in re.findall(r"config/[\w-]+\.py", line):
                override = re.search(r"--out_dir=(\S+)", line)
                out_dirs.add(override.group(1) if override else read_config_file(os.path.join(REPO, config))["out_dir"])
        for line in lines:
            match = re.match(r"tail\s+(-\w+)\s+(\S+)/(log\.txt|metrics\.jsonl)", line)
            if not match:
                continue
            if match.group(1) == "-f":
                problems.append(f"{line!r}: use tail -F (a resume writes the log anew)")
            target = match.group(2)
            if target.startswith("/") or "*" in target:
                continue  # a sweep's scratch dir, or all runs at once
            if target not in (out_dirs or every_config):  # a block that launches nothing: any config's
                problems.append(f"{line!r}: no config launched in this block writes to {target} "
                                f"(they write {sorted(out_dirs)})")
    assert not problems, f"{doc}: {problems}"


@pytest.mark.parametrize("doc", DOCS)
def test_no_citation_outside_the_repository(doc):
    """A reader can open what the docs cite: nothing in a shared/ folder beside the checkout."""
    assert not re.search(r"(?<![\w-])(\.\./)?shared/", read(doc)), f"{doc} cites a file under shared/"


RESULTS_CITE = re.compile(r"`((?:bench/results|experiments)/[\w./-]+\.(?:md|txt|log))`")


def numbers_in(text):
    return [float(x) for x in re.findall(r"-?\d+\.\d+", text.replace("−", "-").replace(",", ""))]


def test_summary_tables_match_their_results_file():
    """A table of EXPERIMENT_SUMMARY.md whose introducing paragraph cites one results file: every number
    of 2 or more decimals in its cells is in that file, as printed or rounded from a longer value."""
    lines = read("EXPERIMENT_SUMMARY.md").splitlines()
    checked, problems = 0, []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))):
            i += 1
            continue
        end = i
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        start = k
        while start > 0 and lines[start - 1].strip() and not lines[start - 1].startswith("|"):
            start -= 1
        cited = sorted(set(RESULTS_CITE.findall(" ".join(lines[start:k + 1]))))
        if len(cited) == 1:
            with open(os.path.join(REPO, cited[0]), encoding="utf-8") as f:
                source = numbers_in(f.read())
            for row in lines[i + 2:end]:
                for cell in row.split("|")[2:]:
                    for text in re.findall(r"-?\d+\.\d{2,}", cell.replace("−", "-").replace(",", "")):
                        places = len(text.split(".")[1])
                        if not any(round(x, places) == float(text) or round(abs(x), places) == abs(float(text))
                                   for x in source):
                            problems.append(f"line {i + 1}: {text} not in {cited[0]}")
                        checked += 1
        i = end
    assert checked > 100, checked  # the check reads real tables
    assert not problems, problems


@pytest.mark.parametrize("doc", GUIDES)
def test_guides_cite_no_issue_and_no_section_sign(doc):
    hits = re.findall(r".{0,30}(?:\bissues? #?\d+|§).{0,30}", read(doc))
    assert not hits, f"{doc} cites what a reader cannot open (cite a file and its heading instead): {hits}"


def test_readme_test_count_is_the_suites():
    stated = re.findall(r"(\d+) tests\b", read("README.md"))
    assert stated, "README.md states no test count"
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/"], cwd=REPO,
                         capture_output=True, text=True).stdout
    collected = int(re.search(r"(\d+) tests? collected", out).group(1))
    assert {int(n) for n in stated} == {collected}, f"README.md says {stated} tests; pytest collects {collected}"


def test_readme_policy_table_counts_are_the_plans():
    rows = re.findall(r"^\| `(baseline|spd|parallel|ladder)`\s*\| (\d+) \|", read("README.md"), re.M)
    assert len(rows) == 4, rows
    for name, syncs in rows:
        assert parse_sync_policy(name, 12).n_syncs == int(syncs), name
    assert re.search(r"^\| `grouped:G`\s*\| 12 / G \|", read("README.md"), re.M)
    assert all(parse_sync_policy(f"grouped:{g}", 12).n_syncs == 12 // g for g in (1, 2, 3, 4, 6, 12))


def test_config_families_hold_the_stated_number_of_policies():
    stated = re.search(r"the same (\d+) policies", read("docs/configs.md"))
    families = [glob.glob(os.path.join(REPO, "config", f"{prefix}_*sync.py")) for prefix in ("train", "shakespeare")]
    assert stated and all(len(f) == int(stated.group(1)) for f in families), [len(f) for f in families]


# where the experiments' commands are written: the guides, the summary, the studies' own READMEs and docstrings,
# the config comments and the GPU suite
COMMAND_FILES = (*DOCS, *sorted(os.path.relpath(p, REPO) for pattern in (
    "experiments/**/*.md", "experiments/**/*.py", "experiments/**/*.sh", "config/*.py", "bench/gpu_suite.sh")
    for p in glob.glob(os.path.join(REPO, pattern), recursive=True)))
OLD_EXPERIMENT_COMMAND = re.compile(r"(?:python3?|torchrun(?: --[\w=-]+)*)\s+(experiments/[\w/.-]+\.py)")


def test_experiments_run_as_modules_that_exist():
    """Scripts under experiments/ run as modules from the repository root (they import the project's packages
    without a path insertion): no `python experiments/<x>.py`, and every `-m experiments.<x>` is a module here."""
    old, missing = [], []
    for doc in COMMAND_FILES:
        text = read(doc)
        old += [f"{doc}: {path}" for path in OLD_EXPERIMENT_COMMAND.findall(text)]
        missing += [f"{doc}: {m}" for m in re.findall(r"-m\s+(experiments(?:\.\w+)+)", text) if not module_file(m)]
    assert len(COMMAND_FILES) > 40 and not old, f"run these as python -m experiments.<...>: {old}"
    assert not missing, f"modules that do not exist: {missing}"
