"""The figures of analysis/compare.py (matplotlib, no display needed): the runs' trade-off PNG, the trend PNG, the gap
against the budget and the headline budget figure."""
import math
from types import SimpleNamespace

from analysis.runs import SETTING_KEYS
from analysis.stats import MARGIN, fmean, mean_ci, natural, setting_labels, sorted_settings, sync_interval
from analysis.tables import fmt_tokens
from training.config import save_figure


MAX_LABELLED = 20  # the trade-off PNG labels each run up to this many runs


SEED_STYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)), (0, (3, 1, 1, 1))]
SETTING_MARKERS = ["o", "s", "^", "v", "P", "X", "D", "*"]


def wall_clock_caveat(runs):
    """The wall-clock panel's warning: '' when every timed run's conditions are known, alike and fair."""
    timed = [r for r in runs if r["time_curve"]]
    if any(r["device"] is None or r["layout"] is None for r in timed):
        return "run conditions unknown (device, layout, load not logged)"
    if any(r["device_type"] == "cpu" or (r["load"] is not None and r["cores"] is not None and r["load"] > r["cores"])
           for r in timed):
        return "CPU or loaded machine: the timing measures the machine, not the policy"
    if len({(r["device"], r["layout"]) for r in timed}) > 1:
        return "runs on different devices or layouts: not comparable"
    return ""


def plot_look(runs, plt):
    """What stays the same in every panel: one colour per policy (baseline first, then by sync interval),
    one line style per seed, one marker per setting."""
    settings = sorted_settings(r["setting"] for r in runs)
    policies = sorted({r["policy"] for r in runs}, key=lambda p: (p != "baseline", sync_interval(p) or 0, p))
    palette = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20").colors
    if len(policies) <= 10:  # tab10's grey last: the margin band is grey
        palette = [c for k, c in enumerate(palette) if k != 7] + [palette[7]]
    seeds = sorted({r["seed"] for r in runs}, key=natural)
    return SimpleNamespace(settings=settings, labels=setting_labels(settings), policies=policies, seeds=seeds,
                           color={p: palette[k % len(palette)] for k, p in enumerate(policies)},
                           style={sd: SEED_STYLES[k % len(SEED_STYLES)] for k, sd in enumerate(seeds)},
                           marker={st: SETTING_MARKERS[k % len(SETTING_MARKERS)] for k, st in enumerate(settings)})


def plot_final_vals(ax, runs, k, setting, look, margin, bands):
    """Left panel, the k-th setting: the ±margin % band around its baseline mean, each run's final val loss a
    point at its measured syncs per forward, each policy's mean a short line (bands: its 95% t-interval a box);
    policies that share a sync count sit side by side."""
    own = [r for r in runs if r["setting"] == setting and r["syncs"] is not None]
    here_policies = [p for p in look.policies if any(r["policy"] == p for r in own)]
    base = [r["final_val"] for r in own if r["policy"] == "baseline"]
    if base:
        mean = fmean(base)
        ax.axhspan(mean * (1 - margin / 100), mean * (1 + margin / 100), color="0.5", alpha=0.12, lw=0)
    n_settings = len(look.settings)
    for syncs in sorted({r["syncs"] for r in own}):
        here = [p for p in here_policies if any(r["policy"] == p and r["syncs"] == syncs for r in own)]
        for j, policy in enumerate(here):
            x = syncs * 2 ** (0.06 * (j - (len(here) - 1) / 2) + 0.02 * (k - (n_settings - 1) / 2))
            values = [r["final_val"] for r in own if r["policy"] == policy and r["syncs"] == syncs]
            ax.scatter([x] * len(values), values, color=look.color[policy], marker=look.marker[setting], s=18,
                       alpha=0.8)
            if len(values) > 1:
                mean, half, _ = mean_ci(values)
                ax.hlines(mean, x / 1.04, x * 1.04, color=look.color[policy], linewidth=2)
                if bands and half is not None:
                    ax.fill_between([x / 1.04, x * 1.04], mean - half, mean + half, color=look.color[policy],
                                    alpha=0.2, lw=0)
    return here_policies


def plot_curves(middle, right, runs, look, bands):
    """Middle and right panels: each run's val-loss curve against iterations and against wall-clock seconds,
    from the first eval after iteration 0 (whose loss, ~ln(vocab), would squash the rest)."""
    for r in runs:
        after_0 = [n for n, (i, _) in enumerate(r["curve"]) if i > 0] or [0]
        for ax, curve in ((middle, r["curve"]), (right, r["time_curve"])):
            if curve:
                xs, losses = zip(*(curve[n] for n in after_0))
                ax.plot(xs, losses, color=look.color[r["policy"]], linestyle=look.style[r["seed"]],
                        linewidth=0.8 if bands else 1.2, alpha=0.6 if bands else 0.85,
                        marker="." if len(xs) < 10 else None, markersize=4)


def plot_mean_curves(ax, runs, policies, look):
    """Middle panel with bands: each policy's mean curve over its seeds, and its 95% t-interval as a band,
    at every iteration after 0 that all its seeds logged."""
    for policy in policies:
        cell = [r for r in runs if r["policy"] == policy]
        common = sorted(set.intersection(*({i for i, _ in r["curve"] if i > 0} for r in cell)))
        if len(cell) < 2 or not common:
            continue
        stats = [mean_ci([dict(r["curve"])[i] for r in cell]) for i in common]
        low = [m - (h or 0) for m, h, _ in stats]
        high = [m + (h or 0) for m, h, _ in stats]
        ax.fill_between(common, low, high, color=look.color[policy], alpha=0.2, lw=0)
        ax.plot(common, [m for m, _, _ in stats], color=look.color[policy], linewidth=2)


def label_panels(left, middle, right, runs, bands):
    """Axes, ticks and titles; the left title says when one seed per policy shows no spread, the right one
    when the timings measure the machine rather than the policy (wall_clock_caveat)."""
    left.set_xscale("log", base=2)
    ticks = sorted({r["syncs"] for r in runs if r["syncs"]})
    left.set_xticks(ticks)
    left.set_xticklabels([str(t) for t in ticks])
    left.minorticks_off()
    left.set_xlabel("all-reduces per forward pass (measured)")
    left.set_ylabel("final val loss")
    per_cell = [sum(r["policy"] == p and r["setting"] == s for r in runs) for s, p in {(r["setting"], r["policy"])
                                                                                    for r in runs}]
    left.set_title(("final val per run (points) and per policy (mean of seeds: line"
                    + ("; 95% t-interval: box)" if bands else ")")) if max(per_cell) > 1 else
                   "final val, ONE seed per policy: no spread measured,\nso no difference here is shown to be real",
                   fontsize=10)
    left.grid(alpha=0.3)
    middle.set_xlabel("iteration")
    middle.set_ylabel("val loss")
    middle.set_title("val loss from the first eval after iteration 0" +
                     (";\nbold: mean of a policy's seeds, band: its 95% t-interval" if bands else ""), fontsize=10)
    middle.grid(alpha=0.3)
    right.set_xlabel("wall-clock seconds since the iteration-0 eval (evals included)")
    right.set_ylabel("val loss")
    caveat = wall_clock_caveat(runs)
    right.set_title("val loss against time" + ("" if any(r["time_curve"] for r in runs) else
                                               ": no eval times logged (log.txt only)")
                    + (f"\n{caveat}" if caveat else ""),
                    fontsize=10, color="firebrick" if caveat else "black")
    right.grid(alpha=0.3)


def plot_legend(fig, runs, look, margin):
    """One legend for the three panels: the policies' colours, the seeds' line styles, the settings' markers
    when there are several, and the margin band when there is a baseline."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=look.color[p], linewidth=2.5, label=p) for p in look.policies]
    handles += [Line2D([], [], color="0.3", linestyle=look.style[sd], linewidth=1.5, label=f"seed {sd}")
                for sd in look.seeds]
    if len(look.settings) > 1:
        handles += [Line2D([], [], color="0.3", marker=look.marker[st], linestyle="None", label=look.labels[st])
                    for st in look.settings]
    if any(r["policy"] == "baseline" for r in runs):
        handles.append(Patch(color="0.5", alpha=0.2,
                             label=f"±{margin:g}% of the baseline mean\n(the --margin of --stats)"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(0.86, 0.5), fontsize=8,
               title="colour: policy; line: seed" + ("; marker: setting" if len(look.settings) > 1 else ""),
               title_fontsize=8)


def plot(runs, path, margin=None, bands=False):
    """One colour per policy, one line style per seed, the same in every panel; a legend names both (and the
    settings' markers when there are several). Left: final val loss against measured syncs per forward, each
    run (seed) a point, each policy's mean over its seeds a short horizontal line; policies that share a sync
    count sit side by side. The band (the baseline's colour) is ±margin % around each setting's baseline mean,
    so the y-range is never narrower than the margin: two single-seed points 0.3% apart do not fill the axis.
    Middle and right: every run's val-loss curve against iterations and against wall-clock seconds, from the
    first eval after iteration 0 (whose loss, ~ln(vocab), would squash the rest); the wall-clock panel says
    when its timings measure the machine rather than the policy (wall_clock_caveat). bands (--stats): each
    policy's 95% t-interval over its seeds, of the final val loss (left, a box) and of the val loss at every
    iteration that all its seeds logged (middle, a band around the mean curve)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    margin = MARGIN if margin is None else margin
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(21, 5.5))
    look = plot_look(runs, plt)
    for k, setting in enumerate(look.settings):
        here_policies = plot_final_vals(left, runs, k, setting, look, margin, bands)
        setting_runs = [r for r in runs if r["setting"] == setting]
        plot_curves(middle, right, setting_runs, look, bands)
        if bands:
            plot_mean_curves(middle, setting_runs, here_policies, look)
    label_panels(left, middle, right, runs, bands)
    plot_legend(fig, runs, look, margin)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    save_figure(fig, path)


def plot_trend(stats, path):
    """Gap to baseline (%) vs measured syncs per forward: one curve per setting, 95% intervals as error
    bars; left final val, right best val. Lines join the baseline and the grouped family (spd,
    grouped:G) where every cell has two seeds or more; other policies are unjoined markers. Colour: width; line style and filled or open
    markers: n_tracks; the grey band: the equivalence margin."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted_settings(tuple(c["setting"]) for c in stats["cells"])
    width_i, tracks_i = SETTING_KEYS.index("n_embd"), SETTING_KEYS.index("n_tracks")
    widths = sorted({s[width_i] for s in settings}, key=natural)
    tracks = sorted({s[tracks_i] for s in settings}, key=natural)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    markers = {"parallel": "s", "ladder": "^", "baseline": "o"}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=False)
    for ax, metric in zip(axes, ("final_val", "best_val")):
        seen_markers, plotted, intervals, gaps = set(), set(), 0, 0
        for k, setting in enumerate(settings):
            cells = [c for c in stats["cells"] if tuple(c["setting"]) == setting and c["syncs"] is not None
                     and (c["policy"] == "baseline" or "gap" in c[metric])]
            if not cells:
                continue
            plotted |= {c["syncs"] for c in cells}
            intervals += sum(c[metric].get("gap_ci") is not None for c in cells)
            gaps += sum(c["policy"] != "baseline" for c in cells)
            color = colors[widths.index(setting[width_i]) % len(colors)]
            style = styles[tracks.index(setting[tracks_i]) % len(styles)]
            face = color if tracks.index(setting[tracks_i]) == 0 else "white"  # open markers: more tracks
            jitter = 2 ** (0.04 * (k - (len(settings) - 1) / 2))  # keeps error bars apart
            point = lambda c: (c["syncs"] * jitter, 0.0 if c["policy"] == "baseline" else c[metric]["gap"],
                               (c[metric].get("gap_ci") or 0.0) if c["policy"] != "baseline" else 0.0)
            line = sorted((c for c in cells if c["policy"] == "baseline" or c["interval"] is not None),
                          key=lambda c: c["syncs"])
            if line:
                xs, ys, es = zip(*(point(c) for c in line))
                joined = all(len(c["seeds"]) > 1 for c in line)  # a line through single seeds is no trend
                ax.errorbar(xs, ys, yerr=es, color=color, linestyle=style if joined else "none", marker="o", capsize=3,
                            markerfacecolor=face, label=cells[0]["label"])
            for c in cells:
                if c["policy"] == "baseline" or c["interval"] is not None:
                    continue
                x, y, e = point(c)
                marker = markers.get(c["policy"].split(":")[0], "x")
                ax.errorbar([x], [y], yerr=[e], color=color, marker=marker, linestyle="none", capsize=3,
                            markerfacecolor=face,
                            label=c["policy"].split(":")[0] if marker not in seen_markers else None)
                seen_markers.add(marker)
        ax.axhline(0.0, color="gray", linewidth=1)
        ax.axhspan(-stats["margin"], stats["margin"], color="gray", alpha=0.12, lw=0,
                   label=f"equivalence margin ±{stats['margin']:g}%")
        ax.set_xscale("log", base=2)
        ticks = sorted(plotted)  # only where a point is
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("all-reduces per forward pass (measured); lines: baseline, spd, grouped:G")
        ax.set_ylabel(f"{metric.replace('_', ' ')}: gap to baseline, % (paired over seeds)")
        bars = (f"error bars: {stats['level']:.0%} t-interval" + (", none for one seed" if intervals < gaps else "")
                if intervals else "one seed per cell: no interval, no error bars")
        ax.set_title(f"{metric.replace('_', ' ')} gap vs syncs ({bars})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def _policy_order(analysis):
    """The policies by syncs per forward, most first (ties by name, last first): the color order of the budget
    figures, the same from run to run (a set's order of strings is not)."""
    names = sorted({e["policy"] for e in analysis}, reverse=True)
    return sorted(names, key=lambda p: -max(e["syncs"] or 0 for e in analysis if e["policy"] == p))


def plot_budgets(analysis, path, margin, trunk_curves=None, other_schedule=()):
    """Gap to baseline (%) against training tokens (log2 axis), one panel per width: each policy's mean over
    seeds with its 95% t band and the seeds as points, the fitted mean line dashed, 0 and the margin.
    trunk_curves: {width label: {policy: [(tokens, mean gap, n seeds)]}}, drawn thin and dotted: the gap
    along the constant-rate trunk, which is not an end-of-schedule gap. other_schedule: budget_analysis entries
    of runs with a cosine schedule over each whole budget, drawn as hollow diamonds with their 95% t bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({e["label"] for e in analysis})
    fig, axes = plt.subplots(1, len(labels), figsize=(8 * len(labels), 5.5), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    policies = _policy_order(analysis)
    for ax, label in zip(axes[0], labels):
        for e in (e for e in analysis if e["label"] == label):
            color = colors[policies.index(e["policy"]) % len(colors)]
            tok = [b["tokens"] for b in e["budgets"]]
            gap = [b["gap"] for b in e["budgets"]]
            half = [b["gap_ci"] or 0.0 for b in e["budgets"]]
            ns = "/".join(str(b["n"]) for b in e["budgets"])
            ax.plot(tok, gap, "o-", color=color, lw=1.8, label=f"{e['policy']} ({e['syncs']} syncs; seeds {ns})")
            ax.fill_between(tok, [g - h for g, h in zip(gap, half)], [g + h for g, h in zip(gap, half)],
                            color=color, alpha=0.12, lw=0)
            for b in e["budgets"]:
                ax.scatter([b["tokens"]] * len(b["gaps"]), list(b["gaps"].values()), color=color, s=10, alpha=0.6)
            if "slope" in e:
                a = fmean(f["a"] for f in e["fits"].values())
                xs = [min(tok), max(tok)]
                ax.plot(xs, [a + e["slope"] * math.log2(x) for x in xs], "--", color=color, lw=1, alpha=0.8)
            curve = (trunk_curves or {}).get(label, {}).get(e["policy"])
            if curve:
                ax.plot([t for t, _, _ in curve], [g for _, g, _ in curve], ":", color=color, lw=1, alpha=0.7)
        for e in (e for e in other_schedule if e["label"] == label):
            color = colors[policies.index(e["policy"]) % len(colors)] if e["policy"] in policies else "black"
            ax.errorbar([b["tokens"] * 1.05 for b in e["budgets"]], [b["gap"] for b in e["budgets"]],
                        yerr=[b["gap_ci"] or 0.0 for b in e["budgets"]], fmt="D", mfc="none", color=color, ms=7,
                        capsize=3, lw=1, label=f"{e['policy']}: a cosine run of the whole budget")
        ax.axhline(0.0, color="black", lw=1)
        ax.axhspan(-margin, margin, color="gray", alpha=0.12, lw=0, label=f"±{margin:g}% margin")
        ax.set_xscale("log", base=2)
        ticks = sorted({b["tokens"] for e in analysis for b in e["budgets"]})
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_tokens(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("training budget, tokens (log scale)")
        ax.set_ylabel("final val loss: gap to baseline, % (paired over seeds)")
        title = f"{label}: gap at the end of each budget's schedule; band 95% t, dashed: fitted a + b·log2(tokens)"
        if trunk_curves and trunk_curves.get(label):
            title += "\ndotted: gap along the constant-lr trunk (not an end-of-schedule gap)"
        if any(e["label"] == label for e in other_schedule):
            title += "; hollow diamonds: cosine over the whole budget"
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


OVERLAPPED = {"ladder"}  # policies whose syncs are overlapped with compute rather than fewer


def _syncs_text(policy, syncs):
    """'1 sync', '12 syncs', '24 syncs, overlapped': a policy's all-reduces per forward pass in words."""
    text = "? syncs" if syncs is None else f"{syncs} sync{'' if syncs == 1 else 's'}"
    return text + (", overlapped" if policy in OVERLAPPED else "")


def plot_budget_headline(analysis, path, n_params=None, title=None, baseline_syncs=24):
    """The one-panel summary of plot_budgets: each policy's mean paired gap to the baseline (%) at the end of
    each budget with its 95% t band, against training tokens (log axis, ticked at the budgets, with tokens per
    parameter when n_params is given); labels say each policy's syncs per forward. No seeds, fits or trunks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    policies = _policy_order(analysis)
    ticks = sorted({b["tokens"] for e in analysis for b in e["budgets"]})
    ax.axhline(0.0, color="black", lw=1.2, zorder=1)
    lines = []
    short = lambda t: f"{t / 1e6:.1f}M" if t < 2e7 else fmt_tokens(t) if t >= 1e9 else f"{t / 1e6:.0f}M"
    for e in analysis:
        color = colors[policies.index(e["policy"]) % len(colors)]
        tok = [b["tokens"] for b in e["budgets"]]
        gap = [b["gap"] for b in e["budgets"]]
        half = [b["gap_ci"] or 0.0 for b in e["budgets"]]
        line, = ax.plot(tok, gap, "o-", color=color, lw=2.2, ms=6, zorder=3,
                        label=f"{e['policy']} ({_syncs_text(e['policy'], e['syncs'])}"
                              + (f"; run to {short(tok[-1])})" if tok[-1] < ticks[-1] else ")"))
        ax.fill_between(tok, [g - h for g, h in zip(gap, half)], [g + h for g, h in zip(gap, half)],
                        color=color, alpha=0.11, lw=0, zorder=2)
        lines.append((gap[-1], line))
    ax.set_xscale("log", base=2)
    ax.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
    ax.set_xticks(ticks)
    ax.set_xticklabels([short(t) + (f"\n{t / n_params:.2g} per param" if n_params else "") for t in ticks],
                       fontsize=10)
    ax.minorticks_off()
    ax.text(ticks[0] / 1.25, 0.0, f"baseline ({_syncs_text('baseline', baseline_syncs)})", va="bottom",
            ha="left", fontsize=9, zorder=4)
    ax.set_xlabel("training tokens (log scale)" + (" and tokens per parameter" if n_params else ""))
    ax.set_ylabel("val loss gap to baseline, %\n(below 0: lower loss, better)")
    ns = sorted({b["n"] for e in analysis for b in e["budgets"]})
    seeds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    ax.set_title((title or "Loss cost of fewer syncs against the training budget")
                 + f"\ngap at the end of each budget's run, mean of {seeds} paired seeds; shaded: 95% interval",
                 fontsize=11)
    ax.grid(alpha=0.3)
    ordered = [line for _, line in sorted(lines, key=lambda x: -x[0])]  # the legend in the lines' order at the right
    ax.legend(handles=ordered, title="policy (syncs per forward pass)", fontsize=9, title_fontsize=9,
              loc="upper left")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
