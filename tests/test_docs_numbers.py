"""
The numbers the documents state are the repository's (the other checks of the documents: tests/test_docs.py):
- a summary table introduced by a paragraph that cites one results file holds only numbers of that file (in
  EXPERIMENT_SUMMARY.md, the study and benchmark READMEs its detail moved to, and docs/gpu-results.md);
- README's policy table states each policy's syncs, and docs/configs.md the number of configs per family;
- README's first screen is the answer, a figure and the quick start, and its answer table (and the summary's) holds
  the numbers of the stored study and benchmark tables it names, recomputed here from those files, as are the first
  screen's cosine gaps and crossovers and parallel's verdict with a pooled seed SD, its gaps on the corpus read once
  (with the learning-rate check's) and its savings against TP + sequence parallelism.
"""
import functools
import glob
import os
import re

import pytest

from model.sync_policy import parse_sync_policy
from tests.conftest import REPO
from tests.doc_text import NOTEBOOKS, read

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


REAL_BUDGET_COLUMN = re.compile(r"(\d+(?:\.\d)?M), (WSD|cosine), (\d+\.\d)/param")
CELL = re.compile(r"([−+]\d+\.\d\d)% ± (\d+\.\d\d) (better|worse|inconclusive|keeps the loss)( \(fragile\))?"
                  r"(?: \((\d) seeds\))?")


@functools.lru_cache(maxsize=None)
def large_stats():
    """experiments/large_budgets/stats.json's rows (read once: the answer table checks 25 cells against it)."""
    import json
    return json.loads(read("experiments/large_budgets/stats.json"))


def real_budget_cell(title, policy, cell):
    """A loss cell of README's answer table on the corpus read once (a column titled '<size>, WSD|cosine,
    <tokens per parameter>/param') against experiments/large_budgets/stats.json's val cell: its gap, its 95%
    half-width, its verdict and its seed count (3 unless the cell says '(N seeds)')."""
    size, schedule, per_param = REAL_BUDGET_COLUMN.fullmatch(title).groups()
    named = lambda n: size == f"{n / 1e6:.1f}M" or (size == "124M" and abs(n - 124e6) < 1e6)  # GPT-2 "124M": 123.6M
    [r] = [r for r in large_stats()
           if r["metric"] == "val" and r["policy"] == policy and named(r["n_params"])
           and r["schedule"] == {"WSD": "runs", "cosine": "cosine"}[schedule]
           and round(r["tokens_per_param"], 1) == float(per_param)]
    m = CELL.fullmatch(cell)
    assert m and not m[4], (title, policy, cell)
    assert (float(m[1].replace("−", "-")), float(m[2]), m[3]) == (round(r["gap"], 2), round(r["gap_ci95"], 2),
                                                                  r["verdict"]), (title, policy, cell)
    assert len(r["seeds"]) == int(m[5] or 3), (title, policy, r["seeds"])


def check_answer_table(doc):
    """Every number of a doc's answer table against the stored tables: the loss cells against the budget studies'
    stats.json (the corpus read once: real_budget_cell; the earlier corpus: budget_table.md too), the syncs against
    the policy's plan, the savings recomputed from the named bench tables (policy and baseline of one run, n_tracks =
    tp), with their kind and device. Returns the cells checked."""
    from model.sync_policy import parse_sync_policy
    entries, params = budget_study()
    budget_table = read(f"{BUDGETS_DIR}/budget_table.md").replace("-", "−")
    header, rows, sources = answer_table(doc)
    assert set(rows) == {"baseline", "ladder", "parallel", "spd", "grouped:4", "grouped:12"}, sorted(rows)
    checked = 0
    for policy, row in rows.items():
        assert int(row[1]) == parse_sync_policy(policy, 12).n_syncs, (doc, policy)
        for title, cell in zip(header[2:], row[2:]):
            real = REAL_BUDGET_COLUMN.fullmatch(title)
            tokens = re.search(r"(\d+\.\d)M", title)
            tp = re.search(r"saving, tp=(\d)", title)
            if real:
                if policy == "baseline":
                    assert cell == "reference", (doc, cell)
                else:
                    real_budget_cell(title, policy, cell)
                    checked += 1
            elif tokens:
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
                m = CELL.fullmatch(cell)
                assert m and not m[5], (doc, policy, cell)  # the earlier corpus's cells are all 3 seeds
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
    """README's first screen holds what the tool is, the answer table (on the corpus read once), the figures and the
    quick start's commands."""
    screen = "\n".join(read("README.md").splitlines()[:FIRST_SCREEN])
    assert "| policy | syncs/fwd |" in screen and "saving, tp=4" in screen
    header, _, _ = answer_table("README.md")
    assert sum(bool(REAL_BUDGET_COLUMN.fullmatch(title)) for title in header) == 5, header
    assert "](experiments/large_budgets/headline.png)" in screen and "](experiments/docs_study/budgets/budget.png)" in screen
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", screen, re.S)
    assert block and "bash scripts/quickstart.sh" in block[1] and "bash scripts/test.sh" in block[1]
    assert "±1% margin" in screen and "0.68 tokens per parameter" in screen


@pytest.mark.parametrize("doc,cells", [("README.md", 39), ("EXPERIMENT_SUMMARY.md", 19)])
def test_answer_table_numbers_are_the_stored_tables(doc, cells):
    """README's answer table and the summary's saving table: every loss and saving cell is the stored tables'."""
    assert check_answer_table(doc) == cells  # 5 policies x 5 budgets + 14 savings; 5 gaps + 14 savings


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


def test_config_families_hold_the_stated_number_of_policies():
    stated = re.search(r"the same (\d+) policies", read("docs/configs.md"))
    families = [glob.glob(os.path.join(REPO, "config", f"{prefix}_*sync.py")) for prefix in ("train", "shakespeare")]
    assert stated and all(len(f) == int(stated.group(1)) for f in families), [len(f) for f in families]


def flat(path):
    """A doc's text on one line, its minus signs (U+2212) written as '-'."""
    return " ".join(read(path).split()).replace("\u2212", "-")


def first_screen_sentence():
    return " ".join(line.strip() for line in read("README.md").splitlines()[:FIRST_SCREEN])


def test_readme_real_budget_and_learning_rate_gaps_are_the_stored_ones():
    """The first screen's sentences beside its table on the corpus read once are experiments/large_budgets/
    stats.json's (width 384's WSD lead at 1.3 and gap at 5.1 tokens per parameter) and its learning-rate check's are
    checks.json's cells, to the printed decimals."""
    import json
    screen = first_screen_sentence().replace("−", "-")
    runs = {(r["policy"], r["tokens"]): r for r in large_stats()
            if (r["width"], r["schedule"], r["metric"]) == (384, "runs", "val")}
    # width 384 (40.6M) WSD: ladder's deepest lead (1,568 iterations of 32 x 1,024 tokens) and its largest branch (6,272)
    lead = re.search(r"40\.6M, WSD, (\d) seeds: ladder ([-+]\d+\.\d\d)% ± (\d+\.\d\d) (better|worse|inconclusive) at 1\.3 "
                     r"per parameter, ([-+]\d+\.\d\d)% ± (\d+\.\d\d) at 5\.1", screen)
    assert lead, "the first screen's sentence on ladder's lead at width 384"
    for (gap, ci, verdict), iters in (((lead[2], lead[3], lead[4]), 1568), ((lead[5], lead[6], None), 6272)):
        r = runs["ladder", iters * 32 * 1024]
        assert len(r["seeds"]) == int(lead[1])
        assert (float(gap), float(ci)) == (round(r["gap"], 2), round(r["gap_ci95"], 2)), iters
        assert verdict in (None, r["verdict"]), iters
    cells = {m["policy"]: m for m in json.loads(read("experiments/large_budgets/checks.json"))["cells"]
             if m["comparison"] == "at_check_lr" and m["check"] == "w768-lr3e-4"}  # not the schedule check
    half = re.search(r"At half that rate \(124M, cosine at 2\.4, (\d) seeds\): (.*?); all worse\.", screen)
    assert half, "the first screen's sentence on the learning-rate check"
    found = re.findall(r"(ladder|spd|parallel|grouped:4|grouped:12) \+(\d+\.\d\d)% ± (\d+\.\d\d)", half[2])
    assert sorted(p for p, _, _ in found) == sorted(cells) and {len(m["seeds"]) for m in cells.values()} == {int(half[1])}
    for policy, gap, ci in found:
        assert (float(gap), float(ci)) == (round(cells[policy]["gap"], 2), round(cells[policy]["gap_ci95"], 2))
    assert all(g > 0 for m in cells.values() for g in m["gaps"]), "'all worse': every run at the check's rate behind"


def test_readme_savings_against_the_strongest_baseline_are_the_comm_tables():
    """The first screen's savings against the strongest baseline are bench.comm_table's 'against the strongest' on
    the invocations docs/benchmarks.md tables (each policy's fastest row, the baseline's in the same file), per tp and
    size; and the mode it names as the faster baseline at each tp is the baseline's fastest row in every file."""
    from bench import comm_table
    block = re.search(r"```bash\n(python -m bench\.comm_table .*?)```", read("docs/benchmarks.md"), re.S)[1]
    rows = [r for f in block.replace("\\\n", " ").split()[3:] for r in comm_table.invocation_rows(os.path.join(REPO, f))]
    strongest = {}  # a (tp, size) timed in two invocations: the sentence may quote either
    for r in rows:
        if r["policy"] != "baseline" and "strongest" in r["savings"]:
            strongest.setdefault((r["tp"], r["size"], r["policy"]), set()).add(round(100 * r["savings"]["strongest"], 1))
    baseline_best = {(r["tp"], r["best"]) for r in rows if r["policy"] == "baseline"}
    sentence = re.search(r"Against the strongest baseline\*\* \([^)]*\): at tp=4 \(4x H200; (.*?) is faster\) 124M, "
                         r"(.*?); large \(774M\), (.*?)\. At tp=2 \(2x H200, n_tracks 2; (.*?) is faster, [^)]*\) 124M, "
                         r"(.*?); medium \(350M\), (.*?); large, (.*?) \(", first_screen_sentence())
    assert sentence, "the first screen's sentence on the strongest baseline"
    modes = {"TP + SP": "sp", "plain TP": "off"}
    assert baseline_best == {(4, modes[sentence[1]]), (2, modes[sentence[4]])}, baseline_best
    for tp, size, text in ((4, "124m", sentence[2]), (4, "large", sentence[3]), (2, "124m", sentence[5]),
                           (2, "medium", sentence[6]), (2, "large", sentence[7])):
        found = re.findall(r"(grouped:4|parallel|spd)(?: saves)? (\d+\.\d)%", text)
        assert found and all(float(v) in strongest[tp, size, p] for p, v in found), (tp, size, found)
    # what the kept syncs cost at tp=4, 124M: each row minus its no-sync floor, in the invocation with floors
    cost = re.search(r"their syncs cost (\d\.\d), (\d\.\d), (\d\.\d) ms a step, baseline's (\d\.\d) of (\d+\.\d)",
                     sentence[2])
    floored = {r["policy"]: r for r in rows if (r["tp"], r["size"]) == (4, "124m") and r["comm_ms"] is not None}
    assert cost and [float(c) for c in cost.groups()] == [round(floored[p]["comm_ms"], 1) for p in (
        "grouped:4", "parallel", "spd", "baseline")] + [round(floored["baseline"]["best_ms"], 1)], cost


def sweep_path_rows():
    """(width, unsteady, final gap) of each of the sweep's cosine policy runs in experiments/large_budgets/answer.md's
    "How each cosine run got to its gap" (a check's rows, whose width cell names the check, left out): unsteady when
    the gradient norm ran above twice the baseline's from some iteration."""
    section = read("experiments/large_budgets/answer.md").split("## How each cosine run got to its gap")[1]
    rows = re.findall(r"^\| (\d+) \| d\S+ \| [^|]+ \| [^|]+ \| (\S+) \| ([-+]\d+\.\d\d) \|$",
                      section.split("\n## ")[0], re.M)
    assert rows, "no sweep rows in answer.md's path table"
    return [(int(width), since != "never", float(gap)) for width, since, gap in rows]


def sweep_paths():
    """(unsteady finals, steady finals) of sweep_path_rows."""
    rows = sweep_path_rows()
    return [gap for _, unsteady, gap in rows if unsteady], [gap for _, unsteady, gap in rows if not unsteady]


def test_the_width_384_cosine_runs_behind_are_the_path_table():
    """README's first screen says how many of width 384's cosine policy runs (10.1 tokens per parameter) ended behind
    their seed's baseline, and that all did: answer.md's path table, counted again."""
    finals = [gap for width, _, gap in sweep_path_rows() if width == 384]
    claim = re.search(r"cosine at 10\.1: all (\d+) runs behind", first_screen_sentence())
    assert finals and claim, "width 384's path-table rows and the first screen's count"
    assert int(claim[1]) == sum(gap > 0 for gap in finals) == len(finals), (claim[1], finals)


def test_the_unsteady_and_steady_ranges_are_the_path_tables():
    """README, the summary and the study README state how many sweep runs ran unsteadily and the range of their final
    gaps against the steady ones': answer.md's path table, counted again."""
    unsteady, steady = sweep_paths()
    fmt = lambda x: f"{x:+.2f}%".replace("-", "−")
    span = lambda xs: f"{fmt(min(xs))} to {fmt(max(xs))}"
    readme = " ".join(read("README.md").split())
    assert f"all ended behind it ({span(unsteady)}), the steady ones within {span(steady)}" in readme
    assert f"{len(unsteady)} of the {len(unsteady) + len(steady)} cosine policy runs" in first_screen_sentence()
    summary = " ".join(read("EXPERIMENT_SUMMARY.md").split())
    assert (f"the {len(unsteady)} of {len(unsteady) + len(steady)} cosine policy runs (three widths) whose gradient "
            f"norm ran above twice the baseline's ended {span(unsteady)}, the other {len(steady)} {span(steady)}") in summary
    study = " ".join(read("experiments/large_budgets/README.md").split())
    assert f"in the {len(unsteady)} of the sweep's {len(unsteady) + len(steady)} policy runs" in study
    assert f"the final gap is {span(unsteady)}; in the {len(steady)} whose norm stayed" in study


def test_the_held_out_sentences_are_the_stored_checks():
    """What EXPERIMENT_SUMMARY.md, the study's README and README.md say of the held-out check across widths on the
    corpus read once (coverage, how many predictions fell below their truths and by how much) is trend.json's and
    size_fit.json's: a new width or seed that moves a prediction makes these sentences fail here."""
    import json
    with open(os.path.join(REPO, "experiments/large_budgets/trend.json")) as f:
        across = json.load(f)["across_widths"]
    held = [h for e in across["policies"].values() for h in e.get("heldout", [])]
    assert held
    inside = sum(bool(h["inside"]) for h in held)
    misses = [h["gap"] - h["truth"] for h in held]
    below = sum(m < 0 for m in misses)
    spread = f"prediction minus truth {min(misses):+.1f} to {max(misses):+.1f} points"
    summary = flat("EXPERIMENT_SUMMARY.md")
    assert (f"its held-out check holds {inside} of {len(held)}, {below} of {len(held)} predictions below the truth "
            f"({spread})") in summary
    study = flat("experiments/large_budgets/README.md")
    assert f"holds {inside} of {len(held)} truths inside the 95% prediction intervals" in study
    assert f"{below} of {len(held)} predictions lie below their truths ({spread})" in study
    with open(os.path.join(REPO, "experiments/large_budgets/size_fit.json")) as f:
        planner = [h for hs in json.load(f)["heldout"].values() for h in hs]
    assert planner
    planner_below = sum(h["gap"] < h["truth"] for h in planner)
    assert f"{planner_below} of its {len(planner)} held-out predictions fall below the truth" in flat("README.md")


def test_the_planners_one_sync_answer_at_1_5b_is_the_stated_one(capsys):
    """grouped:12 at 1.5B and 3e10 tokens, as `python -m analysis.plan --size 1.5b --tp 8 --tokens 3e10` prints it
    from its default fit (the corpus read once): the gap and its 95% prediction interval that README.md (rounded),
    EXPERIMENT_SUMMARY.md and the study's README quote."""
    from analysis import plan
    plan.main(["--size", "1.5b", "--tp", "8", "--tokens", "3e10"])
    row = re.search(r"^grouped:12 +([-+]\d+\.\d\d)% +\[([-+]\d+\.\d\d), ([-+]\d+\.\d\d)\]", capsys.readouterr().out, re.M)
    assert row, "the planner prints no interval for grouped:12"
    gap, low, high = (float(x) for x in row.groups())
    assert f"grouped:12 at {gap:+.0f}% with an interval from {low:+.0f}% to {high:+.0f}%" in flat("README.md")
    assert f"grouped:12 {gap:+.2f}% [{low:+.2f}, {high:+.2f}]" in flat("EXPERIMENT_SUMMARY.md")
    assert (f"grouped:12 at {gap:+.2f}% with a 95% prediction interval of {low:+.2f} to {high:+.2f}"
            in flat("experiments/large_budgets/README.md"))


def test_the_earlier_fits_answer_at_1_5b_is_the_stated_one(capsys):
    """grouped:4 at 1.5B and 3e10 tokens from the earlier corpus's fit (`--fit experiments/docs_study/sizes/
    size_fit.json`), as EXPERIMENT_SUMMARY.md quotes it."""
    from analysis import plan
    plan.main(["--size", "1.5b", "--tp", "8", "--tokens", "3e10", "--fit", "experiments/docs_study/sizes/size_fit.json"])
    row = re.search(r"^grouped:4 +([-+]\d+\.\d\d)% +\[([-+]\d+\.\d\d), ([-+]\d+\.\d\d)\]", capsys.readouterr().out, re.M)
    assert row, "the planner prints no interval for grouped:4"
    gap, low, high = (float(x) for x in row.groups())
    summary = flat("EXPERIMENT_SUMMARY.md")
    assert f"(grouped:4 {gap:+.2f}% [{low:+.2f}, {high:+.2f}]" in summary
