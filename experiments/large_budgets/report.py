"""The budget study on data/debian_large (issue 68): per width, budget and schedule, each policy's paired gap to
the baseline's final val loss, overall and per domain (prose, code), with its verdict.

    python -m experiments.large_budgets.report          # answer.md, stats.json, trend.json, checks.json, size_fit.json,
                                                        # headline.png, curves_w<width>.png, layers_w<width>.png
    python -m experiments.large_budgets.report --check  # regenerates the text in memory; exit 1 if a stored byte differs
    python -m experiments.large_budgets.report --stability experiments/docs_study/budgets/cosine  # any runs' steadiness

The runs: experiments/large_budgets/w<width>/{cosine,runs}/<run>/ (config.json, log.txt, metrics.jsonl), trained by
`python -m experiments.docs_study.run run --config config/large_w<width>.py ...` (README.md beside this file).

Statistics (analysis/compare.py's seed_statistics, the same as the earlier studies): in one cell (width, schedule,
budget) the gap of a policy on seed s is g_s = 100 (L_policy,s / L_baseline,s - 1), in % of the baseline's final
val loss, paired by seed. Over the n seeds: the mean with its 95% t-interval (n - 1 degrees of freedom), the
two-sided t-test of "mean gap = 0" and TOST of "the mean gap is outside (-1%, +1%)" (the margin stated before the
first study, issue 26), Holm-adjusted over the design's five policies of the cell, those without two seeds yet
counted with p = 1 (analysis/stats.py's holm: an upper bound, so a verdict does not rest on a family smaller than
the design's). Verdict: "keeps the loss" when TOST rejects at 5% after Holm, else "worse" / "better" when the
difference test does, else "inconclusive". The per-domain rows (val_prose, val_code) run the same tests on those
losses, as a second family per domain.

answer.md opens with what has been run against the design (DESIGN, README.md's table: 6 policies x 3 seeds at
every budget of every width) and what is still missing: coverage().

A table gives each cosine run's steadiness (gradient norms late in the run, the val loss at 3/4 and at the end,
where the norm sat by layer): stability.py. The side checks under checks/<check>/cosine/ (another learning rate,
or a cosine run over one of the WSD budgets) stay out of the cells; the last section sets each beside the sweep's
run of its seed and budget (check_rows(), also in checks.json).

How each cosine run got to its gap (the gap at every eval, the gradient norm): curves.py's figures; where an
unsteady run's gradient norm sat, layer by layer: layers.py's.

The trend over the budget per width (slope, curvature test, crossover or bound, held-out and cosine checks), the
fit across widths with the width as the unit (from three widths with WSD branches) and the headline figure:
trend.py.
"""
import json
import os
import re
import statistics
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run it from the repository root as: python -m experiments.large_budgets.report " + " ".join(sys.argv[1:]))

from analysis.compare import RunError, load_run, seed_statistics  # noqa: E402
from analysis.stats import budget_analysis, mean_ci  # noqa: E402
from experiments.large_budgets.curves import (by_policy_seed, grad_series, path_rows, plot_curves,  # noqa: E402
                                              render_paths, runs_width, width_title)
from experiments.large_budgets.layers import (layer_series, phase_rows, plot_layers, render_phases,  # noqa: E402
                                              unsteady_runs)
from experiments.large_budgets.stability import folder_stability, stability, stability_table  # noqa: E402
from experiments.large_budgets.trend import (FAMILY, POLICY_ORDER, across_widths, plot_headline,  # noqa: E402
                                             render_across, render_trend, width_trend)
from experiments.runner import read_records  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser, write_text  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULES = ("cosine", "runs")  # runs/: the WSD trunks' cooldown branches
METRICS = {"val": "val_loss", "val_prose": "val_prose_loss", "val_code": "val_code_loss"}
UNSTEADY = 3.0  # the figure marks a cell whose late grad norm is this many times the baseline's (width 256's WSD
# branches: at most 2.7)
# the design (README.md's table), in iterations: per width the first WSD budget and the cosine one; the WSD budgets
# double from the first to half the cosine one; every policy and the baseline at every seed
DESIGN = {256: (224, 7168), 384: (392, 12544), 768: (576, 9216)}
DESIGN_SEEDS = (1337, 1338, 1339)
MIN_WSD_BUDGETS = 3  # a width's line over its WSD budgets, and the same line without the largest to check it


def load(root=None, skipped=None):
    """{(width, schedule): [run dicts]} of the finished runs under root (load_folder's dicts); a run folder that
    cannot be read is named in `skipped`."""
    groups, root = {}, root or HERE
    for width_dir in sorted(os.listdir(root)):
        if not re.fullmatch(r"w[0-9]+", width_dir):
            continue
        for schedule in SCHEDULES:
            folder = os.path.join(root, width_dir, schedule)
            if os.path.isdir(folder):
                runs = load_folder(folder, skipped)
                if runs:
                    groups.setdefault((int(width_dir[1:]), schedule), []).extend(runs)
    return groups


def load_folder(folder, skipped=None):
    """The finished runs in one folder: load_run's dicts, with the last eval's per-domain losses under
    'final_<metric>', stability(), the parameter count, the device and the learning rate."""
    runs = []
    for name in sorted(os.listdir(folder)):
        try:
            run = load_run(os.path.join(folder, name))
        except RunError as e:
            if skipped is not None:
                skipped.append(str(e))
            continue
        if not run["complete"] or run["diverged"] or "-trunk" in name:
            continue
        records = read_records(os.path.join(folder, name, "metrics.jsonl"))
        evals = [r for r in records if r.get("type") == "eval"]
        last = max(evals, key=lambda r: r["iter"])
        run["stability"], run["grad"], run["layers"] = stability(records), grad_series(records), layer_series(records)
        for metric, key in METRICS.items():
            run[f"final_{metric}"] = last.get(key)
        with open(os.path.join(folder, name, "config.json")) as f:
            config = json.load(f)
        run["n_params"], run["device"] = config["derived"]["n_params"], config["derived"].get("device_name")
        run["vocab_size"] = config["derived"].get("vocab_size")
        run["learning_rate"], run["width"] = config.get("learning_rate"), config.get("n_embd")
        run["lr_schedule"] = config.get("lr_schedule")
        run["n_tracks"] = config.get("n_tracks")
        runs.append(run)
    return runs


def render_stability(groups):
    """The stability table of the cosine runs (stability()), one row per run."""
    lines = ["## How steadily the cosine runs trained", "",
             "Per run, from its metrics.jsonl: the median gradient norm (before clipping at 1.0) over the last "
             "quarter of the iterations, the largest after the first 5%, and the val loss at 3/4 of the run and at "
             "its end. A late median far above the baseline's, or a val loss that rises while the learning rate "
             "decays, marks an unsteady run: its gap includes the instability.", ""]
    rows = [(width, run["name"], run.get("stability")) for (width, schedule), runs in sorted(groups.items())
            if schedule == "cosine" for run in runs]
    lines += stability_table(rows)
    # the largest WSD branch of each width: after the longest trunk, the nearest to the cosine runs' budget
    largest = [(width, run["name"], run.get("stability")) for (width, schedule), runs in sorted(groups.items())
               if schedule == "runs" for run in runs if run["tokens"] == max(r["tokens"] for r in runs)]
    if largest:
        lines += ["", "The largest WSD branch of each width, likewise. Its own iterations, the cooldown from its branch "
                      "point at 4/5 of its budget, all lie in the last quarter: its late median is over all of them, "
                      "and its val at 3/4 is its first eval.", ""] + stability_table(largest)
    return "\n".join(lines) + "\n"


def load_checks(root=None, skipped=None):
    """{check name: [run dicts]} of the side checks under root/checks/<name>/cosine/ (a learning rate other than the
    sweep's, or a cosine run at a WSD budget), which the tables above leave out."""
    root = os.path.join(root or HERE, "checks")
    checks = {}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        folder = os.path.join(root, name, "cosine")
        if os.path.isdir(folder):
            checks[name] = load_folder(folder, skipped)
    return {name: runs for name, runs in checks.items() if runs}


def sweep_runs(groups, width):
    """The sweep's runs of one width under both schedules. Its cosine budget is twice its largest WSD budget
    (DESIGN), so a check run's policy, seed and budget find at most one twin: the cosine run at the cosine budget,
    the WSD branch at a WSD budget."""
    return groups.get((width, "cosine"), []) + groups.get((width, "runs"), [])


def find_run(runs, policy, seed, tokens):
    """The run of that policy, seed and budget among runs, or None."""
    return next((r for r in runs if (r["policy"], r["seed"], r["tokens"]) == (policy, seed, tokens)), None)


def percent_gap(run, base):
    """run's final val loss over base's, in % (the gap every table here gives)."""
    return 100 * (run["final_val"] / base["final_val"] - 1)


def check_rows(checks, groups):
    """Each check run beside the sweep's run of the same width, policy, seed and budget: the gap to the baseline of
    its own setting (same seed), the late gradient norm over that baseline's, the same two of the sweep's twin
    (with its learning rate and schedule), and the gap that each policy's better setting of the two leaves against
    the baseline's better one ('better_gap'). One seed a run: a check of how much of a gap the learning rate or the
    schedule explains, not a verdict."""
    def late(run):
        return run["stability"]["late_median_grad_norm"] if run and run.get("stability") else None

    def ratio(run, base):
        return round(late(run) / late(base), 2) if late(run) and late(base) and run is not base else None

    def gap(run, base):
        return round(percent_gap(run, base), 4) if run and base and run is not base else None
    order = {p: i for i, p in enumerate(("baseline",) + POLICY_ORDER)}
    rows = []
    for check, runs in checks.items():
        for run in sorted(runs, key=lambda r: (r["width"], r["tokens"], order.get(r["policy"], 99), r["seed"])):
            sweep = sweep_runs(groups, run["width"])
            base = find_run(runs, "baseline", run["seed"], run["tokens"])
            twin = find_run(sweep, run["policy"], run["seed"], run["tokens"])
            twin_base = find_run(sweep, "baseline", run["seed"], run["tokens"])
            better = None
            if twin and base and twin_base and run is not base:
                better = round(100 * (min(run["final_val"], twin["final_val"])
                                      / min(base["final_val"], twin_base["final_val"]) - 1), 4)
            rows.append({"check": check, "width": run["width"], "tokens": run["tokens"], "policy": run["policy"],
                         "seed": run["seed"], "lr": run["learning_rate"], "final_val": run["final_val"],
                         "gap": gap(run, base), "grad_norm_ratio": ratio(run, base),
                         "sweep_lr": twin and twin["learning_rate"], "sweep_schedule": twin and twin["lr_schedule"],
                         "sweep_final_val": twin and twin["final_val"],
                         "sweep_gap": gap(twin, twin_base), "sweep_grad_norm_ratio": ratio(twin, twin_base),
                         "better_gap": better})
    return rows


def check_cells(checks, groups):
    """Per check and policy, the sweep's seed statistics (analysis/stats.py's seed_statistics: paired gaps, 95%
    t-interval with n - 1 df, Holm over the design's five policies, TOST against the margin, verdict) of two
    comparisons: 'at_check_lr', the check's runs among themselves (the policy over the baseline at the check's
    setting: its learning rate, or the cosine schedule at a WSD budget); 'vs_better_baseline', the same policy runs
    over, per seed, the baseline's run of lower final val loss of the two settings (the check's or the sweep's twin:
    the baseline tuned between them). 'sweep_schedule' names the twins' schedule at the check's budget, 'varied' what
    the check changes ('learning rate', or 'schedule': cosine at a WSD budget, the sweep's rate). At the check's
    setting only, where the sweep has every seed's twins: 'sweep_gap', their mean gap over the same seeds, and
    'shift', the mean over seeds of the check's gap minus the sweep's (points), with its 95% t half-width (n - 1 df):
    how far the learning rate or the schedule moves a policy's gap, paired by seed."""
    def against_sweep(sweep, policy, seeds, gaps, tokens):
        pairs = [(find_run(sweep, policy, s, tokens), find_run(sweep, "baseline", s, tokens)) for s in seeds]
        if not pairs or not all(run and base for run, base in pairs):
            return dict(sweep_gap=None, shift=None, shift_ci95=None)
        twins = [percent_gap(run, base) for run, base in pairs]
        shift, half, _ = mean_ci([g - t for g, t in zip(gaps, twins)])
        return dict(sweep_gap=round(statistics.fmean(twins), 3), shift=round(shift, 3),
                    shift_ci95=None if half is None else round(half, 3))
    cells = []
    for check, runs in checks.items():
        sweep = sweep_runs(groups, runs[0]["width"])
        better = []
        for r in runs:
            if r["policy"] != "baseline":
                better.append(r)
            elif twin := find_run(sweep, "baseline", r["seed"], r["tokens"]):
                better.append(min((r, dict(twin, setting=r["setting"])), key=lambda b: b["final_val"]))
        sweep_lr = next((r["learning_rate"] for r in sweep if r["policy"] == "baseline"), None)
        schedule = {r["tokens"]: r["lr_schedule"] for r in sweep if r["policy"] == "baseline"}
        for kind, compared in (("at_check_lr", runs), ("vs_better_baseline", better)):
            for c in seed_statistics(compared, family_size=FAMILY)["cells"]:
                m = c["final_val"]
                if c["policy"] == "baseline" or "gap" not in m:
                    continue
                cells.append({"check": check, "comparison": kind, "policy": c["policy"], "width": runs[0]["width"],
                              "tokens": c["tokens"], "lr": runs[0]["learning_rate"], "sweep_lr": sweep_lr,
                              "sweep_schedule": schedule.get(c["tokens"]),
                              "varied": "schedule" if runs[0]["learning_rate"] == sweep_lr
                              and schedule.get(c["tokens"]) == "wsd" else "learning rate",
                              "seeds": m["paired_seeds"], "gaps": [round(g, 4) for g in m["gaps"]],
                              "gap": round(m["gap"], 3),
                              "gap_ci95": None if m["gap_ci"] is None else round(m["gap_ci"], 3),
                              **(against_sweep(sweep, c["policy"], m["paired_seeds"], m["gaps"], c["tokens"])
                                 if kind == "at_check_lr" else dict(sweep_gap=None, shift=None, shift_ci95=None)),
                              **{k: round(m[k], 4) for k in ("p_diff_holm", "p_tost_holm") if m.get(k) is not None},
                              "verdict": m.get("verdict")})
    return cells


def render_check_cells(cells):
    """check_cells as one table."""
    lines = ["Per policy over the seeds (the sweep's statistics: paired by seed, 95% t-interval with n - 1 degrees of "
             "freedom, Holm over the design's five policies per comparison, those not run at the check counted with p "
             "= 1, TOST against ±1%). At the check's setting: the policy over the baseline, both at the check's "
             "learning rate and schedule. Against the better baseline: the policy at the check's setting over the "
             "baseline's lower final val loss of the two settings. The sweep's gap: its twins' mean gap over the same "
             "seeds (at the sweep's learning rate, or the WSD branches'). Shift: the check's gap minus the sweep's, "
             "paired by seed, mean with its 95% t-interval (n - 1 df): how far the check's setting moves the gap.", "",
             "| check | comparison | policy | seeds | gap % (95% CI) | Holm p | TOST p | verdict | sweep's gap %, same "
             "seeds | shift, points (95% CI) |",
             "|---|---|---|---:|---:|---:|---:|---|---:|---:|"]
    names = {"at_check_lr": "at the check's setting", "vs_better_baseline": "against the better baseline"}
    for m in cells:
        ci = "" if m["gap_ci95"] is None else f" ± {m['gap_ci95']:.2f}"
        p = lambda key: "" if m.get(key) is None else f"{m[key]:.3f}"  # noqa: E731
        lines.append(f"| {m['check']} | {names[m['comparison']]} | {m['policy']} | {len(m['seeds'])} | "
                     f"{m['gap']:+.2f}{ci} | {p('p_diff_holm')} | {p('p_tost_holm')} | {m['verdict'] or ''} | "
                     + ("" if m.get("sweep_gap") is None else f"{m['sweep_gap']:+.2f}") + " | "
                     + ("" if m.get("shift") is None else f"{m['shift']:+.2f}"
                        + ("" if m.get("shift_ci95") is None else f" ± {m['shift_ci95']:.2f}")) + " |")
    return lines


def render_checks(rows, checks, cells):
    """check_rows as a table per check, then its check_cells, then its runs' stability table."""
    lines = ["## Checks beside the sweep: the learning rate and the schedule", "",
             "Cosine runs under experiments/large_budgets/checks/<check>/cosine/, each beside the sweep's run of the "
             "same width, policy, seed and budget: at the cosine budget the sweep's cosine run (a check of the "
             "learning rate), at a WSD budget the sweep's WSD branch (a check of the schedule: how much of the gap "
             "the WSD branch leaves out). Gap: final val loss over the baseline's of the same setting and seed, in "
             "%. Grad norm: the late median over that baseline's. Better of the two: the policy's lower final val "
             "loss of the two settings over the baseline's lower one (blank where the sweep lacks the policy's run "
             "of that seed)."]
    header = ["| check | width | tokens | policy | seed | lr | final val | gap % | grad norm | sweep lr | "
              "sweep schedule | sweep val | sweep gap % | sweep grad norm | better of the two: gap % |",
              "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    columns = [("lr", "g"), ("final_val", ".4f"), ("gap", "+.2f"), ("grad_norm_ratio", ".1f"), ("sweep_lr", "g"),
               ("sweep_schedule", ""), ("sweep_final_val", ".4f"), ("sweep_gap", "+.2f"),
               ("sweep_grad_norm_ratio", ".1f"), ("better_gap", "+.2f")]
    shown = {"wsd": "WSD"}  # the trainer's lr_schedule names, as the tables above write them
    for check, runs in checks.items():
        lines += ["", f"### {check}", ""] + header
        for r in (r for r in rows if r["check"] == check):
            lines.append(f"| {check} | {r['width']} | {r['tokens'] / 1e6:.1f}M | {r['policy']} | {r['seed']} | "
                         + " | ".join("" if r[key] is None else shown.get(r[key], format(r[key], spec))
                                      for key, spec in columns) + " |")
        lines += [""] + render_check_cells([m for m in cells if m["check"] == check])
        lines += ["", f"How steadily {check}'s runs trained (as the first table):", ""]
        lines += stability_table([(r["width"], r["name"], r.get("stability")) for r in runs])
    return "\n".join(lines) + "\n"


def cell_stats(runs, metric):
    """seed_statistics of runs on one metric (its final value in the role of final_val)."""
    use = [dict(r, final_val=r[f"final_{metric}"], best_val=r[f"final_{metric}"]) for r in runs
           if r.get(f"final_{metric}") is not None]
    return seed_statistics(use, family_size=FAMILY)["cells"]


def late_grad_norm_ratio(runs, policy, tokens, seeds=None):
    """The largest late median gradient norm (stability()) of the policy's runs at this budget over the median of
    the baseline's there: about 1 for a run as steady as the baseline; None where either lacks train records.
    seeds: the cell's paired seeds, whose runs make its gap (a run without its baseline yet is not in the gap, so its
    instability is not the gap's: width 384's grouped:4 seed 1338 at 102.8M, ×288.6, beside a steady seed 1337)."""
    def late(p):
        return [r["stability"]["late_median_grad_norm"] for r in runs
                if r["policy"] == p and r["tokens"] == tokens and r.get("stability")
                and (seeds is None or r["seed"] in seeds)]
    base, own = late("baseline"), late(policy)
    return round(max(own) / statistics.median(base), 2) if base and own else None


def analyse(groups):
    rows = []
    for (width, schedule), runs in sorted(groups.items()):
        for metric in METRICS:
            for cell in cell_stats(runs, metric):
                if cell["policy"] == "baseline":
                    continue
                m = cell["final_val"]
                if "gap" not in m:
                    continue
                params = next(r["n_params"] for r in runs)
                rows.append({"width": width, "schedule": schedule, "metric": metric, "policy": cell["policy"],
                             "syncs": cell["syncs"], "tokens": cell["tokens"], "n_params": params,
                             "n_tracks": next(r["n_tracks"] for r in runs),
                             "tokens_per_param": round(cell["tokens"] / params, 2), "seeds": m["paired_seeds"],
                             "gaps": [round(g, 4) for g in m["gaps"]], "gap": round(m["gap"], 3),
                             "gap_ci95": None if m["gap_ci"] is None else round(m["gap_ci"], 3),
                             "p_diff_holm": None if m.get("p_diff_holm") is None else round(m["p_diff_holm"], 4),
                             "p_tost_holm": None if m.get("p_tost_holm") is None else round(m["p_tost_holm"], 4),
                             "verdict": m.get("verdict"), "devices": sorted({r["device"] for r in runs
                                                                             if r["name"] in cell["runs"]}),
                             "late_grad_norm_ratio": late_grad_norm_ratio(runs, cell["policy"], cell["tokens"],
                                                                          m["paired_seeds"])})
    order = {p: i for i, p in enumerate(POLICY_ORDER)}
    rows.sort(key=lambda r: (r["width"], r["schedule"], r["tokens"], list(METRICS).index(r["metric"]),
                             order.get(r["policy"], 99), r["policy"]))
    return rows


def planner_fit(groups):
    """size_fit.json for analysis.plan from this corpus (`--fit experiments/large_budgets/size_fit.json`): the same
    model as the earlier study's (analysis/size_trend.py's size_fit: per width the line of its WSD cells' seed-mean
    gaps in log2 tokens, regressed on log2 N with the width as the unit), from the widths of wsd_widths; None
    while there is none. With one width the size trend is not measured and the planner says so."""
    from analysis.size_trend import size_fit
    widths = []
    for width, runs in wsd_widths(groups).items():
        n_params, vocab = runs[0]["n_params"], runs[0]["vocab_size"]
        widths.append(dict(width=width, n_params=n_params, non_embedding=vocab and n_params - vocab * width,
                           runs=len(runs),
                           sweep=f"experiments/large_budgets/w{width}",
                           analysis=budget_analysis(seed_statistics(runs, family_size=FAMILY))))
    if not widths:
        return None
    return dict(size_fit(widths), made_by="python -m experiments.large_budgets.report (analysis/size_trend.py's "
                "size_fit over this study's WSD branches)", corpus="data/debian_large (every token read once)",
                tables="experiments/large_budgets/answer.md")


def wsd_widths(groups):
    """{width: its WSD branches} of the widths whose branches span MIN_WSD_BUDGETS budgets or more. A width with
    fewer (a session's first branches, say) stays in the gap tables, out of the trends and the planner's fit."""
    return {width: runs for (width, schedule), runs in sorted(groups.items())
            if schedule == "runs" and len({r["final_iter"] for r in runs}) >= MIN_WSD_BUDGETS}


def trends(groups):
    """{width: ({policy: trend row}, n_params)} of every width of wsd_widths (trend.width_trend)."""
    return {width: (width_trend(runs, groups.get((width, "cosine"), []), runs[0]["n_params"]), runs[0]["n_params"])
            for width, runs in wsd_widths(groups).items()}


def coverage(groups):
    """Per width and schedule of the design: (width, schedule, budgets, runs stored, runs designed, {policy: {seed:
    [budgets missing]}}), counting the finished runs whose policy, seed and budget the design names."""
    out = []
    for width, (first, top) in sorted(DESIGN.items()):
        wsd = [first << k for k in range(top.bit_length()) if first << k < top]
        for schedule, budgets in (("cosine", [top]), ("runs", wsd)):
            have = {(r["policy"], r["seed"], r["final_iter"]) for r in groups.get((width, schedule), [])}
            missing, stored = {}, 0
            for policy in ("baseline",) + POLICY_ORDER:
                for seed in DESIGN_SEEDS:
                    gone = [b for b in budgets if (policy, seed, b) not in have]
                    stored += len(budgets) - len(gone)
                    if gone:
                        missing.setdefault(policy, {})[seed] = gone
            out.append((width, schedule, budgets, stored, len(budgets) * len(DESIGN_SEEDS) * (1 + len(POLICY_ORDER)),
                        missing))
    return out


def missing_text(missing, budgets):
    """'ladder 1339; spd 1338 at 2304/4608': the seeds each policy lacks, with the budgets where only some are."""
    def seed_text(seed, gone):
        return str(seed) if gone == budgets else f"{seed} at {'/'.join(map(str, gone))}"
    return "; ".join(f"{policy} " + ", ".join(seed_text(seed, gone) for seed, gone in seeds.items())
                     for policy, seeds in missing.items())


def render_coverage(rows):
    lines = ["## What has been run, against the design", "",
             f"Finished runs per width and schedule ({1 + len(POLICY_ORDER)} policies x {len(DESIGN_SEEDS)} seeds at "
             "each budget, README.md's design) and the ones still missing: policy, seed (and the budgets, where some "
             "of them ran).", "",
             "| width | schedule | budgets (iterations) | runs | missing |", "|---|---|---|---:|---|"]
    for width, schedule, budgets, stored, designed, missing in rows:
        gone = "all" if stored == 0 else missing_text(missing, budgets) or "none"
        lines.append(f"| {width} | {'cosine' if schedule == 'cosine' else 'WSD'} | {', '.join(map(str, budgets))} | "
                     f"{stored} of {designed} | {gone} |")
    return lines + [""]


def render(rows, covered=()):
    lines = ["# The budget study on data/debian_large: gap to baseline per policy", "",
             "Generated by `python -m experiments.large_budgets.report` from the runs under "
             "experiments/large_budgets/w*/; the statistics are in its docstring. Gap: the policy's final val "
             "loss over the baseline's, paired by seed, in %; negative is better. 95% t-interval over seeds; "
             "Holm over the design's five policies of a cell, those without two seeds yet counted with p = 1; "
             "verdicts against a ±1% margin. Grad norm: the largest late median gradient norm of the policy's runs "
             "over the baseline's (the last table): far above 1, a run trained unsteadily and its gap includes that.",
             ""]
    if covered:  # the tests of the gap table call it alone
        lines += render_coverage(covered) + ["## The gap per cell", ""]
    lines += ["| width | schedule | tokens (per param) | loss | policy | syncs | seeds | gap % (95% CI) | Holm p | "
              "TOST p | verdict | grad norm |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---|---:|"]

    def p(value):
        return "" if value is None else f"{value:.3f}"

    def ratio(value):
        return "" if value is None else f"×{value:.1f}"
    for r in rows:
        ci = "" if r["gap_ci95"] is None else f" ± {r['gap_ci95']:.2f}"
        lines.append(f"| {r['width']} | {'cosine' if r['schedule'] == 'cosine' else 'WSD'} | "
                     f"{r['tokens'] / 1e6:.1f}M ({r['tokens_per_param']:.2f}) | {r['metric']} | {r['policy']} | "
                     f"{r['syncs']} | {len(r['seeds'])} | {r['gap']:+.2f}{ci} | {p(r['p_diff_holm'])} | "
                     f"{p(r['p_tost_holm'])} | {r['verdict'] or ''} | {ratio(r.get('late_grad_norm_ratio'))} |")
    devices = sorted({d for r in rows for d in r["devices"]})
    lines += ["", f"Devices: {', '.join(devices) if devices else 'none yet'}.", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = OneLineArgumentParser(prog="python -m experiments.large_budgets.report", formatter_class=HelpFormatter,
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored files instead of writing")
    parser.add_argument("--force", action="store_true", help="write even when stored rows would be lost")
    parser.add_argument("--stability", metavar="FOLDER",
                        help="print the steadiness table of the runs under FOLDER (any study's) and write nothing")
    args = parser.parse_args(argv)
    if args.stability is not None:
        if not os.path.isdir(args.stability):
            parser.error(f"--stability {args.stability!r} is not a folder; give one that holds run folders")
        rows = folder_stability(args.stability)
        if not any(s for _, _, s in rows):
            parser.error(f"--stability {args.stability!r} holds no run folder with train records (metrics.jsonl "
                         f"and config.json)")
        print("\n".join(stability_table(rows)))
        return 0
    skipped = []
    groups, checks = load(skipped=skipped), load_checks(skipped=skipped)
    rows, trend = analyse(groups), trends(groups)
    for why in skipped:
        print(f"note: skipped {why}", file=sys.stderr)
    across = across_widths(trend, sorted({w for w, schedule in groups if schedule == "cosine"} - set(trend)))
    unsteady = {(r["width"], r["policy"], "wsd" if r["schedule"] == "runs" else r["schedule"], r["tokens"]):
                r["late_grad_norm_ratio"] for r in rows
                if r["metric"] == "val" and (r.get("late_grad_norm_ratio") or 0) >= UNSTEADY}
    answer = render(rows, coverage(groups)) + (
        "\n" + render_trend(trend, ("baseline",) + POLICY_ORDER, unsteady) + "\n" + render_across(across, POLICY_ORDER)
        if trend else "") + "\n" + render_stability(groups)
    curves = {w: by_policy_seed(runs) for (w, schedule), runs in sorted(groups.items()) if schedule == "cosine"}
    check_curves = {name: by_policy_seed(runs) for name, runs in checks.items()}
    paths = [row for w, runs in curves.items() for row in path_rows(w, runs)]
    paths += [row for name, runs in check_curves.items() for row in path_rows(f"{runs_width(runs)}, {name}", runs)]
    if paths:
        answer += "\n" + render_paths(paths)
    layer_runs = {w: unsteady_runs(runs) for w, runs in curves.items()}  # the runs layers.py tables and draws
    check_layer_runs = {name: unsteady_runs(runs) for name, runs in check_curves.items()}
    phases = [row for w, found in layer_runs.items() for row in phase_rows(w, found)]
    phases += [row for name, found in check_layer_runs.items()
               for row in phase_rows(f"{runs_width(check_curves[name])}, {name}", found)]
    if phases:
        answer += "\n" + render_phases(phases)
    checked, cells = check_rows(checks, groups), check_cells(checks, groups)
    if checks:
        answer += "\n" + render_checks(checked, checks, cells)
    widths = {str(w): {"n_params": n, "policies": r} for w, (r, n) in trend.items()}
    outputs = {"answer.md": answer, "stats.json": json.dumps(rows, indent=1) + "\n",
               "trend.json": json.dumps(dict(widths, across_widths=across) if trend else widths, indent=1) + "\n",
               "checks.json": json.dumps({"runs": checked, "cells": cells}, indent=1) + "\n"}
    fit = planner_fit(groups)
    if fit is not None:
        outputs["size_fit.json"] = json.dumps(fit, indent=1) + "\n"
    if args.check:
        stale = []
        for name, text in outputs.items():
            path = os.path.join(HERE, name)
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(name)
        if stale:
            print(f"stale: {', '.join(stale)}; regenerate with python -m experiments.large_budgets.report")
            return 1
        print(f"{', '.join(outputs)} match the stored runs")
        return 0
    stored = os.path.join(HERE, "stats.json")
    if os.path.exists(stored) and not args.force:
        key = lambda r: (r["width"], r["schedule"], r["tokens"], r["metric"], r["policy"])  # noqa: E731
        lost = {key(r) for r in json.load(open(stored))} - {key(r) for r in rows}
        if lost:
            print(f"error: the runs here give no row for {len(lost)} stored row(s), e.g. {sorted(lost)[0]}: are runs "
                  f"missing? (--force writes the tables anyway)", file=sys.stderr)
            return 1
    for name, text in outputs.items():
        write_text(os.path.join(HERE, name), text)
        print(f"wrote {os.path.relpath(os.path.join(HERE, name))}")
    if trend:
        cosine_only = [r for r in rows if r["schedule"] == "cosine" and r["metric"] == "val" and r["width"] not in trend]
        params = {r["width"]: r["n_params"] for r in rows}
        at_rate = [dict(m, tokens_per_param=m["tokens"] / params[m["width"]]) for m in cells
                   if m["comparison"] == "at_check_lr" and m["width"] in params]
        plot_headline(trend, POLICY_ORDER, os.path.join(HERE, "headline.png"), cosine_only, unsteady, at_rate)
        print(f"wrote {os.path.relpath(os.path.join(HERE, 'headline.png'))}")
    figures = [(HERE, f"_w{width}", runs, layer_runs[width], width_title(width, runs))
               for width, runs in curves.items()]
    figures += [(os.path.join(HERE, "checks", name), "", runs, check_layer_runs[name],
                 width_title(None, runs, f"Check {name} (width {runs_width(runs)})"))
                for name, runs in check_curves.items()]
    for folder, suffix, runs, found, title in figures:
        path, layers_path = (os.path.join(folder, f"{kind}{suffix}.png") for kind in ("curves", "layers"))
        if plot_curves(runs, path, title):
            print(f"wrote {os.path.relpath(path)}")
        # where the unsteady runs' gradient norm sat, layer by layer (runs that logged it)
        if plot_layers(found, layers_path, title.split(":")[0] + ": each unsteady run's gradient norm by layer "
                       "(the runs that logged it)"):
            print(f"wrote {os.path.relpath(layers_path)}")
    return 0


if __name__ == "__main__":
    from cli_guard import guarded
    sys.exit(guarded(main))
