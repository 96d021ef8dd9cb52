"""How each cosine run of the budget study got to its final loss: per policy, every seed's gap to its own seed's
baseline at each eval, and its gradient norm over training, so that a final gap made by an instability (a loss
spike, or a gradient norm that stays high while the learning rate decays) shows as one.

    python -m experiments.large_budgets.curves --width 768                       # curves_w768.png beside this file
    python -m experiments.large_budgets.curves --folder experiments/large_budgets/checks/w768-lr3e-4/cosine \
        --out /tmp/lr3e-4.png                                                    # any folder of cosine runs

The gap at eval i of seed s is 100 (L_policy,s(i) / L_baseline,s(i) - 1), in % of the baseline's val loss at the
same iteration (both runs evaluate at the same iterations; an iteration only one of them evaluated is left out).
The gradient norm is the trainer's, before clipping at 1.0, at every log interval. python -m
experiments.large_budgets.report draws the figure of every width with cosine runs; this command draws one, and
writes over an existing file only with --force.
"""
import os
import statistics
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run it from the repository root as: python -m experiments.large_budgets.curves " + " ".join(sys.argv[1:]))

from analysis.compare import RunError, load_run  # noqa: E402
from experiments.runner import read_records  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GAP_LIMIT = 30.0  # the gap axis' top, %: a loss spike reaches +87% (width 768, grouped:12 seed 1339), which would
#                   flatten every other seed's line; a clipped line's legend entry gives its peak


def grad_series(records):
    """[(iter, grad_norm)] of a run's train records, iteration 0 (every run's first, large norm) left out."""
    return [(r["iter"], r["grad_norm"]) for r in records
            if r.get("type") == "train" and r.get("grad_norm") is not None and r["iter"] > 0]


def by_policy_seed(runs):
    """{(policy, seed): run} of analysis.compare.load_run's run dicts that carry 'grad' (grad_series)."""
    return {(run["policy"], run["seed"]): run for run in runs}


def cosine_runs(folder):
    """by_policy_seed of the finished runs in folder (report.py has them from its own loading)."""
    runs = []
    for name in sorted(os.listdir(folder)):
        try:
            run = load_run(os.path.join(folder, name))
        except RunError:
            continue
        if run["complete"]:
            runs.append(dict(run, grad=grad_series(read_records(os.path.join(folder, name, "metrics.jsonl")))))
    return by_policy_seed(runs)


def gap_curve(run, base):
    """[(iter, gap %)] at the evals both runs made, iteration 0 left out (both start from the same loss)."""
    base_at = dict(base["curve"])
    return [(i, 100 * (loss / base_at[i] - 1)) for i, loss in run["curve"] if i > 0 and i in base_at]


def unsteady_from(run, base, ratio=2.0, window=5):
    """The first logged iteration from which the running median of `window` gradient norms, each over the same
    seed's baseline's at that iteration, exceeds `ratio`; None if it never does."""
    base_at = dict(base["grad"])
    ratios = [(i, norm / base_at[i]) for i, norm in run["grad"] if base_at.get(i)]
    for k in range(len(ratios) - window + 1):
        if statistics.median(r for _, r in ratios[k:k + window]) > ratio:
            return ratios[k][0]
    return None


def path_rows(width, runs):
    """One row per policy run with its seed's baseline: (width, run name, the lowest gap and its iteration, the
    first eval after it with a gap above 0, unsteady_from, the final gap)."""
    rows = []
    for (policy, seed), run in sorted(runs.items()):
        base = runs.get(("baseline", seed))
        gaps = gap_curve(run, base) if policy != "baseline" and base is not None else []
        if gaps:
            low = min(gaps, key=lambda g: g[1])
            crossed = next((i for i, g in gaps if i > low[0] and g > 0), None)
            rows.append((width, run["name"], low, crossed, unsteady_from(run, base), gaps[-1][1]))
    return rows


def render_paths(rows):
    """The markdown table of path_rows' rows (report.py puts it in answer.md)."""
    lines = ["## How each cosine run got to its gap", "",
             "Per policy run, against the same seed's baseline at each eval (curves.py; the figures "
             "curves_w<width>.png, and checks/<check>/curves.png for a check's runs, named beside the width): "
             "the lowest gap and where, the first eval after it where the gap is above 0, "
             "the first iteration from which the gradient norm ran above twice the baseline's (the running median "
             "of 5 logged iterations of their ratio), and the gap at the end.", "",
             "| width | run | lowest gap % (iter) | above 0 from iter | grad norm > 2x baseline's from iter "
             "| final gap % |",
             "|---:|---|---:|---:|---:|---:|"]
    for width, name, low, crossed, unsteady, final in rows:
        lines.append(f"| {width} | {name} | {low[1]:+.2f} ({low[0]}) | {crossed if crossed is not None else 'never'} | "
                     f"{unsteady if unsteady is not None else 'never'} | {final:+.2f} |")
    return "\n".join(lines) + "\n"


def plot_curves(runs, path, title):
    """Two rows, one column a policy: the gap to the same seed's baseline at every eval (top) and the gradient norm
    on a log axis (bottom, the baseline's seeds in grey behind the policy's). Returns the number of policies drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter
    from atomic_files import save_figure

    order = ("ladder", "spd", "parallel", "grouped:4", "grouped:12")
    policies = [p for p in order if any(q == p and ("baseline", s) in runs for q, s in runs)]
    policies += sorted({p for p, s in runs if p not in policies and p != "baseline" and ("baseline", s) in runs})
    if not policies:
        return 0
    seeds = sorted({s for _, s in runs if ("baseline", s) in runs})  # a seed without its baseline draws nothing
    logged = any(run["grad"] for run in runs.values())  # runs without train records leave the lower row empty
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(2, len(policies), figsize=(max(3.3 * len(policies), 7.5), 6.4), sharex=True,
                             sharey="row", squeeze=False)
    for k, policy in enumerate(policies):
        top, bottom = axes[0][k], axes[1][k]
        top.axhline(0, color="black", lw=1)
        for s, seed in enumerate(seeds):
            run, base = runs.get((policy, seed)), runs.get(("baseline", seed))
            if base is not None:
                bottom.plot(*zip(*base["grad"]), color="0.75", lw=0.8)
            if run is None or base is None:
                continue
            color = colors[s % len(colors)]
            pairs = gap_curve(run, base)
            if not pairs:  # no eval at a common iteration past 0: nothing to pair
                continue
            x, y = zip(*pairs)
            peak = max(range(len(y)), key=lambda j: y[j])
            clipped = f", peak {y[peak]:+.0f}% ({x[peak]:,})" if y[peak] > GAP_LIMIT else ""
            top.plot(x, [min(v, GAP_LIMIT) for v in y], color=color, lw=1.5,
                     label=f"{seed}: end {y[-1]:+.2f}%{clipped}")
            bottom.plot(*zip(*run["grad"]), color=color, lw=0.9)
        syncs = next(r["syncs"] for (p, _), r in runs.items() if p == policy)
        top.set_title(f"{policy} ({syncs} sync{'' if syncs == 1 else 's'} per forward)", fontsize=10)
        top.set_ylim(top=GAP_LIMIT * 1.05)
        top.grid(alpha=0.3)
        top.legend(fontsize=7, loc="lower right")  # every gap so far ends above 0 or near it: that corner is free
        if logged:
            bottom.set_yscale("log")
        bottom.grid(alpha=0.3)
        bottom.set_xlabel("iteration")
        bottom.xaxis.set_major_locator(MaxNLocator(4))
        bottom.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v else "0"))
    if logged:
        low, high = axes[1][0].get_ylim()  # shared by the row: labels at 1-2-5 within two decades, else each decade
        axes[1][0].yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if high / low < 100 else (1.0,)))
        axes[1][0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axes[1][0].yaxis.set_minor_formatter(NullFormatter())
    axes[0][0].set_ylabel(f"val loss gap to the same seed's\nbaseline, % (clipped at +{GAP_LIMIT:.0f})")
    axes[1][0].set_ylabel("gradient norm before clipping\n(log; grey: the baseline's seeds)")
    fig.suptitle(title + "; lower is better", fontsize=10)  # two lines where the title has a \n
    handles = [plt.Line2D([], [], color="0.75", lw=1.5, label="the baseline's seeds")]
    handles += [plt.Line2D([], [], color=colors[s % len(colors)], lw=1.5, label=f"seed {seed}")
                for s, seed in enumerate(seeds)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    save_figure(fig, path)
    return len(policies)


def runs_width(runs):
    """The width (n_embd) of runs that share one: a check's folder holds a single width's runs."""
    widths = {run["setting"][2] for run in runs.values()}
    return widths.pop() if len(widths) == 1 else "mixed"


def width_title(width, runs, label=None):
    """The figure's title: the width (or `label`, e.g. a check's folder) and the budget of its runs."""
    run = next(iter(runs.values()))
    return (f"{label or f'Width {width}'}, cosine over {run['final_iter']:,} iterations "
            f"({run['tokens'] / 1e6:.1f}M tokens):\neach policy's gap at every eval and its gradient norm")


def main(argv=None):
    parser = OneLineArgumentParser(prog="python -m experiments.large_budgets.curves", formatter_class=HelpFormatter,
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, help="a width of the study: its runs in w<WIDTH>/cosine/")
    parser.add_argument("--folder", help="any folder of cosine runs instead (with --out)")
    parser.add_argument("--out", help="the figure's path (default curves_w<WIDTH>.png beside this file)")
    parser.add_argument("--force", action="store_true", help="write over an existing file")
    args = parser.parse_args(argv)
    if (args.width is None) == (args.folder is None):
        parser.error("give one of --width (a width of the study, e.g. 768) or --folder (a folder of cosine runs)")
    if args.width is not None:
        folder = os.path.join(HERE, f"w{args.width}", "cosine")
        widths = sorted(int(d[1:]) for d in os.listdir(HERE) if d[0] == "w" and d[1:].isdigit()
                        and os.path.isdir(os.path.join(HERE, d, "cosine")))
        if not os.path.isdir(folder):
            parser.error(f"--width {args.width}: no cosine runs at that width; allowed: {', '.join(map(str, widths))}")
        out = args.out or os.path.join(HERE, f"curves_w{args.width}.png")
    else:
        folder = args.folder
        if not os.path.isdir(folder):
            parser.error(f"--folder {folder!r} is not a folder; give one that holds run folders")
        if not args.out:
            parser.error("--folder needs --out (the figure's path)")
        out = args.out
    if os.path.exists(out) and not args.force:
        parser.error(f"--out {out!r} exists; --force writes over it")
    runs = cosine_runs(folder)
    title = width_title(args.width, runs, None if args.width is not None else os.path.relpath(folder)) if runs else ""
    if not plot_curves(runs, out, title):
        parser.error(f"{folder!r} holds no policy run beside a baseline run of the same seed")
    print(f"wrote {os.path.relpath(out)}")
    return 0


if __name__ == "__main__":
    from cli_guard import guarded
    sys.exit(guarded(main))
