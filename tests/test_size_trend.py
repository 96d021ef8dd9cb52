"""The size axis of the budget study (analysis/size_trend.py), its `sizes` report (experiments/docs_study/run.py) and
the planner (analysis/plan.py), on hand-computed cases and on the committed 768-wide records."""
import json
import math
import os
import subprocess
import sys

import pytest

from analysis import plan
from analysis.compare import t_quantile
from analysis.size_trend import (crossover_at, crossover_fit, gap_at, gpt_params, heldout, heldout_table, size_fit,
                                 size_table, slope_at, width_crossover, width_line)
from analysis.stats import curvature_tests
from experiments.docs_study import run as study
from tests.conftest import REPO, run_env

T95 = lambda df: t_quantile(0.975, df)


def test_gpt_params_is_the_trainers_count():
    # 12 (12 * 768^2 + 2 * 768) + 768 + 50304 * 768 = 84,953,088 + 768 + 38,633,472: config.json's derived n_params
    # of every 768-wide run (log.txt: '123.59M parameters'); width 256: 9,443,328 + 256 + 12,877,824
    assert gpt_params(12, 768, 50304) == 123_587_328
    assert gpt_params(12, 256, 50304) == 22_321_408
    with open(os.path.join(REPO, "experiments", "docs_study", "budgets", "runs", "d768-b320-baseline-s1337",
                           "config.json")) as f:
        assert json.load(f)["derived"]["n_params"] == gpt_params(12, 768, 50304)


def three_widths(x0s=(24, 25, 26)):
    """Widths at u = log2 N = 20, 21, 22, each with 3 seeds of slope b = 2 and intercepts -2 x0 - 1, -2 x0, -2 x0 + 1:
    mean line 2 (x - x0), so the crossover is x0; s_aa = 1, s_bb = s_ab = 0, so v = s_aa / (n b^2) = 1 / 12."""
    points = []
    for u, x0 in zip((20, 21, 22), x0s):
        c = width_crossover([(-2 * x0 - 1, 2.0), (-2 * x0, 2.0), (-2 * x0 + 1, 2.0)])
        points.append(dict(u=u, **c))
    return points


def test_crossover_against_size_hand_case():
    points = three_widths()
    # one width: x0 = 24, v = 1/12 with 2 df; Fieller's interval is 24 -+ t(2) sqrt(v) here (no spread in b)
    assert points[0]["x"] == pytest.approx(24) and points[0]["var"] == pytest.approx(1 / 12) and points[0]["df"] == 2
    assert points[0]["lo"] == pytest.approx(24 - T95(2) * math.sqrt(1 / 12))
    fit = crossover_fit(points)
    # x0 = 4 + u exactly: c = 1, alpha = 4, no residual (Birge R = 1). Equal weights 12: lambda_c = (u - 21) / 2,
    # Var(c) = sum lambda^2 v = 2 (1/4)(1/12) = 1/24; the width the unit: 3 widths - 2 parameters = 1 df
    assert fit["c"] == pytest.approx(1.0) and fit["alpha"] == pytest.approx(4.0) and fit["birge"] == 1.0
    assert fit["df"] == 1
    assert fit["c_ci"] == pytest.approx(T95(1) * math.sqrt(1 / 24))  # 12.706 * 0.20412 = 2.594
    assert not fit["c_told_from_0"] and not fit["c_told_from_1"]  # with 1 df neither 0 nor 1 is excluded
    # at u = 30: x = 34; lambda_i = 1/3 + 9 (u_i - 21) / 2 = (-25/6, 1/3, 29/6), sum lambda^2 v = 1470/432,
    # plus one new width's v = 1/12 = 36/432: 1506/432, with 1 df
    x, lo, hi, how = crossover_at(points, 2 ** 30)
    assert x == pytest.approx(34.0) and "(1 df)" in how
    assert hi - x == pytest.approx(T95(1) * math.sqrt(1506 / 432)) and x - lo == pytest.approx(hi - x)
    assert "prediction interval" in how


def test_two_widths_leave_no_degree_of_freedom():
    # the width is the unit: 2 widths - 2 parameters = 0 df, so c and the crossover at a new size get no interval
    fit = crossover_fit(three_widths()[:2])
    assert fit["c"] == pytest.approx(1.0) and fit["df"] == 0 and fit["c_ci"] is None
    assert fit["c_told_from_0"] is None and fit["c_told_from_1"] is None
    x, lo, hi, how = crossover_at(three_widths()[:2], 2 ** 30)
    assert x == pytest.approx(34.0) and lo is None and hi is None and "no interval" in how
    assert slope_at([dict(u=u, b=b) for u, b in ((20, 1.0), (21, 2.0))], 2 ** 22)["ci"] is None


def test_scatter_beyond_the_seeds_widens_c():
    # x0 = 24, 26, 26: c = (26 - 24) / 2 = 1, residuals (-1/3, 2/3, -1/3), Q = 12 * 6/9 = 8 over k - 2 = 1: R = 8;
    # Var(c) = 8 * 1/24 = 1/3 with 1 df: half-width t(1) sqrt(1/3) = 7.34, so c is told from neither 0 nor 1
    fit = crossover_fit(three_widths((24, 26, 26)))
    assert fit["c"] == pytest.approx(1.0) and fit["birge"] == pytest.approx(8.0) and fit["df"] == 1
    assert fit["c_ci"] == pytest.approx(T95(1) * math.sqrt(1 / 3))
    assert not fit["c_told_from_0"] and not fit["c_told_from_1"]


def test_no_crossover_where_the_slope_is_not_told_from_0():
    # slopes +1 and -1: mean 0, Fieller unbounded: no crossover located, and no fit from fewer than two widths
    assert width_crossover([(0.0, 1.0), (0.0, -1.0), (1.0, 0.5)]) is None
    assert crossover_fit(three_widths()[:1]) is None
    x, lo, hi, how = crossover_at(three_widths()[:1], 2 ** 30)  # one width: carried over, c assumed 0
    assert x == pytest.approx(24) and "c assumed 0" in how


def line(u, a, b=0.0):
    """A width's seed-mean line gap = a + b log2 T at N = 2^u."""
    return dict(width=2 ** (u - 14), n_params=2 ** u, u=u, a=a, b=b, tokens_per_param=[1, 8])


def test_gap_surface_prediction_interval_hand_case():
    # one seed-mean value per width, y = 1, 4, 5 at u = 10, 11, 12 (flat lines): OLS on u: u_mean 11, S_uu 2, slope
    # (-1 + 5) / 2 = 2, mean 10/3; residuals -1/3, 2/3, -1/3: s^2 = (6/9) / (3 - 2) = 2/3 with 1 df (3 widths - 2).
    # At u = 13: 10/3 + 4 = 22/3, half = t(1) sqrt(2/3 (1 + 1/3 + 4/2)) = t(1) sqrt(20/9)
    lines = [line(10, 1.0), line(11, 4.0), line(12, 5.0)]
    g = gap_at(lines, 2 ** 13, 2 ** 16)
    assert g["gap"] == pytest.approx(22 / 3) and g["df"] == 1 and g["size_measured"]
    assert g["pi"] == pytest.approx(T95(1) * math.sqrt(20 / 9))
    s = slope_at(lines, 2 ** 13)  # every b is 0: the mean slope is 0 with no spread
    assert s["slope"] == pytest.approx(0.0) and s["ci"] == pytest.approx(0.0, abs=1e-12)
    # two widths: the line through them, no interval (0 df)
    two = gap_at(lines[:2], 2 ** 13, 2 ** 16)
    assert two["gap"] == pytest.approx(1 + 3 * 3) and two["pi"] is None and two["df"] == 0


def test_gap_surface_follows_tokens_per_parameter():
    # one width at u = 10 with gap = 1 + 0.5 log2 T: asked at N = 2^20 and T = 2^24 (16 tokens per parameter) it
    # is read at its own 16 tokens per parameter, T = 2^14: 1 + 0.5 * 14 = 8; the size term assumed 0, no interval
    g = gap_at([line(10, 1.0, 0.5)], 2 ** 20, 2 ** 24)
    assert g["gap"] == pytest.approx(8.0) and g["pi"] is None and g["df"] == 0 and not g["size_measured"]


def test_one_width_gap_is_its_seed_mean_line_at_the_same_tokens_per_parameter():
    # with the 768 sweep alone, gap_at anywhere is the mean of the seeds' lines at the asked tokens per parameter
    # (every seed has every budget), with no interval: one width leaves 0 df
    with open(os.path.join(REPO, "experiments", "docs_study", "budgets", "stats.json")) as f:
        entries = json.load(f)["budgets"]
    n = 123_587_328
    for e in entries:
        if "fits" not in e or not e["fits"]:
            continue
        one = width_line(768, n, e["budgets"])
        g = gap_at([one], 1.5e9, 20 * 1.5e9)
        x = math.log2(20 * n)
        assert g["gap"] == pytest.approx(sum(f["a"] + f["b"] * x for f in e["fits"].values()) / len(e["fits"]))
        assert g["pi"] is None and not g["size_measured"]
        c = width_crossover([(f["a"], f["b"]) for f in e["fits"].values()])
        if e.get("crossover_interval") and e["trend"] != "flat":
            assert [2 ** c["lo"], 2 ** c["hi"]] == pytest.approx(e["crossover_interval"])


def bent_entry(policy, bends, budgets=4):
    """A budget_analysis entry of 3 seeds whose gaps are exactly 1 - x + c_s x^2 (x = log2 tokens = 1..budgets)."""
    return dict(policy=policy, budgets=[dict(tokens=2 ** x, gaps={str(s): 1 - x + c * x * x for s, c in
                                                                   enumerate(bends)}) for x in range(1, budgets + 1)])


def test_curvature_test_over_seeds_with_holm():
    from analysis.stats import t_cdf
    tests = curvature_tests([bent_entry("bent", (1.0, 1.1, 0.9)), bent_entry("flat", (0.1, -0.1, 0.0)),
                             bent_entry("short", (1.0, 1.0, 1.0), budgets=2)])
    bent, flat = tests["bent"], tests["flat"]
    assert "short" not in tests  # two budgets: no bend to fit
    # bends 1.0, 1.1, 0.9: mean 1, sd 0.1, t = 1 / (0.1 / sqrt 3) = sqrt 300 with 2 df; Holm over 2 policies
    p = 2 * (1 - t_cdf(math.sqrt(300), 2))
    assert bent["c"] == pytest.approx(1.0) and bent["seeds"] == 3 and bent["p"] == pytest.approx(p)
    assert bent["p_holm"] == pytest.approx(2 * p) and bent["significant"]
    assert flat["c"] == pytest.approx(0.0, abs=1e-12) and flat["p"] == pytest.approx(1.0) and not flat["significant"]


def held_items(last_gap_at_22=None):
    """Widths at u = 20, 21, 22, budgets at 1, 2, 4 tokens per parameter (r = 0, 1, 2), gap = 1 + 0.5 r + d_w,
    d = (0.1, -0.2, 0.1) (orthogonal to u: the regression across widths is flat)."""
    items = []
    for u, d in ((20, 0.1), (21, -0.2), (22, 0.1)):
        budgets = [dict(iters=2 ** r, tokens=2 ** (u + r), gap=1 + 0.5 * r + d) for r in (0, 1, 2)]
        if u == 22 and last_gap_at_22 is not None:
            budgets[-1]["gap"] = last_gap_at_22
        items.append((dict(width=2 ** (u - 14), n_params=2 ** u), dict(budgets=budgets)))
    return items


def test_heldout_coverage_hand_case():
    # without r = 2 every line is still exact; at r = 2 the widths give 2 + d, regressed on u: 2 at every u, s^2 =
    # (0.01 + 0.04 + 0.01) / 1, half at u_w: t(1) sqrt(0.06 (1 + 1/3 + (u_w - 21)^2 / 2))
    rows = heldout(held_items())
    for r, (u, d) in zip(rows, ((20, 0.1), (21, -0.2), (22, 0.1))):
        assert r["gap"] == pytest.approx(2.0) and r["truth"] == pytest.approx(2 + d) and r["df"] == 1
        assert r["pi"] == pytest.approx(T95(1) * math.sqrt(0.06 * (4 / 3 + (u - 21) ** 2 / 2))) and r["inside"]
    far = heldout(held_items(last_gap_at_22=100.0))
    assert [r["inside"] for r in far] == [True, True, False]
    fit = dict(heldout={"p": far}, policies={"p": dict(curved=[])})
    assert "Coverage: 2/3 held-out truths inside" in heldout_table(fit)
    two = heldout(held_items()[:2])  # two widths: 0 df, no interval, nothing counted
    assert all(r["pi"] is None and r["inside"] is None for r in two)
    assert "Coverage: none (no interval)" in heldout_table(dict(heldout={"p": two}, policies={"p": dict(curved=[])}))
    assert "no interval (0 df)" in heldout_table(dict(heldout={"p": two}, policies={"p": dict(curved=[])}))


def test_committed_size_outputs_regenerate_from_the_stored_runs():
    widths = study.load_widths(study.SIZE_SWEEPS, study.BUDGET_SWEEP)
    fit = size_fit(widths)
    with open(os.path.join(REPO, study.SIZE_SWEEPS, "size_fit.json")) as f:
        assert f.read() == json.dumps(fit, indent=1) + "\n"
    with open(os.path.join(REPO, study.SIZE_SWEEPS, "size_table.md")) as f:
        assert f.read() == size_table(fit)
    with open(os.path.join(REPO, study.SIZE_SWEEPS, "heldout.md")) as f:
        assert f.read() == heldout_table(fit)
    rerun = [w["sweep"] for w in widths if os.path.isdir(os.path.join(REPO, w["sweep"], "earlier"))
             and w["sweep"] != study.BUDGET_SWEEP]
    assert rerun  # width 256's and 384's trunks trained twice
    for sweep in rerun:  # the trunks trained twice, as `sizes` writes them
        with open(os.path.join(REPO, sweep, "rerun_check.md")) as f:
            assert f.read() == study.rerun_check(sweep)


def test_sizes_refuses_a_width_without_runs_and_less_data(tmp_path):
    (tmp_path / "w256" / "runs").mkdir(parents=True)
    with pytest.raises(SystemExit, match="w256.*no run directories"):
        study.size_report(str(tmp_path), study.BUDGET_SWEEP)
    (tmp_path / "w256" / "runs").rmdir()
    (tmp_path / "w256").rmdir()
    (tmp_path / "size_fit.json").write_text(json.dumps({"widths": [{"width": 768, "runs": 999}]}))
    with pytest.raises(SystemExit, match="made from more runs"):
        study.size_report(str(tmp_path), study.BUDGET_SWEEP)
    assert sorted(os.listdir(tmp_path)) == ["size_fit.json"]  # nothing written


def fake_fit(tmp_path, measured_gap=None, curved=False):
    """A policy measured at four widths, N = 2^19, 2^20, 2^22, 2^23 (tokens per parameter 1 to 8), each with a flat
    seed-mean line at 3, 1, 1, 3%: OLS on u: mean 2, slope 0, residuals (1, -1, -1, 1), s^2 = 4 / (4 - 2) = 2 with
    2 df, S_uu = 10. At N = 2^21 (u = 21 = u_mean) the gap is 2% with half-width t(2) sqrt(2 (1 + 1/4)) =
    t(2) sqrt(2.5) = 4.3027 * 1.5811 = 6.8030. measured_gap: the study's cell at width 64 (N = 2^20) and 2^21 tokens,
    where the fit gives 2% with half-width t(2) sqrt(2 (1 + 1/4 + 1/10)) = t(2) sqrt(2.7) = 7.0700. curved: width 64's
    bend significant."""
    lines = [dict(width=2 ** (u - 14), n_params=2 ** u, u=u, a=a, b=0.0, tokens_per_param=[1, 8])
             for u, a in ((19, 3.0), (20, 1.0), (22, 1.0), (23, 3.0))]
    cell = dict(iters=100, tokens=2 ** 21, gap=measured_gap, gap_ci=0.5, n=2)
    bend = dict(c=0.7, ci=0.1, seeds=3, p=0.001, p_holm=0.004, significant=True) if curved else None
    fit = dict(level=0.95, size_measured=True, measured=dict(n_params=[2 ** 19, 2 ** 23], tokens_per_param=[1, 8]),
               widths=[dict(width=l["width"], n_params=l["n_params"], sweep=f"w{l['width']}") for l in lines],
               policies={"grouped:12": dict(lines=lines, curved=[64] if curved else [],
                                            widths=[dict(width=64, curvature=bend,
                                                         budgets=[cell] if measured_gap is not None else [])])})
    path = tmp_path / "size_fit.json"
    path.write_text(json.dumps(fit))
    return str(path)


# a fake step of 2.4 minutes (144,000 ms = 0.04 h) for the baseline and 80% of it for the policy: times in hours
STEPS = {"baseline": dict(spec="baseline", syncs=24, base_ms=144_000.0, ms=144_000.0, saving=0.0, lo=0.0, hi=0.0,
                          time_error=20.0),
         "grouped:12": dict(spec="grouped:12", syncs=1, base_ms=144_000.0, ms=115_200.0, saving=20.0, lo=10.0, hi=30.0,
                            time_error=20.0)}


def table(out, title):
    """{policy: its row} of the planner's table whose title starts with `title` (rows up to the next blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 3  # title, header, rule
    rows = lines[start:lines.index("", start)]
    return {row.split()[0]: row for row in rows}


def test_planner_hand_case(tmp_path, monkeypatch, capsys):
    # baseline loss L = B / T (E = A = 0, B = 1, b = 1): the policy reaches L(T) at T' = T (1 + gap / 100).
    # T = 12,288,000 = 1,000 steps of 12,288 tokens at N = 2^21 (5.86 tokens per parameter: measured range).
    # baseline: 1,000 steps x 0.04 h = 40.0 h. grouped:12: gap 2% -> T' = 1.02 T, 1,020 steps x 0.032 h = 32.6 h;
    # bounds: gap 2 -+ 6.8030 -> T' = 0.951970 T at 0.04 (1 - 0.30) = 0.028 h per step: 26.7 h; 1.088030 T at 0.036 h: 39.2 h
    monkeypatch.setattr(plan, "CHINCHILLA", dict(E=0.0, A=0.0, B=1.0, a=1.0, b=1.0))
    monkeypatch.setattr(plan, "step_savings", lambda shape, tp, policies, device, n_tracks: STEPS)
    assert plan.main(["--fit", fake_fit(tmp_path), "--size", "2097152", "--tokens", "12288000", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    step, loss, time = table(out, "What a training step"), table(out, "What the loss costs"), table(out, "How long")
    assert "40.0 h" in time["baseline"] and time["baseline"].endswith("±20%")
    half = T95(2) * math.sqrt(2.5)
    assert f"+2.00%     [{2 - half:+.2f}, {2 + half:+.2f}]" in loss["grouped:12"] and half == pytest.approx(6.8030, abs=1e-4)
    assert "+20%    [+10, +30]" in step["grouped:12"] and "1.25e+07" in time["grouped:12"]
    assert f"32.6 h      [{(1 - (half - 2) / 100) * 28:.1f} h, {(1 + (2 + half) / 100) * 36:.1f} h]" in time["grouped:12"]
    assert "32.6 h      [26.7 h, 39.2 h]" in time["grouped:12"]
    assert "within the measured range" in out and "measured ±" not in out  # N = 2^21: no width measured it
    assert max(len(line) for line in out.splitlines()) <= plan.COLUMNS


def test_planner_does_not_extrapolate_a_bending_line(tmp_path, monkeypatch, capsys):
    # width 64's bend is significant: past the measured 1-8 tokens per parameter (here 100) no number, the range and
    # "not extrapolated: curvature" instead; inside it (5.9 tokens per parameter) the fit's number as before
    monkeypatch.setattr(plan, "step_savings", lambda shape, tp, policies, device, n_tracks: STEPS)
    path = fake_fit(tmp_path, curved=True)
    plan.main(["--fit", path, "--size", "2097152", "--tokens", str(100 * 2097152)])
    out = capsys.readouterr().out
    loss, time = table(out, "What the loss costs")["grouped:12"], table(out, "How long")["grouped:12"]
    assert loss.split(None, 1)[1].split("  ")[0] == plan.CURVED and "measured 1-8 tokens/param" in loss
    assert plan.CURVED in time and "%" not in loss
    assert "grouped:12: not extrapolated: its gap bends in log2 tokens (width 64: c = +0.70" in " ".join(out.split())
    assert "3.64 doublings past the largest measured (8)" in out  # log2(100 / 8)
    plan.main(["--fit", path, "--size", "2097152", "--tokens", "12288000"])
    assert "+2.00%" in table(capsys.readouterr().out, "What the loss costs")["grouped:12"]


def test_planner_names_its_extrapolation_in_doublings(tmp_path, monkeypatch, capsys):
    # N = 2^25 is 4x the largest measured 2^23: 2 doublings; 2^25 x 32 tokens: 32 per parameter, 2 doublings past 8
    monkeypatch.setattr(plan, "step_savings", lambda shape, tp, policies, device, n_tracks: STEPS)
    plan.main(["--fit", fake_fit(tmp_path), "--size", str(2 ** 25), "--tokens", str(2 ** 30)])
    out = capsys.readouterr().out
    head = " ".join(out.split("\n\n")[0].split())
    assert "N 4x the largest measured width, 2.00 doublings past it" in head
    assert "32 tokens/param, 2.00 doublings past the largest measured (8)" in head
    assert "Extrapolated: the gap to N = 0.0336B and 32 tokens per parameter." in " ".join(out.split())


def test_planner_does_not_reach_when_the_baseline_loss_stops_falling(tmp_path, monkeypatch, capsys):
    # b = 0: the baseline's loss does not fall with tokens, so a policy 2% worse never reaches it
    monkeypatch.setattr(plan, "CHINCHILLA", dict(E=0.0, A=0.0, B=1.0, a=1.0, b=0.0))
    monkeypatch.setattr(plan, "step_savings", lambda shape, tp, policies, device, n_tracks: STEPS)
    plan.main(["--fit", fake_fit(tmp_path), "--size", "2e6", "--tokens", "1.2e7"])
    row = table(capsys.readouterr().out, "How long")["grouped:12"]
    assert row.rstrip().endswith("does not reach it")


def test_the_time_to_reach_is_not_searched_below_the_measured_tokens_per_parameter(monkeypatch):
    """L_b = 1 / T. A gap line of +5% at T rising 20 points a doubling is below -100% from 5.25 doublings below T,
    where the scan used to find that the policy "reached" L_b(T), with T / 1,024 tokens (the corpus read once's fit
    gave grouped:12 2.9e7 tokens for 3e10 at 1.5B); from the least measured budget (lowest) it finds the crossing
    between T and 2T. A policy already at the loss where the data begins is not located (BELOW_DATA)."""
    monkeypatch.setattr(plan, "CHINCHILLA", dict(E=0.0, A=0.0, B=1.0, a=1.0, b=1.0))
    T = 2.0 ** 30
    rising = lambda t: 5 + 20 * (math.log2(t) - 30)
    assert plan.tokens_to_reach(rising, 1.0, T) == T / 1024  # the old, unclipped search: its first point
    assert T < plan.tokens_to_reach(rising, 1.0, T, lowest=T / 8) < 2 * T
    ahead = lambda t: -60.0  # (T / t) 0.4 <= 1 from t = 0.4 T: inside the search, below the data at T / 2
    assert plan.tokens_to_reach(ahead, 1.0, T) == pytest.approx(0.4 * T, rel=1e-6)
    assert plan.tokens_to_reach(ahead, 1.0, T, lowest=T / 2) == plan.BELOW_DATA
    assert plan.tokens_to_reach(rising, 1.0, T, lowest=T * 2 ** 11) == plan.BELOW_DATA  # past the search's top


@pytest.mark.parametrize("measured_gap, inside", [(9.0, "yes"), (9.5, "no"), (-5.5, "no")])
def test_planner_says_whether_the_measurement_is_inside_the_fit(tmp_path, monkeypatch, capsys, measured_gap, inside):
    # at N = 2^20 (width 64) and T = 2^21 (its measured budget, given 0.5% off): fit 2% +- 7.0700 = [-5.07, +9.07]
    monkeypatch.setattr(plan, "step_savings", lambda shape, tp, policies, device, n_tracks: STEPS)
    plan.main(["--fit", fake_fit(tmp_path, measured_gap), "--size", str(2 ** 20), "--tokens", str(2 ** 21 * 1.005)])
    out = capsys.readouterr().out
    half = T95(2) * math.sqrt(2.7)
    row = table(out, "What the loss costs")["grouped:12"]
    assert row.split()[1:] == ["+2.00%", f"[{2 - half:+.2f},", f"{2 + half:+.2f}]", f"{measured_gap:+.2f}%", "±",
                               "0.50", "(2)", inside] and half == pytest.approx(7.0700, abs=1e-4)
    assert "Measured at this point: width 64" in out and "w64/budget_table.md" in out
    plan.main(["--fit", fake_fit(tmp_path, measured_gap), "--size", str(2 ** 20), "--tokens", str(2 ** 21 * 1.02)])
    assert "measured ±" not in capsys.readouterr().out  # 2% off the budget: not the point the study measured


def test_planner_at_a_measured_point_of_the_study(monkeypatch, capsys):
    """The earlier study's committed size fit at 124M and 8.4e7 tokens (the 768-wide sweep's 2560-iteration budget): each policy's
    measured cell of size_fit.json beside the fit, inside exactly where the fit's interval holds it; 100 columns."""
    with open(os.path.join(REPO, plan.SIZE_FIT)) as f:
        fit = json.load(f)
    steps = {p: STEPS["grouped:12"] for p in fit["policies"]}
    monkeypatch.setattr(plan, "step_savings", lambda shape, tp, policies, device, n_tracks: dict(steps, **STEPS))
    assert plan.main(["--fit", plan.SIZE_FIT, "--size", "124m", "--tokens", "8.4e7"]) == 0
    out = capsys.readouterr().out
    loss = table(out, "What the loss costs")
    n_params = gpt_params(12, 768, 50304)
    checked = 0
    for policy, e in fit["policies"].items():
        cell = next(b for w in e["widths"] if w["n_params"] == n_params for b in w["budgets"] if b["iters"] == 2560)
        g = gap_at(e["lines"], n_params, 8.4e7, fit["level"])
        measured = f"{cell['gap']:+.2f}% ± {cell['gap_ci']:.2f} ({cell['n']})"
        if g["pi"] is None:  # one width (parallel): no interval, so no inside?
            assert loss[policy].endswith(measured) and "no interval (0 df)" in loss[policy]
        else:
            inside = "yes" if abs(cell["gap"] - g["gap"]) <= g["pi"] else "no"
            assert loss[policy].endswith(f"{measured}          {inside}")
        checked += 1
    assert checked == 5 and "-0.81% ± 0.11 (3)" in loss["parallel"]  # experiments/docs_study/budgets/budget_table.md
    assert "Fitted, inside the measured range: the gap to N = 0.124B" in " ".join(out.split())  # not 'Extrapolated'
    assert "Extrapolated" not in out
    assert max(len(line) for line in out.splitlines()) <= plan.COLUMNS
    assert plan.main(["--fit", plan.SIZE_FIT, "--size", "124m", "--tokens", "8.4e7", "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in wide) > plan.COLUMNS and any("-0.81% ± 0.11 (3)" in line for line in wide)


@pytest.mark.parametrize("args, named", [(["--size", "2x"], "'2x'"), (["--tokens", "lots"], "'lots'"),
                                         (["--tp", "3"], "3"), (["--n_tracks", "6"], "--n_tracks 6")])
def test_planner_bad_input_is_one_line(args, named, capsys):
    with pytest.raises(SystemExit) as stop:
        plan.main(args)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and named in err
    assert "allowed" in err or "choose from" in err


def test_planner_command_line_refuses_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "analysis.plan", "--size", "2x"], cwd=REPO, env=run_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: --size '2x': allowed: 124m") and len(proc.stderr.splitlines()) == 1


def fake_widths():
    """Three widths at N = 2^20, 2^21, 2^22 with the seeds of three_widths (x0 = 4 + u: 16 tokens per parameter at
    every size) and two budgets at 8 and 16 tokens per parameter (x = u + 3, u + 4)."""
    widths = []
    for u in (20, 21, 22):
        x0 = 4 + u
        fits = {str(s): dict(a=-2 * x0 + d, b=2.0, budgets=2) for s, d in ((1, -1), (2, 0), (3, 1))}
        budgets = [dict(iters=it, tokens=2 ** x, n=3, gap=2 * (x - x0), gap_ci=1.0, verdict="better",
                        gaps={s: f["a"] + 2 * x for s, f in fits.items()}) for it, x in ((320, u + 3), (640, u + 4))]
        entry = dict(policy="grouped:12", syncs=1, fits=fits, budgets=budgets, slope=2.0, slope_ci=0.0,
                     crossover_tokens=2 ** x0, crossover_interval=[2 ** (x0 - 1), 2 ** (x0 + 1)],
                     crossover_in_range=False)
        widths.append(dict(width=2 ** (u - 14), n_params=2 ** u, non_embedding=2 ** u // 2, runs=18, sweep=f"w{u}",
                           analysis=[entry]))
    return widths


def test_size_fit_across_widths(tmp_path):
    fit = size_fit(fake_widths())
    e = fit["policies"]["grouped:12"]
    assert fit["size_measured"] and len(e["located"]) == 3 and len(e["lines"]) == 3
    assert e["crossover_fit"]["c"] == pytest.approx(1.0)  # the hand case above: c = 1 +- 2.59 (1 df)
    assert e["crossover_fit"]["c_ci"] == pytest.approx(T95(1) * math.sqrt(1 / 24))
    # at 8 tokens per parameter every seed's gap is 2 (u + 3) - 2 (4 + u) + d = -2 + d at every size: slope 0
    assert [g["points_per_doubling"] for g in e["gap_vs_size"]] == pytest.approx([0.0, 0.0], abs=1e-9)
    assert e["slope_vs_size"]["per_doubling"] == pytest.approx(0.0, abs=1e-12)
    # the 1.5B extrapolation: 16 tokens per parameter, as at every measured size
    x = e["extrapolation"]["1.5b"]
    assert x["tokens"] / x["n_params"] == pytest.approx(16.0) and "prediction interval" in x["how"]
    table = size_table(fit)
    assert "c = +1.00 ± 2.59" in table and "not told from 0; not told from 1" in table
    from analysis.size_trend import plot_crossovers
    plot_crossovers(fit, str(tmp_path / "crossover.png"))
    assert (tmp_path / "crossover.png").stat().st_size > 10_000


def test_a_bending_width_drops_its_extrapolated_crossover():
    # fake_widths' crossovers are marked past their budgets (crossover_in_range False): with width 128's bend
    # significant its crossover is not extrapolated, so two widths are fitted, with 0 df and no interval
    from analysis.size_trend import policy_fit
    items = [(w, w["analysis"][0]) for w in fake_widths()]
    bend = dict(c=0.7, ci=0.1, seeds=3, p=0.001, p_holm=0.003, significant=True)
    e = policy_fit(items, {}, {128: bend})
    gated = [r for r in e["widths"] if r["not_extrapolated"]]
    assert [r["width"] for r in gated] == [128] and not gated[0]["located"] and e["curved"] == [128]
    assert len(e["located"]) == 2 and e["crossover_fit"]["c_ci"] is None
    assert len(policy_fit(items, {}, {})["located"]) == 3


def test_planner_refuses_n_tracks_out_of_range(monkeypatch, capsys):
    """`analysis.plan --tp 8 --n_tracks 8192` printed savings of -7379% and more without a word on the range."""
    monkeypatch.setattr(plan, "step_savings", lambda *a: pytest.fail("the step model ran"))
    with pytest.raises(SystemExit) as stop:
        plan.main(["--tp", "8", "--n_tracks", "8192"])
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("error: --n_tracks 8192: allowed: a multiple of --tp 8 up to 25, the n_head of xl"), err


def test_the_planner_names_the_gaps_measured_nearer_real_budgets(tmp_path):
    """analysis.plan's last paragraph: each width's largest cosine budget and largest WSD branch from the real-budget
    study's stats.json, with the seeds, a verdict other than inconclusive, and the unsteady cells; nothing without
    that file."""
    rows = [{"schedule": "cosine", "metric": "val", "width": 768, "tokens": 301989888, "tokens_per_param": 2.44,
             "policy": policy, "gap": gap, "gap_ci95": ci, "seeds": seeds, "late_grad_norm_ratio": ratio,
             "verdict": verdict}
            for policy, gap, ci, seeds, ratio, verdict in (("ladder", 10.53, None, [1337], 17.1, None),
                                                           ("parallel", -0.58, 8.98, [1337, 1338], 1.0, "inconclusive"))]
    rows.append(dict(rows[0], tokens=100, gap=99.0))  # a smaller budget: not the one named
    rows.append(dict(rows[0], metric="val_code", gap=55.0))  # a per-domain row: not named
    rows.append(dict(rows[1], schedule="runs", tokens=150994944, tokens_per_param=1.22, policy="spd", gap=-1.8,
                     gap_ci95=0.15, verdict="better"))  # the WSD branches' largest budget
    rows.insert(0, dict(rows[-1], tokens=75497472, tokens_per_param=0.61, gap=-4.8))  # a smaller branch, first
    (tmp_path / "stats.json").write_text(json.dumps(rows))
    (line,) = plan.real_budget_lines(str(tmp_path / "stats.json"))
    assert line.endswith("Width 768, cosine at 2.44 tokens per parameter (302M tokens): ladder +10.53 (1 seed, "
                         "unsteady, grad norm x17); parallel -0.58 ± 8.98 (2 seeds). Width 768, WSD branch at 1.22 "
                         "tokens per parameter (151M tokens): spd -1.80 ± 0.15 (2 seeds, better).")
    assert "), not in the fit above. Width 768" in line
    (line,) = plan.real_budget_lines(str(tmp_path / "stats.json"), in_fit=True)  # the fit is this study's
    assert "), the fit above is made from the WSD branches, not from the cosine runs. Width 768" in line
    assert plan.real_budget_lines(str(tmp_path / "missing.json")) == []


def test_the_planner_names_the_learning_rate_and_schedule_checks(tmp_path):
    """analysis.plan's last sentences: each learning-rate check's per-policy cells from the study's checks.json,
    the comparison against the better baseline beside the gap at the check's rate; each schedule check (cosine at
    a WSD budget, the sweep's learning rate) as the cosine gap beside the WSD branches'; nothing without that file
    or from the older list of rows."""
    cell = {"check": "w768-lr3e-4", "width": 768, "lr": 3e-4, "sweep_lr": 6e-4, "seeds": [1337, 1338],
            "sweep_schedule": "cosine", "varied": "learning rate", "tokens": 301_989_888}
    cells = [dict(cell, policy="ladder", comparison="at_check_lr", gap=3.573, gap_ci95=9.702),
             dict(cell, policy="ladder", comparison="vs_better_baseline", gap=4.747, gap_ci95=16.53),
             dict(cell, policy="grouped:4", comparison="at_check_lr", gap=5.11, gap_ci95=None, seeds=[1337])]
    schedule = dict(cell, check="w256-cosine3584", width=256, lr=6e-4, sweep_schedule="wsd", varied="schedule",
                    tokens=117_440_512)
    cells += [dict(schedule, policy="ladder", comparison="at_check_lr", gap=-3.44, gap_ci95=1.5, sweep_gap=-1.52),
              dict(schedule, policy="ladder", comparison="vs_better_baseline", gap=7.09, gap_ci95=None)]
    (tmp_path / "checks.json").write_text(json.dumps({"runs": [], "cells": cells}))
    rate, schedule_line = plan.check_lines(str(tmp_path / "checks.json"))
    assert rate.endswith("width 768 at learning rate 0.0003 against 0.0006 (w768-lr3e-4): ladder (2 seeds) +3.57 ± 9.70 "
                         "(against the better baseline +4.75 ± 16.53); grouped:4 (1 seed) +5.11.")
    assert schedule_line.endswith("width 256 at 117.4M tokens (2 seeds; w256-cosine3584): ladder -3.44 ± 1.50 cosine, "
                                  "-1.52 WSD.")
    (tmp_path / "old.json").write_text(json.dumps([{"check": "w768-lr3e-4", "gap": 4.3}]))
    assert plan.check_lines(str(tmp_path / "old.json")) == []
    assert plan.check_lines(str(tmp_path / "missing.json")) == []


def test_the_planner_prints_its_held_out_check():
    """analysis.plan's held-out sentence: coverage among the policies it extrapolates and among all, each
    prediction without an interval beside its truth, and how many predictions fall below their truths (a line that
    misses to one side every time); nothing for a fit without held-out rows."""
    h = lambda width, inside, gap=1.0, truth=0.5: dict(width=width, inside=inside, gap=gap, truth=truth)  # noqa: E731
    fit = {"policies": {"ladder": {"curved": [256]}, "spd": {"curved": []}, "parallel": {"curved": []}},
           "heldout": {"ladder": [h(256, False), h(384, True)], "spd": [h(256, True), h(384, False)],
                       "parallel": [h(768, None, -3.63, -0.81)]}}
    (line,) = plan.heldout_lines(fit)
    assert ("1 of 2 truths inside their 95% prediction intervals for the policies it extrapolates (2 of 4 with those "
            "whose gap bends); no interval for parallel at width 768: -3.63 predicted, -0.81 measured; 1 of 5 "
            "predictions below their truths (prediction minus truth -2.82 to +0.50 points).") in line
    assert plan.heldout_lines({"policies": {}, "heldout": {}}) == []


def test_the_planner_flags_an_interval_narrower_than_its_held_out_ones():
    """analysis.plan's narrow_lines: a policy whose interval, a doubling or more of tokens per parameter past the
    data and at or past the largest size, is narrower than each of its held-out intervals (which reached one doubling
    at a measured size) gets a line saying its width is chance; none inside that reach, none for a policy whose
    interval is wider or that has none, and none on the held-out points' own ground."""
    fit = {"measured": {"n_params": [1e7, 4e7], "tokens_per_param": [0.2, 5.0]},
           "heldout": {"a": [{"pi": 20.0}, {"pi": 30.0}], "b": [{"pi": 5.0}], "c": [{"pi": 9.0}]}}
    cells = {"baseline": {"gap": "0"}, "a": {"pi": 10.0, "df": 1}, "b": {"pi": 10.0, "df": 1},
             "c": {"gap": plan.CURVED}, "d": {"pi": 3.0, "df": 2}}
    (line,) = plan.narrow_lines(fit, cells, 4e7, 4e7 * 10)
    assert line == ("a: its interval here (±10.00) is narrower than each of its held-out intervals (±20.00 to ±30.00), "
                    "which reached less far: at 1 df an interval's width rests on one residual, so read this one's "
                    "narrowness as chance, not precision.")
    assert plan.narrow_lines(fit, cells, 4e7, 4e7 * 6) == []   # under a doubling past the measured 5 per parameter
    assert plan.narrow_lines(fit, cells, 1e7, 1e7 * 20) == []  # below the largest measured size


def test_the_planner_takes_the_corpus_read_once_from_three_widths(tmp_path, monkeypatch):
    """analysis.plan's default fit: experiments/large_budgets/size_fit.json once it has 3 widths (an interval),
    the earlier study's before that, or when the file is missing or unreadable."""
    large = tmp_path / "large.json"
    monkeypatch.setattr(plan, "REPO", str(tmp_path))
    monkeypatch.setattr(plan, "LARGE_FIT", "large.json")
    assert plan.default_fit() == plan.SIZE_FIT  # missing
    for widths, expected in ((2, plan.SIZE_FIT), (3, "large.json")):
        large.write_text(json.dumps({"widths": [{"width": 256 * (k + 1)} for k in range(widths)]}))
        assert plan.default_fit() == expected, widths
    large.write_text("{not json")
    assert plan.default_fit() == plan.SIZE_FIT
