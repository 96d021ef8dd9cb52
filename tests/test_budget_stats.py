"""compare_runs.py's gap against the budget: the per-seed line fit, Fieller's crossover interval (against a
scan of the definition), the slope interval and extrapolation (against numbers worked out by hand), and the
paired difference of two sets of runs (--versus)."""
import math

import pytest

from analysis.compare import bend_fit, budget_analysis, crossover_text, fieller, line_fit, seed_statistics, t_quantile, versus


def test_line_fit_by_hand():
    # y = 1 + 2x through (0, 1), (1, 3), (2, 5); with a kink the slope is sum(dx dy) / sum(dx^2)
    assert line_fit([0, 1, 2], [1, 3, 5]) == pytest.approx((1.0, 2.0))
    assert line_fit([0, 1, 2], [0, 0, 3]) == pytest.approx((-0.5, 1.5))  # dx = -1, 0, 1; dy = -1, -1, 2


def test_bend_fit_by_hand():
    # an exact parabola gives its c back whatever its line part; a straight line bends by 0
    xs = [14.0, 15.0, 16.0, 17.0]
    assert bend_fit(xs, [3 - 2 * x + 0.25 * x * x for x in xs]) == pytest.approx(0.25)
    assert bend_fit(xs, [1 + 2 * x for x in xs]) == pytest.approx(0.0, abs=1e-12)
    # three points: the parabola through them; y = 0, 0, 1 at x = -1, 0, 1 is (x^2 + x) / 2
    assert bend_fit([-1, 0, 1], [0, 0, 1]) == pytest.approx(0.5)


def scan(fits, level=0.95, lo=-50.0, hi=50.0, steps=200001):
    """The definition: the x where |mean(a + b x)| <= t * sd(a + b x) / sqrt(n), on a fine grid."""
    n = len(fits)
    t = t_quantile(0.5 + level / 2, n - 1)
    inside = []
    for k in range(steps):
        x = lo + (hi - lo) * k / (steps - 1)
        values = [a + b * x for a, b in fits]
        mean = sum(values) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        if abs(mean) <= t * sd / math.sqrt(n):
            inside.append(x)
    return inside


def test_fieller_interval_is_where_the_t_interval_holds_zero():
    fits = [(-2.0, 1.0), (-4.5, 2.0), (-2.4, 1.6)]  # lines crossing 0 at 2, 2.25, 1.5
    x0, interval, kind = fieller(fits)
    assert x0 == pytest.approx(8.9 / 4.6)  # -mean(a) / mean(b)
    inside = scan(fits)
    assert kind == "bounded" and interval[0] == pytest.approx(min(inside), abs=1e-3)
    assert interval[1] == pytest.approx(max(inside), abs=1e-3)
    # slopes of both signs: the slope is not told from 0, so the interval does not close
    assert fieller([(-1.0, 1.0), (1.0, -0.5), (0.5, 0.2)])[2] == "unbounded"


def cell(iters, policy, gaps):
    """A seed_statistics-like cell: a budget of iters x 1,000 tokens and the paired gaps per seed."""
    return {"setting": ["d", 12, 768, 4, iters], "label": "w768 n4 " + str(iters), "policy": policy, "syncs": 1,
            "tokens": iters * 1000, "final_val": {"gaps": list(gaps.values()), "paired_seeds": list(gaps),
                                                  "gap": sum(gaps.values()) / len(gaps), "gap_ci": None}}


def test_budget_analysis_slope_crossover_and_extrapolation_by_hand():
    # seed 1: gap = -3 + 1 * log2(T / 1000 / 64) at T = 64k, 128k, 256k tokens: -3, -2, -1 (lines on log2 tokens)
    gaps = {1: [-3.0, -2.0, -1.0], 2: [-2.0, 0.0, 2.0], 3: [-2.5, -1.0, 0.5]}
    cells = [cell(it, "grouped:12", {s: g[k] for s, g in gaps.items()}) for k, it in enumerate((64, 128, 256))]
    stats = {"level": 0.95, "cells": cells}
    [e] = budget_analysis(stats, target_tokens=2 ** 20 * 1000)
    # per-seed slopes 1, 2, 1.5 per doubling: mean 1.5, sd 0.5, half-width t(0.975, 2) * 0.5 / sqrt(3)
    assert e["slope"] == pytest.approx(1.5) and e["trend"] == "grows"
    assert e["slope_ci"] == pytest.approx(4.302653 * 0.5 / math.sqrt(3), rel=1e-5)
    # at x = log2(64000) = 15.966 the mean gap is -2.5 and it rises 1.5 per doubling: 0 at 5/3 doublings further
    assert e["crossover_tokens"] == pytest.approx(64000 * 2 ** (5 / 3), rel=1e-9) and e["crossover_in_range"]
    # at 2^20 * 1000 tokens (14 doublings after 64k): -3 + 14, -2 + 28, -2.5 + 21 = 11, 26, 18.5
    assert e["target_gap"] == pytest.approx(18.5)
    assert e["target_pi"] == pytest.approx(4.302653 * 7.5 * math.sqrt(1 + 1 / 3), rel=1e-5)
    assert [b["n"] for b in e["budgets"]] == [3, 3, 3] and e["seeds_fitted"] == 3
    # straight lines per seed: no bend, and the interval of three zeros is zero
    assert e["bend"] == pytest.approx(0.0, abs=1e-9) and e["bend_seeds"] == 3


def test_common_range_slope_when_policies_reach_different_budgets():
    """A policy measured to fewer budgets: every policy also gets its slope over the budgets all of them have;
    the longer one's full slope stays as it is."""
    long = {1: [-3.0, -3.0, 1.0], 2: [-2.0, -1.0, 4.0]}   # 64k, 128k, 256k; flat, then a jump at 256k
    short = {1: [-1.0, -2.0], 2: [0.0, -2.0]}
    cells = [cell(it, "spd", {s: g[k] for s, g in long.items()}) for k, it in enumerate((64, 128, 256))]
    cells += [cell(it, "parallel", {s: g[k] for s, g in short.items()}) for k, it in enumerate((64, 128))]
    by = {e["policy"]: e for e in budget_analysis({"level": 0.95, "cells": cells})}
    # spd per seed over 64k-256k: slopes (4 / 2, 6 / 2) = 2, 3; over 64k-128k alone: 0 and 1
    assert by["spd"]["slope"] == pytest.approx(2.5)
    assert by["spd"]["common_slope"] == pytest.approx(0.5) and by["spd"]["common_tokens"] == [64000, 128000]
    assert by["spd"]["common_slope_ci"] == pytest.approx(12.706205 * math.sqrt(0.5) / math.sqrt(2), rel=1e-5)
    # parallel has only the common budgets: the same slopes, -1 and -2
    assert by["parallel"]["common_slope"] == pytest.approx(by["parallel"]["slope"]) == pytest.approx(-1.5)
    # its interval, -1.5 +- 6.35 (1 df), holds 0: the line's zero is nowhere in particular
    assert by["parallel"]["trend"] == "flat" and crossover_text(by["parallel"]).startswith("none located")
    # one policy alone (or all with the same budgets): no common-range slope
    assert "common_slope" not in budget_analysis({"level": 0.95, "cells": cells[:3]})[0]


def test_versus_pairs_seed_by_seed():
    def run(policy, seed, val, iters=640):
        return {"name": f"{policy}-{seed}", "policy": policy, "seed": seed, "setting": ("d", 12, 768, 4, iters),
                "complete": True, "diverged": False, "syncs": 1, "final_val": val, "best_val": val, "tokens": iters}
    wsd = [run("baseline", 1, 4.0), run("baseline", 2, 4.1), run("grouped:12", 1, 4.04), run("grouped:12", 2, 4.141)]
    cosine = [run("baseline", 1, 4.0), run("baseline", 2, 4.2), run("grouped:12", 1, 3.96), run("grouped:12", 2, 4.2)]
    [row] = versus(wsd, cosine)
    # seed 1: +1% here, -1% there: +2 points; seed 2: +1% here, 0% there: +1 point
    assert row["diffs"] == pytest.approx([2.0, 1.0]) and row["diff"] == pytest.approx(1.5)
    assert row["diff_ci"] == pytest.approx(12.706205 * math.sqrt(0.5) / math.sqrt(2), rel=1e-5)
    assert row["differ"] is False and row["iters"] == 640


def test_seed_statistics_carries_the_budget_in_tokens():
    runs = [{"name": f"{p}-{s}", "policy": p, "seed": s, "setting": ("d", 12, 768, 4, 10), "complete": True,
             "diverged": False, "syncs": 1, "final_val": v, "best_val": v, "tokens": 327680}
            for p, s, v in (("baseline", 1, 4.0), ("spd", 1, 3.9))]
    assert {c["tokens"] for c in seed_statistics(runs)["cells"]} == {327680}
