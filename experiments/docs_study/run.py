#!/usr/bin/env python3
"""The 124M study on data/debian_docs: the gap against the training budget (part 4) and the val-loss
curves and GPU time of the one-budget sweep (part 3).

    python -m experiments.docs_study.run run --budgets 320,640,1280,2560 --policies baseline,ladder,grouped:12 \
        --seeds 1337,1338,1339 --jobs 8 --deadline 540 --scratch /tmp/scratch --pack "$OUT"   # on the GPU machine
    python -m experiments.docs_study.run run --budgets 10,20 --smoke --set dataset=shakespeare \
        --policies baseline,grouped:12 --seeds 1337   # CPU: a check of the machinery, 6 tiny runs
    python -m experiments.docs_study.run run --schedule cosine --budgets 320,1280,2560 --policies baseline,ladder \
        --seeds 1337,1338,1339 --jobs 5 --scratch /tmp/scratch --pack "$OUT"   # a cosine run per budget (cosine/)
    python -m experiments.docs_study.run budgets     # part 4's budget_table.md, budget.png, budget_full.png, stats.json, wsd_check.md
    python -m experiments.docs_study.run sizes       # part 5: each width's budget table, and size_table.md, heldout.md, size_fit.json
    python -m experiments.docs_study.run report      # part 3's val_curves.png and gpu_seconds.md (experiments/docs_study/one_budget)

The two parts' records: part 4 (`run`, `budgets`) in experiments/docs_study/budgets/, part 3 (its runs trained by
`python -m experiments.char_sweep.run d768`, its figures by `report`) in experiments/docs_study/one_budget/; each
holds runs/<run>/ and, beside it, the part's tables, figures and GPU call logs.

Many budgets from one run (`run`). Each (policy, seed) is a warmup-stable-decay (WSD) trunk and one cooldown
branch per budget B (iterations of the config's tokens per iteration):
    trunk      lr_schedule='wsd', lr_decay_iters = the largest budget, max_iters = its decay start, so the
               whole trunk runs at the constant peak rate after warmup; save_iters keeps a checkpoint at
               every budget's branch point s(B) = B - round(cooldown_frac * B) (0.8 B by default);
    branch B   init_from='branch' from the trunk's ckpt_<s(B)>.pt, max_iters = lr_decay_iters = B: the
               1-sqrt cooldown of a WSD run of budget B, which it equals bit for bit
               (tests/test_budgets.py), in its own run directory.
`run --schedule cosine` instead trains one cosine run per (policy, seed, budget), decayed over the whole budget,
into <--sweep>/cosine/: `budgets` then writes cosine_check.md, each branch's paired gap minus the cosine run's.
data_order='passes': every training window once per pass, the first pass in the one_pass order of the
one-budget sweep, so a branch of up to one pass reads the batches the cosine runs of part 3 read. Runs land
in <--sweep>/runs/ (default experiments/docs_study/budgets/runs/): d768-trunk2048-<policy>-s<seed> and
d768-b<B>-<policy>-s<seed>, logs only. The runner is experiments/runner.py: finished runs are skipped, a run stopped at --deadline
resumes from its scratch checkpoint on the same machine, a branch starts as soon as its trunk has written
its branch point (trunk and branches run side by side), a branch point is deleted once its branch is
collected, and a finished trunk whose branch points are gone (another machine) is trained again for the
branches still missing. Runs are launched chain by chain (a trunk, then its branches). With --branches-in-trunk
the trunk's process trains its branches itself once the trunk ends (the trainer's branches=: the model built and
compiled once per chain), and the runner collects them; a branch that process did not finish (a stop, a deadline)
is then trained or resumed in a process of its own.

Part 3's figures (`report`): val_curves.png, val loss against training tokens for each policy of each width,
the mean over seeds as a line with a band of the 95% Student-t interval of the mean (n - 1 degrees of
freedom) at each eval; gpu_seconds.md, per run the wall seconds it ran on the shared GPU, summed over the
sweep commands that ran it (gpu-call-*.log), with the number of runs that shared the GPU and the median
ms/iter. The verdicts come from compare_runs.py (--stats, --trend, --budgets).
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

if __name__ == "__main__" and not __package__:  # run by its path: the imports below need the repository root
    sys.exit("run it from the repository root as: python -m experiments.docs_study.run " + " ".join(sys.argv[1:]))

from bench.common import pyplot
from analysis.compare import load_run, mean_ci, records_from_log
from training.config import (REPO, ConfigError, HelpFormatter, OneLineArgumentParser, parse, save_figure, write_text,
                             wsd_decay_start)
from training.run_dir import kept_checkpoint_iter
from experiments.char_sweep.run import DOCS_POLICIES, SMOKE_DOCS
from experiments.runner import Run, SweepError, check_args, read_records, run_and_pack, run_state
from training.cli import guarded

# each part's tables, figures and call logs, beside its runs/
SWEEP = os.path.join("experiments", "docs_study", "one_budget")
BUDGET_SWEEP = os.path.join("experiments", "docs_study", "budgets")
SIZE_SWEEPS = os.path.join("experiments", "docs_study", "sizes")  # w256/, w384/, ...: one budget sweep per width
RUN_NAME = re.compile(r"^d(\d+)-(\w+)-s(\d+)$")
SEGMENT = re.compile(r"^\s+(d\d+-\w+-s\d+)\s+(?:complete|stopped at deadline)\s+(\d+) s")
JOBS = re.compile(r"jobs (\d+)")
# policy tag -> (label, syncs per forward) in the order of the legend
POLICIES = {"baseline": ("baseline (24)", 24), "ladder": ("ladder (24)", 24), "spd": ("spd (12)", 12),
            "parallel": ("parallel (12)", 12), "selective9": ("selective:m0-3,m5,m7,m9-11 (9)", 9),
            "grouped2": ("grouped:2 (6)", 6), "grouped3": ("grouped:3 (4)", 4), "grouped4": ("grouped:4 (3)", 3),
            "grouped6": ("grouped:6 (2)", 2), "grouped12": ("grouped:12 (1)", 1)}


def load(sweep):
    """{width: {tag: [run dicts]}} of the finished runs."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(sweep, "runs", "d*-*-s*"))):
        match = RUN_NAME.match(os.path.basename(path))
        if not match or not os.path.isdir(path):
            continue
        run = load_run(path)
        if run["complete"] and not run["diverged"]:
            runs.setdefault(int(match.group(1)), {}).setdefault(match.group(2), []).append(run)
    return runs


def plot_curves(runs, path):
    plt = pyplot()
    widths = sorted(runs, reverse=True)
    fig, axes = plt.subplots(len(widths), 2, figsize=(13, 5 * len(widths)), squeeze=False)
    colors = plt.get_cmap("tab10")
    for row, width in zip(axes, widths):
        for k, (tag, (label, _)) in enumerate(POLICIES.items()):
            group = runs[width].get(tag)
            if not group:
                continue
            iters = sorted(set.intersection(*(set(i for i, _ in r["curve"]) for r in group)) - {0})
            tokens = [i * group[0]["tokens_per_iter"] / 1e6 for i in iters]
            means, lows, highs = [], [], []
            for it in iters:
                values = [dict(r["curve"])[it] for r in group]
                mean, half, _ = mean_ci(values)
                means.append(mean)
                lows.append(mean - (half or 0.0))
                highs.append(mean + (half or 0.0))
            style = dict(color=colors(k), lw=1.6, ls="--" if tag == "baseline" else "-")
            for ax, start in ((row[0], 0), (row[1], max(0, len(iters) - 5))):
                ax.plot(tokens[start:], means[start:], label=f"{label}, {len(group)} seeds", **style)
                ax.fill_between(tokens[start:], lows[start:], highs[start:], color=colors(k), alpha=0.15, lw=0)
            final = [r["final_val"] for r in group]
            row[1].scatter([tokens[-1]] * len(final), final, color=colors(k), s=14, zorder=3)
        row[0].set_title(f"width {width}: val loss against tokens (mean of seeds, 95% t band)")
        row[1].set_title(f"width {width}: the last five evals; points are the seeds' final val")
        for ax in row:
            ax.set_xlabel("training tokens (millions, one pass)")
            ax.set_ylabel("val loss")
            ax.grid(alpha=0.3)
        row[0].set_ylim(top=min(8.0, row[0].get_ylim()[1]))
        row[1].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def gpu_seconds(sweep, runs):
    """Markdown table: per run, seconds on the shared GPU summed over calls, and how many runs shared it."""
    seconds, jobs = {}, {}
    for log in sorted(glob.glob(os.path.join(sweep, "gpu-call-*.log"))):
        with open(log) as f:
            lines = f.read().splitlines()
        call_jobs = next((int(m.group(1)) for line in lines for m in [JOBS.search(line)] if m and "runs:" in line), None)
        in_summary = False
        for line in lines:
            if line.startswith("== ") and " s:" in line:
                in_summary = True  # the final table of the call: one line per run with its seconds this call
            match = SEGMENT.match(line) if in_summary else None
            if match:
                seconds[match.group(1)] = seconds.get(match.group(1), 0) + int(match.group(2))
                jobs.setdefault(match.group(1), set()).add(call_jobs)
    lines = ["| run | syncs/fwd | seconds on the shared GPU | runs sharing it | median ms/iter (shared) |",
             "|---|---:|---:|---|---:|"]
    for width in sorted(runs, reverse=True):
        for tag in POLICIES:
            for run in sorted(runs[width].get(tag, []), key=lambda r: r["seed"]):
                ms = [json.loads(x)["time_ms"] for x in open(os.path.join(run["dir"], "metrics.jsonl"))
                      if '"train"' in x]
                lines.append(f"| {run['name']} | {run['syncs']} | {seconds.get(run['name'], '?')} | "
                             f"{', '.join(str(j) for j in sorted(jobs.get(run['name'], ())))} | "
                             f"{statistics.median(ms[1:]):.0f} |")
    return "\n".join(lines) + "\n"


def sweep_args(config, schedule):
    """The trainer arguments every run of the budget sweep shares, around its schedule's."""
    return [config, "--tp=1", *schedule, "--data_order=passes", "--always_save_checkpoint=True", "--keep_best=False"]


def policy_tag(policy):
    """The policy as it appears in run names: grouped:12 -> grouped12."""
    return DOCS_POLICIES.get(policy) or re.sub(r"[^A-Za-z0-9]", "", policy)


def cosine_runs(config, budgets, policies, seeds, sweep_dir, sets=()):
    """One cosine run per (seed, policy, budget), decayed over the whole budget: the check of the WSD branches
    at every budget. Same data order as the branches (`passes`), so up to one pass they read the same batches."""
    width = f"d{parse([config, *sets]).n_embd}"
    runs = []
    for seed in seeds:
        for policy in policies:
            tag = policy_tag(policy)
            for b in sorted(budgets):
                runs.append(Run(f"{width}-b{b}-{tag}-s{seed}", sweep_dir,
                                [*sweep_args(config, ["--lr_schedule=cosine"]), f"--sync_policy={policy}",
                                 f"--seed={seed}", *sets, f"--max_iters={b}", f"--lr_decay_iters={b}"],
                                policy, seed, width, tag))
    return runs


def budget_runs(config, budgets, policies, seeds, sweep_dir, scratch, sets=(), cooldown_frac=0.2, in_trunk=False):
    """The trunk and branches of every (seed, policy), chain by chain. Each trunk keeps the branch points
    of its branches (Run.keep); each branch needs its own (Run.needs). in_trunk: the trunk's process trains its
    branches itself once it ends (the trainer's branches=, sparing each branch a process's start and compile);
    the runner only collects them then (Run.after), or trains them in processes of their own if that was cut."""
    cfg = parse([config, *sets, f"--cooldown_frac={cooldown_frac}"])
    width = f"d{cfg.n_embd}"
    points = {b: wsd_decay_start(cfg, b) for b in budgets}  # where the trainer's wsd schedule starts b's cooldown
    point_names = {b: f"ckpt_{points[b]}.pt" for b in budgets}  # the trunk's save_iters copies there
    top = max(budgets)
    bad = [b for b in budgets if points[b] <= cfg.warmup_iters]
    if bad:
        raise SweepError(f"--budgets {bad}: the branch point {points[bad[0]]} of budget {bad[0]} is inside the warmup "
                         f"({cfg.warmup_iters} iterations); use budgets whose cooldown starts after it")
    common = sweep_args(config, ["--lr_schedule=wsd", f"--cooldown_frac={cooldown_frac}"])
    runs = []
    for seed in seeds:
        for policy in policies:
            tag = policy_tag(policy)
            base = [*common, f"--sync_policy={policy}", f"--seed={seed}", *sets]
            trunk = Run(f"{width}-trunk{points[top]}-{tag}-s{seed}", sweep_dir,
                        [*base, f"--max_iters={points[top]}", f"--lr_decay_iters={top}",
                         f"--save_iters={','.join(str(points[b]) for b in sorted(budgets))}"],
                        policy, seed, width, tag, keep=set(point_names.values()))
            source = {b: os.path.join(trunk.scratch_dir(scratch), point_names[b]) for b in budgets}
            branches = [Run(f"{width}-b{b}-{tag}-s{seed}", sweep_dir,
                            [*base, f"--max_iters={b}", f"--lr_decay_iters={b}", "--init_from=branch",
                             f"--branch_from={source[b]}"], policy, seed, width, tag, needs=source[b],
                            after=trunk.name if in_trunk else None) for b in sorted(budgets)]
            trunk.branch_items = {point_names[b]: f"{b}:{r.scratch_dir(scratch)}"
                                  for b, r in zip(sorted(budgets), branches)} if in_trunk else {}
            runs += [trunk, *branches]
    return [set_branches(r) for r in runs]


def set_branches(run):
    """A trunk's --branches= (the branches its process trains): those of the branch points it keeps."""
    items = [item for name, item in run.branch_items.items() if name in run.keep]  # budget order
    run.args = [a for a in run.args if not a.startswith("--branches=")] + ([f"--branches={','.join(items)}"] if items else [])
    return run


def trim_keeps(runs, root, scratch):
    """The runs still needed: a trunk keeps only the branch points whose branches are not done yet, and a
    trunk none of whose branches is left is not trained again."""
    # 'collect': finished in scratch, its logs not yet copied (the device tool sends a fresh tree each call)
    done = {r.needs for r in runs if r.needs and run_state(r, root, scratch) in ("done", "collect")}
    needed = []
    for r in runs:
        if r.keep:
            r.keep = {name for name in r.keep if os.path.join(r.scratch_dir(scratch), name) not in done}
            if not r.keep and run_state(r, root, scratch) not in ("done", "collect"):
                continue
            # a point kept for a finished branch would hold 1.5 GB of disk until the trunk ends
            points = sorted(kept_checkpoint_iter(name) for name in r.keep)
            r.args = [a for a in r.args if not a.startswith("--save_iters=")] + \
                     [f"--save_iters={','.join(map(str, points))}"]
            set_branches(r)
        needed.append(r)
    return needed


def run_main(argv):
    parser = OneLineArgumentParser(formatter_class=HelpFormatter, prog="python -m experiments.docs_study.run run", description="train the budget sweep: per policy and seed a WSD trunk at constant learning rate and one "
                                     "cooldown branch per budget; resumable (finished runs are skipped, stopped ones resume)")
    parser.add_argument("--config", default=os.path.join("config", "docs_124m.py"))
    parser.add_argument("--budgets", default="320,640,1280,2560", help="iterations, comma-separated")
    parser.add_argument("--policies", default="baseline,ladder,spd,grouped:4,grouped:12")
    parser.add_argument("--seeds", default="1337,1338,1339")
    parser.add_argument("--cooldown-frac", type=float, default=0.2)
    parser.add_argument("--schedule", default="wsd", choices=["wsd", "cosine"],
                        help="wsd: trunks and cooldown branches (runs/); cosine: one run per budget, decayed over all "
                             "of it (cosine/), the check of the branches that `budgets` writes to cosine_check.md")
    parser.add_argument("--sweep", default=BUDGET_SWEEP, help="the part's folder; the runs' logs go to its runs/ (cosine/ with --schedule cosine)")
    parser.add_argument("--jobs", type=int, default=8, help="runs at once on the GPU (trunks and branches)")
    parser.add_argument("--deadline", type=float, default=None, help="stop (resumably) after this many seconds")
    parser.add_argument("--hold", type=float, default=None,
                        help="the seconds the machine stays held: start only the runs expected to end by then "
                             "(experiments/run_time.py), packed per GPU (experiments/hold.py)")
    parser.add_argument("--pack", default=None, help="write DIR/sweep-logs.tgz with the runs' logs at the end")
    parser.add_argument("--scratch", default="out-sweep", help="out_dirs and checkpoints (default %(default)s)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a trainer override for every run")
    parser.add_argument("--branches-in-trunk", action="store_true",
                        help="--schedule wsd: each trunk's process trains its branches once the trunk ends (no process "
                             "start and compile per branch; the same numbers: tests/test_budgets.py)")
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU, logs under out-sweep-smoke/")
    parser.add_argument("--dry-run", action="store_true", help="print each run's state and command; run nothing")
    parser.add_argument("--status-every", type=float, default=60.0)
    parser.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.chdir(REPO)
    sets = [f"--{s.lstrip('-')}" for s in args.set]
    args.root, args.allow_cpu = ".", False
    if args.smoke:
        sets = [*SMOKE_DOCS, "--eval_interval=4", "--warmup_iters=2", *sets]
        args.scratch, args.root = os.path.join("out-sweep-smoke", "scratch"), "out-sweep-smoke"
    if args.pack:
        args.pack = os.path.abspath(args.pack)
    try:
        check_args(args)
        if not 0 < args.cooldown_frac <= 1:  # also nan; 2 was blamed on the warmup
            raise SweepError(f"--cooldown-frac={args.cooldown_frac:g}: must be in (0, 1] (the share of each budget "
                             f"spent decaying, e.g. 0.2)")
        budgets = [int(b) for b in args.budgets.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
        policies = args.policies.split(",")
        if any(b < 1 for b in budgets) or len(set(budgets)) != len(budgets):
            raise SweepError(f"--budgets {args.budgets}: give distinct iteration counts >= 1")
        if args.schedule == "cosine":
            runs = cosine_runs(args.config, budgets, policies, seeds, os.path.join(args.sweep, "cosine"), sets)
            return run_and_pack(runs, args)
        runs = budget_runs(args.config, budgets, policies, seeds, os.path.join(args.sweep, "runs"), args.scratch, sets,
                           args.cooldown_frac, args.branches_in_trunk)
        return run_and_pack(trim_keeps(runs, args.root, args.scratch), args)
    except (SweepError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"error: --budgets and --seeds take comma-separated integers ({e})", file=sys.stderr)
        return 1


TRUNK_NAME = re.compile(r"^(d\d+)-trunk\d+-(\w+)-s(\d+)(?:\.out)?$")


def trunk_logs(sweep, folders=("earlier", "runs")):
    """[((width, tag, seed), path relative to the sweep, {iter: val_loss}, device)]: every trunk log in these
    folders of the sweep, folder by folder: earlier/ (the first version of a trunk trained again for a later
    branch), runs/, stopped/ (the stdout, <name>.out, of a trunk whose machine was lost; its eval lines are
    log.txt's)."""
    out = []
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(sweep, folder, "d*-trunk*-*-s*"))):
            match = TRUNK_NAME.match(os.path.basename(path))
            if not match:
                continue
            records = (records_from_log(path) if path.endswith(".out")
                       else read_records(os.path.join(path, "metrics.jsonl")))
            layout = next((r for r in records if r.get("type") == "layout"), {})
            curve = {r["iter"]: r["val_loss"] for r in records if r.get("type") == "eval"}
            out.append(((match[1], match[2], int(match[3])), os.path.relpath(path, sweep), curve,
                        layout.get("device_name", "not logged")))
    return out


def trunk_curves(sweep):
    """{width label: {policy: [(tokens, mean paired gap %, n seeds)]}}: each trunk's val loss against the baseline
    trunk of the same seed at the same iteration, at the constant learning rate (not an end-of-schedule gap).
    Finished trunks from runs/; trunks stopped with a lost machine from their stdout (stopped/)."""
    val = {}  # (width, tag, seed) -> {iter: val}
    tokens_per_iter, policy_of = {}, {}
    for key, path, curve, _ in trunk_logs(sweep, ("runs", "stopped")):
        val.setdefault(key, {}).update(curve)
        if not path.endswith(".out"):
            run = load_run(os.path.join(sweep, path))
            tokens_per_iter[key[0]], policy_of[key[1]] = run["tokens_per_iter"], run["policy"]
    out = {}
    for (width, tag, seed), curve in val.items():
        base = val.get((width, "baseline", seed))
        if tag == "baseline" or base is None or tag not in policy_of:
            continue
        for it in sorted(set(curve) & set(base) - {0}):
            out.setdefault(width, {}).setdefault(policy_of[tag], {}).setdefault(it, []).append(
                100.0 * (curve[it] / base[it] - 1.0))
    return {f"w{width[1:]} n4": {policy: [(it * tokens_per_iter[width], statistics.fmean(g), len(g))
                                         for it, g in sorted(points.items())]
                                for policy, points in policies.items()}
            for width, policies in out.items()}


def rerun_check(sweep, from_iter=256):
    """rerun_check.md: the same (policy, seed) trunk trained twice, on one GPU or on two: the mean relative
    val-loss difference over their common evals from `from_iter` on, and a t-interval over the pairs."""
    rows, diffs = [], {"all": [], "H100 against another": []}
    by_trunk = {}
    for key, path, curve, device in trunk_logs(sweep):
        by_trunk.setdefault(key, []).append((path, curve, device))
    for (width, tag, seed), logs in sorted(by_trunk.items()):
        for (path_a, a, dev_a), (path_b, b, dev_b) in zip(logs, logs[1:]):
            common = sorted(i for i in set(a) & set(b) if i >= from_iter)
            if not common:
                continue
            gaps = [100.0 * (b[i] / a[i] - 1.0) for i in common]
            mean = statistics.fmean(gaps)
            diffs["all"].append(mean)
            if ("H100" in dev_a) != ("H100" in dev_b):
                diffs["H100 against another"].append(mean)
            rows.append(f"| {tag} | {seed} | {path_a} ({dev_a}) | {path_b} ({dev_b}) | {common[0]}-{common[-1]} "
                        f"({len(common)}) | {mean:+.3f}% | {min(gaps):+.2f}% to {max(gaps):+.2f}% |")
    lines = ["# One trunk trained twice", "",
             "Each row: the same policy, seed and config trained twice (a checkpoint does not outlive its machine, "
             "so a trunk is trained again for a later branch). Difference: val loss of the second ÷ the first − 1, "
             f"at their common evals from iteration {from_iter} on; device from each run's layout record "
             "('not logged': a run from before the trainer logged it).", "",
             "| policy | seed | first | second | iterations (evals) | mean difference | range |",
             "|---|---|---|---|---|---:|---|", *rows, ""]
    for label, values in diffs.items():
        if len(values) >= 2:
            mean, half, _ = mean_ci(values)
            lines.append(f"- {label}: {mean:+.2f} ± {half:.2f}% (mean ± 95% t half-width over {len(values)} pairs, "
                         f"{len(values) - 1} df)")
    return "\n".join(lines) + "\n"


def cosine_budgets(cosine, others):
    """The gap against the budget with no branch in it: budget_analysis of the cosine runs' own paired gaps, with
    the runs of `others` (part 3's cosine runs) of the same policies and seeds at the budgets cosine/ lacks; and
    how many of those were added."""
    from analysis.compare import budget_analysis, seed_statistics
    have = {(r["policy"], r["seed"], r["setting"]) for r in cosine}
    policies, seeds = {r["policy"] for r in cosine}, {r["seed"] for r in cosine}
    added = [r for r in others if r["policy"] in policies and r["seed"] in seeds
             and (r["policy"], r["seed"], r["setting"]) not in have]
    return budget_analysis(seed_statistics(cosine + added)), len(added)


def model_params(run_dirs):
    """The model's parameter count from the first run's log ('123.59M parameters'), or None."""
    for d in run_dirs:
        try:
            with open(os.path.join(d, "log.txt")) as f:
                m = re.search(r"([\d.]+)M parameters", f.read())
        except OSError:
            continue
        if m:
            return float(m.group(1)) * 1e6
    return None


def budget_report(sweep, versus_glob):
    """budget_table.md, budget.png (the one-panel summary), budget_full.png (with the seeds, fits, trunk curves and
    cosine runs), stats.json, wsd_check.md, rerun_check.md and, with runs in cosine/, cosine_check.md in the budget
    sweep's directory."""
    from analysis.compare import (budget_analysis, budget_table, plot_budget_headline, plot_budgets, seed_statistics,
                                  versus, versus_table)
    # every file below is replaced whole: from no runs (a mistyped --sweep or --versus) they would lose rows
    branch_dirs = sorted(glob.glob(os.path.join(sweep, "runs", "d*-b*-*-s*")))
    if not branch_dirs:
        raise SystemExit(f"error: --sweep {sweep}: no run directories {os.path.join(sweep, 'runs', 'd*-b*-*-s*')}; "
                         f"nothing written")
    if not glob.glob(versus_glob):
        raise SystemExit(f"error: --versus {versus_glob!r} matches no run directory; nothing written "
                         f"(the stored wsd_check.md, cosine_check.md, budget.png and budget_full.png are kept)")
    branches = [load_run(d) for d in branch_dirs]
    stats = seed_statistics(branches)
    budgets = budget_analysis(stats)
    curves = trunk_curves(sweep)
    others = [load_run(d) for d in sorted(glob.glob(versus_glob))]
    cosine = [load_run(d) for d in sorted(glob.glob(os.path.join(sweep, "cosine", "d*-b*-*-s*")))]
    cosine_trend, added = cosine_budgets(cosine, others) if cosine else ([], 0)
    plot_budget_headline(budgets, os.path.join(sweep, "budget.png"), model_params(branch_dirs),
                         "GPT-2 124M: loss cost of fewer syncs grows with the training budget")
    plot_budgets(budgets, os.path.join(sweep, "budget_full.png"), stats["margin"], curves, cosine_trend)
    write_text(os.path.join(sweep, "budget_table.md"), budget_table(budgets, stats["margin"]) + "\n")
    write_text(os.path.join(sweep, "stats.json"), json.dumps({"stats": stats, "budgets": budgets}, indent=1))
    write_text(os.path.join(sweep, "wsd_check.md"), versus_table(versus(branches, others), versus_glob) + "\n")
    write_text(os.path.join(sweep, "rerun_check.md"), rerun_check(sweep))
    written = "budget.png, budget_full.png, budget_table.md, stats.json, wsd_check.md, rerun_check.md"
    if cosine:  # `run --schedule cosine`: the branches against a cosine run of every budget
        source = f"cosine/ and {added} runs of {versus_glob}" if added else "cosine/ alone"
        write_text(os.path.join(sweep, "cosine_check.md"),
                   versus_table(versus(branches, cosine), os.path.join(sweep, "cosine")) + "\n\n"
                   + f"## The cosine runs' own gaps against the budget ({source})\n\n"
                   + budget_table(cosine_trend, stats["margin"]) + "\n")
        written += ", cosine_check.md"
    print(f"wrote {sweep}/{written}")
    return 0


def width_sweeps(sizes_dir, budget_sweep):
    """{width: sweep folder}: the 768 budget sweep and each <sizes_dir>/w<width>/."""
    sweeps = {768: budget_sweep}
    for path in sorted(glob.glob(os.path.join(sizes_dir, "w*"))):
        match = re.fullmatch(r"w(\d+)", os.path.basename(path))
        if match and os.path.isdir(path):
            sweeps[int(match[1])] = path
    return sweeps


def load_widths(sizes_dir, budget_sweep):
    """[dict(width, n_params, non_embedding, runs, sweep, analysis, stats)] of every width sweep, smallest first: its
    seed statistics and budget_analysis. Refuses (SystemExit, one line) a width folder without runs."""
    from analysis.compare import budget_analysis, seed_statistics
    widths = []
    for width, sweep in sorted(width_sweeps(sizes_dir, budget_sweep).items()):
        dirs = sorted(glob.glob(os.path.join(sweep, "runs", f"d{width}-b*-*-s*")))
        if not dirs:
            raise SystemExit(f"error: {sweep}: no run directories {os.path.join(sweep, 'runs', f'd{width}-b*-*-s*')}; "
                             f"nothing written")
        stats = seed_statistics([load_run(d) for d in dirs])
        with open(os.path.join(dirs[0], "config.json")) as f:
            derived = json.load(f).get("derived", {})
        # the trainer's get_num_params, exact in config.json (log.txt's 'NNN.NNM parameters' is it rounded)
        n, vocab = derived.get("n_params") or model_params(dirs), derived.get("vocab_size", 50304)
        if n is None:
            raise SystemExit(f"error: {sweep}: no run's log.txt logs its parameters ('NNN.NNM parameters'); nothing written")
        widths.append(dict(width=width, n_params=n, non_embedding=n - vocab * width, runs=len(dirs), sweep=sweep,
                           analysis=budget_analysis(stats), stats=stats))
    return widths


def size_report(sizes_dir, budget_sweep):
    """Part 5: per width under sizes_dir its budget_table.md, budget_full.png and stats.json, and rerun_check.md where
    a trunk was trained twice (earlier/; the 768 sweep's are `budgets`' own, not rewritten here), then size_table.md, heldout.md, size_fit.json and crossover_vs_params.png across the
    widths (analysis/size_trend.py). Refuses, writing nothing, where a width has no runs or the stored
    size_fit.json was made from a width or runs no longer found."""
    from analysis.compare import budget_table, plot_budgets
    from analysis.size_trend import heldout_table, plot_crossovers, size_fit, size_table
    widths = load_widths(sizes_dir, budget_sweep)
    out = os.path.join(sizes_dir, "size_fit.json")
    if os.path.exists(out):  # never replaced from less data
        with open(out) as f:
            before = {w["width"]: w["runs"] for w in json.load(f)["widths"]}
        now = {w["width"]: w["runs"] for w in widths}
        fewer = [f"w{k}: {v} runs, {now.get(k, 0)} now" for k, v in before.items() if now.get(k, 0) < v]
        if fewer:
            raise SystemExit(f"error: {out} was made from more runs ({'; '.join(fewer)}); nothing written")
    for w in widths:
        if w["sweep"] != budget_sweep:
            write_text(os.path.join(w["sweep"], "budget_table.md"), budget_table(w["analysis"], w["stats"]["margin"]) + "\n")
            write_text(os.path.join(w["sweep"], "stats.json"),
                       json.dumps({"stats": w["stats"], "budgets": w["analysis"]}, indent=1))
            plot_budgets(w["analysis"], os.path.join(w["sweep"], "budget_full.png"), w["stats"]["margin"],
                         trunk_curves(w["sweep"]))
            if os.path.isdir(os.path.join(w["sweep"], "earlier")):
                write_text(os.path.join(w["sweep"], "rerun_check.md"), rerun_check(w["sweep"]))
    fit = size_fit(widths)
    os.makedirs(sizes_dir, exist_ok=True)
    write_text(os.path.join(sizes_dir, "size_table.md"), size_table(fit))
    write_text(os.path.join(sizes_dir, "heldout.md"), heldout_table(fit))
    write_text(out, json.dumps(fit, indent=1) + "\n")
    plot_crossovers(fit, os.path.join(sizes_dir, "crossover_vs_params.png"))
    print(f"wrote {sizes_dir}/size_table.md, heldout.md, size_fit.json, crossover_vs_params.png from widths "
          f"{', '.join(str(w['width']) for w in widths)}" + (" (one width: the size trend is not measured)"
                                                             if len(widths) == 1 else ""))
    return 0


def report_or_error(report, *args):
    """report(*args), or one line where a run it reads is not one (`budgets --versus <a file>` was a traceback).
    Each file is written whole (atomically), and the runs are read before the tables are."""
    from analysis.compare import RunError
    try:
        return report(*args)
    except RunError as e:
        raise SystemExit(f"error: {e}") from None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        return run_main(argv[1:])
    if argv[:1] == ["budgets"]:
        parser = OneLineArgumentParser(formatter_class=HelpFormatter, prog="python -m experiments.docs_study.run budgets")
        parser.add_argument("--sweep", default=BUDGET_SWEEP)
        parser.add_argument("--versus", default=os.path.join(SWEEP, "runs", "d768-*"), help="the cosine runs of one budget")
        args = parser.parse_args(argv[1:])
        return report_or_error(budget_report, args.sweep, args.versus)
    if argv[:1] == ["sizes"]:
        parser = OneLineArgumentParser(formatter_class=HelpFormatter, prog="python -m experiments.docs_study.run sizes",
                                       description="part 5: the budget table of every width and the fits across sizes")
        parser.add_argument("--sizes", default=SIZE_SWEEPS, help="the folder of the width sweeps w<width>/ and the "
                                                                 "cross-size outputs")
        parser.add_argument("--budget-sweep", default=BUDGET_SWEEP, help="the 768-wide sweep (written by `budgets`)")
        args = parser.parse_args(argv[1:])
        return report_or_error(size_report, args.sizes, args.budget_sweep)
    if argv[:1] == ["report"]:
        argv = argv[1:]
    # the usage names the other modes: an option of `run` (--budgets, --seeds, ...) given without it lands here
    parser = OneLineArgumentParser(
        formatter_class=HelpFormatter, prog="python -m experiments.docs_study.run [run ...|budgets ...|sizes ...|report]",
        description=__doc__.split("\n\n")[0],
        epilog="commands (each with its own --help):\n"
               "  run      train the budget sweep (part 4)\n"
               "  budgets  part 4's table, figure and stats from the stored runs\n"
               "  sizes    part 5: each width's budget table and the fits across sizes\n"
               "  report   part 3's figures (the default; its options are above)")
    parser.add_argument("--sweep", default=SWEEP)
    args = parser.parse_args(argv)
    runs = load(args.sweep)
    if not runs:
        print(f"no finished run under {args.sweep}", file=sys.stderr)
        return 1
    plot_curves(runs, os.path.join(args.sweep, "val_curves.png"))
    write_text(os.path.join(args.sweep, "gpu_seconds.md"), gpu_seconds(args.sweep, runs))
    print(f"wrote {args.sweep}/val_curves.png and gpu_seconds.md")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))
