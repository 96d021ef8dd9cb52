"""Loss against measured step time: each policy's loss gap to baseline from a study's stats (compare_runs
--stats-json) beside its measured step-time saving from bench.train_throughput rows, as one figure and table.

    python -m analysis.loss_vs_time --stats experiments/docs_study/budgets/stats.json --iters 2560 \\
        --times bench/results/issue49/final/train_loop/tp2_124m.json bench/results/issue49/final/train_loop/tp2_124m_n4.json \\
        --out bench/results/issue49/final/loss_vs_time_tp2
    python -m analysis.loss_vs_time --stats experiments/large_budgets/stats.json --width 768 --times ... --out ...
    python -m analysis.loss_vs_time --stats experiments/large_budgets/stats.json --width 768 --schedule wsd ...

--stats is a compare_runs study's stats.json (its cells at --iters) or the budget study's
(experiments/large_budgets/stats.json: the cosine cell of --width, the whole budget, each token read once; with
--schedule wsd, its largest WSD cooldown branch instead).

    y = gap = 100 (loss_policy / loss_baseline - 1), paired over seeds, with its 95% t interval (the stats file's)
    x = saving = 100 (1 - ms_policy / ms_baseline), both ms from one run at one n_tracks (median over iterations);
        --against strongest: the policy's fastest row against the baseline's fastest (sequence parallelism and
        overlap included), the baseline a Megatron user runs

Both axes are measured; neither is modeled. The study fixes one n_tracks (its cells' setting); a time row at
another n_tracks is drawn hollow and its loss is the study's, borrowed (the table says so), except for ladder
and parallel, whose function does not depend on n_tracks (their tracks never hold diverged streams). A policy
the stats have no cell for at --iters takes its largest budget below it, and the table names that budget.
--out's .png and .md are never written over unless --force says so.
"""
import json
import os
import sys

from bench.throughput.report import comm_mode, fastest_rows
from training.cli import guarded, positive_int
from training.config import HelpFormatter, OneLineArgumentParser, save_figure, write_text

SAME_AT_ANY_N_TRACKS = ("ladder", "parallel")  # model/gpt.py: every sublayer reads the shared stream


STUDY_SCHEDULES = {"cosine": "cosine", "wsd": "runs"}  # --schedule: the budget study's stats.json name for it


def study_gaps(stats_path, iters=None, width=None, schedule="cosine"):
    """{policy: (gap %, half-width, budget, n_tracks, tokens or None, seeds or None)}: from a compare_runs
    stats.json, each policy's cell at the largest budget <= iters (budget: iterations, an int); from the budget
    study's (a list of rows), the val cell of width at its largest budget of the schedule, cosine or wsd (budget:
    its tokens per parameter, a float; seeds: how many, which differ between policies there)."""
    with open(stats_path) as f:
        data = json.load(f)
    if isinstance(data, list):  # experiments/large_budgets/stats.json
        widths = ", ".join(str(w) for w in sorted({r["width"] for r in data}))
        if width is None:
            raise ValueError(f"{stats_path} is the budget study's stats: give --width (one of {widths})")
        rows = [r for r in data if r["width"] == width and r["schedule"] == STUDY_SCHEDULES[schedule]
                and r["metric"] == "val"]
        if not rows:
            raise ValueError(f"{stats_path} has no {schedule} cell at width {width}; widths: {widths}")
        rows = [r for r in rows if r["tokens"] == max(r["tokens"] for r in rows)]
        return {r["policy"]: (r["gap"], r["gap_ci95"], float(r["tokens_per_param"]), r["n_tracks"], r["tokens"],
                              len(r["seeds"])) for r in rows}
    if iters is None:
        raise ValueError(f"{stats_path} is a compare_runs stats.json: give --iters (the budget in iterations)")
    cells = data["stats"]["cells"]
    found = {}
    for c in cells:
        n_tracks, budget = c["setting"][3], c["setting"][4]
        gap = c["final_val"].get("gap")
        if gap is None or budget > iters:
            continue
        if c["policy"] not in found or budget > found[c["policy"]][2]:
            found[c["policy"]] = (gap, c["final_val"]["gap_ci"], budget, n_tracks, c.get("tokens"), None)
    return found


def measured_savings(paths, against="same"):
    """[(policy, n_tracks, saving %, ms, baseline ms, source, (policy's row, baseline's row))] of the tp2 rows
    (tensor parallel, ours) without the async option. against='same': each row against the baseline row of its own
    tp, n_tracks, compile mode and tp_comm; 'strongest': each policy's fastest row (its best mode, sequence
    parallelism and overlap included) against the fastest baseline row of its tp and n_tracks, the baseline a
    Megatron user would run (plain TP's async input-gradient all-reduce counted as a mode too). A row names itself
    as 'mode' or 'mode, tp_comm' ('mode, async_grad')."""
    def key(r):  # tp and tp_comm: rows of files written before they were recorded have neither
        return (r["policy"], r.get("tp", 2), r["n_tracks"]) + ((r["mode"], comm_mode(r)) if against == "same" else ())

    def name(r):
        return r["mode"] + ("" if comm_mode(r) == "off" else f", {comm_mode(r)}")
    out = []
    for path in paths:
        with open(path) as f:
            fastest = fastest_rows(json.load(f)["rows"], key, with_async=against == "strongest")
        for (policy, *k), r in sorted(fastest.items(), key=lambda item: item[0]):
            base = fastest.get(("baseline", *k))
            if policy != "baseline" and base is not None:
                out.append((policy, r["n_tracks"], 100 * (1 - r["ms"] / base["ms"]), r["ms"], base["ms"], path,
                            (name(r), name(base))))
    return out


def main(argv=None):
    p = OneLineArgumentParser(prog="python -m analysis.loss_vs_time", description=__doc__.split("\n\n")[0],
                              formatter_class=HelpFormatter)
    p.add_argument("--stats", required=True, help="a study's stats.json (compare_runs --stats-json, or "
                                                  "experiments/large_budgets/stats.json)")
    p.add_argument("--iters", type=positive_int, help="the study's budget in iterations (a compare_runs stats.json)")
    p.add_argument("--width", type=positive_int, help="the width whose cosine cell to read (the budget study's stats)")
    p.add_argument("--schedule", choices=tuple(STUDY_SCHEDULES), default="cosine",
                   help="with --width: the cosine run over the whole budget, or the largest WSD cooldown branch")
    p.add_argument("--times", nargs="+", required=True, help="bench.train_throughput JSON files")
    p.add_argument("--out", required=True, help="output path without suffix: writes .png and .md")
    p.add_argument("--title", default="Loss against measured time", help="the figure's title (say the model, tp, device)")
    p.add_argument("--against", choices=("same", "strongest"), default="same",
                   help="same: each row against the baseline row of its own mode; strongest: each policy's fastest "
                        "row against the fastest baseline row (sequence parallelism and overlap included)")
    p.add_argument("--force", action="store_true", help="let --out replace an existing .png or .md")
    args = p.parse_args(argv)
    try:
        gaps = study_gaps(args.stats, args.iters, args.width, args.schedule)
        times = measured_savings(args.times, args.against)
    except (OSError, ValueError, KeyError) as e:
        p.error(f"cannot read the inputs: {e}")
    rows = [row for row in times if row[0] in gaps]
    strongest = args.against == "strongest"
    if not rows:
        p.error(f"no policy is in both --stats ({', '.join(sorted(gaps)) or 'none'}) and --times")
    existing = [args.out + s for s in (".png", ".md") if os.path.exists(args.out + s)]
    if existing and not args.force:
        p.error(f"--out {args.out!r}: {' and '.join(existing)} exist already; give a new path, or --force to replace them")
    command = "python -m analysis.loss_vs_time " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = ["# Loss gap against measured step-time saving\n", f"`{command}`\n",
             "| policy | n_tracks (time) | step ms (baseline ms) | saving | loss gap (95% CI) | loss: budget, n_tracks |"
             + (" rows: policy's fastest / baseline's fastest |" if strongest else ""),
             "|---|---:|---:|---:|---:|---|" + ("---|" if strongest else "")]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    colors = {}
    for pol, n, saving, ms, base, src, (own, base_row) in sorted(rows):
        gap, half, budget, study_n, tokens, seeds = gaps[pol]
        seeds_text = seeds and f"{seeds} seed{'' if seeds == 1 else 's'}"
        # the budget in tokens too: a reader at another batch size compares tokens, not iterations
        if seeds is None:
            budget_text = f"{budget} it" + (f" ({tokens / 1e6:.1f}M tokens)" if tokens else "")
        else:  # the budget study's cell: its tokens, then tokens per parameter and seeds
            budget_text = (f"{tokens / 1e6:.1f}M tokens ({budget:.2f} per parameter, {seeds_text}"
                           + (", WSD branch)" if args.schedule == "wsd" else ")"))
        half_text = "" if half is None else f" ± {half:.2f}"  # one seed: no interval
        borrowed = "" if n == study_n or pol in SAME_AT_ANY_N_TRACKS else " (borrowed)"
        lines.append(f"| {pol} | {n} | {ms:.2f} ({base:.2f}) | {saving:+.1f}% | {gap:+.2f}%{half_text} | "
                     f"{budget_text}, n_tracks {study_n}{borrowed} |" + (f" {own} / {base_row} |" if strongest else ""))
        color = colors.setdefault(pol, f"C{len(colors)}")
        ax.errorbar(saving, gap, yerr=half or 0.0, fmt="o", color=color, mfc="white" if borrowed else color,
                    capsize=3, label=f"{pol}, n_tracks {n}" + (f" (loss from n_tracks {study_n})" if borrowed else "")
                    + ("" if budget == args.iters or seeds else f" (loss at {budget} it)")
                    + (f" ({seeds_text})" if seeds else ""))
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel("step-time saving against " + ("baseline's fastest mode" if strongest else "baseline")
                  + ", % (measured; right is faster)")
    ax.set_ylabel("val-loss gap to baseline, % (measured; below is better)")
    # the seeds differ between policies: the legend gives each its own
    at = (f"{args.iters} iterations" if args.iters else
          f"width {args.width}'s {'cosine budget' if args.schedule == 'cosine' else 'largest WSD branch'} "
          f"({next(iter(gaps.values()))[2]:.2f} tokens per parameter)")
    ax.set_title(f"{args.title}\nloss at {at}\nhollow: loss borrowed from another n_tracks", fontsize=9)
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
