"""Statistics over seeds for analysis/compare.py: Student-t intervals, paired tests against the baseline with Holm's
correction and the verdicts, the trend over sync intervals, the gap against the training budget (line and bend
fits, Fieller intervals for the crossover) and one schedule's gaps against another's."""
import math
import re
import statistics

from analysis.runs import SETTING_KEYS


def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (Numerical Recipes, betacf)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom (df > 0, not necessarily an integer)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p, df):
    """The p-quantile of Student's t with df degrees of freedom (bisection on t_cdf; 1e-10 precise)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


def fmean(values):
    """statistics.fmean; for values near the float limit (a loss of 1e308 in a broken run's log), whose sum
    overflows, the sum of v / n: their mean, not an OverflowError."""
    values = list(values)
    try:
        return statistics.fmean(values)
    except OverflowError:
        return math.fsum(v / len(values) for v in values)


def mean_ci(values, level=0.95):
    """(mean, half-width of the Student-t interval at `level`, sample std): None for what n = 1 cannot give."""
    n = len(values)
    mean = fmean(values)
    if n < 2:
        return mean, None, None
    std = statistics.stdev(values)
    return mean, t_quantile(0.5 + level / 2, n - 1) * std / math.sqrt(n), std


def welch_ci(a, b, level=0.95):
    """(mean(b) - mean(a), half-width of Welch's t interval) for two independent samples; half None if
    either has one value or both have zero spread."""
    diff = fmean(b) - fmean(a)
    if len(a) < 2 or len(b) < 2:
        return diff, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, None
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    return diff, t_quantile(0.5 + level / 2, df) * math.sqrt(va + vb)


def sync_interval(policy):
    """Layers between syncs for the grouped family (spd: a sync after every MLP = 1, grouped:G = G),
    None for any other policy."""
    if policy == "spd":
        return 1
    m = re.fullmatch(r"grouped:([0-9]+)", policy)
    return int(m[1]) if m else None


def natural(value):
    """Sort key that puts numbers in numeric order (w192 before w1024) and anything else after them."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def sorted_settings(settings):
    """Distinct settings, their numbers in numeric order."""
    return sorted(set(settings), key=lambda s: [natural(x) for x in s])


def setting_labels(settings):
    """A short label per setting, naming only the keys that vary between them (always width and tracks)."""
    varying = [i for i, k in enumerate(SETTING_KEYS) if len({s[i] for s in settings}) > 1]
    short = {"dataset": "{}", "n_layer": "L{}", "n_embd": "w{}", "n_tracks": "n{}", "max_iters": "{} it"}
    labels = {}
    for s in settings:
        keys = [i for i, k in enumerate(SETTING_KEYS) if i in varying or k in ("n_embd", "n_tracks")]
        labels[s] = " ".join(short[SETTING_KEYS[i]].format("?" if s[i] is None else s[i]) for i in keys)
    return labels


ALPHA = 0.05  # family-wise error rate of the verdicts
MARGIN = 1.0  # equivalence margin, % of the baseline's val loss, stated before the part-3 runs (issue 26)


def paired_tests(gaps, margin):
    """Tests of one cell's paired gaps (%, one per seed; n >= 2): the two-sided t-test of 'mean gap = 0'
    and TOST of 'the mean gap lies outside (-margin, +margin)', both with n - 1 degrees of freedom.
    Returns (p of the difference test, p of TOST = the larger of its two one-sided p's, p of its upper
    one-sided test alone = non-inferiority, 90% interval)."""
    n = len(gaps)
    mean, std = fmean(gaps), statistics.stdev(gaps)
    if std == 0:  # identical gaps on every seed: no spread to test against
        return float(mean == 0), float(abs(mean) >= margin), float(mean >= margin), (mean, mean)
    se = std / math.sqrt(n)
    p_diff = 2.0 * (1.0 - t_cdf(abs(mean) / se, n - 1))
    p_above_lower = 1.0 - t_cdf((mean + margin) / se, n - 1)  # H0: gap <= -margin
    p_below_upper = t_cdf((mean - margin) / se, n - 1)  # H0: gap >= +margin
    half90 = t_quantile(1.0 - ALPHA, n - 1) * se
    return p_diff, max(p_above_lower, p_below_upper), p_below_upper, (mean - half90, mean + half90)


def holm(p_values, family_size=None):
    """Holm's step-down adjusted p-values (family-wise error control), in the order given.

    family_size, when larger than the p's given: the family's members not tested yet (a design's policies whose
    seeds are still to run) count with p = 1. A member's p, once tested, can only lower the others' adjusted p's,
    so these are upper bounds: a verdict does not rest on a family smaller than the design's."""
    padded = list(p_values) + [1.0] * max(0, (family_size or 0) - len(p_values))
    order = sorted(range(len(padded)), key=lambda i: padded[i])
    adjusted, running = [0.0] * len(padded), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(padded) - rank) * padded[i]))
        adjusted[i] = running
    return adjusted[:len(p_values)]


def decide(m):
    """The verdict of a cell from its Holm-adjusted p's: 'keeps the loss' when TOST rejects (its whole 90%
    interval lies inside the margin), else 'worse' / 'better' when the difference test rejects, else
    'inconclusive'. None with one seed (no test)."""
    if m.get("p_diff_holm") is None:
        return None
    if m["p_tost_holm"] < ALPHA:
        return "keeps the loss"
    if m["p_diff_holm"] < ALPHA:
        return "worse" if m["gap"] > 0 else "better"
    return "inconclusive"


def seed_statistics(runs, level=0.95, margin=MARGIN, family_size=None):
    """Statistics over seeds (see the module docstring). Returns a dict: 'cells' (one per setting and
    policy: values per seed, mean/std, paired gaps to the baseline), 'excluded' (unfinished runs) and
    'notes' (duplicate seeds). family_size: the policies a setting's Holm family holds by design (holm()),
    where fewer than that have two paired seeds yet."""
    excluded = [r["name"] + (" (diverged)" if r["diverged"] else "") for r in runs if not r["complete"]]
    notes = []
    cells = {}
    for r in runs:
        if not r["complete"]:
            continue
        cell = cells.setdefault((r["setting"], r["policy"]), {"setting": r["setting"], "policy": r["policy"],
                                                             "runs": {}, "syncs": set()})
        if r["seed"] in cell["runs"]:
            notes.append(f"{r['name']}: seed {r['seed']} repeats {cell['runs'][r['seed']]['name']} in its "
                         f"setting and policy; only the first is used")
            continue
        cell["runs"][r["seed"]] = r
        if r["syncs"] is not None:
            cell["syncs"].add(r["syncs"])
    labels = setting_labels(sorted_settings(c["setting"] for c in cells.values()))
    out = []
    for (setting, policy), cell in cells.items():
        seeds = sorted(cell["runs"], key=lambda x: (x is None, str(x)))
        row = {"setting": list(setting), "label": labels[setting], "policy": policy,
               "syncs": max(cell["syncs"]) if cell["syncs"] else None, "interval": sync_interval(policy),
               "seeds": seeds, "runs": [cell["runs"][x]["name"] for x in seeds],
               "tokens": cell["runs"][seeds[0]]["tokens"]}
        if len(cell["syncs"]) > 1:
            notes.append(f"{labels[setting]} {policy}: the runs logged different syncs/fwd {sorted(cell['syncs'])}")
        base = cells.get((setting, "baseline"))
        for metric in ("final_val", "best_val"):
            values = [cell["runs"][x][metric] for x in seeds]
            mean, _, std = mean_ci(values, level)
            row[metric] = {"values": values, "mean": mean, "std": std}
            if policy == "baseline" or base is None:
                continue
            paired = [x for x in seeds if x in base["runs"]]
            gaps = [100.0 * (cell["runs"][x][metric] / base["runs"][x][metric] - 1.0) for x in paired]
            diffs = [cell["runs"][x][metric] - base["runs"][x][metric] for x in paired]
            if not paired:
                continue
            gap, gap_half, gap_std = mean_ci(gaps, level)
            diff, diff_half, _ = mean_ci(diffs, level)
            row[metric].update(paired_seeds=paired, gaps=gaps, gap=gap, gap_ci=gap_half, gap_std=gap_std,
                               diffs=diffs, diff=diff, diff_ci=diff_half, p_diff=None, p_tost=None, p_noninf=None,
                               ci90=None)
            if len(paired) > 1:
                p_diff, p_tost, p_noninf, ci90 = paired_tests(gaps, margin)
                row[metric].update(p_diff=p_diff, p_tost=p_tost, p_noninf=p_noninf, ci90=ci90)
        out.append(row)
    # Holm within each family: the non-baseline policies of one setting, per metric and per test
    for setting in {tuple(c["setting"]) for c in out}:
        for metric in ("final_val", "best_val"):
            family = [c[metric] for c in out if tuple(c["setting"]) == setting and c[metric].get("p_diff") is not None]
            for key in ("p_diff", "p_tost", "p_noninf"):
                for m, adjusted in zip(family, holm([m[key] for m in family], family_size)):
                    m[f"{key}_holm"] = adjusted
            for m in family:
                m["family_size"] = max(len(family), family_size or 0)
    for c in out:
        for metric in ("final_val", "best_val"):
            if "gap" in c[metric]:
                c[metric]["verdict"] = decide(c[metric])
    out.sort(key=lambda c: ([str(x) for x in c["setting"]], c["policy"] != "baseline", -(c["syncs"] or 0), c["policy"]))
    return {"level": level, "margin": margin, "alpha": ALPHA, "cells": out, "excluded": excluded, "notes": notes}


def _slope(xs, ys):
    mx, my = fmean(xs), fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def trend_analysis(stats, metric="final_val"):
    """The numbers behind the verdict: per setting, the per-seed slope of the gap (%) against the sync
    interval over the grouped family, its mean and interval; then compare_across for width and for
    n_tracks."""
    level = stats["level"]
    by_setting = {}
    for c in stats["cells"]:
        if c["interval"] is not None and "gaps" in c[metric]:
            by_setting.setdefault(tuple(c["setting"]), []).append(c)
    settings = []
    for setting, cells in sorted(by_setting.items(), key=lambda kv: [str(x) for x in kv[0]]):
        per_seed = {}
        for c in cells:
            for seed, gap in zip(c[metric]["paired_seeds"], c[metric]["gaps"]):
                per_seed.setdefault(seed, []).append((c["interval"], gap))
        slopes = [_slope(*zip(*pts)) for pts in per_seed.values() if len({d for d, _ in pts}) >= 2]
        entry = {"setting": list(setting), "label": cells[0]["label"],
                 "gaps": {c["interval"]: (c[metric]["gap"], c[metric]["gap_ci"], c[metric]["gaps"]) for c in cells}}
        if slopes:
            mean, half, _ = mean_ci(slopes, level)
            entry.update(slopes=slopes, slope=mean, slope_ci=half,
                         trend=None if half is None else "grows" if mean - half > 0 else
                         "shrinks" if mean + half < 0 else "flat")
        settings.append(entry)
    return {"metric": metric, "settings": settings, "widths": compare_across(settings, "n_embd", level),
            "tracks": compare_across(settings, "n_tracks", level)}


def compare_across(settings, key, level):
    """For each group of trend settings equal but in `key` (a SETTING_KEYS name): each value against the next
    larger one (192 vs 384, 384 vs 768), so adding a third width never changes the first comparison.
    Compared: the gap at the largest sync interval common to both, and the per-seed slope, each with Welch's
    interval (the two settings' runs are independent samples). `diff` is large minus small."""
    i = SETTING_KEYS.index(key)
    groups = {}
    for e in settings:
        if e["setting"][i] is not None:
            groups.setdefault(tuple(x for j, x in enumerate(e["setting"]) if j != i), []).append(e)
    rows = []
    pairs = []
    for entries in groups.values():
        entries = sorted(entries, key=lambda e: e["setting"][i])
        pairs += zip(entries, entries[1:])
    for small, large in pairs:
        common = set(small["gaps"]) & set(large["gaps"])
        if not common:
            continue
        d = max(common)
        diff, half = welch_ci(small["gaps"][d][2], large["gaps"][d][2], level)
        row = {"small": small["label"], "large": large["label"], "v_small": small["setting"][i],
               "v_large": large["setting"][i], "interval": d, "gap_small": small["gaps"][d][0],
               "gap_large": large["gaps"][d][0], "diff": diff, "diff_ci": half,
               "significant": half is not None and abs(diff) > half}
        if "slopes" in small and "slopes" in large:
            sdiff, shalf = welch_ci(small["slopes"], large["slopes"], level)
            row.update(slope_diff=sdiff, slope_diff_ci=shalf,
                       slope_significant=shalf is not None and abs(sdiff) > shalf)
        rows.append(row)
    return rows


# The seed's experiment (config/train_*.py): 20,000 iterations of 491,520 tokens on OpenWebText, where the only
# expectation on record is a reduced-sync val loss <= 3.35 against the baseline's 3.28 (+2.1%).
SEED_TOKENS, SEED_GAP = 20_000 * 491_520, 100 * (3.35 / 3.28 - 1)


def line_fit(xs, ys):
    """Least-squares (intercept, slope) of y = a + b x."""
    b = _slope(xs, ys)
    return fmean(ys) - b * fmean(xs), b


def bend_fit(xs, ys):
    """Least-squares c of y = a + b x + c x^2: how far the gap bends away from a line in log2(tokens)
    (x^2 is first made orthogonal to 1 and x, so c is the multiple-regression coefficient)."""
    mx = fmean(xs)
    u = [x - mx for x in xs]
    mq = fmean(v * v for v in u)
    q = [v * v - mq for v in u]
    beta = sum(a * b for a, b in zip(q, u)) / sum(v * v for v in u)
    r = [a - beta * b for a, b in zip(q, u)]
    return sum(a * y for a, y in zip(r, ys)) / sum(a * a for a in r)


def fieller(fits, level=0.95):
    """Where the mean over seeds of a_s + b_s x is 0, with its interval: the x at which the t-interval
    (n - 1 df) of that mean contains 0 (Fieller's interval for -mean(a) / mean(b), from the seeds'
    spread of (a, b)). Returns (x0 or None, (lo, hi) or None, 'bounded'/'unbounded')."""
    n = len(fits)
    a = fmean(f[0] for f in fits)
    b = fmean(f[1] for f in fits)
    x0 = -a / b if b != 0 else None
    if n < 2:
        return x0, None, "unbounded"
    saa = statistics.variance([f[0] for f in fits])
    sbb = statistics.variance([f[1] for f in fits])
    sab = sum((f[0] - a) * (f[1] - b) for f in fits) / (n - 1)
    c = t_quantile(0.5 + level / 2, n - 1) ** 2 / n
    qa, qb, qc = b * b - c * sbb, 2 * (a * b - c * sab), a * a - c * saa  # (a + b x)^2 <= c Var(a + b x)
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:  # the slope is not told from 0 at this level: no finite interval
        return x0, None, "unbounded"
    root = math.sqrt(disc)
    return x0, ((-qb - root) / (2 * qa), (-qb + root) / (2 * qa)), "bounded"


def budget_analysis(stats, metric="final_val", target_tokens=SEED_TOKENS):
    """The gap against the training budget, per (setting but its budget, policy). The stated model:
    gap_s(T) = a_s + b_s log2(T) in % (T: training tokens), fitted by least squares for each seed s that has
    two budgets or more; b (percentage points per doubling of tokens) is the mean over seeds with its
    t-interval (n - 1 df); the crossover is where the mean line is 0 (Fieller's interval); the gap at
    target_tokens (default the seed's 9.8B) is an extrapolation with a prediction interval for one seed,
    mean +- t * sd * sqrt(1 + 1/n). Returns a list of dicts, one per (group, policy)."""
    level = stats["level"]
    max_i = SETTING_KEYS.index("max_iters")
    groups = {}
    for c in stats["cells"]:
        if c["policy"] == "baseline" or "gaps" not in c[metric] or not c.get("tokens"):
            continue
        key = (tuple(x for i, x in enumerate(c["setting"]) if i != max_i), c["policy"])
        groups.setdefault(key, []).append(c)
    # the budgets every policy of a setting has: slopes over them compare policies measured to different budgets
    all_budgets = {key: {c["tokens"] for c in cells} for key, cells in groups.items()}
    common = {}
    for (setting, _), have in all_budgets.items():
        common[setting] = have if setting not in common else common[setting] & have
    out = []
    for (setting, policy), cells in groups.items():
        cells.sort(key=lambda c: c["tokens"])
        entry = {"setting": list(setting), "label": re.sub(r" [0-9]+ it$", "", cells[0]["label"]), "policy": policy,
                 "syncs": cells[0]["syncs"], "budgets": [
                     {"tokens": c["tokens"], "iters": c["setting"][max_i], "n": len(c[metric]["gaps"]),
                      "gap": c[metric]["gap"], "gap_ci": c[metric]["gap_ci"], "verdict": c[metric].get("verdict"),
                      "p_diff_holm": c[metric].get("p_diff_holm"), "p_noninf_holm": c[metric].get("p_noninf_holm"),
                      "p_tost_holm": c[metric].get("p_tost_holm"), "gaps": dict(zip(c[metric]["paired_seeds"],
                                                                                    c[metric]["gaps"]))}
                     for c in cells]}
        per_seed = {}
        for bud in entry["budgets"]:
            for seed, gap in bud["gaps"].items():
                per_seed.setdefault(seed, []).append((math.log2(bud["tokens"]), gap))
        fits = {seed: line_fit(*zip(*pts)) for seed, pts in sorted(per_seed.items(), key=lambda kv: str(kv[0]))
                if len({x for x, _ in pts}) >= 2}
        entry["fits"] = {str(seed): {"a": a, "b": b, "budgets": len(per_seed[seed])} for seed, (a, b) in fits.items()}
        bends = [bend_fit(*zip(*pts)) for pts in per_seed.values() if len({x for x, _ in pts}) >= 3]
        if len(bends) >= 2:  # the seeds are the replicates: their bends' t-interval, as for the slope
            entry["bend"], entry["bend_ci"], _ = mean_ci(bends, level)
            entry["bend_seeds"] = len(bends)
        if any(have != common[setting] for (st, _), have in all_budgets.items() if st == setting):
            in_common = {}
            for bud in entry["budgets"]:
                if bud["tokens"] in common[setting]:
                    for seed, gap in bud["gaps"].items():
                        in_common.setdefault(seed, []).append((math.log2(bud["tokens"]), gap))
            slopes = [line_fit(*zip(*pts))[1] for pts in in_common.values() if len(pts) >= 2]
            if len(slopes) >= 2:
                entry["common_tokens"] = [min(common[setting]), max(common[setting])]
                entry["common_slope"], entry["common_slope_ci"], _ = mean_ci(slopes, level)
                entry["common_seeds"] = len(slopes)
        if fits:
            slope, slope_half, _ = mean_ci([b for _, b in fits.values()], level)
            x0, interval, kind = fieller(list(fits.values()), level)
            xs = [math.log2(b["tokens"]) for b in entry["budgets"]]
            at_target = [a + b * math.log2(target_tokens) for a, b in fits.values()]
            pred, _, pred_sd = mean_ci(at_target, level)
            n = len(fits)
            entry.update(
                seeds_fitted=n, slope=slope, slope_ci=slope_half,
                trend=None if slope_half is None else "grows" if slope - slope_half > 0 else
                "shrinks" if slope + slope_half < 0 else "flat",
                crossover_tokens=None if x0 is None else 2 ** x0,
                crossover_interval=None if interval is None else [2 ** interval[0], 2 ** interval[1]],
                crossover_kind=kind,
                crossover_in_range=x0 is not None and min(xs) <= x0 <= max(xs),
                target_tokens=target_tokens, target_gap=pred,
                target_pi=None if pred_sd is None else t_quantile(0.5 + level / 2, n - 1) * pred_sd * math.sqrt(1 + 1 / n))
        out.append(entry)
    out.sort(key=lambda e: ([str(x) for x in e["setting"]], -(e["syncs"] or 0), e["policy"]))
    return out


def versus(runs, other_runs, metric="final_val", level=0.95, margin=MARGIN):
    """Per policy and budget present in both sets: the paired gap in `runs` minus the paired gap in
    `other_runs`, seed by seed (e.g. WSD against cosine), its mean and t-interval (n - 1 df)."""
    mine, theirs = seed_statistics(runs, level, margin), seed_statistics(other_runs, level, margin)
    key = lambda c: (c["setting"][SETTING_KEYS.index("n_embd")], c["setting"][SETTING_KEYS.index("max_iters")],
                     c["policy"])
    other = {key(c): c for c in theirs["cells"] if "gaps" in c[metric]}
    rows = []
    for c in mine["cells"]:
        o = other.get(key(c))
        if o is None or "gaps" not in c[metric]:
            continue
        a, b = dict(zip(c[metric]["paired_seeds"], c[metric]["gaps"])), dict(zip(o[metric]["paired_seeds"],
                                                                                  o[metric]["gaps"]))
        seeds = sorted(set(a) & set(b), key=str)
        if not seeds:
            continue
        diffs = [a[s] - b[s] for s in seeds]
        mean, half, _ = mean_ci(diffs, level)
        rows.append({"policy": c["policy"], "n_embd": key(c)[0], "iters": key(c)[1], "seeds": seeds,
                     "gap": fmean(a[s] for s in seeds), "other_gap": fmean(b[s] for s in seeds),
                     "diff": mean, "diff_ci": half, "diffs": diffs,
                     "differ": half is not None and abs(mean) > half})
    return rows


def curvature_tests(entries, level=0.95, family_size=None):
    """The curvature test of one width, before any extrapolation of its lines: per budget_analysis entry (one per
    policy), the bend c_s of gap_s = a_s + b_s x + c_s x^2 (x = log2 tokens) of each seed with 3 budgets or more,
    their mean and t-interval, and the two-sided t-test of 'mean c = 0' over the seeds (n - 1 df), Holm-adjusted
    across the policies of the width (family_size: as many as the design has, holm()). {policy: dict(c, ci, seeds,
    p, p_holm, significant)}; a policy with fewer than two such seeds has no entry (not tested)."""
    out = {}
    for e in entries:
        per_seed = {}
        for bud in e["budgets"]:
            for seed, gap in bud["gaps"].items():
                per_seed.setdefault(seed, []).append((math.log2(bud["tokens"]), gap))
        bends = [bend_fit(*zip(*pts)) for pts in per_seed.values() if len({x for x, _ in pts}) >= 3]
        if len(bends) < 2:
            continue
        mean, half, sd = mean_ci(bends, level)
        n = len(bends)
        p = float(mean == 0) if sd == 0 else 2.0 * (1.0 - t_cdf(abs(mean) / (sd / math.sqrt(n)), n - 1))
        out[e["policy"]] = dict(c=mean, ci=half, seeds=n, p=p)
    for test, adjusted in zip(out.values(), holm([t["p"] for t in out.values()], family_size)):
        test.update(p_holm=adjusted, significant=adjusted < ALPHA)
    return out
