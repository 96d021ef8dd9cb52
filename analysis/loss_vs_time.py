"""Loss against measured step time: each policy's loss gap to baseline from a study's stats (compare_runs
--stats-json) beside its measured step-time saving from bench.train_throughput rows, as one figure and table.

    python -m analysis.loss_vs_time --stats experiments/docs_study/budgets/stats.json --iters 2560 \\
        --times bench/results/issue49/final/train_loop/tp2_124m.json bench/results/issue49/final/train_loop/tp2_124m_n4.json \\
        --out bench/results/issue49/final/loss_vs_time_tp2

    y = gap = 100 (loss_policy / loss_baseline - 1), paired over seeds, with its 95% t interval (the stats file's)
    x = saving = 100 (1 - ms_policy / ms_baseline), both ms from one run at one n_tracks (median over iterations)

Both axes are measured; neither is modeled. The study fixes one n_tracks (its cells' setting); a time row at
another n_tracks is drawn hollow and its loss is the study's, borrowed (the table says so), except for ladder
and parallel, whose function does not depend on n_tracks (their tracks never hold diverged streams). A policy
the stats have no cell for at --iters takes its largest budget below it, and the table names that budget.
"""
import json
import sys

from training.cli import guarded, positive_int
from training.config import HelpFormatter, OneLineArgumentParser, save_figure, write_text

SAME_AT_ANY_N_TRACKS = ("ladder", "parallel")  # model/gpt.py: every sublayer reads the shared stream


def study_gaps(stats_path, iters):
    """{policy: (gap %, half-width, iterations, n_tracks, tokens or None)} at the largest budget <= iters each policy
    has."""
    with open(stats_path) as f:
        cells = json.load(f)["stats"]["cells"]
    found = {}
    for c in cells:
        n_tracks, budget = c["setting"][3], c["setting"][4]
        gap = c["final_val"].get("gap")
        if gap is None or budget > iters:
            continue
        if c["policy"] not in found or budget > found[c["policy"]][2]:
            found[c["policy"]] = (gap, c["final_val"]["gap_ci"], budget, n_tracks, c.get("tokens"))
    return found


def measured_savings(paths):
    """[(policy, n_tracks, saving %, ms, baseline ms, source)] of the tp2 rows without the async option."""
    out = []
    for path in paths:
        with open(path) as f:
            rows = [r for r in json.load(f)["rows"] if r["group"] == "tp2" and r["async_grad"] == "off" and not r["error"]]
        base = {(r["n_tracks"], r["mode"]): r["ms"] for r in rows if r["policy"] == "baseline"}
        for r in rows:
            key = (r["n_tracks"], r["mode"])
            if r["policy"] != "baseline" and key in base:
                out.append((r["policy"], r["n_tracks"], 100 * (1 - r["ms"] / base[key]), r["ms"], base[key], path))
    return out


def main(argv=None):
    p = OneLineArgumentParser(prog="python -m analysis.loss_vs_time", description=__doc__.split("\n\n")[0],
                              formatter_class=HelpFormatter)
    p.add_argument("--stats", required=True, help="a study's stats.json (compare_runs --stats-json)")
    p.add_argument("--iters", type=positive_int, required=True, help="the study's budget in iterations")
    p.add_argument("--times", nargs="+", required=True, help="bench.train_throughput JSON files")
    p.add_argument("--out", required=True, help="output path without suffix: writes .png and .md")
    p.add_argument("--title", default="Loss against measured time", help="the figure's title (say the model, tp, device)")
    args = p.parse_args(argv)
    try:
        gaps, times = study_gaps(args.stats, args.iters), measured_savings(args.times)
    except (OSError, ValueError, KeyError) as e:
        p.error(f"cannot read the inputs: {e}")
    rows = [(pol, n, s, ms, base, src) for pol, n, s, ms, base, src in times if pol in gaps]
    if not rows:
        p.error(f"no policy is in both --stats ({', '.join(sorted(gaps)) or 'none'}) and --times")
    command = "python -m analysis.loss_vs_time " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = ["# Loss gap against measured step-time saving\n", f"`{command}`\n",
             "| policy | n_tracks (time) | step ms (baseline ms) | saving | loss gap (95% CI) | loss: budget, n_tracks |",
             "|---|---:|---:|---:|---:|---|"]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    colors = {}
    for pol, n, saving, ms, base, src in sorted(rows):
        gap, half, budget, study_n, tokens = gaps[pol]
        # the budget in tokens too: a reader at another batch size compares tokens, not iterations
        budget_text = f"{budget} it" + (f" ({tokens / 1e6:.1f}M tokens)" if tokens else "")
        borrowed = "" if n == study_n or pol in SAME_AT_ANY_N_TRACKS else " (borrowed)"
        lines.append(f"| {pol} | {n} | {ms:.2f} ({base:.2f}) | {saving:+.1f}% | {gap:+.2f}% ± {half:.2f} | "
                     f"{budget_text}, n_tracks {study_n}{borrowed} |")
        color = colors.setdefault(pol, f"C{len(colors)}")
        ax.errorbar(saving, gap, yerr=half, fmt="o", color=color, mfc="white" if borrowed else color,
                    capsize=3, label=f"{pol}, n_tracks {n}" + (f" (loss from n_tracks {study_n})" if borrowed else "")
                    + ("" if budget == args.iters else f" (loss at {budget} it)"))
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel("step-time saving against baseline, % (measured; right is faster)")
    ax.set_ylabel("val-loss gap to baseline, % (measured; below is better)")
    ax.set_title(f"{args.title}\nloss at {args.iters} iterations; hollow: loss borrowed from another n_tracks", fontsize=9)
    # below the axes: inside, "best" still covered an error bar (the issue-49 figure)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.tight_layout()
    save_figure(fig, args.out + ".png")
    write_text(args.out + ".md", "\n".join(lines) + "\n")
    print("\n".join(lines[2:]))
    print(f"wrote {args.out}.png and .md")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))
