#!/usr/bin/env python3
"""The study's part 3 (issue 26): val-loss curves and the GPU time of each run, from experiments/docs-sweep/.

    python experiments/docs_study.py            # writes val_curves.png and gpu_seconds.md there

val_curves.png: val loss against training tokens for each policy of each width (d768, d384), the mean over
its seeds as a line, the seeds as points at the final eval, and a band of the 95% Student-t interval of
the mean (n - 1 degrees of freedom) at each eval. The verdicts and the gap-vs-syncs figure come from
compare_runs.py (--stats, --trend); this script only draws what the table cannot show.

gpu_seconds.md: per run, the wall seconds it ran on the shared GPU, summed over the sweep commands that ran
it (experiments/docs-sweep/gpu-call-*.log: 'complete NAME (N s)' and 'stopped at deadline N s' lines),
with the number of runs that shared the GPU and the median ms/iter from its metrics.jsonl. Several runs
shared one GPU, so a run's seconds are not its cost alone: the calls' total is.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
from bench.common import pyplot  # noqa: E402
from compare_runs import load_run, mean_ci  # noqa: E402
from configurator import save_figure, write_text  # noqa: E402

SWEEP = os.path.join("experiments", "docs-sweep")
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
    for path in sorted(glob.glob(os.path.join(sweep, "d*-*-s*"))):
        match = RUN_NAME.match(os.path.basename(path))
        if not match or not os.path.isdir(path):
            continue
        run = load_run(path)
        if run["complete"] and not run["diverged"]:
            with open(os.path.join(path, "config.json")) as f:
                cfg = json.load(f)
            run["tokens_per_iter"] = cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    sys.exit(main())
