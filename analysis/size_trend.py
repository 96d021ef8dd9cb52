"""The loss cost of fewer syncs against model size: budget_analysis (analysis/stats.py) of each width's budget
sweep, combined across widths. Written by `python -m experiments.docs_study.run sizes`; read by analysis/plan.py.

Notation. N: parameters as the trainer counts them (model.gpt.GPT.get_num_params: every parameter but the position
embedding, the 'NNN.NNM parameters' of each run's log.txt; gpt_params below for a shape no run logged);
u = log2 N; x = log2 T, T the training tokens; r = log2 (T / N), tokens per parameter.

Across widths the width is the unit of replication: the seeds of one width share its shape and sweep, so the
widths' scatter about a trend, not the seeds', is what a new size would show. Every fit across widths below is
fitted to one value per width (per budget cell: the mean over its seeds) and its interval has k - p degrees of
freedom, k widths and p parameters fitted; where k - p < 1 no interval is given and the tables say so.

0. Curvature, tested before any extrapolation (stats.curvature_tests): per width and seed the bend c of
   gap = a + b x + c x^2; the t-test of mean c = 0 over the seeds, Holm across the width's policies. A policy with
   a significant bend at any width is not extrapolated along a straight line past the measured tokens per
   parameter: its width crossovers past the measured budgets are dropped, and the planner prints the measured
   range and "not extrapolated: curvature" instead of a number.
1. The crossover against size. At one width the crossover is where the seeds' mean line is 0,
   x0 = -mean(a) / mean(b), located only where Fieller's 95% interval (compare.fieller) is bounded, i.e. where the
   slope is told from 0; its variance by the delta method, v = (s_aa + 2 x0 s_ab + x0^2 s_bb) / (n mean(b)^2). Model:
       x0(N) = alpha + c u,   i.e. crossover tokens proportional to N^c,
   fitted by weighted least squares over the widths whose crossover is located (weights 1/v), with every variance
   multiplied by the Birge ratio R = sum_i (r_i^2 / v_i) / (k - 2) where it exceeds 1 (the widths scatter more than
   their v say), and k - 2 degrees of freedom. c's 95% interval: "not told from 0" where it holds 0, "not told from
   1" where it holds 1 (the crossover does not move in tokens per parameter). The prediction interval at a new size
   adds one new width's variance (the mean v of the fitted widths, times R). With one located width c is not fitted:
   c is assumed 0 and the interval is that width's Fieller interval.
2. The gap at any (N, T) (the planner's surface). Per width the line of its budget cells' seed-mean gaps against
   x, gap_w = a_w + b_w x (the mean of the seeds' lines where every seed has every budget), evaluated at the asked
   tokens per parameter, y_w = a_w + b_w (r + u_w); the k values regressed on u by ordinary least squares,
       gap(r, u) = y_bar + slope (u - u_bar),
   with the 95% prediction interval for a new width's seed-mean gap, t(k - 2) s sqrt(1 + 1/k + (u - u_bar)^2 / S_uu).
   With one width the size term is not measured: it is assumed 0 (the gap follows tokens per parameter), and there is
   no interval (0 df), as with two widths.
3. The held-out check of 2 (heldout): the surface refitted without each width's largest budget (every width at
   once), the held-out cells predicted at their own (N, T); coverage: how many truths lie in their intervals.
4. The slope per doubling of tokens against size: the widths' b_w regressed on u (a confidence interval for the
   mean slope at N, k - 2 df).
5. Parallel Track's question (arXiv 2602.07306: the cost of fewer syncs shrinks as models grow), answered at the
   measured budgets: at each budget in iterations (nearly the same tokens per parameter at every width), the
   widths' seed-mean gaps regressed on u: points per doubling of parameters, with its t(k - 2) interval.
"""
import functools
import math
import statistics

from analysis.stats import curvature_tests, fieller, fmean, line_fit, t_cdf, t_quantile
from analysis.tables import fmt_ci, fmt_tokens, format_table

EXTRAPOLATE = {"1.5b": "xl", "70b": "70b"}  # labelled extrapolations: bench/steptime/shapes.py's SHAPES


@functools.lru_cache(maxsize=None)
def _t(level, df):
    """The two-sided t quantile at `level` (cached: the planner's search evaluates gap_at a few thousand times)."""
    return t_quantile(0.5 + level / 2, df)


def gpt_params(n_layer, n_embd, vocab):
    """get_num_params of the study's GPT (bias=False, tied head): per layer two LayerNorm weights (2C), attention
    (4C^2) and MLP (8C^2); the token embedding (V C) and the final LayerNorm (C)."""
    return n_layer * (12 * n_embd ** 2 + 2 * n_embd) + n_embd + vocab * n_embd


def target_sizes():
    """{label: N} of the extrapolation targets, counted as the trainer counts."""
    from bench.steptime import SHAPES
    return {label: gpt_params(SHAPES[s][0], SHAPES[s][2], SHAPES[s][3]) for label, s in EXTRAPOLATE.items()}


def width_crossover(fits, level=0.95):
    """One width's crossover from its seeds' (a, b) fits: dict(x, var, df, lo, hi) in log2 tokens (lo, hi: Fieller's
    interval), None where that interval is unbounded (the slope not told from 0: no crossover located)."""
    x0, interval, kind = fieller(fits, level)
    if kind != "bounded" or x0 is None:
        return None
    n = len(fits)
    a, b = fmean(f[0] for f in fits), fmean(f[1] for f in fits)
    saa = statistics.variance([f[0] for f in fits])
    sbb = statistics.variance([f[1] for f in fits])
    sab = sum((f[0] - a) * (f[1] - b) for f in fits) / (n - 1)
    return dict(x=x0, var=(saa + 2 * x0 * sab + x0 * x0 * sbb) / (n * b * b), df=n - 1, lo=interval[0], hi=interval[1])


def _wls(points):
    """Weighted least squares of x on u over points [{u, x, var, df}]: the sums the estimates and intervals need."""
    w = [1.0 / p["var"] for p in points]
    W = sum(w)
    ub = sum(wi * p["u"] for wi, p in zip(w, points)) / W
    xb = sum(wi * p["x"] for wi, p in zip(w, points)) / W
    suu = sum(wi * (p["u"] - ub) ** 2 for wi, p in zip(w, points))
    c = sum(wi * (p["u"] - ub) * p["x"] for wi, p in zip(w, points)) / suu
    k = len(points)
    q = sum(wi * (p["x"] - xb - c * (p["u"] - ub)) ** 2 for wi, p in zip(w, points))
    return dict(w=w, W=W, ub=ub, xb=xb, suu=suu, c=c, k=k, birge=max(1.0, q / (k - 2)) if k > 2 else 1.0)


def _combination(points, lam, s, extra=()):
    """(variance, df) of sum_i lam_i x_i plus independent extra variances, the width the unit (module docstring, 1):
    times the Birge ratio where the widths scatter more than their variances say, with k - 2 df."""
    var = sum(l * l * p["var"] for l, p in zip(lam, points)) + sum(extra)
    return s["birge"] * var, s["k"] - 2


def crossover_fit(points, level=0.95):
    """log2 crossover tokens = alpha + c log2 N over the located widths [{u, x, var}]; None below two. With two
    widths (0 df) c has no interval: c_ci and the verdicts on it are None."""
    if len(points) < 2:
        return None
    s = _wls(points)
    lam = [wi * (p["u"] - s["ub"]) / s["suu"] for wi, p in zip(s["w"], points)]
    var, df = _combination(points, lam, s)
    half = _t(level, df) * math.sqrt(var) if df >= 1 else None
    return dict(c=s["c"], c_ci=half, alpha=s["xb"] - s["c"] * s["ub"], df=df, birge=s["birge"], widths=len(points),
                c_told_from_0=None if half is None else abs(s["c"]) > half,
                c_told_from_1=None if half is None else abs(s["c"] - 1) > half)


def crossover_at(points, n_params, level=0.95):
    """(log2 tokens, lo, hi, how) of the crossover at N: the fitted line with its prediction interval for one new
    width measured as these were (lo, hi None below 1 df); with one point, that width's crossover and Fieller
    interval (c assumed 0)."""
    if len(points) == 1:
        p = points[0]
        return p["x"], p["lo"], p["hi"], "c assumed 0 (one width): that width's crossover and Fieller interval"
    s = _wls(points)
    d = math.log2(n_params) - s["ub"]
    lam = [wi / s["W"] + d * wi * (p["u"] - s["ub"]) / s["suu"] for wi, p in zip(s["w"], points)]
    var, df = _combination(points, lam, s, [fmean(p["var"] for p in points)])  # one more width, measured alike
    x = s["xb"] + s["c"] * d
    if df < 1:
        return x, None, None, f"fitted line through {s['k']} widths: {df} df, no interval"
    half = _t(level, df) * math.sqrt(var)
    return x, x - half, x + half, f"fitted line, 95% prediction interval ({df} df)"


def regress_at(us, ys, u0, level=0.95, new=True):
    """OLS of y on u, one (u, y) per width, at u0: (value, half-width or None below 1 df, df, size_measured). new: the
    prediction interval of one more width; else the interval of the mean. One width: its value, the size term
    assumed 0."""
    k = len(ys)
    mean, ub = fmean(ys), fmean(us)
    suu = sum((u - ub) ** 2 for u in us)
    if k == 1 or suu == 0:
        return mean, None, 0, False
    slope = sum((u - ub) * (y - mean) for u, y in zip(us, ys)) / suu
    value = mean + slope * (u0 - ub)
    if k < 3:
        return value, None, k - 2, True
    s2 = sum((y - mean - slope * (u - ub)) ** 2 for u, y in zip(us, ys)) / (k - 2)
    half = _t(level, k - 2) * math.sqrt(s2 * ((1 if new else 0) + 1 / k + (u0 - ub) ** 2 / suu))
    return value, half, k - 2, True


def ols_slope_test(us, ys, level=0.95):
    """OLS of y on u, one (u, y) per width: dict(slope, ci, df, p), ci its t(k - 2) half-width and p the two-sided
    t-test of slope = 0 (k - 2 df), both None below 3 points; None for fewer than two distinct u."""
    ub, yb = fmean(us), fmean(ys)
    suu = sum((u - ub) ** 2 for u in us)
    if suu == 0:
        return None
    slope = sum((u - ub) * (y - yb) for u, y in zip(us, ys)) / suu
    df = len(us) - 2
    if df < 1:
        return dict(slope=slope, ci=None, df=df, p=None)
    se = math.sqrt(sum((y - yb - slope * (u - ub)) ** 2 for u, y in zip(us, ys)) / df / suu)
    p = float(slope == 0) if se == 0 else 2.0 * (1.0 - t_cdf(abs(slope) / se, df))
    return dict(slope=slope, ci=_t(level, df) * se, df=df, p=p)


def ols_slope(us, ys, level=0.95):
    """(slope of y on u, its t(k - 2) half-width or None below 3 points): None for fewer than two distinct u."""
    f = ols_slope_test(us, ys, level)
    return None if f is None else (f["slope"], f["ci"])


def width_line(width, n_params, budgets):
    """One width's line of its budget cells' seed-mean gaps against log2 tokens: dict(width, n_params, u, a, b,
    tokens_per_param = [lowest, highest]); None below two budgets."""
    xs = [math.log2(b["tokens"]) for b in budgets]
    if len(set(xs)) < 2:
        return None
    a, b = line_fit(xs, [b["gap"] for b in budgets])
    tpp = [b["tokens"] / n_params for b in budgets]
    return dict(width=width, n_params=n_params, u=math.log2(n_params), a=a, b=b, tokens_per_param=[min(tpp), max(tpp)])


def gap_at(lines, n_params, tokens, level=0.95):
    """The gap (%) of a policy at N parameters and T tokens from its width lines (module docstring, 2): dict(gap, pi,
    df, size_measured); pi, the half-width of the prediction interval for a new width's seed-mean gap, None below
    1 df."""
    r = math.log2(tokens / n_params)
    value, half, df, measured = regress_at([l["u"] for l in lines], [l["a"] + l["b"] * (r + l["u"]) for l in lines],
                                           math.log2(n_params), level)
    return dict(gap=value, pi=half, df=df, size_measured=measured)


def slope_at(lines, n_params, level=0.95):
    """The mean slope (points per doubling of tokens) at N with its confidence interval: dict(slope, ci, df, ...)."""
    value, half, df, measured = regress_at([l["u"] for l in lines], [l["b"] for l in lines], math.log2(n_params),
                                           level, new=False)
    return dict(slope=value, ci=half, df=df, size_measured=measured)


def policy_fit(items, targets, curvature, level=0.95):
    """One policy across widths, items [(width dict, its budget_analysis entry)], smallest first, curvature {width:
    its curvature test or None}: per width its slope, bend and crossover, the width lines, the crossover fit, the
    extrapolations and the gap against size per budget."""
    rows, points, lines, by_iters = [], [], [], {}
    for w, e in items:
        u = math.log2(w["n_params"])
        fits = [(f["a"], f["b"]) for f in e["fits"].values()]
        cross = width_crossover(fits, level) if len(fits) >= 2 else None
        bend = curvature.get(w["width"])
        curved = bool(bend and bend["significant"])
        in_range = bool(e.get("crossover_in_range"))
        gated = cross is not None and curved and not in_range  # a crossover past the budgets of a bending line
        rows.append(dict(width=w["width"], n_params=w["n_params"], slope=e.get("slope"), slope_ci=e.get("slope_ci"),
                         crossover_tokens=e.get("crossover_tokens"), crossover_interval=e.get("crossover_interval"),
                         located=cross is not None and not gated, in_range=in_range, curvature=bend,
                         not_extrapolated=gated,
                         budgets=[dict(iters=b["iters"], tokens=b["tokens"], tokens_per_param=b["tokens"] / w["n_params"],
                                       gap=b["gap"], gap_ci=b["gap_ci"], n=b["n"], verdict=b["verdict"])
                                  for b in e["budgets"]]))
        if cross and not gated:
            points.append(dict(u=u, width=w["width"], in_range=in_range, **cross))
        line = width_line(w["width"], w["n_params"], e["budgets"])
        if line:
            lines.append(line)
        for b in e["budgets"]:
            by_iters.setdefault(b["iters"], []).append((u, b["gap"]))
    extrapolation = {}
    for label, n in targets.items():
        if points:
            x, lo, hi, how = crossover_at(points, n, level)
            extrapolation[label] = dict(n_params=n, tokens=2 ** x, pi=None if lo is None else [2 ** lo, 2 ** hi],
                                        how=how)
    slope_trend = ols_slope([l["u"] for l in lines], [l["b"] for l in lines], level)
    gap_vs_size = []
    for iters, pts in sorted(by_iters.items()):
        fit = ols_slope(*zip(*pts), level)
        if fit:
            gap_vs_size.append(dict(iters=iters, points_per_doubling=fit[0], ci=fit[1], widths=len(pts)))
    return dict(syncs=items[0][1]["syncs"], widths=rows, located=points, crossover_fit=crossover_fit(points, level),
                extrapolation=extrapolation, lines=lines, gap_vs_size=gap_vs_size,
                curved=[r["width"] for r in rows if r["curvature"] and r["curvature"]["significant"]],
                slope_vs_size=None if slope_trend is None else dict(per_doubling=slope_trend[0], ci=slope_trend[1],
                                                                    widths=len(lines)))


def heldout(items, level=0.95):
    """The held-out check of the planner's surface for one policy (module docstring, 3): each width's largest budget
    left out of every width's line at once, then predicted by gap_at at that width's N and tokens. Rows dict(width,
    tokens, tokens_per_param, truth, gap, pi, inside); pi and inside None below 1 df. Empty where a width would keep
    fewer than two budgets."""
    kept, last = [], []
    for w, e in items:
        budgets = sorted(e["budgets"], key=lambda b: b["tokens"])
        line = width_line(w["width"], w["n_params"], budgets[:-1])
        if line is None:
            return []
        kept.append(line)
        last.append((w, budgets[-1]))
    rows = []
    for w, b in last:
        g = gap_at(kept, w["n_params"], b["tokens"], level)
        rows.append(dict(width=w["width"], tokens=b["tokens"], tokens_per_param=b["tokens"] / w["n_params"],
                         truth=b["gap"], gap=g["gap"], pi=g["pi"], df=g["df"],
                         inside=None if g["pi"] is None else abs(b["gap"] - g["gap"]) <= g["pi"]))
    return rows


def size_fit(widths, level=0.95):
    """size_fit.json's content. widths: [dict(width, n_params, non_embedding, runs, sweep, analysis)], analysis
    the budget_analysis entries of that width's sweep."""
    widths = sorted(widths, key=lambda w: w["n_params"])
    targets = target_sizes()
    items = {}
    curvature = {}
    for w in widths:
        tests = curvature_tests(w["analysis"], level)
        for e in w["analysis"]:
            items.setdefault(e["policy"], []).append((w, e))
            curvature.setdefault(e["policy"], {})[w["width"]] = tests.get(e["policy"])
    order = sorted(items, key=lambda p: (-(items[p][0][1]["syncs"] or 0), p))
    tpp = [b["tokens"] / w["n_params"] for w in widths for e in w["analysis"] for b in e["budgets"]]
    return dict(
        made_by="python -m experiments.docs_study.run sizes (analysis/size_trend.py: its docstring states the models)",
        level=level, size_measured=len(widths) > 1, targets=targets,
        measured=dict(n_params=[widths[0]["n_params"], widths[-1]["n_params"]], tokens_per_param=[min(tpp), max(tpp)]),
        widths=[dict(width=w["width"], n_params=w["n_params"], non_embedding=w["non_embedding"], runs=w["runs"],
                     sweep=w["sweep"], budgets=sorted({(b["iters"], b["tokens"]) for e in w["analysis"]
                                                       for b in e["budgets"]})) for w in widths],
        policies={p: policy_fit(items[p], targets, curvature[p], level) for p in order},
        heldout={p: heldout(items[p], level) for p in order})


def _m(n):
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _ci(mean, half, df):
    """mean ± half, or mean with 'no interval' where df < 1 (the width the unit: too few widths)."""
    return fmt_ci(mean, half) if half is not None else f"{mean:+.2f} (no interval: {df} df)"


def _bend_cell(t):
    if t is None:
        return "not tested"
    return (f"{fmt_ci(t['c'], t['ci'])} (p Holm {t['p_holm']:.3f})"
            + (": significant, not extrapolated" if t["significant"] else ""))


def _cross_cell(r):
    if r["slope"] is None or r["slope_ci"] is None:
        return "—"
    lo, hi = r["crossover_interval"] or (None, None)
    if r["not_extrapolated"]:
        return f"not extrapolated: curvature (line reaches 0 at {fmt_tokens(r['crossover_tokens'])}, past the budgets)"
    if not r["located"]:
        return "none located (slope not told from 0)"
    where = "within the range" if r["in_range"] else "extrapolated"
    return (f"{fmt_tokens(r['crossover_tokens'])} [{fmt_tokens(lo)}, {fmt_tokens(hi)}] = {r['crossover_tokens'] / r['n_params']:.2g} "
            f"[{lo / r['n_params']:.2g}, {hi / r['n_params']:.2g}] per param, {where}")


def _fit_text(fit, policy):
    f = fit["policies"][policy]["crossover_fit"]
    located = fit["policies"][policy]["located"]
    if f is None:
        return (f"not fitted: a crossover located at {len(located)} width(s)"
                + ("; c assumed 0" if located else ""))
    if f["c_ci"] is None:
        return f"c = {f['c']:+.2f} ({f['widths']} widths, {f['df']} df: no interval)"
    told = "told from 0" if f["c_told_from_0"] else "not told from 0"
    per_param = "told from 1" if f["c_told_from_1"] else "not told from 1 (constant tokens per parameter)"
    return (f"c = {fmt_ci(f['c'], f['c_ci'])} ({f['widths']} widths, {f['df']} df, Birge R {f['birge']:.2f}): "
            f"{told}; {per_param}")


def _extrapolation_cell(x):
    pi = "no interval" if x["pi"] is None else f"[{fmt_tokens(x['pi'][0])}, {fmt_tokens(x['pi'][1])}]"
    return (f"{fmt_tokens(x['tokens'])} {pi} = {x['tokens'] / x['n_params']:.2g} per param"
            + (" (c = 0 assumed)" if x["how"].startswith("c assumed") else ""))


def size_table(fit):
    """size_table.md: the sizes, then per policy and width the slope, bend and crossover, then the fits across
    sizes."""
    lines = ["# The loss cost of fewer syncs against model size", "",
             "Made by `python -m experiments.docs_study.run sizes` from each width's budget sweep; the models are "
             "stated in analysis/size_trend.py's docstring. N: parameters as the trainer counts them (get_num_params: "
             "all but the position embedding; each run's config.json 'derived', log.txt's 'NNN.NNM parameters'); "
             "non-embedding: N minus vocab x width.", ""]
    lines += [format_table(["width", "N", "non-embedding", "runs", "budgets: tokens (tokens per parameter)", "sweep"],
                           [[str(w["width"]), _m(w["n_params"]), _m(w["non_embedding"]), str(w["runs"]),
                             ", ".join(f"{fmt_tokens(t)} ({t / w['n_params']:.3g})" for _, t in w["budgets"]), w["sweep"]]
                            for w in fit["widths"]], True), ""]
    if not fit["size_measured"]:
        lines += ["**One width measured: the size trend is not measured.** Every fit across sizes below assumes "
                  "c = 0 (the crossover at the same tokens at every size); the extrapolations are that width's "
                  "numbers carried over, not predictions from a trend.", ""]
    rows = []
    for p, e in fit["policies"].items():
        for r in e["widths"]:
            rows.append([p, str(e["syncs"]), str(r["width"]), fmt_ci(r["slope"], r["slope_ci"]) if r["slope"] is not None
                         else "—", _bend_cell(r["curvature"]), _cross_cell(r)])
    lines += ["## Per width", "", format_table(["policy", "syncs/fwd", "width", "slope, points per doubling of tokens",
                                                  "bend c, points per doubling² (95% CI, t-test over seeds)",
                                                  "crossover: tokens [Fieller 95%] = tokens per parameter"], rows, True),
              "", "Bend: c of gap = a + b x + c x² (x = log2 tokens) per seed, its mean over seeds; p: the t-test of "
              "c = 0 over the seeds, Holm across the width's policies. Where it is significant the straight line is "
              "not extrapolated past the measured budgets (its crossover there is dropped, and the planner prints "
              "\"not extrapolated: curvature\").", ""]
    rows = []
    for p, e in fit["policies"].items():
        ext = [_extrapolation_cell(x) for x in e["extrapolation"].values()]
        sv = e["slope_vs_size"]
        gaps = "; ".join(f"{g['iters']} it {_ci(g['points_per_doubling'], g['ci'], g['widths'] - 2)}"
                         for g in e["gap_vs_size"])
        rows.append([p, _fit_text(fit, p), *(ext or ["—"] * len(fit["targets"])),
                     "—" if sv is None else _ci(sv["per_doubling"], sv["ci"], sv["widths"] - 2), gaps or "—"])
    head = ["policy", "log2 crossover = alpha + c log2 N"] + [
        f"crossover at {k} ({_m(n)}), extrapolated [95% PI]" for k, n in fit["targets"].items()] + [
        "slope's change per doubling of N", "gap per doubling of N at matched tokens per parameter (points)"]
    lines += ["## Across sizes", "", format_table(head, rows, True), "",
              "The width is the unit of replication: every fit across sizes has one value per width (a budget cell: "
              "the mean over its seeds) and k - p degrees of freedom (k widths, p = 2 parameters); below 1 df no "
              "interval is given. c: the crossover in tokens grows as N^c (c = 1: the same tokens per parameter at "
              "every size). Extrapolations are labelled: they rest on the stated line, far outside the measured sizes."]
    return "\n".join(lines) + "\n"


def heldout_table(fit):
    """heldout.md: the planner's surface refitted without each width's largest budget, predicting it; coverage."""
    rows, inside, counted, straight = [], 0, 0, [0, 0]  # straight: [inside, counted] of the policies not bending
    for p, held in fit["heldout"].items():
        curved = fit["policies"][p]["curved"]
        for h in held:
            interval = (f"[{h['gap'] - h['pi']:+.2f}, {h['gap'] + h['pi']:+.2f}]" if h["pi"] is not None
                        else f"no interval ({h['df']} df)")
            verdict = "—" if h["inside"] is None else "yes" if h["inside"] else "no"
            rows.append([p, str(h["width"]), f"{fmt_tokens(h['tokens'])} ({h['tokens_per_param']:.3g})",
                         f"{h['truth']:+.2f}%", f"{h['gap']:+.2f}%", interval, verdict,
                         "yes" if curved else "no"])
            if h["inside"] is not None:
                counted += 1
                inside += h["inside"]
                if not curved:
                    straight = [straight[0] + h["inside"], straight[1] + 1]
    coverage = f"{inside}/{counted} held-out truths" if counted else "none (no interval)"
    if counted and straight[1] < counted:
        coverage += (f" ({straight[0]}/{straight[1]} of the policies the planner extrapolates, those with no "
                     f"significant bend)")
    lines = ["# The planner's intervals, checked on held-out budgets", "",
             "Made by `python -m experiments.docs_study.run sizes` (analysis/size_trend.py, heldout). The planner's "
             "surface (size_trend's docstring, 2: per width the line of its seed-mean gaps against log2 tokens, "
             "evaluated at a tokens per parameter and regressed on log2 N across widths, with the 95% prediction "
             "interval for a new width's seed-mean gap, k - 2 df) refitted without the largest budget of every width, "
             "then asked for that budget at each width's own N: one doubling of tokens past the budgets it was fitted "
             "to. Truth: the held-out cell's seed-mean gap (the width's budget_table.md).", "",
             format_table(["policy", "width", "held-out budget: tokens (per parameter)", "truth", "predicted",
                           "95% prediction interval", "inside?", "bend significant (full data)"], rows, True), "",
             f"Coverage: {coverage} inside their 95% prediction intervals."]
    return "\n".join(lines) + "\n"


def plot_crossovers(fit, path):
    """crossover_vs_params.png: crossover tokens against N, log-log, one colour per policy: each width's crossover
    with its Fieller 95% interval (hollow where it is an extrapolation of that width's line), the fitted line and
    its 95% prediction band out to the extrapolation targets; grey, the measured tokens per parameter."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from training.config import save_figure

    fig, ax = plt.subplots(figsize=(9, 6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    n_lo, n_hi = fit["measured"]["n_params"]
    top = max(fit["targets"].values())
    grid = [2 ** (math.log2(n_lo / 1.5) + i * math.log2(top * 1.5 * 1.5 / n_lo) / 60) for i in range(61)]
    for i, r in enumerate(fit["measured"]["tokens_per_param"]):  # the measured budgets' range, labelled apart
        ax.plot(grid, [r * n for n in grid], ":", color="gray", lw=1)
        ax.annotate(f"{r:.2g} tokens/param", (grid[2 + 12 * i], r * grid[2 + 12 * i]), fontsize=7, color="gray",
                    ha="left", va="bottom")
    none = []
    for k, (policy, e) in enumerate(fit["policies"].items()):
        color = colors[k % len(colors)]
        if not e["located"]:
            none.append(policy)
            continue
        for p in e["located"]:
            n, t = 2 ** p["u"], 2 ** p["x"]
            ax.errorbar([n], [t], yerr=[[t - 2 ** p["lo"]], [2 ** p["hi"] - t]], fmt="o", color=color, capsize=3,
                        mfc=color if p["in_range"] else "white", ms=7)
        label = f"{policy} ({e['syncs']} syncs/fwd): " + (
            f"c = {fmt_ci(e['crossover_fit']['c'], e['crossover_fit']['c_ci'])}"
            + (f" ({e['crossover_fit']['widths']} widths: no interval)" if e["crossover_fit"]["c_ci"] is None else "")
            if e["crossover_fit"] else "one width, c assumed 0")
        bands = [crossover_at(e["located"], n, fit["level"]) for n in grid]
        ax.plot(grid, [2 ** b[0] for b in bands], "-" if e["crossover_fit"] else "--", color=color, lw=1.5,
                label=label)
        if e["crossover_fit"] and bands[0][1] is not None:  # no band with c assumed 0 (one width) or below 1 df
            ax.fill_between(grid, [2 ** b[1] for b in bands], [2 ** b[2] for b in bands], color=color, alpha=0.08, lw=0)
        for x in e["extrapolation"].values():  # side by side, not on top of each other
            n = x["n_params"] * 1.12 ** (k - 2)
            ax.errorbar([n], [x["tokens"]], yerr=None if x["pi"] is None else
                        [[x["tokens"] - x["pi"][0]], [x["pi"][1] - x["tokens"]]],
                        fmt="s", color=color, mfc="white", capsize=3, ms=6)
    for label_t, n in fit["targets"].items():
        ax.axvline(n, color="black", lw=0.6, ls="--")
        ax.text(n * 0.8, 0.02, f"{label_t} (extrapolated)", fontsize=7, rotation=90, va="bottom", ha="right",
                transform=ax.get_xaxis_transform())
    ax.axvspan(n_lo / 1.1, n_hi * 1.1, color="green", alpha=0.06, lw=0, label="measured sizes")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # from a tenth of the smallest measured budget to 100 tokens per parameter at the largest target: a
    # prediction interval of 1 df spans dozens of decades and would hide every measured point
    smallest = min(fit["measured"]["tokens_per_param"]) * n_lo
    ax.set_ylim(smallest / 10, 100 * top)
    ax.set_xlabel("parameters N (the trainer's count: all but the position embedding)")
    ax.set_ylabel("crossover: training tokens where the gap to baseline is 0")
    title = "Where each policy's loss gap crosses 0, against model size"
    if not fit["size_measured"]:
        title += "\none width measured: no size trend; dashed lines carry its crossover over with c = 0 (assumed)"
    if none:
        title += f"\nno crossover located (slope not told from 0): {', '.join(none)}"
    ax.set_title(title + "\npoints: Fieller 95% (hollow: past the measured budgets); band and squares: 95% PI, "
                 "cut at the axes"
                 "\ndotted: the measured budgets' tokens per parameter",
                 fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
