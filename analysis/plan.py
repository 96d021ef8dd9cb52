"""The planner: each sync policy at the user's scale, from the committed fits only.

    python -m analysis.plan --size 1.5b --tp 8 --tokens 3e10 --device H100
    python -m analysis.plan --size 70b --tp 8 --tokens 1.4e12
    python -m analysis.plan --size 3e9 --tp 4 --tokens 6e10      # a parameter count: timed at the nearest shape

One row per policy:
- step-time saving, 1 - policy ms / baseline ms per training iteration (12 x 1024 tokens, AdamW: the step model's
  train_b12), modeled by bench/step_model.py with its interval (the range over its all-reduce fits, widened by its
  held-out saving error; the same numbers as `python -m bench.step_model --size S --tp P --policy X`). At a depth
  other than 12 layers a grouped:G policy is timed as the spec with the nearest syncs per forward
  (bench/steptime/pareto.py's nearest_sync_spec, as its --pareto does): the loss was measured with the 12-layer spec.
- loss gap to baseline at N parameters and T tokens, % of the baseline's final val loss, with the 95% prediction
  interval for a new width's seed-mean gap: the surface of experiments/docs_study/sizes/size_fit.json, or of
  experiments/large_budgets/size_fit.json (the corpus read once) from its third width on, or --fit's
  (analysis/size_trend.py, 2): per measured width the line of its budget cells' seed-mean gaps in log2 tokens,
  evaluated at T / N tokens per parameter and regressed on log2 N across the widths. The width is the unit of
  replication: k widths give k - 2 degrees of freedom, and below 1 (one or two widths) no interval is printed and
  the last lines say so. With one width the size term is not measured: it is assumed 0 (the gap follows tokens per
  parameter), and every row says so. "extrapolation" wherever N lies outside the measured sizes or T / N outside
  the measured tokens per parameter; the first line counts the doublings past the largest of each. A policy whose
  gap bends in log2 tokens at some width (size_fit.json's curvature test: the t-test over seeds of the bend,
  Holm across policies) is not extrapolated past the measured tokens per parameter: its row prints the measured
  range and "not extrapolated: curvature" instead of a number.
- wall-clock to reach baseline's final loss L_b(T): the policy needs the tokens T' at which its loss
  L_b(T') (1 + gap(T') / 100) first equals L_b(T) (T' < T where it is better, > T where worse); time =
  T' / 12,288 tokens per step x its step time, on one tp group (data parallelism divides it alike for every
  policy and is not modeled). L_b's change with tokens at size N is Chinchilla's fitted law (Hoffmann et al.,
  arXiv 2203.15556: L = E + A / N^a + B / T^b), an assumption, not this study's measurement; only the ratio
  L_b(T') / L_b(T) is used. T' is searched in [T / 1024, 1024 T]; none there: "does not reach it". Its interval:
  T' from the gap's lower and upper prediction bounds, times the policy's step-time interval.
Printed as three tables of at most 100 columns, one per question (what a step saves, what the loss costs, how
long to reach the baseline's loss); --wide prints them as one table, one row per policy. At a point the study
measured (N within 1% of a measured width's and T of one of its budgets: --size 124m --tokens 8.4e7), the loss table
shows the measured gap beside the fit's (mean and 95% t half-width over the seeds, as the width's budget_table.md)
and whether it lies inside the fit's prediction interval.
Everything printed is modeled or extrapolated unless a column says measured; the last lines say what was measured,
and how the fit did on held-out budgets (size_fit.json's heldout: each width's largest budget left out, then
predicted; with --fit experiments/large_budgets/size_fit.json, the corpus read once).
"""
import argparse
import json
import math
import os
import re
import sys
import textwrap

from analysis.tables import format_table
from analysis.size_trend import gap_at, gpt_params
from training.cli import guarded, positive_int
from training.config import REPO, HelpFormatter, OneLineArgumentParser

SIZE_FIT = os.path.join("experiments", "docs_study", "sizes", "size_fit.json")  # under the repository root
LARGE_FIT = os.path.join("experiments", "large_budgets", "size_fit.json")  # the corpus read once
MIN_FIT_WIDTHS = 3  # the first number of widths whose fit has an interval (widths - 2 df)
REAL_BUDGETS = os.path.join("experiments", "large_budgets", "stats.json")  # the study at a corpus read once
CHECKS = os.path.join("experiments", "large_budgets", "checks.json")  # its runs at another learning rate
SCHEDULES = {"cosine": "cosine", "runs": "WSD branch"}  # the study's stats.json schedules, as the planner names them
UNSTEADY = 3.0  # a cell whose late gradient norm is this many times the baseline's (experiments/large_budgets)
FIT_KEYS = ("policies", "level", "measured", "widths", "size_measured")  # what the table and summary read
TOKENS_PER_STEP = 12 * 1024  # the step model's train_b12 (bench/steptime/shapes.py): 12 x 1024 tokens per iteration
CHINCHILLA = dict(E=1.69, A=406.4, B=410.7, a=0.34, b=0.28)  # arXiv 2203.15556, its fitted parametric loss
SEARCH = 10  # doublings either side of T searched for T'
BELOW_DATA = 0.0  # tokens_to_reach: T' lies below the smallest measured tokens per parameter (not located)
COUNT = re.compile(r"^([0-9]+(?:\.[0-9]+)?(?:e[0-9]+)?)([kmb]?)$", re.IGNORECASE)
COLUMNS = 100  # the widest line the default layout prints
CURVED = "not extrapolated: curvature"
MEASURED_TOL = 0.01  # N and T within 1% of a measured width's and budget's: the point the study measured


def default_fit():
    """The corpus read once's fit once it has MIN_FIT_WIDTHS widths (an interval), else the earlier study's."""
    try:
        with open(os.path.join(REPO, LARGE_FIT)) as f:
            if len(json.load(f)["widths"]) >= MIN_FIT_WIDTHS:
                return LARGE_FIT
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return SIZE_FIT


def parse_size(text):
    """(label, N, shape name) from a step-model size name or a parameter count ('3e9', '3b', '770m'); a count is
    timed at the shape whose N is nearest in log. ValueError naming what is allowed."""
    from bench.steptime import ALIASES, SHAPES
    shapes = {s: v for s, v in SHAPES.items() if s != "tiny"}
    count = lambda s: gpt_params(shapes[s][0], shapes[s][2], shapes[s][3])
    name = ALIASES.get(text.lower(), text.lower())
    if name in shapes:
        return text, count(name), name
    m = COUNT.match(text)
    if not m or float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}[m[2].lower()] < 1e6:
        raise ValueError(f"--size {text!r}: allowed: {', '.join(list(shapes) + list(ALIASES))}, or a parameter count "
                         f">= 1e6 such as 3e9 or 3b")
    n = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}[m[2].lower()]
    return text, n, min(shapes, key=lambda s: abs(math.log(count(s) / n)))


def step_savings(shape, tp, policies, device, n_tracks):
    """{policy: the step model's training answer as numbers}: the spec timed, its syncs, baseline and policy ms, the
    saving % with its interval (lo, hi) and the stated time error %: bench/steptime/answers.py's saving_with_interval,
    which its answer() prints as the train_b12 line."""
    from bench import steptime as sm
    fit, tables, rows, held = sm.validate()
    out = {}
    for policy in policies:
        spec, syncs, _ = sm.nearest_sync_spec(policy, sm.SHAPES[shape][0])
        a = sm.saving_with_interval(shape, "train_b12", tp, spec, n_tracks, device, tables, fit, rows, held)
        out[policy] = dict(spec=spec, syncs=syncs, base_ms=a["b"]["ms"], ms=a["p"]["ms"], saving=a["saving"],
                           lo=a["lo"] - a["err"], hi=a["hi"] + a["err"], time_error=100 * sm.time_error(rows))
    return out


def baseline_loss(n_params, tokens):
    c = CHINCHILLA
    return c["E"] + c["A"] / n_params ** c["a"] + c["B"] / tokens ** c["b"]


def tokens_to_reach(gap_of, n_params, tokens, lowest=None):
    """The smallest T' in [T / 2^SEARCH, T 2^SEARCH] with L_b(T') (1 + gap_of(T') / 100) <= L_b(T), or None: a scan
    in 1/32 doublings, then bisection in log2 between the last point above and the first at or below. lowest: no T'
    below it (the fit's smallest measured tokens per parameter, times N); where the scan's first point, there or
    above, already reaches the loss, the crossing lies below the data: BELOW_DATA. Below the measured range a line in
    log tokens runs to absurd gaps (grouped:12's on data/debian_large: -54% at 0.019 tokens per parameter, so that
    it "reached" the baseline's loss at 3e10 tokens in 2.9e7)."""
    target = baseline_loss(n_params, tokens)
    above = lambda x: baseline_loss(n_params, 2 ** x) * (1 + gap_of(2 ** x) / 100) > target
    x0 = math.log2(tokens)
    start = x0 - SEARCH if lowest is None else max(x0 - SEARCH, math.log2(lowest))
    if start > x0 + SEARCH:  # T itself lies far below the data: so does any crossing
        return BELOW_DATA
    xs = [start + i / 32 for i in range(int((x0 + SEARCH - start) * 32) + 1)]
    first = next((i for i, x in enumerate(xs) if not above(x)), None)
    if first is None:
        return None
    if first == 0 and lowest is not None and start > x0 - SEARCH:
        return BELOW_DATA
    if first == 0:
        return 2 ** xs[0]
    lo, hi = xs[first - 1], xs[first]
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if above(mid) else (lo, mid)
    return 2 ** hi


def token_count(text):
    """--tokens: a number of tokens >= 1e6 (3e10, 30000000000)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 1e6:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed: a number of tokens >= 1e6, such as 3e10")
    return value


def _duration(ms):
    h = ms / 3.6e6
    return f"{h / 24:.1f} d" if h >= 48 else f"{h:.1f} h" if h >= 1 else f"{h * 60:.1f} min" if h * 60 >= 1 else \
        f"{ms / 1e3:.1f} s"


def measured_at(fit, n_params, tokens):
    """(the width's entry, {policy: its budget cell}) where the study measured N and T (within MEASURED_TOL): each
    cell's gap is the seeds' mean paired gap, gap_ci its 95% t half-width, n the seeds. (None, {}) elsewhere."""
    near = lambda a, b: abs(a / b - 1) <= MEASURED_TOL
    width = next((w for w in fit["widths"] if near(n_params, w["n_params"])), None)
    if width is None:
        return None, {}
    cells = {policy: b for policy, e in fit["policies"].items() for w in e.get("widths", [])
             if w["width"] == width["width"] for b in w["budgets"] if near(tokens, b["tokens"])}
    return (width, cells) if cells else (None, {})


def policy_cells(fit, n_params, tokens, steps):
    """{policy: named cells}, the baseline first, for the tables; steps: {policy: step_savings' entry}."""
    base = steps["baseline"]
    _, measured = measured_at(fit, n_params, tokens)
    out = {"baseline": dict(timed=base["spec"], syncs=str(base["syncs"]), saving="0", saving_interval="",
                            gap="0", gap_interval="(reference)", measured="", inside="", tokens=f"{tokens:.3g}",
                            time=_duration(tokens / TOKENS_PER_STEP * base["base_ms"]),
                            time_interval=f"±{base['time_error']:.0f}%", size_measured=True)}
    r_lo, r_hi = fit["measured"]["tokens_per_param"]
    for policy, e in fit["policies"].items():
        s, lines = steps[policy], e["lines"]
        step = dict(timed=s["spec"], syncs=str(s["syncs"]), saving=f"{s['saving']:+.0f}%",
                    saving_interval=f"[{s['lo']:+.0f}, {s['hi']:+.0f}]")
        if not_extrapolated(fit, policy, n_params, tokens):
            out[policy] = dict(step, gap=CURVED, gap_interval=f"measured {r_lo:.2g}-{r_hi:.2g} tokens/param",
                               measured="", inside="", tokens="—", time=CURVED, time_interval="",
                               size_measured=len(lines) > 1)
            continue
        g = gap_at(lines, n_params, tokens, fit["level"])
        pi = g["pi"] or 0.0
        gap_of = lambda t, d: (lambda f: f["gap"] + d * (f["pi"] or 0.0))(gap_at(lines, n_params, t, fit["level"]))
        reach = [tokens_to_reach(lambda t, d=d: gap_of(t, d), n_params, tokens, lowest=r_lo * n_params)
                 if d == 0 or g["pi"] else None for d in (0, -1, 1)]
        ms_lo, ms_hi = s["base_ms"] * (1 - s["hi"] / 100), s["base_ms"] * (1 - s["lo"] / 100)
        when = lambda t, ms: ("does not reach it" if t is None else f"below {r_lo:.2g} tokens/param (not measured)"
                              if t == BELOW_DATA else _duration(t / TOKENS_PER_STEP * ms))
        time, interval = when(reach[0], s["ms"]), ""
        if reach[0] not in (None, BELOW_DATA):
            interval = f"[{when(reach[1], ms_lo)}, {when(reach[2], ms_hi)}]" if g["pi"] else "no interval"
        m = measured.get(policy)
        out[policy] = dict(
            step, gap=f"{g['gap']:+.2f}%", pi=g["pi"], df=g["df"],
            gap_interval=f"[{g['gap'] - pi:+.2f}, {g['gap'] + pi:+.2f}]" if g["pi"] else f"no interval ({g['df']} df)",
            measured=f"{m['gap']:+.2f}% ± {m['gap_ci']:.2f} ({m['n']})" if m else "",
            inside=("yes" if g["gap"] - pi <= m["gap"] <= g["gap"] + pi else "no") if m and g["pi"] else "",
            tokens="—" if reach[0] in (None, BELOW_DATA) else f"{reach[0]:.3g}", time=time, time_interval=interval,
            size_measured=g["size_measured"])
    return out


def not_extrapolated(fit, policy, n_params, tokens):
    """True where the policy's gap bends at some width (size_fit.json's curvature test) and T / N lies outside the
    measured tokens per parameter: its straight line is not extrapolated there."""
    r_lo, r_hi = fit["measured"]["tokens_per_param"]
    return bool(fit["policies"][policy].get("curved")) and not r_lo * 0.99 <= tokens / n_params <= r_hi * 1.01


# (title, [(column header, cell key)]): one table per question; --wide puts every column in one table
QUESTIONS = (
    ("What a training step saves (modeled)", [("timed as", "timed"), ("syncs/fwd", "syncs"), ("saving", "saving"),
                                              ("interval", "saving_interval")]),
    ("What the loss costs: gap to baseline, % of its final val loss", [
        ("gap (fit)", "gap"), ("95% prediction interval", "gap_interval"),
        ("measured ± 95% CI (seeds)", "measured"), ("inside?", "inside")]),
    ("How long to reach the baseline's final loss", [("tokens", "tokens"), ("wall-clock", "time"),
                                                     ("interval", "time_interval")]),
)


def tables(cells, tokens, measured, wide=False):
    """The tables' lines: per question (QUESTIONS) a title and a table, or with wide one table of every column. The
    measured columns appear only where the study measured this point."""
    questions = [(title.replace("gap to baseline", f"gap to baseline at {tokens:.3g} tokens"),
                  [(h, k) for h, k in cols if measured or k not in ("measured", "inside")]) for title, cols in QUESTIONS]
    if wide:
        questions = [("", [c for _, cols in questions for c in cols])]
    lines = []
    for title, cols in questions:
        rows = [[policy] + [c[k] for _, k in cols] for policy, c in cells.items()]
        lines += ([""] if lines else []) + ([f"{title}:"] if title else [])
        lines.append(format_table(["policy"] + [h for h, _ in cols], rows, False))
    return lines


def extrapolation_label(fit, n_params, tokens):
    """'' inside the measured sizes and tokens per parameter, else 'extrapolation (...)'."""
    (n_lo, n_hi), (r_lo, r_hi) = fit["measured"]["n_params"], fit["measured"]["tokens_per_param"]
    why = []
    if not n_lo * 0.99 <= n_params <= n_hi * 1.01:
        why.append(f"N {n_params / n_hi:.3g}x the largest measured width, {math.log2(n_params / n_hi):.2f} doublings "
                   f"past it" if n_params > n_hi else f"N {n_params / n_lo:.3g}x the smallest measured")
    r = tokens / n_params
    if not r_lo * 0.99 <= r <= r_hi * 1.01:
        why.append(f"{r:.3g} tokens/param, {math.log2(r / r_hi):.2f} doublings past the largest measured ({r_hi:.3g})"
                   if r > r_hi else f"{r:.3g} tokens/param, below the measured {r_lo:.2g}-{r_hi:.2g}")
    return f"extrapolation ({'; '.join(why)})" if why else "within the measured range"


def heldout_lines(fit):
    """The fit's own check (size_fit.json's heldout: each width's largest budget left out of every width's line, then
    predicted at that width): how many truths its 95% prediction intervals hold, for the policies it extrapolates
    (no significant bend) and for all; where it gives no interval, each prediction beside its truth."""
    rows = [(p, h, bool(fit["policies"].get(p, {}).get("curved"))) for p, hs in fit.get("heldout", {}).items()
            for h in hs]
    tested = [(h, curved) for _, h, curved in rows if h.get("inside") is not None]
    parts = []
    if tested:
        straight = [h for h, curved in tested if not curved]
        parts.append(f"{sum(h['inside'] for h in straight)} of {len(straight)} truths inside their 95% prediction "
                     f"intervals for the policies it extrapolates ({sum(h['inside'] for h, _ in tested)} of "
                     f"{len(tested)} with those whose gap bends)")
    bare = [(p, h) for p, h, _ in rows if h.get("inside") is None]
    if bare:
        parts.append("no interval for " + "; ".join(f"{p} at width {h['width']}: {h['gap']:+.2f} predicted, "
                                                    f"{h['truth']:+.2f} measured" for p, h in bare))
    if rows:
        misses = [h["gap"] - h["truth"] for _, h, _ in rows]
        # a line that misses to one side every time understates (or overstates) the gap by about this much
        parts.append(f"{sum(m < 0 for m in misses)} of {len(rows)} predictions below their truths (prediction minus "
                     f"truth {min(misses):+.2f} to {max(misses):+.2f} points)")
    return [f"Held out (each width's largest budget left out of the fit, then predicted, one doubling of tokens "
            f"out): {'; '.join(parts)}."] if parts else []


def narrow_lines(fit, cells, n_params, tokens):
    """Where T / N lies a doubling or more past the measured tokens per parameter (the held-out predictions reached
    one, at a measured size), each policy whose interval here is narrower than every one of its held-out intervals:
    with few df an interval's width rests on a few residuals, so a narrow one farther out is chance, not precision."""
    n_hi, r_hi = fit["measured"]["n_params"][1], fit["measured"]["tokens_per_param"][1]  # as extrapolation_label
    if tokens / n_params < 2 * r_hi * 0.99 or n_params < n_hi * 0.99:
        return []
    lines = []
    for policy, c in cells.items():
        held = [h["pi"] for h in fit.get("heldout", {}).get(policy, []) if h.get("pi")]
        if c.get("pi") and held and c["pi"] < min(held):
            lines.append(f"{policy}: its interval here (±{c['pi']:.2f}) is narrower than each of its held-out "
                         f"intervals (±{min(held):.2f} to ±{max(held):.2f}), which reached less far: at {c['df']} df "
                         f"an interval's width rests on {'one residual' if c['df'] == 1 else 'a few residuals'}, so "
                         f"read this one's narrowness as chance, not precision.")
    return lines


def width_seeds(fit, width):
    """The most seeds any policy's cell has at that width in the fit (a width begun with one seed says so)."""
    return max((b.get("n") or 0 for entry in fit.get("policies", {}).values() for w in entry.get("widths", [])
                if w.get("width") == width for b in w.get("budgets", [])), default=0)


def summary(fit, args, shape, n_params, cells, label):
    """The planner's closing paragraphs; label: extrapolation_label's text for this size and budget."""
    seeds = {w["width"]: width_seeds(fit, w["width"]) for w in fit["widths"]}
    widths = ", ".join(f"{w['width']} ({w['n_params'] / 1e6:.1f}M" + (
        f", {seeds_text(seeds[w['width']])}" if seeds[w["width"]] else "") + ")"
        for w in fit["widths"])
    r_lo, r_hi = fit["measured"]["tokens_per_param"]
    k = len(fit["widths"])
    trend = ("across widths" if fit["size_measured"] else
             "at one width: the size trend is NOT measured; assumed 0 (the gap follows tokens per parameter)")
    corpus = f" on {fit.get('corpus', 'data/debian_docs (25M tokens, read up to 3.3 times)')}"
    tables = fit.get("tables") or "each width's budget_table.md"
    lines = [f"Measured: loss gaps of 12-layer GPTs{corpus} at widths {widths}, {r_lo:.2g}-{r_hi:.2g} tokens per "
             f"parameter, n_tracks 4, WSD schedule, paired seeds per cell as {tables} says ({trend}). "
             + ("Extrapolated" if label.startswith("extrapolation") else "Fitted, inside the measured range") +
             f": the gap to N = {n_params / 1e9:.3g}B and {args.tokens / n_params:.3g} tokens per "
             f"parameter. Modeled: every step time (bench/step_model.py, {shape} at tp={args.tp}, n_tracks "
             f"{args.n_tracks}, {args.device}); the baseline's loss against tokens (Chinchilla's law, assumed).",
             "Gap: % of the baseline's final val loss, [95% prediction interval for a new width's seed-mean gap: the "
             "width is the unit, one seed-mean line per width, " + (f"{k} widths - 2 parameters = {k - 2} df" if k > 2
                                                                     else f"none from {k} width{'s' if k > 1 else ''}")
             + "]. Wall-clock: "
             f"one tp group at {TOKENS_PER_STEP:,} tokens per step, [interval: the gap's bounds x the step-time "
             "interval]."]
    unmeasured = [p for p, c in cells.items() if p != "baseline" and not c["size_measured"]]
    if unmeasured:
        lines.append(f"The size trend of {', '.join(unmeasured)} is not measured (one width): assumed 0 (its gap "
                     f"follows tokens per parameter).")
    bare = [p for p, c in cells.items() if c["gap_interval"].startswith("no interval")]
    if bare:
        lines.append(f"No interval for {', '.join(bare)}: fewer than 3 widths leave fewer than 1 degree of freedom "
                     f"with the width as the unit.")
    for policy, c in cells.items():
        if c["gap"] == CURVED:
            bends = "; ".join(f"width {r['width']}: c = {r['curvature']['c']:+.2f} per doubling², p Holm "
                              f"{r['curvature']['p_holm']:.3f}" for r in fit["policies"][policy]["widths"]
                              if r["curvature"] and r["curvature"]["significant"])
            lines.append(f"{policy}: not extrapolated: its gap bends in log2 tokens ({bends}), so its straight line "
                         f"is not carried past the measured {r_lo:.2g}-{r_hi:.2g} tokens per parameter.")
    lines += heldout_lines(fit) + narrow_lines(fit, cells, n_params, args.tokens)
    width, measured = measured_at(fit, n_params, args.tokens)
    if measured:
        where = fit.get("tables") or f"{width['sweep']}/budget_table.md"
        lines.append(f"Measured at this point: width {width['width']} ({width['n_params'] / 1e6:.1f}M), the seeds' "
                     f"mean paired gap ± its 95% t half-width (seeds), as {where}; inside? "
                     "says whether it lies in the fit's 95% prediction interval.")
    return lines


def real_budget_lines(path=REAL_BUDGETS, in_fit=False):
    """The measured gaps at each width's largest budget of the study at real budgets (a corpus read once), cosine and
    WSD branch: one sentence, or none without that study. in_fit: the fit above is that study's (its WSD branches
    are the fit's data, its cosine runs are not), else the earlier study's (it uses none of them). A verdict other
    than inconclusive is named (Holm over the design's policies, the study's ±1% margin)."""
    try:
        with open(os.path.join(REPO, path)) as f:
            rows = [r for r in json.load(f) if r["schedule"] in SCHEDULES and r["metric"] == "val"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    parts = []
    for width, schedule in sorted({(r["width"], r["schedule"]) for r in rows}):
        cells = [r for r in rows if r["width"] == width and r["schedule"] == schedule]
        last = max(r["tokens"] for r in cells)
        cells = [r for r in cells if r["tokens"] == last]
        gaps = []
        for r in cells:
            spread = f" ± {r['gap_ci95']:.2f}" if r["gap_ci95"] is not None else ""
            ratio = r.get("late_grad_norm_ratio") or 0
            note = [seeds_text(len(r["seeds"]))] + (
                [r["verdict"]] if r.get("verdict") in ("better", "worse", "keeps the loss") else []) + (
                [f"unsteady, grad norm x{ratio:.0f}"] if ratio >= UNSTEADY else [])
            gaps.append(f"{r['policy']} {r['gap']:+.2f}{spread} ({', '.join(note)})")
        parts.append(f"Width {width}, {SCHEDULES[schedule]} at {cells[0]['tokens_per_param']:.3g} tokens per parameter "
                     f"({last / 1e6:.0f}M tokens): {'; '.join(gaps)}")
    if not parts:
        return []
    return [f"Measured nearer real budgets, on a corpus read once (gap %, mean ± 95% half-width over seeds; "
            f"experiments/large_budgets/answer.md), " + ("the fit above is made from the WSD branches, not from "
            "the cosine runs" if in_fit else "not in the fit above") + f". {'. '.join(parts)}."]


def seeds_text(n):
    return f"{n} seed{'s' if n > 1 else ''}"


def check_lines(path=CHECKS):
    """The study's side checks (experiments/large_budgets/checks.json, its "cells"), one sentence a kind, or none.
    Learning-rate checks: per check, each policy's mean gap over seeds at the check's learning rate, and at that
    rate against the baseline's better rate of the two, with 95% t-intervals. Schedule checks (cosine runs over one
    of the WSD budgets): each policy's cosine gap beside the WSD branches' over the same seeds."""
    def text(m):
        return f"{m['gap']:+.2f}" + ("" if m["gap_ci95"] is None else f" ± {m['gap_ci95']:.2f}")
    try:
        with open(os.path.join(REPO, path)) as f:
            cells = json.load(f)["cells"]
        rates, schedules = [], []
        for check in dict.fromkeys(m["check"] for m in cells):
            mine = [m for m in cells if m["check"] == check]
            first = mine[0]
            by_policy = {}
            for m in mine:
                by_policy.setdefault(m["policy"], {})[m["comparison"]] = m
            # one count in the heading where every policy has it; each policy's own where the check is part-run
            counts = {len(c["at_check_lr"]["seeds"]) for c in by_policy.values() if "at_check_lr" in c}
            heading = f"{seeds_text(counts.pop())}; " if len(counts) == 1 else ""

            def named(policy, c):
                return policy + ("" if heading else f" ({seeds_text(len(c['at_check_lr']['seeds']))})")
            if first.get("varied") == "schedule":
                gaps = "; ".join(f"{named(policy, c)} {text(c['at_check_lr'])} cosine" + (
                    "" if c["at_check_lr"].get("sweep_gap") is None else f", {c['at_check_lr']['sweep_gap']:+.2f} WSD")
                    for policy, c in by_policy.items() if "at_check_lr" in c)
                schedules.append(f"width {first['width']} at {first['tokens'] / 1e6:.1f}M tokens ({heading}{check}): "
                                 f"{gaps}")
                continue
            gaps = "; ".join(f"{named(policy, c)} {text(c['at_check_lr'])}" + (
                f" (against the better baseline {text(c['vs_better_baseline'])})" if "vs_better_baseline" in c else "")
                for policy, c in by_policy.items() if "at_check_lr" in c)
            rates.append(f"width {first['width']} at learning rate {first['lr']:g} against {first['sweep_lr']:g} "
                         f"({heading}{check}): {gaps}")
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return []
    lines = [f"The learning rate's share (gap %, 95% t-interval over seeds; against the better baseline: the policy "
             f"at the check's rate over the baseline's lower loss of the two rates): {'. '.join(rates)}."] if rates else []
    if schedules:
        lines.append(f"The schedule's share (gap %: a cosine run over one of the WSD budgets beside the WSD branches "
                     f"of the same seeds): {'. '.join(schedules)}.")
    return lines


def main(argv=None):
    ap = OneLineArgumentParser(prog="python -m analysis.plan", formatter_class=HelpFormatter,
                               description=__doc__.split("\n\n")[0],
                               epilog="example: python -m analysis.plan --size 1.5b --tp 8 --tokens 3e10 --device H100"
                                      "\n\nthe rules: see the module docstring of analysis/plan.py")
    ap.add_argument("--size", default="1.5b", help="124m, medium, large, xl, 1.5b, 70b, ... or a parameter count (3e9, 3b)")
    ap.add_argument("--tp", type=int, choices=(1, 2, 4, 8), default=8, help="tensor-parallel degree")
    ap.add_argument("--tokens", type=token_count, default="3e10", help="the training budget in tokens")
    ap.add_argument("--device", choices=("H100", "H200"), default="H100", help="the step model's datasheet")
    ap.add_argument("--n_tracks", type=positive_int, default=None,
                    help="default: max(tp, 4); a multiple of tp, at most the n_head of the size timed")
    ap.add_argument("--fit", default=None, help=f"a committed fit, relative to the repository root (default: "
                    f"{LARGE_FIT} once it has {MIN_FIT_WIDTHS} widths, else {SIZE_FIT}: now {default_fit()})")
    ap.add_argument("--wide", action="store_true", help=f"one table, one row per policy (wider than {COLUMNS} columns)")
    args = ap.parse_args(argv)
    try:
        label, n_params, shape = parse_size(args.size)
    except ValueError as e:
        ap.error(str(e))
    args.n_tracks = args.n_tracks or max(args.tp, 4)
    if args.n_tracks % args.tp:
        ap.error(f"--n_tracks {args.n_tracks}: allowed: a multiple of --tp {args.tp}")
    from bench.steptime import tracks_problem  # as step_savings, here: the planner's --help needs no step model
    problem = tracks_problem(shape, args.tp, args.n_tracks)
    if problem:
        ap.error(problem)
    try:
        args.fit = args.fit or default_fit()
        with open(os.path.join(REPO, args.fit)) as f:
            fit = json.load(f)
    except (OSError, ValueError) as e:
        ap.error(f"--fit {args.fit}: not a readable size_fit.json ({e}); make it with "
                 f"python -m experiments.docs_study.run sizes")
    lacks = [k for k in FIT_KEYS if not isinstance(fit, dict) or k not in fit]
    if lacks or not isinstance(fit["policies"], dict):  # `--fit` of a JSON {} was a KeyError traceback
        ap.error(f"--fit {args.fit}: not a size_fit.json (it lacks {', '.join(lacks) or 'a policies object'}); "
                 f"make it with python -m experiments.docs_study.run sizes")
    steps = step_savings(shape, args.tp, ["baseline", *fit["policies"]], args.device, args.n_tracks)
    cells = policy_cells(fit, n_params, args.tokens, steps)
    timed = "" if label.lower() in (shape, "1.5b", "350m", "774m") else f"; timed at the {shape} shape"
    wrap = lambda text: textwrap.fill(text, COLUMNS, break_on_hyphens=False)
    extrapolation = extrapolation_label(fit, n_params, args.tokens)
    print(wrap(f"{label} ({n_params / 1e9:.3g}B parameters{timed}), tp={args.tp}, {args.device}, {args.tokens:.3g} "
               f"tokens: the loss gaps are {extrapolation}") + "\n")
    print("\n".join(tables(cells, args.tokens, bool(measured_at(fit, n_params, args.tokens)[1]), args.wide)) + "\n")
    fit_is_read_once = os.path.realpath(os.path.join(REPO, args.fit)) == os.path.realpath(os.path.join(REPO, LARGE_FIT))
    print("\n".join(wrap(line) for line in summary(fit, args, shape, n_params, cells, extrapolation)
                     + real_budget_lines(in_fit=fit_is_read_once) + check_lines()))
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))
