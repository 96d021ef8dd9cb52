"""The gap against the budget on data/debian_large, per width: the WSD branches' trend, its curvature test, its
crossover or bound, two checks of its predictions, and the headline figure; then the fit across widths.

Per width and policy, over the budgets B of the WSD branches (runs/), with x = log2(tokens of B):
    line       gap_s(x) = a_s + b_s x fitted for each seed s with two budgets or more (analysis/stats.py's
               budget_analysis); the slope b is the mean over seeds with its t-interval (n - 1 df), the
               crossover is Fieller's interval for the x where the mean line is 0;
    curvature  c_s of gap_s(x) = a_s + b_s x + c_s x^2 for each seed with three budgets or more, the t-test of
               "mean c = 0" over the seeds, Holm over the design's policies of the width (stats.curvature_tests).
               A line whose curvature is significant is not extrapolated: its prediction cells say so instead.
    bound      where no crossover is located: the largest budget at which the policy is ahead (or behind) after
               Holm, "still ahead at N tokens", and the largest budget measured; a curved line keeps this
               measured bound beside "not extrapolated".
Two checks of the line's 95% prediction interval for one seed's gap, mean +- t(n-1) sd sqrt(1 + 1/n):
    held out   the line refitted without the largest WSD budget predicts that budget; the measured mean gap
               there is inside the interval or not;
    cosine     the line predicts the width's cosine budget (2x the largest WSD budget), against the cosine
               runs' measured mean gap. The schedules differ (the WSD branches understated the 12/24-sync
               policies' late leads by about 0.7 points on data/debian_docs), so this is a check of the
               extrapolation's reach, not an equality.
Across widths (across_widths) the width is the unit of replication: the seeds of one width share its shape and
sweep, so the widths' scatter about the trend is what a new width would show, and every interval has k - 2 df
(k widths with WSD branches, 2 parameters fitted); below MIN_WIDTHS = 3 nothing is fitted and the one line says
which widths are there (a width with cosine runs only has no line and does not count). Per policy, with
u_w = log2 N_w (N: parameters) and r = log2 (tokens / N), the planner's surface (analysis/size_trend.py, 2):
    width line   gap_w(x) = a_w + b_w x, the line of width w's WSD cells' seed-mean gaps against x (the mean of
                 its seeds' lines where every seed has every budget);
    grid         every power of two of tokens per parameter inside the range that every width measured (none
                 there: the range's geometric middle), so no width's line is extrapolated in tokens;
    across       at each grid point, y_w = a_w + b_w (r + u_w) regressed on u by OLS, one value per width:
                 y = y_bar + c (u - u_bar); c, points per doubling of parameters, with its t(k - 2) interval and
                 the t-test of c = 0, Holm across the design's policies at each grid point; and the 95% prediction
                 interval for a new width's seed-mean gap at 2 N_largest, t(k - 2) s sqrt(1 + 1/k + (u - u_bar)^2
                 / S_uu) (an extrapolation in N, one doubling);
    held out     every width's line refitted without its largest WSD budget, the surface refitted from those
                 lines and asked for that budget at the width's own N (size_trend.heldout, the planner's check):
                 how many measured seed-mean gaps lie inside their 95% prediction intervals, overall and for the
                 policies with no significant bend at any width.
"""
import itertools
import math

from analysis.size_trend import gap_at, heldout, ols_slope_test, width_line
from analysis.stats import ALPHA, budget_analysis, curvature_tests, holm, seed_statistics

LEVEL = 0.95
POLICY_ORDER = ("ladder", "spd", "parallel", "grouped:4", "grouped:12")  # the design's policies besides the baseline
FAMILY = len(POLICY_ORDER)  # every Holm family here holds them all, the untested at p = 1 (analysis.stats.holm)
MIN_WIDTHS = 3  # a line through k widths leaves k - 2 df: three for the first interval
CLIP = 12.0  # the headline figure's y range, ± points


def _prediction(entry):
    """(mean, half-width) of the per-seed lines' 95% prediction for one seed at entry['target_tokens'], or None."""
    if entry.get("target_gap") is None or entry.get("target_pi") is None:
        return None
    return entry["target_gap"], entry["target_pi"]


def _bound(entry):
    """The largest budget at which the verdict is 'better' (and 'worse'), from the per-budget cells."""
    ahead = [b["tokens"] for b in entry["budgets"] if b.get("verdict") == "better"]
    behind = [b["tokens"] for b in entry["budgets"] if b.get("verdict") == "worse"]
    return (max(ahead) if ahead else None), (max(behind) if behind else None)


def width_trend(wsd_runs, cosine_runs, n_params, level=LEVEL):
    """The trend of one width: {policy: row} (see the module docstring)."""
    wsd_iters = sorted({r["final_iter"] for r in wsd_runs})
    tokens_per_iter = wsd_runs[0]["tokens_per_iter"]
    cosine_iters = sorted({r["final_iter"] for r in cosine_runs})
    cosine_tokens = cosine_iters[-1] * tokens_per_iter if cosine_iters else None
    stats = seed_statistics(wsd_runs, level, family_size=FAMILY)
    entries = budget_analysis(stats, target_tokens=cosine_tokens or wsd_iters[-1] * tokens_per_iter)
    curvature = curvature_tests(entries, level, FAMILY)
    # held out: the same fit without the largest WSD budget, predicting it
    top = wsd_iters[-1]
    held = {e["policy"]: e for e in budget_analysis(
        seed_statistics([r for r in wsd_runs if r["final_iter"] != top], level, family_size=FAMILY),
        target_tokens=top * tokens_per_iter)}
    cosine = {}
    if cosine_runs:
        for c in seed_statistics(cosine_runs, level, family_size=FAMILY)["cells"]:
            m = c["final_val"]
            if c["policy"] != "baseline" and "gap" in m:
                cosine[c["policy"]] = (m["gap"], m["gap_ci"], len(m["gaps"]))
    rows = {}
    for e in entries:
        policy = e["policy"]
        bend = curvature.get(policy)
        curved = bool(bend and bend["significant"])
        measured_top = next((b for b in e["budgets"] if b["iters"] == top), None)
        h = held.get(policy)
        held_pred = None if (h is None or curved) else _prediction(h)
        ahead, behind = _bound(e)
        cos_pred = None if curved else _prediction(e)
        rows[policy] = dict(
            syncs=e["syncs"], seeds=e.get("seeds_fitted"), slope=e.get("slope"), slope_ci=e.get("slope_ci"),
            trend=e.get("trend"), bend=bend, curved=curved,
            crossover_tokens=e.get("crossover_tokens"), crossover_interval=e.get("crossover_interval"),
            crossover_in_range=e.get("crossover_in_range"),
            ahead_to=ahead, behind_from=behind, largest=e["budgets"][-1]["tokens"],
            heldout=None if held_pred is None or measured_top is None else dict(
                tokens=top * tokens_per_iter, predicted=held_pred[0], pi=held_pred[1], measured=measured_top["gap"],
                inside=abs(measured_top["gap"] - held_pred[0]) <= held_pred[1]),
            cosine=None if policy not in cosine else dict(
                tokens=cosine_tokens, measured=cosine[policy][0], ci=cosine[policy][1], seeds=cosine[policy][2],
                predicted=None if cos_pred is None else cos_pred[0], pi=None if cos_pred is None else cos_pred[1]),
            budgets=[dict(tokens=b["tokens"], per_param=b["tokens"] / n_params, gap=b["gap"], ci=b["gap_ci"],
                          n=b["n"], verdict=b.get("verdict")) for b in e["budgets"]])
        c = rows[policy]["cosine"]
        if c and c["predicted"] is not None:
            c["inside"] = abs(c["measured"] - c["predicted"]) <= c["pi"]
    return rows


def tokens_text(t):
    return f"{t / 1e9:.2f}B" if t >= 1e9 else f"{t / 1e6:.1f}M"


def render_trend(trends, order, unsteady=None):
    """The answer.md section of the trend: one table per width, and under it the WSD budgets whose branch trained
    unsteadily (unsteady: plot_headline's map), since the line through such a point carries the instability."""
    unsteady = unsteady or {}
    lines = ["## The gap against the budget (WSD branches), per width", "",
             "From experiments/large_budgets/trend.py (its docstring states the model and the tests). Slope: points "
             "per doubling of tokens, mean over seeds ± 95% t half-width. Bend: the quadratic term, points per "
             "doubling², with its Holm-adjusted p over the width's five policies (those not tested yet at p = 1); a "
             "significant bend stops the line's extrapolation. Held out: the line without the largest WSD budget, its "
             "95% prediction interval for one seed at that budget, and the measured mean gap. Cosine: the line's "
             "prediction at the cosine budget against the cosine runs' measured mean gap.", ""]
    for width, (rows, n_params) in sorted(trends.items()):
        lines += [f"### Width {width} ({n_params / 1e6:.1f}M parameters)", "",
                  "| policy | syncs | slope (95% CI, seeds) | bend (95% CI), Holm p | crossover or bound | held out: "
                  "predicted (95% PI) vs measured | cosine: predicted (95% PI) vs measured |",
                  "|---|---:|---|---|---|---|---|"]
        for policy in sorted(rows, key=lambda p: order.index(p) if p in order else 99):
            r = rows[policy]
            slope = "—" if r["slope"] is None else (f"{r['slope']:+.2f}" + (
                f" ± {r['slope_ci']:.2f}" if r["slope_ci"] is not None else "") + f" ({r['seeds']})")
            b = r["bend"]
            bend = "not tested (fewer than 2 seeds with 3 budgets)" if b is None else (
                f"{b['c']:+.2f} ± {b['ci']:.2f}, p {b['p_holm']:.3f}" + (" **curved**" if b["significant"] else ""))
            lines.append(f"| {policy} | {r['syncs']} | {slope} | {bend} | {cross_text(r)} | {heldout_text(r)} | "
                         f"{cosine_text(r)} |")
        inside = [r["heldout"]["inside"] for r in rows.values() if r["heldout"]]
        cos = [r["cosine"]["inside"] for r in rows.values() if r["cosine"] and "inside" in r["cosine"]]
        lines += ["", f"Held-out truths inside their 95% prediction intervals: {sum(inside)} of {len(inside)}; cosine "
                      f"measurements inside the WSD lines' intervals: {sum(cos)} of {len(cos)}.", ""]
        marked = sorted((order.index(p) if p in order else 99, t, p, ratio)
                        for (w, p, schedule, t), ratio in unsteady.items() if w == width and schedule == "wsd")
        if marked:
            lines += ["WSD budgets whose branch trained unsteadily (late median gradient norm over the baseline's; the "
                      "gap and the line through it include the instability): "
                      + "; ".join(f"{p} at {tokens_text(t)} (×{ratio:.1f})" for _, t, p, ratio in marked) + ".", ""]
    return "\n".join(lines)


def _holm_bound(r):
    parts = []
    if r["ahead_to"]:
        parts.append(f"ahead (Holm) up to {tokens_text(r['ahead_to'])}")
    if r["behind_from"]:
        parts.append(f"behind (Holm) at {tokens_text(r['behind_from'])}")
    return parts


def cross_text(r):
    if r["curved"]:
        # the per-budget verdicts are measurements, not the line's: they stand where the line is withdrawn
        return "; ".join(["not extrapolated: curvature"] + _holm_bound(r))
    if r["crossover_interval"] is not None and r["crossover_in_range"]:
        lo, hi = r["crossover_interval"]
        # Fieller's bounds run off to absurd token counts when the slope is barely told from 0: say so instead
        far = 100 * r["largest"]
        hi_text = tokens_text(hi) if hi <= far else f"beyond {tokens_text(far)}"
        lo_text = tokens_text(lo) if lo >= r["largest"] / 1e4 else "below the smallest budget"
        return f"crosses 0 at {tokens_text(r['crossover_tokens'])} [{lo_text}, {hi_text}]"
    if r["seeds"] < 2:  # Fieller needs a spread of lines: one seed's line has a point, never an interval
        x0 = r["crossover_tokens"]
        where = "none" if x0 is None else tokens_text(x0) + ("" if r["crossover_in_range"] else ", outside the budgets")
        return f"one seed, no interval: its line crosses 0 at {where} (budgets to {tokens_text(r['largest'])})"
    return "; ".join(_holm_bound(r) + [f"no crossover located to {tokens_text(r['largest'])}"])


def heldout_text(r):
    h = r["heldout"]
    if h is None:
        return "—" if not r["curved"] else "not predicted: curvature"
    return (f"{h['predicted']:+.2f} ± {h['pi']:.2f} vs {h['measured']:+.2f} at {tokens_text(h['tokens'])}: "
            + ("inside" if h["inside"] else "**outside**"))


def cosine_text(r):
    c = r["cosine"]
    if c is None:
        return "—"
    measured = f"{c['measured']:+.2f}" + (f" ± {c['ci']:.2f}" if c["ci"] is not None else "") + f" ({c['seeds']})"
    if c["predicted"] is None:
        return f"not predicted{': curvature' if r['curved'] else ''} vs {measured}"
    return (f"{c['predicted']:+.2f} ± {c['pi']:.2f} vs {measured} at {tokens_text(c['tokens'])}: "
            + ("inside" if c["inside"] else "**outside**"))


def seeds_label(counts, one="no band"):
    """A legend's seed count for one line style over the panels, {policy: seeds}: the most common count, then each
    policy that has another ("2 seeds; ladder 3"), so that one entry a style stays exact while a grid is part-run."""
    values = list(counts.values())
    common = max(sorted(set(values)), key=values.count)
    text = f"{common} seed{'s' if common > 1 else ', ' + one if one else ''}"
    return "; ".join([text] + [f"{policy} {n}" for policy, n in counts.items() if n != common])


def plot_headline(trends, order, path, cosine_only=(), unsteady=None, checks=()):
    """Gap to baseline against tokens per parameter: one panel per policy, one line per width (the WSD branches'
    mean over seeds with its 95% t band), the cosine runs as squares with their 95% interval. cosine_only: the
    cosine cells (report.py's rows of metric val) of widths without WSD branches yet, drawn as squares alone (a
    single seed has no interval). unsteady: {(width, policy, schedule, tokens): late grad norm over the baseline's}
    of the cells to mark as unsteadily trained (written beside their marker, a WSD budget's or a cosine run's).
    checks: report.py's check cells at the check's setting (with tokens_per_param), drawn as triangles just left of
    the sweep's marker: another learning rate, or the cosine schedule over a WSD budget."""
    unsteady = unsteady or {}
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from training.config import save_figure

    policies = [p for p in order if any(p in rows for rows, _ in trends.values())
                or any(c["policy"] == p for c in cosine_only)]
    fig, axes = plt.subplots(1, len(policies), figsize=(3.3 * len(policies), 4.6), sharey=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    check_colors = {}  # one color a check for every panel, after the widths' colors
    for c in checks:
        check_colors.setdefault(c["check"], colors[(len(trends) + len({x["width"] for x in cosine_only})
                                                    + len(check_colors)) % len(colors)])
    wsd_seeds = {width: seeds_label({p: r["seeds"] for p, r in rows.items() if p in policies})
                 for width, (rows, _) in trends.items()}
    cosine_seeds = {width: seeds_label({p: r["cosine"]["seeds"] for p, r in rows.items()
                                        if p in policies and r["cosine"]}, one="")
                    for width, (rows, _) in trends.items() if any(r["cosine"] for r in rows.values())}
    check_seeds = {check: seeds_label({c["policy"]: len(c["seeds"]) for c in checks if c["check"] == check}, one="")
                   for check in check_colors}
    for ax, policy in zip(axes[0], policies):
        ax.axhline(0, color="black", lw=1)
        for k, (width, (rows, n_params)) in enumerate(sorted(trends.items())):
            r = rows.get(policy)
            if r is None:
                continue
            color = colors[k % len(colors)]
            x = [b["per_param"] for b in r["budgets"]]
            y = [b["gap"] for b in r["budgets"]]
            h = [b["ci"] or 0.0 for b in r["budgets"]]
            ax.plot(x, y, "o-", color=color, lw=2, ms=5, label=f"width {width}, WSD ({wsd_seeds[width]})")
            for b, xi, yi in zip(r["budgets"], x, y):
                # a mean past the clip: its value at the edge, so the line's course stays told
                label = f"{yi:+.0f}" if abs(yi) > CLIP else ""
                ratio = unsteady.get((width, policy, "wsd", b["tokens"]))
                label += f" ×{ratio:.0f}" if ratio else ""
                if label:
                    ax.annotate(label.strip(), (xi, max(-CLIP, min(CLIP, yi))), textcoords="offset points",
                                xytext=(0, 4 if yi < CLIP - 2 else -10), ha="center", fontsize=7, color=color,
                                bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=0.5))  # over its line
            ax.fill_between(x, [a - b for a, b in zip(y, h)], [a + b for a, b in zip(y, h)], color=color,
                            alpha=0.15, lw=0)
            c = r["cosine"]
            if c is not None:
                ax.errorbar([c["tokens"] / n_params], [c["measured"]], yerr=[c["ci"] or 0.0], fmt="s", color=color,
                            mfc="white", ms=7, capsize=3, label=f"width {width}, cosine ({cosine_seeds[width]})")
                ratio = unsteady.get((width, policy, "cosine", c["tokens"]))
                if ratio:  # under a marker at the top edge: above it, the label ran into the panel's title
                    y_mark = max(-CLIP, min(CLIP, c["measured"]))
                    ax.annotate(f"×{ratio:.0f}", (c["tokens"] / n_params, y_mark), textcoords="offset points",
                                xytext=(-8, 7 if y_mark < CLIP - 2 else -12), ha="right", fontsize=7, color=color)
        for k, width in enumerate(sorted({c["width"] for c in cosine_only}), start=len(trends)):
            # one legend entry a width: while its policies have different seed counts, each marker names its own
            counts = sorted({len(c["seeds"]) for c in cosine_only if c["width"] == width})
            seeds = (f"{counts[0]} seed{'' if counts[0] == 1 else 's'}{', no interval' if counts[0] == 1 else ''}"
                     if len(counts) == 1 else f"{counts[0]}-{counts[-1]} seeds, n= at each marker")
            for c in (c for c in cosine_only if c["width"] == width and c["policy"] == policy):
                ax.errorbar([c["tokens_per_param"]], [c["gap"]], yerr=[c["gap_ci95"] or 0.0], fmt="D",
                            color=colors[k % len(colors)], mfc="white", ms=7, capsize=3,
                            label=f"width {width}, cosine ({seeds})")
                # labelled at the marker, not as a tick: it would crowd the WSD budgets' ticks; kept short, as a
                # longer one ran into the next width's labels
                label = f"{c['tokens_per_param']:.2g}" + (f" n={len(c['seeds'])}" if len(counts) > 1 else "")
                ratio = unsteady.get((width, policy, "cosine", c.get("tokens")))
                if ratio:
                    label += f" ×{ratio:.0f}"
                ax.annotate(label, (c["tokens_per_param"], c["gap"]), textcoords="offset points", xytext=(7, 4),
                            fontsize=7, color=colors[k % len(colors)],
                            bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=0.5))  # over the 0 line
        for c in (c for c in checks if c["policy"] == policy):
            color = check_colors[c["check"]]
            lr = f"{c['lr']:.0e}".replace("e-0", "e-")  # 3e-4, as the configs write it
            setting = "cosine over a WSD budget" if c["varied"] == "schedule" else f"cosine at learning rate {lr}"
            # left of the sweep's marker: to its right stand the next width's WSD budgets
            ax.errorbar([c["tokens_per_param"] / 1.15], [c["gap"]], yerr=[c["gap_ci95"] or 0.0], fmt="^", color=color,
                        mfc="white", ms=7, capsize=3, elinewidth=1,
                        label=f"width {c['width']}, {setting} ({check_seeds[c['check']]})")
        ax.set_xscale("log", base=2)
        # powers of two: each width's own budgets sit at other tokens per parameter, and their labels ran together
        xs = [b["per_param"] for rows, _ in trends.values() if policy in rows for b in rows[policy]["budgets"]]
        xs += [rows[policy]["cosine"]["tokens"] / n for rows, n in trends.values()
               if policy in rows and rows[policy]["cosine"]]
        xs += [c["tokens_per_param"] for c in cosine_only if c["policy"] == policy] or [1.0]
        ticks = [2.0 ** k for k in range(math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs))) + 1)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"1/{round(1 / t)}" if t < 1 else f"{t:.0f}" for t in ticks], fontsize=8)
        ax.minorticks_off()
        ax.set_ylim(-CLIP, CLIP)  # a 2-seed band at one budget spans ±28 points: clipped, so the means stay readable
        syncs = next(itertools.chain((rows[policy]["syncs"] for rows, _ in trends.values() if policy in rows),
                                     (c["syncs"] for c in cosine_only if c["policy"] == policy)))
        ax.set_title(f"{policy} ({syncs} sync{'' if syncs == 1 else 's'} per forward)", fontsize=10)
        ax.set_xlabel("tokens per parameter")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("val loss gap to baseline (24 syncs), %\nlower is better")
    legend = {}  # one legend under the panels: inside them it hid points
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    # at most three entries a row: six in one row ran past the figure's edges
    rows = -(-len(legend) // 3)
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=min(len(legend), 3), fontsize=9, frameon=False)
    fig.suptitle("Loss cost of fewer syncs against the training budget on data/debian_large: mean of paired seeds "
                 f"(counts in the legends), 95% t bands (clipped at ±{CLIP:.0f}); lower is better\n"
                 "×N beside a marker: trained unsteadily, its late median gradient norm N times the baseline's",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.035 + 0.045 * rows, 1, 1))
    save_figure(fig, path)
    plt.close(fig)


def common_grid(lines):
    """The tokens per parameter at which every width's line is evaluated: the powers of two inside the range that
    every width measured (no width's line is extrapolated in tokens), or the range's geometric middle where it holds
    none; [] where the ranges do not overlap."""
    lo = max(line["tokens_per_param"][0] for line in lines)
    hi = min(line["tokens_per_param"][1] for line in lines)
    if lo > hi:
        return []
    # a budget at exactly 2^k tokens per parameter must not drop out to rounding in log2
    grid = [2.0 ** k for k in range(math.ceil(math.log2(lo) - 1e-9), math.floor(math.log2(hi) + 1e-9) + 1)]
    return grid or [math.sqrt(lo * hi)]


def _forms(trends, cosine_only):
    """'256 (WSD branches and cosine); 768: cosine runs only, not counted': which widths are there, in what form."""
    have = [f"{w} (WSD branches{' and cosine' if any(r['cosine'] for r in rows.values()) else ''})"
            for w, (rows, _) in sorted(trends.items())]
    text = ", ".join(have) if have else "none"
    if cosine_only:
        text += f"; {', '.join(map(str, sorted(cosine_only)))}: cosine runs only, not counted"
    return text


def across_widths(trends, cosine_only=(), level=LEVEL):
    """The fit across widths (module docstring, across), from width_trend's rows: trends {width: ({policy: row},
    n_params)}, cosine_only the widths with cosine runs but no WSD branches. Below MIN_WIDTHS widths with WSD
    branches: dict(reason, widths, cosine_only) and nothing fitted."""
    widths = sorted(trends, key=lambda w: trends[w][1])
    if len(widths) < MIN_WIDTHS:
        return dict(reason=f"needs {MIN_WIDTHS} widths with WSD branches; have {len(widths)}: "
                           f"{_forms(trends, cosine_only)}", widths=widths, cosine_only=sorted(cosine_only))
    new_params = 2 * trends[widths[-1]][1]
    policies = {}
    for policy in dict.fromkeys(p for w in widths for p in trends[w][0]):
        items = [(dict(width=w, n_params=trends[w][1]), trends[w][0][policy]) for w in widths
                 if policy in trends[w][0]]
        lines = [line for line in (width_line(w["width"], w["n_params"], row["budgets"]) for w, row in items) if line]
        entry = dict(syncs=items[0][1]["syncs"], widths=[line["width"] for line in lines],
                     curved=[w["width"] for w, row in items if row["curved"]],
                     lines=[dict(width=line["width"], n_params=line["n_params"], a=line["a"], b=line["b"],
                                 tokens_per_param=line["tokens_per_param"]) for line in lines], grid=[], heldout=[])
        policies[policy] = entry
        if len(lines) < MIN_WIDTHS:
            entry["reason"] = f"lines at {len(lines)} widths"
            continue
        us = [line["u"] for line in lines]
        for r in common_grid(lines):
            ys = [line["a"] + line["b"] * (math.log2(r) + line["u"]) for line in lines]
            test = ols_slope_test(us, ys, level)
            new = gap_at(lines, new_params, r * new_params, level)
            entry["grid"].append(dict(tokens_per_param=r, gaps=ys, per_doubling=test["slope"], ci=test["ci"],
                                      df=test["df"], p=test["p"], new_gap=new["gap"], new_pi=new["pi"]))
        entry["heldout"] = heldout(items, level)
    # one family per tokens per parameter: the policies' slope tests there (the grid points of one policy share its
    # lines, so they are not separate families' worth of evidence, and are not corrected across); as large as the
    # design's policies, as in every cell
    families = {}
    for entry in policies.values():
        for g in entry["grid"]:
            if g["p"] is not None:
                families.setdefault(g["tokens_per_param"], []).append(g)
    for family in families.values():
        for g, adjusted in zip(family, holm([g["p"] for g in family], FAMILY)):
            g.update(p_holm=adjusted, told_from_0=adjusted < ALPHA)
    held = [(h, bool(e["curved"])) for e in policies.values() for h in e["heldout"] if h["inside"] is not None]
    return dict(level=level, widths=widths, n_params=[trends[w][1] for w in widths], cosine_only=sorted(cosine_only),
                new_params=new_params, policies=policies,
                heldout_inside=[sum(h["inside"] for h, _ in held), len(held)],
                heldout_inside_straight=[sum(h["inside"] for h, c in held if not c), sum(not c for _, c in held)])


def prediction_bias(heldout):
    """How many held-out predictions ('gap') fall below their truths, and the range of prediction minus truth: a
    coverage count says nothing of a line that misses to one side every time with wide intervals."""
    misses = [h["gap"] - h["truth"] for h in heldout]
    if not misses:
        return ""
    below = sum(m < 0 for m in misses)
    return (f"Predictions below their truths: {below} of {len(misses)} (prediction minus truth {min(misses):+.2f} to "
            f"{max(misses):+.2f} points; the policies of a width share its baseline, so they are not independent).")


def render_across(across, order):
    """The answer.md section of the fit across widths: one line while too few widths, else the slope table and the
    held-out table."""
    lines = ["## Across widths (the width is the unit)", ""]
    if "reason" in across:
        return "\n".join(lines + [f"Not fitted: {across['reason']}.", ""])
    widths, new = across["widths"], across["new_params"]
    lines += ["From experiments/large_budgets/trend.py's across_widths (its docstring states the model). Per policy, "
              "each width's line of its WSD cells' seed-mean gaps against log2 tokens, evaluated at the tokens per "
              "parameter every width measured; those values (one a width) regressed on log2 N: points per doubling "
              "of parameters, 95% t-interval with widths − 2 df, Holm p over the design's five policies at each "
              "tokens per parameter; and the 95% prediction interval for a new width's seed-mean gap at "
              f"N = {new / 1e6:.1f}M (one doubling of N past the largest width: an extrapolation in N, not in tokens per parameter).", "",
              "| policy | syncs | tokens/param | " + " | ".join(f"width {w}" for w in widths)
              + " | per doubling of N (95% CI, df) | Holm p | new width: predicted (95% PI) |",
              "|---|---:|---:|" + "---:|" * len(widths) + "---|---:|---|"]
    rank = lambda p: order.index(p) if p in order else 99  # noqa: E731
    policies = sorted(across["policies"].items(), key=lambda kv: rank(kv[0]))
    for policy, e in policies:
        if "reason" in e:
            lines.append(f"| {policy} | {e['syncs']} | not fitted: {e['reason']} |" + " |" * (len(widths) + 3))
            continue
        if not e["grid"]:
            lines.append(f"| {policy} | {e['syncs']} | no tokens per parameter common to its widths |"
                         + " |" * (len(widths) + 3))
        for g in e["grid"]:
            at = dict(zip(e["widths"], g["gaps"]))
            gaps = " | ".join(f"{at[w]:+.2f}" if w in at else "—" for w in widths)
            slope = f"{g['per_doubling']:+.2f}" + ("" if g["ci"] is None else f" ± {g['ci']:.2f}") + f" ({g['df']})"
            p = "" if g.get("p_holm") is None else (f"{g['p_holm']:.3f}"
                                                     + (" **told from 0**" if g["told_from_0"] else ""))
            pred = f"{g['new_gap']:+.2f}" + ("" if g["new_pi"] is None else f" ± {g['new_pi']:.2f}")
            lines.append(f"| {policy} | {e['syncs']} | {g['tokens_per_param']:.2g} | {gaps} | {slope} | {p} | {pred} |")
    lines += ["", "Held out: every width's line refitted without its largest WSD budget, the fit across widths redone "
              "from those lines and asked for that budget at each width's own N (analysis/size_trend.py's heldout, "
              "as the planner's check).", "",
              "| policy | width | held-out budget: tokens (per param) | measured | predicted (95% PI) | inside? | "
              "bends at some width |", "|---|---:|---|---:|---|---|---|"]
    for policy, e in policies:
        for h in e["heldout"]:
            pred = f"{h['gap']:+.2f}" + (f" ± {h['pi']:.2f}" if h["pi"] is not None
                                         else f" (no interval: {h['df']} df)")
            inside = "—" if h["inside"] is None else "inside" if h["inside"] else "**outside**"
            lines.append(f"| {policy} | {h['width']} | {tokens_text(h['tokens'])} ({h['tokens_per_param']:.2g}) | "
                         f"{h['truth']:+.2f} | {pred} | {inside} | {'yes' if e['curved'] else 'no'} |")
    (k, n), (ks, ns) = across["heldout_inside"], across["heldout_inside_straight"]
    lines += ["", f"Held-out truths inside their 95% prediction intervals: {k} of {n} ({ks} of {ns} for the policies "
                  "with no significant bend at any width). " + prediction_bias([h for _, e in policies
                                                                                for h in e["heldout"]]), ""]
    return "\n".join(lines)
