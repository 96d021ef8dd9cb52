"""compare_runs.py's statistics over seeds on hand-made run dirs with known numbers: Student-t quantiles,
mean ± std per cell, paired gaps to the baseline with 95% t-intervals, the trend slope, the width
comparison (Welch), the verdict sentence, the trend PNG and the JSON."""
import json
import math
import statistics
import os
import re

import pytest

import analysis.compare as compare_runs
T975 = {1: 12.706204736, 2: 4.302652730, 4: 2.776445105, 10: 2.228138852, 30: 2.042272456}  # t_{0.975, df}


def write_run(root, name, policy, seed, final, best, syncs, n_embd=384, n_tracks=2, max_iters=40, last_iter=None):
    """A finished run: evals at 0, 20 and max_iters with val losses 5.0, best, final (best <= final)."""
    run = os.path.join(root, name)
    os.makedirs(run)
    config = {"sync_policy": policy, "seed": seed, "dataset": "shakespeare_char", "n_layer": 6, "n_embd": n_embd,
              "n_tracks": n_tracks, "max_iters": max_iters}
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump(config, f)
    last = max_iters if last_iter is None else last_iter
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        for it, val in ((0, 5.0), (20, best), (last, final)):
            f.write(json.dumps({"type": "eval", "iter": it, "train_loss": val, "val_loss": val,
                                "syncs_per_fwd": syncs}) + "\n")
    return run


SYNCS = {"baseline": 12, "spd": 6, "parallel": 6, "grouped:2": 3, "grouped:6": 1}


def test_t_quantiles_and_intervals():
    for df, t in T975.items():
        assert compare_runs.t_quantile(0.975, df) == pytest.approx(t, abs=1e-7)
        assert compare_runs.t_quantile(0.025, df) == pytest.approx(-t, abs=1e-7)
    assert compare_runs.t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)  # the normal limit
    assert compare_runs.t_cdf(0.0, 3) == 0.5
    mean, half, std = compare_runs.mean_ci([1.0, 2.0, 3.0])
    assert (mean, std) == (2.0, 1.0) and half == pytest.approx(T975[2] / math.sqrt(3), abs=1e-7)
    assert compare_runs.mean_ci([4.0]) == (4.0, None, None)
    # equal sizes and variances: Welch's df is 2(n-1) = 4
    diff, half = compare_runs.welch_ci([1.0, 2.0, 3.0], [3.0, 4.0, 5.0])
    assert diff == 2.0 and half == pytest.approx(T975[4] * math.sqrt(2 / 3), abs=1e-7)


def test_cell_means_and_paired_gaps(tmp_path):
    base = {1: (2.00, 1.95), 2: (2.10, 2.05), 3: (1.90, 1.85)}
    for seed, (final, best) in base.items():
        write_run(tmp_path, f"base-s{seed}", "baseline", seed, final, best, 12)
    # grouped:6 is 1.0%, 1.0% and 0.5% above the same seed's baseline (final), 0.2% on every seed (best)
    for seed, gap in ((1, 1.0), (2, 1.0), (3, 0.5)):
        write_run(tmp_path, f"g6-s{seed}", "grouped:6", seed, base[seed][0] * (1 + gap / 100),
                  base[seed][1] * 1.002, 1)
    # spd: seed 3 unfinished (its last eval is before max_iters), so 2 seeds, better by 0.5% and 1.5%
    write_run(tmp_path, "spd-s1", "spd", 1, 2.00 * 0.995, 1.95, 6)
    write_run(tmp_path, "spd-s2", "spd", 2, 2.10 * 0.985, 2.05, 6)
    write_run(tmp_path, "spd-s3", "spd", 3, 1.5, 1.5, 6, last_iter=20)
    with open(tmp_path / "spd-s3" / "metrics.jsonl", "a") as f:  # as the trainer logs a divergence
        f.write(json.dumps({"type": "error", "iter": 21, "error": "non-finite"}) + "\n")
    runs = [compare_runs.load_run(str(p)) for p in sorted(tmp_path.iterdir())]
    stats = compare_runs.seed_statistics(runs)
    assert stats["excluded"] == ["spd-s3 (diverged)"]
    cells = {c["policy"]: c for c in stats["cells"]}
    assert [c["policy"] for c in stats["cells"]] == ["baseline", "spd", "grouped:6"]  # baseline, then by syncs
    b = cells["baseline"]
    assert b["label"] == "w384 n2" and b["seeds"] == [1, 2, 3] and b["syncs"] == 12
    assert b["final_val"]["mean"] == pytest.approx(2.0) and b["final_val"]["std"] == pytest.approx(0.1)
    assert b["best_val"]["mean"] == pytest.approx(1.95) and b["best_val"]["std"] == pytest.approx(0.1)

    g = cells["grouped:6"]["final_val"]
    assert g["gaps"] == pytest.approx([1.0, 1.0, 0.5])
    assert g["gap"] == pytest.approx(2.5 / 3)
    assert g["gap_std"] == pytest.approx(math.sqrt(1 / 12))
    assert g["gap_ci"] == pytest.approx(T975[2] * math.sqrt(1 / 12) / math.sqrt(3))  # 0.7171
    # t = 0.8333 / (0.2887 / sqrt 3) = 5.0 with 2 df: p = 0.0377 alone, but Holm over the family {spd, grouped:6}
    # doubles the smaller p (0.0754); TOST: the upper one-sided p is P(T2 <= (0.8333 - 1) / 0.1667 = -1) = 0.2113
    assert g["p_diff"] == pytest.approx(0.037750, abs=1e-5) and g["p_diff_holm"] == pytest.approx(2 * g["p_diff"])
    assert g["p_tost"] == pytest.approx(0.211325, abs=1e-5) and g["p_noninf"] == g["p_tost"]
    assert g["ci90"] == pytest.approx((2.5 / 3 - 2.919986 * 0.166667, 2.5 / 3 + 2.919986 * 0.166667), abs=1e-4)
    assert g["verdict"] == "inconclusive" and g["family_size"] == 2
    assert g["diffs"] == pytest.approx([0.02, 0.021, 0.0095])
    assert g["diff"] == pytest.approx(0.0505 / 3)
    gb = cells["grouped:6"]["best_val"]
    # the same +0.2% on every seed: inside the ±1% margin with no spread at all
    assert gb["gap"] == pytest.approx(0.2) and gb["gap_ci"] == pytest.approx(0.0, abs=1e-9)
    assert gb["verdict"] == "keeps the loss"

    s = cells["spd"]["final_val"]
    assert cells["spd"]["seeds"] == [1, 2] and s["gaps"] == pytest.approx([-0.5, -1.5])
    assert s["gap"] == pytest.approx(-1.0)
    assert s["gap_ci"] == pytest.approx(T975[1] * math.sqrt(0.5) / math.sqrt(2))  # 6.35: includes 0 and the margin
    assert s["verdict"] == "inconclusive"


def test_trend_width_and_verdict(tmp_path, capsys):
    """Gaps linear in the sync interval D: w384 slopes 0.19/0.20/0.21 % per layer (seeds 1-3), w768
    0.09/0.10/0.11; so the gap grows with D in both settings, and is smaller at the wider model."""
    slopes = {384: {1: 0.19, 2: 0.20, 3: 0.21}, 768: {1: 0.09, 2: 0.10, 3: 0.11}}
    for width, per_seed in slopes.items():
        for seed, slope in per_seed.items():
            b = 1.5 + 0.01 * seed + (0.1 if width == 384 else 0.0)
            write_run(tmp_path, f"w{width}-base-s{seed}", "baseline", seed, b, b, 12, n_embd=width)
            for policy, d in (("spd", 1), ("grouped:2", 2), ("grouped:6", 6)):
                v = b * (1 + slope * d / 100)
                write_run(tmp_path, f"w{width}-{policy.replace(':', '')}-s{seed}", policy, seed, v, v, SYNCS[policy],
                          n_embd=width)
            # parallel: not in the grouped family, so not in the slope
            write_run(tmp_path, f"w{width}-parallel-s{seed}", "parallel", seed, b * 1.05, b * 1.05, 6, n_embd=width)
    runs = [compare_runs.load_run(str(p)) for p in sorted(tmp_path.iterdir())]
    analysis = compare_runs.trend_analysis(compare_runs.seed_statistics(runs), "final_val")
    by_label = {e["label"]: e for e in analysis["settings"]}
    assert sorted(by_label) == ["w384 n2", "w768 n2"]
    narrow, wide = by_label["w384 n2"], by_label["w768 n2"]
    assert narrow["slopes"] == pytest.approx([0.19, 0.20, 0.21]) and narrow["slope"] == pytest.approx(0.20)
    assert narrow["slope_ci"] == pytest.approx(T975[2] * 0.01 / math.sqrt(3))
    assert narrow["trend"] == wide["trend"] == "grows" and wide["slope"] == pytest.approx(0.10)
    assert narrow["gaps"][6][0] == pytest.approx(1.2) and narrow["gaps"][1][0] == pytest.approx(0.2)
    (w,) = analysis["widths"]
    assert (w["v_small"], w["v_large"], w["interval"]) == (384, 768, 6)
    assert w["diff"] == pytest.approx(-0.6)
    assert w["diff_ci"] == pytest.approx(T975[4] * math.sqrt(2 * 0.0036 / 3), rel=1e-6) and w["significant"]
    sentence = compare_runs.verdict_sentence(analysis, "3 seeds per cell")
    assert sentence.startswith("Verdict (final val loss, 3 seeds per cell): the gap to the baseline grows with the "
                               "sync interval in 2 of 2 settings and shrinks in 0")
    assert "by +0.150 percentage points per layer between syncs on average" in sentence
    assert "(+0.15% at a sync every layer vs +0.90% every 6 layers, mean over settings)" in sentence
    assert "smaller at the wider model in 1 of 1 comparisons (width 384 vs 768" in sentence
    assert "wide minus narrow -0.60 points on average, 95% Welch interval excluding 0 in 1 of 1; slope wide minus " \
           "narrow -0.100 points per layer, excluding 0 in 1 of 1)" in sentence
    assert sentence.endswith(").") and not re.search(r"[.;:]\s+[A-Z]", sentence)  # one sentence

    # the command line: tables, the same sentence, the trend PNG, the JSON
    trend, js = tmp_path / "trend.png", tmp_path / "stats.json"
    assert compare_runs.main([str(tmp_path / "w*"), "--out", str(tmp_path / "x.png"), "--trend", str(trend),
                              "--stats-json", str(js)]) == 0
    out = capsys.readouterr().out
    assert sentence in out
    row = next(line.split("  ") for line in out.splitlines() if line.startswith("w768 n2") and "grouped:6" in line)
    cols = [c.strip() for c in row if c.strip()]
    assert cols[:4] == ["w768 n2", "grouped:6", "1", "3"]
    # +0.6% on every seed give or take 0.06: worse than the baseline, but inside the ±1% margin
    assert cols[-2:] == ["+0.60 ± 0.15", "keeps the loss"]  # 4.303 x 0.06 / sqrt(3)
    assert trend.stat().st_size > 10_000
    payload = json.loads(js.read_text())
    assert payload["verdict"] == sentence and len(payload["stats"]["cells"]) == 10


def test_one_seed_and_no_width_pair(tmp_path):
    write_run(tmp_path, "b", "baseline", 1, 2.0, 2.0, 12)
    write_run(tmp_path, "s", "spd", 1, 2.02, 2.0, 6)
    write_run(tmp_path, "g", "grouped:6", 1, 2.04, 2.0, 1)
    runs = [compare_runs.load_run(str(p)) for p in sorted(tmp_path.iterdir())]
    stats = compare_runs.seed_statistics(runs)
    g = next(c for c in stats["cells"] if c["policy"] == "grouped:6")["final_val"]
    assert g["gap"] == pytest.approx(2.0) and g["gap_ci"] is None and g["verdict"] is None
    header, rows = compare_runs.stats_table(stats)
    assert rows[-1][6:] == ["+2.00", "", "", "", "inconclusive (1 seed)", "", "+0.00", "inconclusive (1 seed)"]
    analysis = compare_runs.trend_analysis(stats)
    (e,) = analysis["settings"]
    assert e["slope"] == pytest.approx(0.2)  # (1, +1.0%), (6, +2.0%) and e["slope_ci"] is None and e["trend"] is None
    sentence = compare_runs.verdict_sentence(analysis, "1 seed per cell")
    assert "in 0 of 1 settings and shrinks in 0 (95% interval of the per-seed slope above or below 0; 1 with one " \
           "seed, untested)" in sentence and "the data say nothing about width" in sentence


def test_settings_sort_numbers_numerically():
    """Widths order as numbers (192 < 384 < 1024), not as strings ('1024' < '192'); unknowns go last."""
    assert sorted([1024, None, 384, 192], key=compare_runs.natural) == [192, 384, 1024, None]
    settings = [("shakespeare_char", 6, w, 2, 5000) for w in (1024, 192)]
    assert sorted(settings, key=lambda s: [compare_runs.natural(x) for x in s])[0][2] == 192


def test_slopes_compared_across_n_tracks(tmp_path):
    """One width at n_tracks 2 (per-seed slopes 0.19/0.20/0.21 % per layer) and 6 (0.69/0.70/0.71): the
    slope is 0.5 higher with more tracks, Welch interval t(0.975, 4) * sqrt(2 * 0.0001 / 3)."""
    slopes = {2: {1: 0.19, 2: 0.20, 3: 0.21}, 6: {1: 0.69, 2: 0.70, 3: 0.71}}
    for tracks, per_seed in slopes.items():
        for seed, slope in per_seed.items():
            b = 1.5 + 0.01 * seed
            write_run(tmp_path, f"n{tracks}-base-s{seed}", "baseline", seed, b, b, 12, n_tracks=tracks)
            for policy, d in (("spd", 1), ("grouped:2", 2), ("grouped:6", 6)):
                v = b * (1 + slope * d / 100)
                write_run(tmp_path, f"n{tracks}-{policy.replace(':', '')}-s{seed}", policy, seed, v, v,
                          SYNCS[policy], n_tracks=tracks)
    runs = [compare_runs.load_run(str(p)) for p in sorted(tmp_path.iterdir())]
    analysis = compare_runs.trend_analysis(compare_runs.seed_statistics(runs), "final_val")
    assert analysis["widths"] == []
    (t,) = analysis["tracks"]
    assert (t["v_small"], t["v_large"], t["interval"]) == (2, 6, 6)
    assert t["slope_diff"] == pytest.approx(0.5) and t["diff"] == pytest.approx(3.0)  # gap at D=6: 4.2 - 1.2
    half = T975[4] * math.sqrt(2 * 0.0001 / 3)
    assert t["slope_diff_ci"] == pytest.approx(half, rel=1e-6) and t["slope_significant"]
    sentence = compare_runs.verdict_sentence(analysis, "3 seeds per cell")
    assert (f"with more tracks the slope is +0.500 points per layer higher on average (1 comparison, n_tracks 2 "
            f"vs 6, +0.500 ± {half:.3f}; 95% Welch interval excluding 0 in 1 of 1)") in sentence
    assert sentence.endswith(").") and not re.search(r"[.;:]\s+[A-Z]", sentence)


def test_three_widths_compare_adjacent_pairs(tmp_path):
    """Widths 192, 384, 768 with per-width slopes 0.1, 0.3, 0.6 (% per layer, the same on both seeds): the
    width comparison is 192 vs 384 and 384 vs 768, so a third width leaves the first comparison as it was."""
    slope = {192: 0.1, 384: 0.3, 768: 0.6}
    for width in slope:
        for seed in (1, 2):
            b = 1.5 + 0.01 * seed
            write_run(tmp_path, f"w{width}-base-s{seed}", "baseline", seed, b, b, 12, n_embd=width)
            for policy, d in (("spd", 1), ("grouped:6", 6)):
                v = b * (1 + slope[width] * d / 100)
                write_run(tmp_path, f"w{width}-{policy.replace(':', '')}-s{seed}", policy, seed, v, v,
                          SYNCS[policy], n_embd=width)
    runs = [compare_runs.load_run(str(p)) for p in sorted(tmp_path.iterdir())]
    widths = compare_runs.trend_analysis(compare_runs.seed_statistics(runs), "final_val")["widths"]
    assert [(w["v_small"], w["v_large"]) for w in widths] == [(192, 384), (384, 768)]
    assert [w["slope_diff"] for w in widths] == pytest.approx([0.2, 0.3])
    assert [w["diff"] for w in widths] == pytest.approx([1.2, 1.8])  # gap at a sync every 6 layers: 0.6, 1.8, 3.6


def test_holm_and_tost():
    assert compare_runs.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert compare_runs.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert compare_runs.holm([0.9, 0.8]) == [1.0, 1.0]  # 2 x 0.8 capped at 1, and monotone
    # a family of 5 by design with 2 tested: the 3 untested count with p = 1, so the 2 are adjusted as its smallest
    assert compare_runs.holm([0.02, 0.01], family_size=5) == pytest.approx([0.08, 0.05])
    assert compare_runs.holm([0.02, 0.01], family_size=2) == compare_runs.holm([0.02, 0.01])
    # an upper bound: whatever p the untested members get later, the tested ones' adjusted p's do not rise
    for later in ([0.001, 0.5, 0.9], [0.03, 0.04, 0.05], [1.0, 1.0, 1.0]):
        assert all(a <= b + 1e-12 for a, b in zip(compare_runs.holm([0.02, 0.01] + later)[:2], [0.08, 0.05]))
    scipy_stats = pytest.importorskip("scipy.stats")
    gaps = [0.3, -0.2, 0.1, 0.4]
    p_diff, p_tost, p_noninf, (lo, hi) = compare_runs.paired_tests(gaps, 1.0)
    assert p_diff == pytest.approx(scipy_stats.ttest_1samp(gaps, 0.0).pvalue, rel=1e-6)
    upper = scipy_stats.ttest_1samp(gaps, 1.0, alternative="less").pvalue
    lower = scipy_stats.ttest_1samp(gaps, -1.0, alternative="greater").pvalue
    assert p_tost == pytest.approx(max(upper, lower), rel=1e-6) and p_noninf == pytest.approx(upper, rel=1e-6)
    half = scipy_stats.t.ppf(0.95, 3) * statistics.stdev(gaps) / math.sqrt(4)
    assert (lo, hi) == pytest.approx((statistics.fmean(gaps) - half, statistics.fmean(gaps) + half))
    # unadjusted, TOST rejects exactly when the 90% interval lies inside the margin
    for margin in (0.3, 0.5, 0.7, 1.0):
        p_tost = compare_runs.paired_tests(gaps, margin)[1]
        assert (p_tost < 0.05) == (-margin < lo and hi < margin)


def test_verdicts_on_synthetic_cells():
    cell = lambda p_diff, p_tost, gap: compare_runs.decide({"p_diff_holm": p_diff, "p_tost_holm": p_tost, "gap": gap})
    assert cell(0.001, 0.001, 0.3) == "keeps the loss"  # significant, but inside the margin
    assert cell(0.001, 0.6, 2.0) == "worse" and cell(0.001, 0.6, -2.0) == "better"
    assert cell(0.2, 0.3, 0.4) == "inconclusive"
    assert compare_runs.decide({"p_diff_holm": None}) is None  # one seed: no test


def test_means_of_values_near_the_float_limit_do_not_overflow():
    """A broken run's log can hold a loss of 1e308: two of them averaged are 1e308, not an OverflowError."""
    mean, half, std = compare_runs.mean_ci([1e308, 1e308])
    assert mean == 1e308 and std == 0.0 and half == 0.0
    diff, _ = compare_runs.welch_ci([1e308, 1e308], [1.0, 2.0])
    assert diff == 1.5 - 1e308
