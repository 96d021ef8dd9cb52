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
  test counts the README states are the suite's;
- EXPERIMENT_SUMMARY.md stays a summary (at most about 400 lines);
- the scripts and modules their commands run exist and answer --help, their relative links open and the headings
  they cite exist.
The numbers they state (the answer tables, the summary tables, syncs per policy, configs per family) are checked
against the stored results in tests/test_docs_numbers.py.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from training.config import VALID_KEYS, read_config_file
from tests.conftest import REPO, Started, selected
from tests.doc_text import DOCS, FENCE, GUIDES, code_blocks, command_lines, inline_code, read

TOP_DIRS = ("config", "data", "experiments", "bench", "tests", "scripts", "model", "parallel", ".ci", "shared")
PATH = re.compile(r"(?<![\w./$-])((?:%s)/[\w./*<>{}$-]*)" % "|".join(re.escape(d) for d in TOP_DIRS))
ROOT_FILE = re.compile(r"(?<![\w./$*<>-])([\w-]+\.(?:py|sh|md|txt|ini))(?![\w.-])")
GENERATED = (".bin", ".pt", ".pkl")  # what prepare scripts and training write: ignored by git, never stored
# files named in the docs that live outside this repository (other projects, other machines)
ELSEWHERE = {"openai_public.py", "conf.py", "LICENSE.txt", "vocab.bpe", "encoder.json", "log.txt",
             "config.json", "metrics.jsonl", "KINDS.md", "METHOD.md", "meta.pkl", "prepare.py"}


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
            # a stem that a command writes its outputs to (--out DIR/name: name.md, name.png) counts as its files
            if not any(glob.glob(os.path.join(REPO, p), recursive=True) for p in (pattern, pattern + ".*")):
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


def module_path(module):
    """The repository file that `python -m module` runs (a.b -> a/b.py or a/b/__main__.py), else None."""
    base = os.path.join(*module.split("."))
    for path in (base + ".py", os.path.join(base, "__main__.py")):
        if os.path.isfile(os.path.join(REPO, path)):
            return path
    return None


def run_target(words):
    """(the repository file a command line runs, the words after it): a script (x.py, data/x/prepare.py)
    or a module of ours (-m bench.x); (None, []) for anything else (python -m pytest ...)."""
    for i, word in enumerate(words):
        if word == "-m" and words[i + 1:i + 2] == ["training.launch"]:
            continue  # torchrun's options, then the script it launches with that script's
        if word == "-m":
            path = module_path(words[i + 1]) if i + 1 < len(words) else None
            return (path, words[i + 2:]) if path else (None, [])
        if word.endswith(".py") and os.path.isfile(os.path.join(REPO, word)):
            return word, words[i + 1:]
    return None, []


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
            script, after = run_target(words)
            if not script or not any(w in ("python", "python3", "torchrun") or w.startswith("--nproc")
                                     for w in words[:3]):
                continue
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


@pytest.mark.parametrize("doc", GUIDES)
def test_guides_cite_no_issue_and_no_section_sign(doc):
    hits = re.findall(r".{0,30}(?:\bissues? #?\d+|§).{0,30}", read(doc))
    assert not hits, f"{doc} cites what a reader cannot open (cite a file and its heading instead): {hits}"


def test_summary_stays_a_summary():
    """EXPERIMENT_SUMMARY.md answers in at most about 400 lines; each question's section links where its detail
    lives, and the notebooks it links exist (checked with every path above)."""
    text = read("EXPERIMENT_SUMMARY.md")
    assert len(text.splitlines()) <= 400, len(text.splitlines())
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 7
    for section in sections:
        title = section.splitlines()[0]
        if title != "GPU time":
            assert re.search(r"README\.md|docs/", section), f"section {title!r} links no detail"


MODULE_DIRS = ("bench",)  # folders whose scripts run as modules from the repository root (python -m bench.x)
AS_FILE = re.compile(r"""(?:\bpython3?|\btorchrun\b[^\n`|]*?|"\$\{launch\[@\]\}")\s+((?:%s)/\w+\.py)\b"""
                     % "|".join(MODULE_DIRS))
AS_MODULE = re.compile(r"(?<![\w-])-m\s+((?:%s)(?:\.\w+)+)" % "|".join(MODULE_DIRS))


def command_files():
    """Files whose text holds commands a reader runs: the docs, the results' headers, the configs'
    comments, the benchmarks' docstrings and the shell scripts."""
    patterns = ("bench/results/**/*.md", "config/*.py", "bench/*.py", "bench/*.sh", "scripts/*.sh")
    found = {os.path.relpath(p, REPO) for pattern in patterns
             for p in glob.glob(os.path.join(REPO, pattern), recursive=True)}
    return [*DOCS, *sorted(found)]


def test_folder_scripts_run_as_modules():
    """No command runs a bench script as a file (that way the repository root is not on sys.path), and each
    `-m bench.x` names a module that exists."""
    as_file, missing, modules = [], [], set()
    for rel in command_files():
        text = read(rel)
        as_file += [f"{rel}: {path}" for path in AS_FILE.findall(text)]
        for module in AS_MODULE.findall(text):
            modules.add(module)
            if not module_path(module):
                missing.append(f"{rel}: {module}")
    assert len(modules) >= 9, sorted(modules)  # the check reads real commands
    assert not as_file, f"run these as modules from the repository root (python -m bench.x): {as_file}"
    assert not missing, f"no such module: {missing}"


# the collection of the whole suite, its default tier selected as scripts/test.sh selects it
COLLECT = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow or gate", "tests/"]
HELP_RUNNER = ("import runpy, sys\n"
               "for module in sys.argv[1:]:\n"
               "    sys.argv = [module, '--help']\n"
               "    try:\n"
               "        runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
               "    except SystemExit as e:\n"
               "        print(f'== {module} exit {e.code}', flush=True)\n")


def help_runner(modules):
    return [sys.executable, "-W", "ignore::RuntimeWarning", "-c", HELP_RUNNER, *modules]


def bench_modules():
    return sorted({m for rel in command_files() for m in AS_MODULE.findall(read(rel))})


def experiment_and_training_modules():
    return sorted({m for doc in DOCS for m in re.findall(r"-m\s+((?:experiments|training)(?:\.\w+)+)", read(doc))})


BENCH_AS_FILE = [sys.executable, os.path.join("bench", "sample_decode.py"), "--help"]


@pytest.fixture(scope="module", autouse=True)
def started(request, tmp_path_factory):
    """The commands of this module that take seconds (the collection of the whole suite, the --help runners), started
    together at its first test, each read by its own test: they run beside each other and beside the quick checks
    (a second core idles otherwise). Only those of the tests this session runs."""
    commands = {"test_readme_test_count_is_the_suites": {"collect": COLLECT},
                "test_bench_modules_show_help_and_files_name_the_module": {"bench_help": help_runner(bench_modules()),
                                                                           "bench_as_file": BENCH_AS_FILE},
                "test_experiment_and_training_modules_show_help": {
                    "experiment_help": help_runner(experiment_and_training_modules())}}
    folder = tmp_path_factory.mktemp("docs_commands")
    runs = {name: Started(argv, os.path.join(folder, name), cwd=REPO)
            for test in sorted(selected(request, *commands)) for name, argv in commands[test].items()}
    yield runs
    for run in runs.values():
        run.close()


def test_bench_modules_show_help_and_files_name_the_module(started):
    """Every bench module the docs name answers --help (one process: torch is imported once), and a bench
    script run as a file stops in one line that names the module command."""
    modules = bench_modules()
    proc = started["bench_help"].result(timeout=120)
    assert proc.args == help_runner(modules)
    exits = re.findall(r"^== (\S+) exit (\S+)$", proc.stdout, re.M)
    assert exits == [(m, "0") for m in modules], (exits, proc.stderr[-2000:])
    assert proc.stdout.count("usage: ") == len(modules), proc.stdout[-2000:]
    # the usage line names the command that works (python -m bench.x), not the file name, which does not
    assert all(f"usage: python -m {m}" in proc.stdout for m in modules), re.findall(r"^usage: \S+", proc.stdout, re.M)
    proc = started["bench_as_file"].result(timeout=60)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr == "run it from the repository root as: python -m bench.sample_decode ...\n", proc.stderr


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
        missing += [f"{doc}: {m}" for m in re.findall(r"-m\s+(experiments(?:\.\w+)+)", text) if not module_path(m)]
    assert len(COMMAND_FILES) > 40 and not old, f"run these as python -m experiments.<...>: {old}"
    assert not missing, f"modules that do not exist: {missing}"


def tracked(*patterns):
    out = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return out.split()


def test_relative_markdown_links_open():
    """Every relative link of every tracked .md file opens: a file or folder, relative to the document's folder."""
    broken, checked = [], 0
    for doc in tracked("*.md"):
        for link in re.findall(r"\]\(([^)\s]+)\)", read(doc)):
            if re.match(r"[a-z]+:", link) or link.startswith("#"):
                continue  # a URL, or a heading of this page
            checked += 1
            if not os.path.exists(os.path.join(REPO, os.path.dirname(doc), link.split("#")[0])):
                broken.append(f"{doc}: {link}")
    assert checked >= 20 and not broken, f"links that do not open: {broken}"


# `FILE.md, "Heading"` (also `[FILE.md](link), "Heading"` and `README, "Heading"`): a heading, or a bold lead
CITED_HEADING = re.compile(r'\[?([\w./-]+\.md|README)\]?(?:\([^)\s]*\))?,\s+"([^"]+)"')


def headings(doc):
    text = read(doc)
    return [" ".join(h.split()) for h in re.findall(r"^#+ (.*)$", text, re.M) + re.findall(r"\*\*([^*]+)\*\*", text)]


def test_cited_headings_exist():
    """A heading cited in quotes beside the file that holds it (in the docs, the studies' READMEs, docstrings and
    scripts) is a heading or a bold paragraph lead of that file, so a reader finds it after the file changed;
    so is every heading that experiments/README.md's table quotes from EXPERIMENT_SUMMARY.md."""
    cites = []
    for doc in tracked("*.md", "*.py", "*.sh"):
        if doc == "tests/test_docs.py":  # its own examples
            continue
        for name, heading in CITED_HEADING.findall(read(doc)):
            name = "README.md" if name == "README" else name
            near = os.path.normpath(os.path.join(os.path.dirname(doc), name))
            cites.append((doc, near if os.path.isfile(os.path.join(REPO, near)) else name, heading))
    table = [line.split("|")[-2] for line in read("experiments/README.md").splitlines() if line.startswith("| ")]
    cites += [("experiments/README.md", "EXPERIMENT_SUMMARY.md", h) for cell in table[1:] for h in re.findall(r'"([^"]+)"', cell)]
    missing = []
    for doc, target, heading in cites:
        if not os.path.isfile(os.path.join(REPO, target)):
            missing.append(f"{doc}: no file {target}")
        elif not any(" ".join(heading.split()) in h for h in headings(target)):
            missing.append(f"{doc}: {target} has no heading {heading!r}")
    assert len(cites) >= 20 and not missing, missing


@pytest.mark.parametrize("doc", DOCS)
def test_commands_stand_in_fenced_blocks(doc):
    """Command lines stand in ```bash blocks, where the checks above read them, not in indented code blocks."""
    text = FENCE.sub("", read(doc))
    indented = re.findall(r"^ {4,}((?:python3?|torchrun|bash) .*)$", text, re.M)
    assert not indented, f"{doc}: put these in a ```bash block: {indented}"


def test_experiment_and_training_modules_show_help(started):
    """Every experiments/training module a doc runs answers --help with its usage and exits 0, without doing
    its work first (a repro that read sys.argv by hand used to run on --help)."""
    modules = experiment_and_training_modules()
    assert len(modules) >= 6, modules
    proc = started["experiment_help"].result(timeout=120)
    assert proc.args == help_runner(modules)
    outputs = re.split(r"^== \S+ exit \S+\n", proc.stdout, flags=re.M)[:-1]
    exits = re.findall(r"^== (\S+) exit (\S+)$", proc.stdout, re.M)
    assert exits == [(m, "0") for m in modules], (exits, proc.stderr[-2000:])
    assert all(out.lstrip().startswith("usage: ") for out in outputs), [out[:200] for out in outputs]
    assert all(f"usage: python -m {m}" in proc.stdout for m in modules), re.findall(r"^usage: \S+", proc.stdout, re.M)


# last in the module: its collection of the whole suite (started with the module) runs beside the checks above
def test_readme_test_count_is_the_suites(started):
    stated = re.findall(r"(\d+) tests\b", read("README.md"))
    assert stated, "README.md states no test count"
    # the default tier as scripts/test.sh selects it (COLLECT): not slow, or slow and marked gate
    out = started["collect"].result(timeout=300).stdout
    fast, collected, slow = map(int, re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", out).groups())
    assert {int(n) for n in stated} == {collected}, f"README.md says {stated} tests; pytest collects {collected}"
    tiers = re.search(r"the (\d+) of the default tier.*?runs the other (\d+)", read("README.md"), re.S)
    assert tiers and tuple(map(int, tiers.groups())) == (fast, slow), \
        f"README.md's tiers {tiers and tiers.groups()}; pytest: {fast} in the default tier, {slow} slow"
