"""The text analysis/compare.py prints: the run table, the timing lines, the statistics table and verdict sentence,
the budget table and the versus table."""
import math
import statistics

from analysis.runs import name_list, num
from analysis.stats import (ALPHA, MARGIN, SEED_GAP, SEED_TOKENS, fmean, seed_statistics, setting_labels,
                            sorted_settings, trend_analysis)


def timing_lines(runs):
    """What compare_runs.py may say about speed. A tok/s ratio only between runs of one setting on the same
    device (by name) at the same layout (world, dp, tp), each policy's median tok/s over its seeds against the
    baseline's; where runs differ, or their conditions are unknown, one line says so instead. One line warns
    that the timings measure the machine, not the policy, where any run was on CPU or had a load average above
    its CPU cores (other processes shared them)."""
    timed = [r for r in runs if r["tok_per_s"] is not None]
    if not timed:
        return []
    lines = []
    unknown = [r["name"] for r in timed if r["device"] is None or r["layout"] is None]
    if unknown:
        lines.append(f"timing: conditions unknown (no device or layout logged: older runs, or "
                     f"log.txt only) for {name_list(unknown)}: no speed ratio involving them")
    known = [r for r in timed if r["device"] is not None and r["layout"] is not None]
    on_cpu = [r["name"] for r in known if r["device_type"] == "cpu"]
    loaded = [f"{r['name']} ({r['load']:g} > {r['cores']})" for r in known
              if r["load"] is not None and r["cores"] is not None and r["load"] > r["cores"]]
    if on_cpu or loaded:
        why = "; ".join(x for x in (f"on CPU: {name_list(on_cpu)}" if on_cpu else "",
                                    f"load average above the CPU cores: {name_list(loaded)}" if loaded else "") if x)
        lines.append(f"timing: the timing measures the machine, not the policy ({why})")
    groups = {}
    for r in known:
        groups.setdefault((r["device"], r["layout"]), []).append(r)
    if len(groups) > 1:
        parts = [f"{device}, world {w} = dp {dp} x tp {tp}: {name_list([r['name'] for r in own])}"
                 for (device, (w, dp, tp)), own in groups.items()]
        lines.append(f"timing: the runs differ in device or layout, so no speed ratio between them ({'; '.join(parts)})")
    for (device, (w, dp, tp)), own in groups.items():
        for setting in sorted_settings(r["setting"] for r in own):
            cell = [r for r in own if r["setting"] == setting]
            base = [r["tok_per_s"] for r in cell if r["policy"] == "baseline"]
            others = sorted({r["policy"] for r in cell} - {"baseline"})
            if not base or not others:
                continue
            ref = statistics.median(base)
            ratios = []
            for policy in others:
                ratio = statistics.median(r["tok_per_s"] for r in cell if r["policy"] == policy) / ref
                ratios.append(f"{policy} x{ratio:.2f} tok/s (time per token x{1 / ratio:.2f})")
            lines.append(f"speed vs baseline ({device}, world {w} = dp {dp} x tp {tp}, median tok/s over seeds): "
                         + ", ".join(ratios))
    return lines


def baseline_stats(runs, key="final_val"):
    """(mean of `key` over the baseline runs, std or None, description); there must be one."""
    base = [r for r in runs if r["policy"] == "baseline"]
    values = [r[key] for r in base]
    mean = fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None
    noise = (f", std {num(std)} = {num(100 * std / mean, '.2f')}% (run-to-run noise)" if std is not None
             else "")
    return mean, std, f"{key.replace('_', ' ')}: mean of {len(values)} baseline run(s): {num(mean)}{noise}"


def baseline_references(runs):
    """The reference of each run's Δ columns: the mean of the baseline runs of its own setting. A setting
    without one gets no reference (None: its Δ columns show —): another setting's baseline (another width,
    n_tracks, dataset or run length) is no reference, and neither is another policy's run.
    Returns ({setting: (final mean, best mean, best std) or None}, description lines)."""
    settings = sorted_settings(r["setting"] for r in runs)
    labels = setting_labels(settings)
    refs, lines = {}, []
    for s in settings:
        own = [r for r in runs if r["setting"] == s]
        prefix = f"baseline ({labels[s]})" if len(settings) > 1 else "baseline"
        if not any(r["policy"] == "baseline" for r in own):
            refs[s] = None
            lines.append(f"{prefix}: no 'baseline' run in this setting, so its Δ columns show — (another setting's "
                         f"baseline, or another policy, is no reference)")
            continue
        final, _, final_desc = baseline_stats(own, "final_val")
        best, best_std, best_desc = baseline_stats(own, "best_val")
        refs[s] = (final, best, best_std)
        lines += [f"{prefix} {final_desc}", f"{prefix} {best_desc}"]
    return refs, lines


def table_rows(runs, refs):
    """Δ columns are relative to the run's reference (baseline_references). One run carries no verdict:
    verdicts come from the paired statistics over seeds (--stats)."""
    header = ["run", "policy", "syncs/fwd", "final iter", "final val", "best val", "Δ final vs base",
              "Δ best vs base", "tok/s"]
    rows = []
    for r in runs:
        delta = delta_best = "—"  # no baseline run in this run's setting (baseline_references says so)
        if refs[r["setting"]] is not None:
            final_base, best_base, _ = refs[r["setting"]]
            delta = f"{num(100 * (r['final_val'] - final_base) / final_base, '+.2f')}%"
            delta_best = f"{num(100 * (r['best_val'] - best_base) / best_base, '+.2f')}%"
        rows.append([r["name"], r["policy"], "?" if r["syncs"] is None else str(r["syncs"]), str(r["final_iter"]),
                     num(r["final_val"]), num(r["best_val"]), delta, delta_best,
                     "?" if r["tok_per_s"] is None else f"{r['tok_per_s']:,.0f}"])
    return header, rows


def format_table(header, rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows])


def verdict_sentence(analysis, n_seeds_text):
    """One sentence from trend_analysis's numbers."""
    metric = analysis["metric"].replace("_val", " val")
    with_slope = [e for e in analysis["settings"] if "slope" in e]
    if not with_slope:
        return (f"Verdict ({metric}): too few grouped-family policies (spd, grouped:G) with seeds paired with a "
                f"baseline to tell whether the gap grows with the sync interval.")
    n = len(with_slope)
    grows = sum(e.get("trend") == "grows" for e in with_slope)
    shrinks = sum(e.get("trend") == "shrinks" for e in with_slope)
    tested = sum(e.get("trend") is not None for e in with_slope)
    slope = fmean(e["slope"] for e in with_slope)
    lo_d = min(min(e["gaps"]) for e in with_slope)
    hi_d = max(max(e["gaps"]) for e in with_slope)
    at = lambda d: [e["gaps"][d][0] for e in with_slope if d in e["gaps"]]
    text = (f"Verdict ({metric} loss, {n_seeds_text}): the gap to the baseline grows with the sync interval in "
            f"{grows} of {n} settings and shrinks in {shrinks} (95% interval of the per-seed slope above or below 0"
            + ("" if tested == n else f"; {n - tested} with one seed, untested") +
            f"), by {slope:+.3f} percentage points per layer between syncs on average "
            f"({fmean(at(lo_d)):+.2f}% at a sync every {'layer' if lo_d == 1 else f'{lo_d} layers'} vs "
            f"{fmean(at(hi_d)):+.2f}% every {hi_d} layers, mean over settings)")
    widths = analysis["widths"]
    if not widths:
        text += "; with one width per setting, the data say nothing about width"
    else:
        smaller = sum(w["diff"] < 0 for w in widths)
        sig = sum(w["significant"] for w in widths)
        w = widths[0]
        slopes = [x for x in widths if "slope_diff" in x]
        slope_text = "" if not slopes else (
            f"; slope wide minus narrow {fmean(x['slope_diff'] for x in slopes):+.3f} points per layer, "
            f"excluding 0 in {sum(x['slope_significant'] for x in slopes)} of {len(slopes)}")
        text += (f"; at the largest common interval the gap is smaller at the wider model in {smaller} of "
                 f"{len(widths)} comparisons (width {w['v_small']} vs {w['v_large']}"
                 + (f" and others" if len({(x['v_small'], x['v_large']) for x in widths}) > 1 else "") +
                 f"; wide minus narrow {fmean(x['diff'] for x in widths):+.2f} points on average, "
                 f"95% Welch interval excluding 0 in {sig} of {len(widths)}{slope_text})")
    tracks = [t for t in analysis.get("tracks", []) if "slope_diff" in t]
    if tracks:
        t = tracks[0]
        sig = sum(x["slope_significant"] for x in tracks)
        text += (f"; with more tracks the slope is {fmean(x['slope_diff'] for x in tracks):+.3f} points "
                 f"per layer higher on average ({len(tracks)} comparison{'s' if len(tracks) > 1 else ''}, "
                 f"n_tracks {t['v_small']} vs {t['v_large']}"
                 + (" and others" if len({(x['v_small'], x['v_large']) for x in tracks}) > 1 else "") +
                 (f", {t['slope_diff']:+.3f} ± {t['slope_diff_ci']:.3f}" if len(tracks) == 1 and
                  t["slope_diff_ci"] is not None else "") +
                 f"; 95% Welch interval excluding 0 in {sig} of {len(tracks)})")
    return text + "."


def fmt_ci(mean, half, unit=""):
    return f"{num(mean, '+.2f')}{unit}" + ("" if half is None else f" ± {num(half, '.2f')}")


def _fmt_p(p):
    return "" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def stats_table(stats):
    header = ["setting", "policy", "syncs/fwd", "seeds", "final val (mean ± std)", "best val (mean ± std)",
              "Δ final % (95% CI)", "90% CI", "p Holm", "TOST p Holm", "verdict (final)", "not worse by ≥ margin",
              "Δ best % (95% CI)",
              "verdict (best)"]
    rows = []
    for c in stats["cells"]:
        row = [c["label"], c["policy"], "?" if c["syncs"] is None else str(c["syncs"]), str(len(c["seeds"]))]
        for metric in ("final_val", "best_val"):
            m = c[metric]
            row.append(num(m["mean"]) + ("" if m["std"] is None else f" ± {num(m['std'])}"))
        for metric in ("final_val", "best_val"):
            m = c[metric]
            tests = metric == "final_val"  # the verdicts use final val; best val is shown beside it
            if c["policy"] == "baseline":
                row += ["0 (reference)", "", "", "", "", ""] if tests else ["0 (reference)", ""]
                continue
            if "gap" not in m:
                row += ["no paired baseline", "", "", "", "", ""] if tests else ["no paired baseline", ""]
                continue
            n = len(m["paired_seeds"])
            row.append(fmt_ci(m["gap"], m["gap_ci"]) + ("" if n == len(c["seeds"]) else f" ({n} paired)"))
            if tests:
                ci90 = "" if m["ci90"] is None else f"[{num(m['ci90'][0], '+.2f')}, {num(m['ci90'][1], '+.2f')}]"
                row += [ci90, _fmt_p(m.get("p_diff_holm")), _fmt_p(m.get("p_tost_holm"))]
            row.append(m["verdict"] or "inconclusive (1 seed)")
            if tests:
                p = m.get("p_noninf_holm")
                row.append("" if p is None else f"{'yes' if p < ALPHA else 'not shown'} (p Holm {_fmt_p(p)})")
        rows.append(row)
    return header, rows


def fmt_tokens(t):
    if t >= 1e15:
        return f"10^{math.log10(t):.0f}"
    return f"{t / 1e9:.2f}B" if t >= 1e9 else f"{t / 1e6:.1f}M"


def crossover_text(e):
    """The crossover of one budget_analysis entry in words."""
    if "slope" not in e:
        return "one budget: no trend"
    if e["slope_ci"] is None:
        return "one seed: no interval"
    if e["crossover_tokens"] is None:
        return "flat line: no crossover"
    if e.get("trend") == "flat":  # a line whose slope's interval holds 0 places its zero anywhere
        return "none located: the slope is not told from 0"
    where = fmt_tokens(e["crossover_tokens"])
    interval = e["crossover_interval"]
    span = f" [{fmt_tokens(interval[0])}, {fmt_tokens(interval[1])}]" if interval else " (interval unbounded: slope not told from 0)"
    if e["crossover_in_range"]:
        return f"crosses 0 at {where}{span}, within the range"
    return f"not crossed within the range (the line reaches 0 at {where}{span}, an extrapolation)"


def budget_table(analysis, margin):
    """Markdown: policy x budget (gap, interval, verdict), then slope, crossover and the extrapolation."""
    budgets = sorted({(b["iters"], b["tokens"]) for e in analysis for b in e["budgets"]})
    header = ["width", "policy", "syncs/fwd"] + [f"{it} it ({fmt_tokens(t)})" for it, t in budgets] + [
        "slope, points per doubling (95% CI)", "bend, points per doubling² (95% CI)", "crossover (gap = 0)", f"at {fmt_tokens(SEED_TOKENS)} (extrapolated, 95% PI)"]
    spans = {tuple(e["common_tokens"]) for e in analysis if "common_tokens" in e}
    if spans:  # policies measured to different budgets: their slopes over the budgets all of them have
        header.insert(len(header) - 3, "slope over " + "; ".join(f"{fmt_tokens(a)}-{fmt_tokens(b)}" for a, b in sorted(spans))
                      + " (the budgets every policy has)")
    rows = []
    for e in analysis:
        by = {(b["iters"], b["tokens"]): b for b in e["budgets"]}
        cells = []
        for key in budgets:
            b = by.get(key)
            cells.append("—" if b is None else f"{fmt_ci(b['gap'], b['gap_ci'], '%')} ({b['n']}) "
                         + (b["verdict"] or "1 seed"))
        slope = "—" if "slope" not in e else fmt_ci(e["slope"], e["slope_ci"]) + f" ({e['seeds_fitted']} seeds)"
        bend = "—" if "bend" not in e else fmt_ci(e["bend"], e["bend_ci"]) + f" ({e['bend_seeds']} seeds)"
        target = "—" if "target_gap" not in e else fmt_ci(e["target_gap"], e["target_pi"], "%")
        common_slope = ([fmt_ci(e["common_slope"], e["common_slope_ci"]) + f" ({e['common_seeds']} seeds)"
                         if "common_slope" in e else "—"] if spans else [])
        rows.append([e["label"], e["policy"], str(e["syncs"]), *cells, slope, *common_slope, bend, crossover_text(e),
                     target])
    note = (f"Each budget cell: paired gap to the baseline, mean ± 95% t half-width (n seeds), verdict at that budget "
            f"(Holm over the policies of the budget; 'keeps the loss' needs TOST within ±{margin:g}%). Slope: "
            f"gap_s = a_s + b_s·log2(tokens) fitted per seed, b averaged over seeds with its t-interval. Bend: c_s of "
            f"a_s + b_s·x + c_s·x² (x = log2 tokens) per seed with 3 budgets or more, averaged likewise; an interval "
            f"that holds 0 means the budgets do not show the line bending. Crossover: "
            f"Fieller's 95% interval for the budget where the mean line is 0. The last column extrapolates the line to "
            f"the seed's {fmt_tokens(SEED_TOKENS)} tokens (its expectation on record: {SEED_GAP:+.1f}%), with a 95% "
            f"prediction interval for one seed: an extrapolation, not a measurement.")
    return format_table(header, rows, True) + "\n\n" + note


def versus_table(rows, other):
    header = ["width", "budget (iters)", "policy", "seeds", "gap here", f"gap in {other}", "here minus there (95% CI)",
              "differ?"]
    body = [[str(r["n_embd"]), str(r["iters"]), r["policy"], ",".join(map(str, r["seeds"])), f"{r['gap']:+.2f}%",
             f"{r['other_gap']:+.2f}%", fmt_ci(r["diff"], r["diff_ci"], " points"),
             "n/a (1 seed)" if r["diff_ci"] is None else "yes" if r["differ"] else "no: within the seeds' noise"]
            for r in rows]
    return (format_table(header, body, True) + "\n\nEach seed's paired gap (policy vs the baseline of the same seed and "
            "set) here minus the same seed's gap there; 95% t-interval over seeds (n - 1 df). 'differ' when it "
            "excludes 0.")


def stats_report(runs, metric, markdown, margin=MARGIN):
    """(text, stats dict, analysis dict): the seed-statistics table, exclusions, notes and the verdict."""
    stats = seed_statistics(runs, margin=margin)
    analysis = trend_analysis(stats, metric)
    seeds = sorted({len(c["seeds"]) for c in stats["cells"]})
    n_seeds_text = (f"{seeds[0]} seed{'s' if seeds[0] > 1 else ''} per cell" if len(seeds) == 1 else
                    f"{seeds[0]}-{seeds[-1]} seeds per cell") if seeds else "no seeds"
    lines = ["", f"statistics over seeds. Δ: paired relative gap to the baseline of the same setting (seed by seed), "
                 f"mean ± half-width of the {stats['level']:.0%} t-interval (n - 1 df). Family: the policies of one "
                 f"setting; p Holm: two-sided paired t-test of Δ = 0, Holm-adjusted; TOST p Holm: equivalence within "
                 f"±{stats['margin']:g}% (the margin), Holm-adjusted. Verdict at α = {stats['alpha']:g}: 'keeps the "
                 f"loss' when TOST rejects (the 90% interval lies inside ±{stats['margin']:g}%), else 'worse'/'better' "
                 f"when the difference test rejects, else 'inconclusive'. 'not worse by ≥ margin': the upper one-sided "
                 f"test of TOST alone (non-inferiority), Holm-adjusted."]
    header, rows = stats_table(stats)
    lines.append(format_table(header, rows, markdown))
    if stats["excluded"]:
        lines.append(f"not finished (no eval at max_iters), left out of the statistics: {', '.join(stats['excluded'])}")
    lines += [f"note: {n}" for n in stats["notes"]]
    verdict = verdict_sentence(analysis, n_seeds_text)
    lines += ["", verdict]
    return "\n".join(lines), stats, analysis, verdict
