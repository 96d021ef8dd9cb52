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
- a summary table introduced by a paragraph that cites one results file holds only numbers of that file (in
  EXPERIMENT_SUMMARY.md and in the study and benchmark READMEs its detail moved to);
- README's first screen is the answer, a figure and the quick start, and its answer table (and the summary's) holds
  the numbers of the stored study and benchmark tables it names, recomputed here from those files;
- EXPERIMENT_SUMMARY.md stays a summary (at most about 400 lines).
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
from tests.conftest import REPO, Started, selected

GUIDES = ("README.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))))
# the studies' and benchmark sets' full records, which EXPERIMENT_SUMMARY.md summarizes and links
NOTEBOOKS = ("experiments/docs_study/budgets/README.md", "experiments/docs_study/sizes/README.md",
             "experiments/docs_study/one_budget/README.md", "experiments/shakespeare_sweep/README.md",
             "experiments/char_sweep/README.md", "experiments/compiler_repros/README.md",
             "bench/results/decode/README.md", "bench/results/issue49/README.md",
             "bench/results/ladder_compiled_overlap/README.md", "bench/results/issue50/README.md",
             "bench/results/h100_tp2/README.md", "experiments/gpu_stop/README.md",
             "experiments/large_budgets/README.md")
DOCS = (*GUIDES, "TRAINING_INSTRUCTIONS.md", "EXPERIMENT_SUMMARY.md", "experiments/README.md", *NOTEBOOKS)
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


RESULTS_CITE = re.compile(r"`((?:bench/results|experiments)/[\w./-]+\.(?:md|txt|log))`")


def numbers_in(text):
    return [float(x) for x in re.findall(r"-?\d+\.\d+", text.replace("−", "-").replace(",", ""))]


def test_summary_tables_match_their_results_file():
    """A table of EXPERIMENT_SUMMARY.md, of a study's or benchmark set's README or of docs/gpu-results.md whose
    introducing paragraph cites one results file: every number of 2 or more decimals in its cells is in that file,
    as printed or rounded from a longer value."""
    checked, problems = 0, []
    for doc in ("EXPERIMENT_SUMMARY.md", *NOTEBOOKS, "docs/gpu-results.md"):
        n, found = table_numbers_against_cited_file(doc)
        checked += n
        problems += [f"{doc} {p}" for p in found]
    assert checked > 300, checked  # the check reads real tables
    assert not problems, problems


def table_numbers_against_cited_file(doc):
    """(numbers checked, problems) for the tables of one document (see the test above)."""
    lines = read(doc).splitlines()
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
    return checked, problems


@pytest.mark.parametrize("doc", GUIDES)
def test_guides_cite_no_issue_and_no_section_sign(doc):
    hits = re.findall(r".{0,30}(?:\bissues? #?\d+|§).{0,30}", read(doc))
    assert not hits, f"{doc} cites what a reader cannot open (cite a file and its heading instead): {hits}"


def test_readme_policy_table_counts_are_the_plans():
    rows = re.findall(r"^\| `(baseline|spd|parallel|ladder)`\s*\| (\d+) \|", read("README.md"), re.M)
    assert len(rows) == 4, rows
    for name, syncs in rows:
        assert parse_sync_policy(name, 12).n_syncs == int(syncs), name
    assert re.search(r"^\| `grouped:G`\s*\| 12 / G \|", read("README.md"), re.M)
    assert all(parse_sync_policy(f"grouped:{g}", 12).n_syncs == 12 // g for g in (1, 2, 3, 4, 6, 12))


BUDGETS_DIR = "experiments/docs_study/budgets"
FIRST_SCREEN = 60  # lines of README.md a newcomer reads before scrolling


def budget_study():
    """{policy: its entry of the budget study's stats.json} and width 768's parameter count (size_fit.json)."""
    import json
    with open(os.path.join(REPO, BUDGETS_DIR, "stats.json"), encoding="utf-8") as f:
        entries = {e["policy"]: e for e in json.load(f)["budgets"]}
    with open(os.path.join(REPO, "experiments/docs_study/sizes/size_fit.json"), encoding="utf-8") as f:
        [params] = [w["n_params"] for w in json.load(f)["widths"] if w["width"] == 768]
    return entries, params


def answer_table(doc):
    """(header cells, {policy: cells}, {n: source path}) of the answer table of a doc: the table whose header
    names the saving at tp=2, and the numbered sources ([n] `path`) listed below it."""
    text = read(doc)
    lines = text.splitlines()
    [start] = [i for i, line in enumerate(lines) if line.startswith("| policy |") and "saving, tp=2" in line]
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        row = cells(line)
        rows[row[0]] = row
    return cells(lines[start]), rows, dict(re.findall(r"\[(\d)\] `([^`]+)`", text))


def step_saving(path, policy, tp):
    """(saving %, baseline ms, device, kind) of a policy against baseline at one track per GPU (n_tracks = tp) in a
    stored bench table: the trainer's step (bench.train_throughput's .md) or train_b8 (bench.tp_latency's .md)."""
    text = read(path)
    device = re.search(r"NVIDIA (H\d00)", text).group(1)
    if text.startswith("# Training throughput"):
        kind, table = "step", text
        header = next(l for l in text.splitlines() if l.startswith("| variant |"))
        cols = [c.strip() for c in header.strip("|").split("|")]
        ms_col, tp_col, n_col, pol_col = (cols.index(c) for c in ("ms/iter (median)", "tp", "n_tracks", "policy"))
    else:
        kind = "b8"
        table = re.search(r"### 124m train_b8 graph\n\n(.*?)(?:\n\n|\Z)", text, re.S).group(1)
        cols = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
        ms_col, tp_col, n_col, pol_col = cols.index(f"tp={tp} ms"), None, cols.index("n_tracks"), cols.index("policy")
        assert re.search(rf"^- tp={tp}: NVIDIA", text, re.M), (path, tp)
    ms = {}
    for line in table.splitlines():
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(row) == len(cols) and row[n_col] == str(tp) and (tp_col is None or row[tp_col] == str(tp)):
            ms[row[pol_col]] = float(row[ms_col])
    return 100.0 * (1.0 - ms[policy] / ms["baseline"]), ms["baseline"], device, kind


def check_answer_table(doc):
    """Every number of a doc's answer table against the stored tables: the loss cells against the budget study's
    stats.json and budget_table.md, the syncs against the policy's plan, the savings recomputed from the named bench
    tables (policy and baseline of one run, n_tracks = tp), with their kind and device. Returns the cells checked."""
    from model.sync_policy import parse_sync_policy
    entries, params = budget_study()
    budget_table = read(f"{BUDGETS_DIR}/budget_table.md").replace("-", "−")
    header, rows, sources = answer_table(doc)
    assert set(rows) == {"baseline", "ladder", "parallel", "spd", "grouped:4", "grouped:12"}, sorted(rows)
    checked = 0
    for policy, row in rows.items():
        assert int(row[1]) == parse_sync_policy(policy, 12).n_syncs, (doc, policy)
        for title, cell in zip(header[2:], row[2:]):
            tokens = re.search(r"(\d+\.\d)M", title)
            tp = re.search(r"saving, tp=(\d)", title)
            if tokens:
                budgets = [b for b in entries["ladder"]["budgets"] if round(b["tokens"] / 1e6, 1) == float(tokens[1])]
                assert len(budgets) == 1, (doc, title)
                per_param = re.search(r"(\d\.\d+)/param", title)
                if per_param:
                    places = len(per_param[1].split(".")[1])
                    assert round(budgets[0]["tokens"] / params, places) == float(per_param[1]), (doc, title)
                if policy == "baseline":
                    assert cell == "reference", (doc, cell)
                    continue
                [b] = [b for b in entries[policy]["budgets"] if b["tokens"] == budgets[0]["tokens"]]
                m = re.fullmatch(r"([−+]\d+\.\d\d)% ± (\d+\.\d\d) (better|worse|inconclusive|keeps the loss)( \(fragile\))?",
                                 cell)
                assert m, (doc, policy, cell)
                assert float(m[1].replace("−", "-")) == round(b["gap"], 2) and float(m[2]) == round(b["gap_ci"], 2), \
                    (doc, policy, cell, b["gap"], b["gap_ci"])
                assert m[3] == b["verdict"], (doc, policy, cell, b["verdict"])
                assert f"{m[1]}% ± {m[2]} (3) {m[3]}" in budget_table, (doc, policy, cell)
                checked += 1
            elif tp:
                for item in cell.split("; "):
                    if policy == "baseline":
                        m = re.fullmatch(r"0 \((\d+\.\d\d) ms (step|b8), (H\d00)\) \[(\d)\]", item)
                        assert m, (doc, item)
                        _, base, device, kind = step_saving(sources[m[4]], "baseline", int(tp[1]))
                        assert (round(base, 2), kind, device) == (float(m[1]), m[2], m[3]), (doc, item, base, device)
                    else:
                        m = re.fullmatch(r"(\d+\.\d)% (step|b8), (H\d00) \[(\d)\]", item)
                        assert m, (doc, policy, item)
                        saving, _, device, kind = step_saving(sources[m[4]], policy, int(tp[1]))
                        assert (round(saving, 1), kind, device) == (float(m[1]), m[2], m[3]), \
                            (doc, policy, item, round(saving, 2), kind, device)
                    checked += 1
    return checked


def test_readme_first_screen_is_the_answer():
    """README's first screen holds what the tool is, the answer table, the figure and the quick start's commands."""
    screen = "\n".join(read("README.md").splitlines()[:FIRST_SCREEN])
    assert "| policy | syncs/fwd |" in screen and "saving, tp=4" in screen
    assert "](experiments/docs_study/budgets/budget.png)" in screen
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", screen, re.S)
    assert block and "bash scripts/quickstart.sh" in block[1] and "bash scripts/test.sh" in block[1]
    assert "±1% margin" in screen and "0.68 tokens per parameter" in screen


@pytest.mark.parametrize("doc,cells", [("README.md", 34), ("EXPERIMENT_SUMMARY.md", 19)])
def test_answer_table_numbers_are_the_stored_tables(doc, cells):
    """README's answer table and the summary's saving table: every loss and saving cell is the stored tables'."""
    assert check_answer_table(doc) == cells  # 5 policies x 4 budgets + 14 savings; 5 gaps + 14 savings


def test_readme_cosine_and_crossover_numbers_are_the_stored_ones():
    """The first screen's cosine gaps are cosine_check.md's, and its crossovers stats.json's (in millions of tokens)."""
    screen = "\n".join(read("README.md").splitlines()[:FIRST_SCREEN])
    cosine = read(f"{BUDGETS_DIR}/cosine_check.md").replace("-", "−")
    sentence = re.search(r"One cosine run of the whole 83\.9M budget gives (.*?)\.\n", screen.replace("\n  ", " "), re.S)
    found = re.findall(r"(ladder|spd|grouped:12) ([−+]\d+\.\d\d% ± \d+\.\d\d)", sentence[1])
    assert len(found) == 3, found
    for policy, gap in found:
        assert re.search(rf"\| {re.escape(policy)} \|[^\n]*\| {re.escape(gap)} \(3\)", cosine), (policy, gap)
    entries, _ = budget_study()
    crossing = re.search(r"cross to worse at (\d+)M and (\d+)M tokens", screen.replace("\n  ", " "))
    assert crossing and [int(c) for c in crossing.groups()] == \
        [round(entries[p]["crossover_tokens"] / 1e6) for p in ("grouped:12", "grouped:4")]


def pooled_tost_holm():
    """Holm-adjusted TOST p (±1% margin) of every policy at the largest budget, parallel's seed SD replaced by the SD
    pooled over the three 12/24-sync policies (ladder, spd, parallel: 6 df); the others as stored."""
    import math
    import statistics
    from analysis.compare import MARGIN, holm, t_cdf
    entries, _ = budget_study()
    last = {p: list(e["budgets"][-1]["gaps"].values()) for p, e in entries.items()}
    pool = ("ladder", "spd", "parallel")
    df = sum(len(last[p]) - 1 for p in pool)
    sd = math.sqrt(sum(sum((g - statistics.fmean(last[p])) ** 2 for g in last[p]) for p in pool) / df)

    def tost(gaps, sd, df):
        mean, se = statistics.fmean(gaps), sd / math.sqrt(len(gaps))
        return max(1.0 - t_cdf((mean + MARGIN) / se, df), t_cdf((mean - MARGIN) / se, df))
    p = {k: tost(g, sd, df) if k == "parallel" else tost(g, statistics.stdev(g), len(g) - 1) for k, g in last.items()}
    return dict(zip(p, holm(list(p.values())))), entries["parallel"]["budgets"][-1]["p_tost_holm"]


def test_parallel_verdict_with_pooled_seed_sd():
    """Parallel's "keeps the loss" at 83.9M is fragile: README and the summary state its stored Holm p and the p with
    its seed SD pooled over the three 12/24-sync policies, which crosses 0.05."""
    pooled, stored = pooled_tost_holm()
    assert stored < 0.05 <= pooled["parallel"], (stored, pooled)
    for doc in ("README.md", "EXPERIMENT_SUMMARY.md"):
        text = " ".join(read(doc).split())
        assert f"p = {stored:.3f}" in text and f"p = {pooled['parallel']:.3f}" in text, doc


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


def test_config_families_hold_the_stated_number_of_policies():
    stated = re.search(r"the same (\d+) policies", read("docs/configs.md"))
    families = [glob.glob(os.path.join(REPO, "config", f"{prefix}_*sync.py")) for prefix in ("train", "shakespeare")]
    assert stated and all(len(f) == int(stated.group(1)) for f in families), [len(f) for f in families]


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
