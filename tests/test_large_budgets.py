"""experiments/large_budgets/report.py on small synthetic runs: paired gaps per seed, overall and per domain, the
verdicts, --check against the stored files, and the refusal to rewrite the stored tables from fewer runs. When
the study's runs are stored, its committed tables must regenerate byte for byte."""
import json
import os

import pytest

from experiments.large_budgets import report, stability


def fake_run(folder, policy, seed, val, prose, code, width=256, max_iters=224, n_params=22_321_408, lr=6e-4,
             schedule="cosine"):
    run = folder / f"d{width}-b{max_iters}-{policy.replace(':', '')}-s{seed}"
    run.mkdir(parents=True)
    config = {"sync_policy": policy, "seed": seed, "dataset": "debian_large", "n_layer": 12, "n_embd": width,
              "n_tracks": 4, "max_iters": max_iters, "batch_size": 32, "block_size": 1024,
              "gradient_accumulation_steps": 1, "learning_rate": lr, "lr_schedule": schedule, "derived": {"n_params": n_params, "device_name": "NVIDIA H100"}}
    (run / "config.json").write_text(json.dumps(config))
    evals = [{"type": "eval", "iter": it, "train_loss": v, "val_loss": v, "val_prose_loss": p, "val_code_loss": c,
              "syncs_per_fwd": 24 if policy == "baseline" else 3}
             for it, v, p, c in ((112, val + 1, prose + 1, code + 1), (max_iters, val, prose, code))]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(e) for e in evals) + "\n")


@pytest.fixture
def study(tmp_path, monkeypatch):
    cosine = tmp_path / "w256" / "cosine"
    for seed, base in ((1, 4.00), (2, 4.10), (3, 3.90)):
        fake_run(cosine, "baseline", seed, base, base - 0.5, base + 0.5)
        fake_run(cosine, "grouped:4", seed, base * 1.05 + 0.001 * seed, base - 0.5, (base + 0.5) * 1.10)
    monkeypatch.setattr(report, "HERE", str(tmp_path))
    return tmp_path


def test_gaps_verdicts_and_domains(study):
    rows = report.analyse(report.load(str(study)))
    by_metric = {r["metric"]: r for r in rows}
    assert set(by_metric) == {"val", "val_prose", "val_code"}
    val = by_metric["val"]
    assert val["policy"] == "grouped:4" and val["seeds"] == [1, 2, 3] and val["tokens"] == 224 * 32 * 1024
    assert val["gaps"] == pytest.approx([100 * ((b * 1.05 + 0.001 * s) / b - 1) for s, b in ((1, 4.0), (2, 4.1), (3, 3.9))],
                                        abs=1e-4)
    assert val["verdict"] == "worse" and by_metric["val_code"]["verdict"] == "worse"
    assert by_metric["val_prose"]["gap"] == 0 and by_metric["val_prose"]["verdict"] != "worse"
    assert "| 256 | cosine | 7.3M (0.33) | val | grouped:4 | 3 | 3 | +5" in report.render(rows)


def test_holm_runs_over_the_designs_five_policies_while_some_are_untested(study):
    # only grouped:4 has seeds here: its difference test is adjusted as the smallest p of a family of five (the
    # untested four at p = 1), not as a family of one
    from analysis.stats import paired_tests
    val = next(r for r in report.analyse(report.load(str(study))) if r["metric"] == "val")
    p_diff = paired_tests(val["gaps"], 1.0)[0]
    assert val["p_diff_holm"] == pytest.approx(min(1.0, len(report.POLICY_ORDER) * p_diff), abs=1e-4)


def test_check_and_no_rewrite_from_fewer_runs(study, capsys):
    assert report.main(["--check"]) == 1  # nothing stored yet
    assert report.main([]) == 0 and report.main(["--check"]) == 0
    for run in (study / "w256" / "cosine").glob("*grouped4*"):
        (run / "metrics.jsonl").unlink()
    assert report.main([]) == 1 and "are runs missing?" in capsys.readouterr().err
    assert report.main(["--force"]) == 0


@pytest.mark.skipif(not os.path.exists(os.path.join(report.HERE, "stats.json")), reason="no stored study tables yet")
def test_stored_tables_regenerate_byte_for_byte():
    assert report.main(["--check"]) == 0


def test_trend_slope_crossover_heldout_and_figure(tmp_path, monkeypatch):
    """WSD branches whose gap is a known line in log2(tokens) per seed, plus cosine runs at twice the largest
    budget: the slope is recovered, the crossover is located inside the range, the held-out budget and the cosine
    point fall inside the line's prediction intervals, and the figure is written."""
    import math
    budgets, slope, x0 = (224, 448, 896, 1792), 1.0, math.log2(448 * 32768)
    wsd, cosine = tmp_path / "w256" / "runs", tmp_path / "w256" / "cosine"
    for seed, (base, wobble) in {1: (4.0, 0.05), 2: (4.1, -0.04), 3: (3.9, 0.0)}.items():
        for b in budgets + (3584,):
            gap = slope * (math.log2(b * 32768) - x0) + wobble  # % of the baseline
            folder = cosine if b == 3584 else wsd
            fake_run(folder, "baseline", seed, base, base, base, max_iters=b)
            fake_run(folder, "grouped:4", seed, base * (1 + gap / 100), base, base, max_iters=b)
    monkeypatch.setattr(report, "HERE", str(tmp_path))
    trend = report.trends(report.load(str(tmp_path)))
    row = trend[256][0]["grouped:4"]
    assert row["slope"] == pytest.approx(slope, abs=0.02) and row["seeds"] == 3
    lo, hi = row["crossover_interval"]
    assert row["crossover_in_range"] and lo < 448 * 32768 < hi
    assert row["heldout"]["inside"] and row["heldout"]["tokens"] == 1792 * 32768
    assert row["cosine"]["inside"] and row["cosine"]["measured"] == pytest.approx(slope * 3, abs=0.1)
    assert report.main([]) == 0 and (tmp_path / "headline.png").stat().st_size > 10_000
    assert "crosses 0 at" in (tmp_path / "answer.md").read_text() and report.main(["--check"]) == 0


def test_one_seeds_line_gives_its_crossing_point_and_no_interval(tmp_path, monkeypatch):
    """With one seed there is no spread of lines for Fieller: the table gives the line's own crossing and says that
    no interval exists, instead of 'no crossover located' where the gap plainly changes sign."""
    import math
    from experiments.large_budgets import trend as trend_mod
    budgets, x0 = (224, 448, 896, 1792), math.log2(448 * 32768)
    wsd = tmp_path / "w256" / "runs"
    for b in budgets:
        fake_run(wsd, "baseline", 1, 4.0, 4.0, 4.0, max_iters=b)
        fake_run(wsd, "ladder", 1, 4.0 * (1 + (math.log2(b * 32768) - x0) / 100), 4.0, 4.0, max_iters=b)
    monkeypatch.setattr(report, "HERE", str(tmp_path))
    row = report.trends(report.load(str(tmp_path)))[256][0]["ladder"]
    assert row["seeds"] == 1 and row["crossover_interval"] is None
    assert row["crossover_tokens"] == pytest.approx(448 * 32768, rel=0.01)
    text = trend_mod.cross_text(row)
    assert text.startswith("one seed, no interval: its line crosses 0 at 14.7M") and "outside" not in text


def test_a_curved_line_keeps_its_measured_bound():
    """A significant bend withdraws the line (no crossover, no prediction), but the per-budget Holm verdicts are
    measurements: "ahead up to 151M" still stands beside "not extrapolated" (width 768's spd, three seeds)."""
    from experiments.large_budgets import trend as trend_mod
    row = dict(curved=True, ahead_to=151.0e6, behind_from=None, largest=151.0e6, seeds=3,
               crossover_interval=None, crossover_in_range=False, crossover_tokens=None)
    assert trend_mod.cross_text(row) == "not extrapolated: curvature; ahead (Holm) up to 151.0M"
    row.update(ahead_to=None)
    assert trend_mod.cross_text(row) == "not extrapolated: curvature"
    row.update(curved=False, ahead_to=18.9e6, behind_from=75.5e6)
    assert trend_mod.cross_text(row) == ("ahead (Holm) up to 18.9M; behind (Holm) at 75.5M; "
                                         "no crossover located to 151.0M")


def test_the_planner_reads_this_corpus_fit(tmp_path, monkeypatch, capsys):
    """size_fit.json from the WSD widths (analysis/size_trend.py's size_fit: one width here, so no size trend and
    no interval), and `analysis.plan --fit` on it names this corpus and its tables; no WSD width, no file."""
    import math
    from analysis import plan
    wsd = tmp_path / "w256" / "runs"
    for seed, base in {1: 4.0, 2: 4.1, 3: 3.9}.items():
        for b in (224, 448, 896, 1792):
            gap = 1.0 * (math.log2(b / 448)) + 0.01 * seed
            fake_run(wsd, "baseline", seed, base, base, base, max_iters=b)
            fake_run(wsd, "grouped:4", seed, base * (1 + gap / 100), base, base, max_iters=b)
    monkeypatch.setattr(report, "HERE", str(tmp_path))
    assert report.main([]) == 0
    fit = json.loads((tmp_path / "size_fit.json").read_text())
    assert [w["width"] for w in fit["widths"]] == [256] and not fit["size_measured"]
    assert fit["policies"]["grouped:4"]["lines"][0]["b"] == pytest.approx(1.0, abs=1e-6)  # points per doubling
    capsys.readouterr()
    argv = ["--size", "1.5b", "--tp", "8", "--tokens", "3e10", "--fit", str(tmp_path / "size_fit.json")]
    assert plan.main(argv) in (0, None)
    text = " ".join(capsys.readouterr().out.split())
    assert "on data/debian_large (every token read once) at widths 256 (22.3M, 3 seeds)" in text
    assert "as experiments/large_budgets/answer.md says" in text and "none from 1 width]" in text
    (tmp_path / "w256" / "runs").rename(tmp_path / "w256" / "cosine")
    (tmp_path / "size_fit.json").unlink()
    assert report.main(["--force"]) == 0 and not (tmp_path / "size_fit.json").exists()


def test_a_width_with_cosine_runs_only_is_tabled_and_drawn(tmp_path, monkeypatch):
    """Width 768's first cosine runs (one seed, no WSD branches yet) beside a width with a trend: its cell is in
    answer.md with its gap and no interval or verdict, and the figure draws it, calling on plot_headline with it."""
    wsd = tmp_path / "w256" / "runs"
    for seed, base in ((1, 4.0), (2, 4.1)):
        for b in (224, 448, 896):
            fake_run(wsd, "baseline", seed, base, base, base, max_iters=b)
            fake_run(wsd, "grouped:4", seed, base * 1.01, base, base, max_iters=b)
    cosine = tmp_path / "w768" / "cosine"
    fake_run(cosine, "baseline", 1, 2.0, 2.0, 2.0, width=768, max_iters=9216)
    fake_run(cosine, "grouped:4", 1, 2.2, 2.0, 2.0, width=768, max_iters=9216)
    for name, norm in (("baseline", 0.5), ("grouped4", 5.0)):  # grouped:4 trained unsteadily: marked in the figure
        with open(cosine / f"d768-b9216-{name}-s1" / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"type": "train", "iter": 9000, "grad_norm": norm}) + "\n")
    for seed, name, norm in ((1, "baseline", 0.4), (2, "baseline", 0.6), (2, "grouped4", 2.0)):  # a WSD branch too
        with open(wsd / f"d256-b896-{name}-s{seed}" / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"type": "train", "iter": 890, "grad_norm": norm}) + "\n")
    check = tmp_path / "checks" / "w768-lr3e-4" / "cosine"  # a learning-rate check: drawn beside the sweep's point
    for seed, gap in ((1, 0.04), (2, 0.06)):
        fake_run(check, "baseline", seed, 2.1, 2.0, 2.0, width=768, max_iters=9216, lr=3e-4)
        fake_run(check, "grouped:4", seed, 2.1 * (1 + gap), 2.0, 2.0, width=768, max_iters=9216, lr=3e-4)
    monkeypatch.setattr(report, "HERE", str(tmp_path))
    drawn = {}
    real_plot = report.plot_headline
    monkeypatch.setattr(report, "plot_headline", lambda t, o, p, c=(), u=None, k=(): drawn.update(
        cells=c, unsteady=u, checks=k) or real_plot(t, o, p, c, u, k))
    assert report.main([]) == 0
    # keyed by the cell: the WSD branch's norm over the median of its baseline's two seeds
    assert drawn["unsteady"] == {(768, "grouped:4", "cosine", 9216 * 32768): 10.0,
                                 (256, "grouped:4", "wsd", 896 * 32768): 4.0}
    assert "branch trained unsteadily (late median gradient norm over the baseline's; the gap and the line through " \
           "it include the instability): grouped:4 at 29.4M (×4.0)." in (tmp_path / "answer.md").read_text()
    (k,) = drawn["checks"]
    assert (k["policy"], k["lr"], k["seeds"], k["tokens_per_param"]) == ("grouped:4", 3e-4, [1, 2],
                                                                          pytest.approx(13.53, abs=0.01))
    assert k["gap"] == pytest.approx(5.0) and k["gap_ci95"] == pytest.approx(12.706, abs=1e-3)  # sd of (4, 6): sqrt(2)
    assert "| 768 | cosine | 302.0M (13.53) | val | grouped:4 | 3 | 1 | +10.00 |  |  |  | ×10.0 |" in \
        (tmp_path / "answer.md").read_text()
    assert [(c["width"], c["policy"], c["gap_ci95"]) for c in drawn["cells"]] == [(768, "grouped:4", None)]
    assert (tmp_path / "headline.png").stat().st_size > 10_000


def test_across_widths_recovers_the_size_slope(tmp_path, monkeypatch):
    """Three widths of WSD branches whose gap is a + b log2(tokens / N) + c log2 N per seed, plus small noise, at
    0.25-2 tokens per parameter: the fit across widths (one value per width, 1 df) recovers c at every common
    tokens per parameter, the held-out budgets are predicted and counted, and answer.md and trend.json carry it."""
    import math
    import random
    from experiments.large_budgets import trend as trend_mod
    a, b, c = 8.0, 0.8, -0.5
    noise = random.Random(0)
    for width, n_params in ((256, 22_321_408), (384, 40_600_000), (768, 123_600_000)):
        wsd = tmp_path / f"w{width}" / "runs"
        for seed, base in ((1, 4.0), (2, 4.1), (3, 3.9)):
            for per_param in (0.25, 0.5, 1, 2):
                iters = round(per_param * n_params / 32768)
                tokens = iters * 32768
                gap = a + b * math.log2(tokens / n_params) + c * math.log2(n_params) + noise.gauss(0, 0.02)
                fake_run(wsd, "baseline", seed, base, base, base, width, iters, n_params)
                fake_run(wsd, "grouped:4", seed, base * (1 + gap / 100), base, base, width, iters, n_params)
    monkeypatch.setattr(report, "HERE", str(tmp_path))
    monkeypatch.setattr(report, "plot_headline", lambda *args: None)  # drawn by the tests above; keeps this fast
    across = trend_mod.across_widths(report.trends(report.load(str(tmp_path))))
    assert across["widths"] == [256, 384, 768] and across["new_params"] == 2 * 123_600_000
    fit = across["policies"]["grouped:4"]
    assert fit["widths"] == [256, 384, 768] and len(fit["grid"]) >= 2
    for g in fit["grid"]:
        assert 0.25 <= g["tokens_per_param"] <= 2 and g["df"] == 1
        assert g["per_doubling"] == pytest.approx(c, abs=0.1) and g["ci"] is not None
        # the one policy fitted, in a Holm family of the design's five (the other four at p = 1)
        assert g["p_holm"] == pytest.approx(min(1.0, len(report.POLICY_ORDER) * g["p"]))
        expected = a + b * math.log2(g["tokens_per_param"]) + c * math.log2(2 * 123_600_000)
        assert g["new_gap"] == pytest.approx(expected, abs=0.2) and g["new_pi"] > 0
    held = fit["heldout"]
    assert [h["width"] for h in held] == [256, 384, 768] and all(h["inside"] is not None for h in held)
    assert all(h["truth"] == pytest.approx(h["gap"], abs=0.3) for h in held)
    assert across["heldout_inside"] == [sum(h["inside"] for h in held), 3]
    assert report.main([]) == 0 and report.main(["--check"]) == 0
    answer = (tmp_path / "answer.md").read_text()
    assert "## Across widths (the width is the unit)" in answer and "Not fitted" not in answer
    assert f"Held-out truths inside their 95% prediction intervals: {across['heldout_inside'][0]} of 3" in answer
    below = sum(h["gap"] < h["truth"] for h in held)
    assert f"Predictions below their truths: {below} of 3 (prediction minus truth " in answer
    stored = json.loads((tmp_path / "trend.json").read_text())["across_widths"]
    assert stored["policies"]["grouped:4"]["grid"][0]["df"] == 1


def test_prediction_bias_counts_the_misses_to_one_side():
    from experiments.large_budgets.trend import prediction_bias
    held = [dict(gap=-8.70, truth=-1.08), dict(gap=-1.26, truth=12.90), dict(gap=0.5, truth=0.25)]
    assert prediction_bias(held) == ("Predictions below their truths: 2 of 3 (prediction minus truth -14.16 to +0.25 "
                                     "points; the policies of a width share its baseline, so they are not independent).")
    assert prediction_bias([]) == ""


def test_across_widths_with_one_width_names_the_widths_instead(tmp_path, monkeypatch):
    """One width with WSD branches and one with cosine runs only: nothing is fitted across widths, and answer.md's
    section is the one line saying why and which widths are there in what form."""
    for seed, base in ((1, 4.0), (2, 4.1)):
        for b in (224, 448, 896):
            fake_run(tmp_path / "w256" / "runs", "baseline", seed, base, base, base, max_iters=b)
            fake_run(tmp_path / "w256" / "runs", "grouped:4", seed, base * 1.01, base, base, max_iters=b)
    fake_run(tmp_path / "w768" / "cosine", "baseline", 1, 2.0, 2.0, 2.0, width=768, max_iters=9216)
    fake_run(tmp_path / "w768" / "cosine", "grouped:4", 1, 2.2, 2.0, 2.0, width=768, max_iters=9216)
    monkeypatch.setattr(report, "HERE", str(tmp_path))
    monkeypatch.setattr(report, "plot_headline", lambda *args: None)
    assert report.main([]) == 0
    section = (tmp_path / "answer.md").read_text().split("## Across widths (the width is the unit)\n\n")[1]
    section = section.split("\n## ")[0]
    assert section == ("Not fitted: needs 3 widths with WSD branches; have 1: 256 (WSD branches); 768: cosine runs "
                       "only, not counted.\n")
    assert json.loads((tmp_path / "trend.json").read_text())["across_widths"]["widths"] == [256]


def test_stability_reads_late_grad_norms_and_a_loss_that_rises():
    train = [{"type": "train", "iter": i, "grad_norm": 30.0 if i == 0 else (5.0 if i >= 300 else 0.5)}
             for i in range(0, 401, 10)]
    train[20]["grad_norm"] = 90.0  # iteration 200: the largest after the first 5%
    evals = [{"type": "eval", "iter": it, "val_loss": v} for it, v in ((0, 10.0), (200, 2.0), (300, 1.5), (400, 1.6))]
    s = stability.stability(train + evals)
    assert s["late_median_grad_norm"] == 5.0  # iterations 300-400 only
    assert (s["max_grad_norm"], s["max_at"]) == (90.0, 200)  # iteration 0's 30 is left out
    assert (s["three_quarters_iter"], s["val_at_three_quarters"], s["val_final"]) == (300, 1.5, 1.6)
    assert stability.stability(evals) is None  # no train records: nothing to say
    assert "peak_layer" not in s and "largest layer" not in "\n".join(stability.stability_table([(256, "r", s)]))
    # a run that logged each layer's norm: the table names the layer that held the peak and its share of norm²
    train[20]["grad_norm_layers"] = {"emb": 6.0, "h0": 89.7, "final": 1.0}
    s = stability.stability(train + evals)
    assert s["peak_layer"] == ("h0", pytest.approx(89.7 ** 2 / (36 + 89.7 ** 2 + 1)))
    assert "late_layer" not in s  # no late record logged its layers
    # over the last quarter (iterations 300-400): emb holds 64% of norm² on 9 of its 11 records, h0 on the other 2,
    # so emb's median share is the largest even though h0 held the peak
    for i, r in enumerate(train[30:]):
        r["grad_norm_layers"] = {"emb": 4.0, "h0": 3.0} if i < 9 else {"emb": 1.0, "h0": 7.0}
    s = stability.stability(train + evals)
    assert s["late_layer"] == ("emb", pytest.approx(16 / 25)) and s["peak_layer"][0] == "h0"
    unlogged = [{k: v for k, v in r.items() if k != "grad_norm_layers"} for r in train]
    table = stability.stability_table([(256, "a", s), (256, "b", stability.stability(unlogged + evals))])
    assert table[0].endswith("| largest layer at the peak (share of norm²) | largest layer, last quarter (median share) |")
    assert table[2].endswith(" h0 (100%) | emb (64%) |")
    assert table[3].endswith("| | |") and len(table[1].split("|")) == len(table[2].split("|")) == len(table[3].split("|"))


def test_the_stability_table_lists_each_cosine_run(study):
    text = report.render_stability(report.load(str(study)))
    rows = [line for line in text.splitlines() if line.startswith("| 256 |")]
    assert len(rows) == 0  # the fixture's runs log evals only: no train records, no rows
    run = study / "w256" / "cosine" / "d256-b224-baseline-s1"
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"type": "train", "iter": 200, "grad_norm": 0.25}) + "\n")
    text = report.render_stability(report.load(str(study)))
    assert "| 256 | d256-b224-baseline-s1 | 0.25 | 0.2 (200) | 5.0000 (112) | 4.0000 |" in text


def test_stability_of_any_folder_prints_its_runs_and_names_a_bad_one(study, capsys):
    run = study / "w256" / "cosine" / "d256-b224-grouped4-s2"
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"type": "train", "iter": 220, "grad_norm": 7.5}) + "\n")
    assert report.main(["--stability", str(study / "w256" / "cosine")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| width | run |") and out[2:] == ["| 256 | d256-b224-grouped4-s2 | 7.50 | 7.5 (220) | "
                                                                 "5.3070 (112) | 4.3070 |"]
    assert not (study / "answer.md").exists()  # it writes nothing
    for bad in (str(study / "nothing-here"), str(study)):
        with pytest.raises(SystemExit):
            report.main(["--stability", bad])
        assert f"--stability {bad!r}" in capsys.readouterr().err


def test_the_stability_section_adds_each_widths_largest_wsd_branches():
    """render_stability: the cosine runs' table, then one of the WSD branches at each width's largest budget only."""
    steady = {"late_median_grad_norm": 0.3, "max_grad_norm": 0.4, "max_at": 3744, "val_at_three_quarters": 1.52,
              "three_quarters_iter": 3744, "val_final": 1.37, "iters": 4608}
    run = lambda name, tokens: {"name": name, "tokens": tokens, "stability": steady}
    groups = {(768, "cosine"): [run("d768-b9216-baseline-s1", 302e6)],
              (768, "runs"): [run("d768-b576-baseline-s1", 18.9e6), run("d768-b4608-baseline-s1", 151e6),
                              run("d768-b4608-ladder-s1", 151e6)]}
    text = report.render_stability(groups)
    cosine, _, wsd = text.partition("The largest WSD branch of each width")
    assert "| 768 | d768-b9216-baseline-s1 | 0.30 |" in cosine and "b4608" not in cosine
    assert "| 768 | d768-b4608-baseline-s1 | 0.30 | 0.4 (3744) |" in wsd and "d768-b4608-ladder-s1" in wsd
    assert "b576" not in text
    assert "WSD branch" not in report.render_stability({(768, "cosine"): groups[768, "cosine"]})


def test_each_cell_gives_its_late_grad_norm_over_the_baselines(study):
    cosine = study / "w256" / "cosine"
    for name, norm in (("baseline-s1", 0.4), ("baseline-s2", 0.5), ("baseline-s3", 0.6),
                       ("grouped4-s1", 0.5), ("grouped4-s2", 6.0)):
        with open(cosine / f"d256-b224-{name}" / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"type": "train", "iter": 200, "grad_norm": norm}) + "\n")
    rows = report.analyse(report.load(str(study)))
    assert {r["late_grad_norm_ratio"] for r in rows} == {12.0}  # seed 2's 6.0 over the baselines' median 0.5
    assert report.render(rows).splitlines()[6].endswith("| worse | ×12.0 |")


def test_a_run_without_its_baseline_is_not_the_cells_instability():
    """Width 384's grouped:4 at 102.8M: seed 1338's branch (×288.6) ran before its seed's baseline, so the cell's gap
    is seed 1337's alone, and its ratio is seed 1337's; unrestricted, the unpaired run's."""
    run = lambda policy, seed, norm: {"policy": policy, "seed": seed, "tokens": 1e8,  # noqa: E731
                                      "stability": {"late_median_grad_norm": norm}}
    runs = [run("baseline", 1337, 0.40), run("grouped:4", 1337, 0.48), run("grouped:4", 1338, 115.4)]
    assert report.late_grad_norm_ratio(runs, "grouped:4", 1e8, [1337]) == 1.2
    assert report.late_grad_norm_ratio(runs, "grouped:4", 1e8) == 288.5


def test_a_learning_rate_check_sits_beside_the_sweeps_runs(study, capsys):
    check = study / "checks" / "w256-lr3e-4" / "cosine"
    fake_run(check, "baseline", 1, 4.20, 3.7, 4.7, lr=3e-4)
    fake_run(check, "grouped:4", 1, 4.20 * 1.02, 3.7, 4.7, lr=3e-4)
    fake_run(check, "grouped:4", 9, 5.0, 4.5, 5.5, lr=3e-4)  # no sweep twin, no baseline of its seed: blanks
    assert report.main([]) == 0
    answer = (study / "answer.md").read_text()
    rows = [line for line in answer.splitlines() if line.startswith("| w256-lr3e-4 |")]
    assert rows[0] == ("| w256-lr3e-4 | 256 | 7.3M | baseline | 1 | 0.0003 | 4.2000 |  |  | 0.0006 | cosine | 4.0000 "
                       "|  |  |  |")
    # its own gap +2.00; the sweep's seed 1: 4.201 / 4.0 = +5.03%; better of the two: 4.201 / 4.0
    assert rows[1] == ("| w256-lr3e-4 | 256 | 7.3M | grouped:4 | 1 | 0.0003 | 4.2840 | +2.00 |  | 0.0006 | cosine | "
                       "4.2010 | +5.03 |  | +5.03 |")
    assert rows[2] == "| w256-lr3e-4 | 256 | 7.3M | grouped:4 | 9 | 0.0003 | 5.0000 |  |  |  |  |  |  |  |  |"
    stats = json.loads((study / "stats.json").read_text())
    assert {r["seeds"] == [1, 2, 3] for r in stats} == {True}  # the check's runs stay out of the sweep's cells
    assert report.main(["--check"]) == 0


def test_a_checks_seeds_give_intervals_at_its_rate_and_against_the_better_baseline(study):
    """Two seeds of a check: per policy the mean gap with its t-interval (1 df: t = 12.706) at the check's rate,
    and at that rate against the baseline's lower loss of the two rates, in checks.json's cells and answer.md."""
    check = study / "checks" / "w256-lr3e-4" / "cosine"
    for seed, base, gap in ((1, 4.20, 0.02), (2, 4.30, 0.04)):
        fake_run(check, "baseline", seed, base, 3.7, 4.7, lr=3e-4)
        fake_run(check, "grouped:4", seed, base * (1 + gap), 3.7, 4.7, lr=3e-4)
    assert report.main([]) == 0
    cells = {m["comparison"]: m for m in json.loads((study / "checks.json").read_text())["cells"]}
    at_rate = cells["at_check_lr"]
    assert at_rate["seeds"] == [1, 2] and at_rate["gap"] == pytest.approx(3.0)
    assert at_rate["gap_ci95"] == pytest.approx(12.706 * 2 ** 0.5 / 2 ** 0.5, abs=1e-3)  # sd of (2, 4) is sqrt(2)
    # the sweep's baselines are 4.0 and 4.1 (seeds 1, 2), lower than the check's: 4.284 / 4.0 and 4.472 / 4.1
    better = [100 * (4.284 / 4.0 - 1), 100 * (4.472 / 4.1 - 1)]
    assert cells["vs_better_baseline"]["gaps"] == pytest.approx(better, abs=1e-3)
    assert cells["vs_better_baseline"]["verdict"] == "inconclusive"  # one policy: Holm leaves p as it is
    assert "| w256-lr3e-4 | at the check's setting | grouped:4 | 2 | +3.00 ± 12.71 |" in (study / "answer.md").read_text()


def test_a_cosine_check_at_a_wsd_budget_sits_beside_the_wsd_branch(study):
    """A check of the schedule: cosine runs over one of the WSD budgets find the sweep's WSD branches of the same
    policy, seed and budget (not the sweep's cosine runs, which end at the cosine budget), so each row shows the
    cosine gap beside the WSD one; the figure names the setting, not a learning rate."""
    branches, check = study / "w256" / "runs", study / "checks" / "w256-cosine448" / "cosine"
    for seed, base, cosine in ((1, 3.50, 0.97), (2, 3.60, 0.96)):
        fake_run(branches, "baseline", seed, base, 3.0, 4.0, max_iters=448, schedule="wsd")
        fake_run(branches, "grouped:4", seed, base * 0.99, 3.0, 4.0, max_iters=448, schedule="wsd")
        fake_run(check, "baseline", seed, base + 0.2, 3.0, 4.0, max_iters=448)
        fake_run(check, "grouped:4", seed, (base + 0.2) * cosine, 3.0, 4.0, max_iters=448)
    assert report.main([]) == 0
    rows = [r for r in json.loads((study / "checks.json").read_text())["runs"] if r["policy"] == "grouped:4"]
    assert [(r["seed"], r["sweep_schedule"]) for r in rows] == [(1, "wsd"), (2, "wsd")]
    assert [r["gap"] for r in rows] == pytest.approx([-3.0, -4.0]) and [r["sweep_gap"] for r in rows] == pytest.approx(
        [-1.0, -1.0])
    answer = (study / "answer.md").read_text()
    assert ("| w256-cosine448 | 256 | 14.7M | grouped:4 | 1 | 0.0006 | 3.5890 | -3.00 |  | 0.0006 | WSD | 3.4650 | "
            "-1.00 |  | -1.00 |") in answer
    assert "### w256-cosine448" in answer
    cells = [m for m in json.loads((study / "checks.json").read_text())["cells"] if m["comparison"] == "at_check_lr"]
    assert [m["varied"] for m in cells] == ["schedule"]
    assert [(m["sweep_schedule"], m["gap"], m["sweep_gap"]) for m in cells] == [("wsd", pytest.approx(-3.5),
                                                                              pytest.approx(-1.0))]
    # the shift, paired by seed: -2 and -3 points, mean -2.5 with t(0.975, 1 df) x sd / sqrt(2) = 12.706 x 0.5
    assert cells[0]["shift"] == pytest.approx(-2.5) and cells[0]["shift_ci95"] == pytest.approx(6.353, abs=1e-3)
    assert "| -1.00 | -2.50 ± 6.35 |" in answer
    # branches at one budget give no line: the width stays out of the trends and the planner's fit, in the tables
    assert report.trends(report.load(str(study))) == {} and report.planner_fit(report.load(str(study))) is None
    assert "| 256 | WSD | 14.7M (0.66) | val | grouped:4 | 3 | 2 | -1.00" in answer


def test_headline_names_each_markers_seeds_when_a_widths_policies_differ(tmp_path, monkeypatch):
    """A width whose cosine cells have 2 and 3 seeds gets one legend entry ("2-3 seeds"), and each marker says its own
    n=; where every cell has the same count, the legend says it and the markers do not. A width without WSD
    branches is drawn alone (the panel's sync count from its cells)."""
    import training.config
    from experiments.large_budgets import trend
    texts = {}

    def keep(fig, path):
        texts[os.path.basename(path)] = ([t.get_text() for legend in fig.legends for t in legend.get_texts()],
                                         [t.get_text() for ax in fig.axes for t in ax.texts])
    monkeypatch.setattr(training.config, "save_figure", keep)

    def cell(policy, seeds):
        return {"width": 768, "policy": policy, "syncs": 12, "seeds": list(range(seeds)), "tokens_per_param": 2.44,
                "gap": 1.0, "gap_ci95": 2.0}
    trend.plot_headline({}, ["spd", "parallel"], str(tmp_path / "mixed.png"), [cell("spd", 3), cell("parallel", 2)])
    trend.plot_headline({}, ["spd", "parallel"], str(tmp_path / "same.png"), [cell("spd", 2), cell("parallel", 2)])
    assert texts["mixed.png"] == (["width 768, cosine (2-3 seeds, n= at each marker)"], ["2.4 n=3", "2.4 n=2"])
    assert texts["same.png"] == (["width 768, cosine (2 seeds)"], ["2.4", "2.4"])


def test_one_legend_entry_a_line_style_names_the_policies_off_its_common_seed_count():
    """The WSD lines, cosine markers and checks of a width take one legend entry each: the most common seed count
    (the smaller on a tie), then each policy with another; one seed says it has no band (WSD lines) or not."""
    from experiments.large_budgets.trend import seeds_label
    assert seeds_label({"ladder": 3, "spd": 2, "parallel": 2, "grouped:4": 2}) == "2 seeds; ladder 3"
    assert seeds_label({"ladder": 3, "spd": 3}) == "3 seeds"
    assert seeds_label({"ladder": 1, "parallel": 2, "spd": 1}) == "1 seed, no band; parallel 2"
    assert seeds_label({"ladder": 1, "parallel": 2, "spd": 1}, one="") == "1 seed; parallel 2"
    assert seeds_label({"ladder": 3, "spd": 2}) == "2 seeds; ladder 3"


def test_coverage_counts_the_designed_runs_and_names_the_missing():
    """answer.md's first table: per width and schedule, the finished runs of the design's policies, seeds and budgets
    (a run at another budget does not count) and what is missing, by policy and seed."""
    cosine = [dict(policy=p, seed=s, final_iter=9216) for p in ("baseline",) + report.POLICY_ORDER
              for s in report.DESIGN_SEEDS if (p, s) != ("ladder", 1339)]
    cosine.append(dict(policy="spd", seed=1337, final_iter=4096))
    wsd = [dict(policy="baseline", seed=1337, final_iter=b) for b in (576, 1152)]
    rows = report.coverage({(768, "cosine"): cosine, (768, "runs"): wsd})
    found = {(w, schedule): rest for w, schedule, *rest in rows}
    assert found[768, "cosine"] == [[9216], 17, 18, {"ladder": {1339: [9216]}}]
    budgets, stored, designed, missing = found[768, "runs"]
    assert (budgets, stored, designed) == ([576, 1152, 2304, 4608], 2, 72)
    assert missing["baseline"] == {1337: [2304, 4608], 1338: budgets, 1339: budgets}
    assert found[256, "cosine"][1] == 0 and found[384, "runs"][0] == [392, 784, 1568, 3136, 6272]
    text = "\n".join(report.render_coverage(rows))
    assert "| 768 | cosine | 9216 | 17 of 18 | ladder 1339 |" in text
    assert "| 768 | WSD | 576, 1152, 2304, 4608 | 2 of 72 | baseline 1337 at 2304/4608, 1338, 1339; ladder " in text
    assert "| 256 | cosine | 7168 | 0 of 18 | all |" in text


def test_the_design_is_the_configs_and_the_readme_table():
    """DESIGN's cosine budgets are the width configs' max_iters, and both budgets stand in README.md's design table."""
    readme = open(os.path.join(report.HERE, "README.md")).read()
    for width, (first, top) in report.DESIGN.items():
        name = "large_124m.py" if width == 768 else f"large_w{width}.py"
        with open(os.path.join(report.HERE, "..", "..", "config", name)) as f:
            assert f"\nmax_iters = {top}\n" in f.read(), name
        row = next(line for line in readme.splitlines() if line.startswith(f"| {width} | `config/{name}`"))
        assert f"{first:,}" in row and f"{top:,}" in row, row


def test_curves_pair_each_eval_with_the_same_seeds_baseline_and_refuse_to_overwrite(tmp_path, capsys):
    """curves.py: the gap at every eval both runs made (iteration 0 left out), the gradient norms from the train
    records, where a run's norm leaves its baseline's, the table row, a figure per folder, one line naming a bad
    --width and an existing --out."""
    from experiments.large_budgets import curves
    cosine = tmp_path / "cosine"
    fake_run(cosine, "baseline", 1, 4.0, 4.0, 4.0)
    fake_run(cosine, "ladder", 1, 4.4, 4.0, 4.0)  # val 5.4 at 112 and 4.4 at 224 against 5.0 and 4.0
    fake_run(cosine, "spd", 2, 4.4, 4.0, 4.0)  # seed 2 has no baseline: not drawn
    for name, norms in (("baseline-s1", (0.5, 0.4)), ("ladder-s1", (0.6, 50.0))):
        with open(cosine / f"d256-b224-{name}" / "metrics.jsonl", "a") as f:
            for it, norm in zip((0, 112, 224), (9.0,) + norms):  # iteration 0's norm is left out
                f.write(json.dumps({"type": "train", "iter": it, "grad_norm": norm}) + "\n")
    runs = curves.cosine_runs(str(cosine))
    assert set(runs) == {("baseline", 1), ("ladder", 1), ("spd", 2)}
    assert runs["ladder", 1]["grad"] == [(112, 0.6), (224, 50.0)]
    iters, gaps = zip(*curves.gap_curve(runs["ladder", 1], runs["baseline", 1]))
    assert iters == (112, 224) and gaps == pytest.approx((8.0, 10.0))  # 5.4 / 5.0 and 4.4 / 4.0
    assert curves.unsteady_from(runs["ladder", 1], runs["baseline", 1], window=1) == 224  # 50 / 0.4; 0.6 / 0.5 is not
    assert curves.unsteady_from(runs["ladder", 1], runs["baseline", 1]) is None  # 2 norms: no window of 5
    (row,) = curves.path_rows(256, runs)
    assert row[:2] == (256, "d256-b224-ladder-s1") and row[2] == (112, pytest.approx(8.0)) and row[3] == 224
    assert row[4] is None and row[5] == pytest.approx(10.0)
    assert "| 256 | d256-b224-ladder-s1 | +8.00 (112) | 224 | never | +10.00 |" in curves.render_paths([row])
    out = tmp_path / "curves.png"
    assert curves.plot_curves(runs, str(out), "t") == 1 and out.stat().st_size > 10_000
    assert curves.plot_curves({k: v for k, v in runs.items() if k[0] != "baseline"}, str(tmp_path / "x.png"), "t") == 0
    for argv, named in ((["--folder", str(cosine), "--out", str(out)], "exists; --force"),
                        (["--width", "5"], "--width 5: no cosine runs at that width; allowed: "),
                        (["--folder", str(cosine)], "--folder needs --out"),
                        ([], "give one of --width")):
        with pytest.raises(SystemExit) as stop:
            curves.main(argv)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and named in err and "\n" not in err, (argv, err)
    assert curves.main(["--folder", str(cosine), "--out", str(out), "--force"]) == 0


def test_the_curves_legend_names_only_the_seeds_with_a_baseline(tmp_path, monkeypatch):
    """A check part-run: a policy's seed whose baseline has not run draws no line, so the legend does not name it."""
    import atomic_files
    from experiments.large_budgets import curves
    cosine = tmp_path / "cosine"
    fake_run(cosine, "baseline", 1, 4.0, 4.0, 4.0)
    fake_run(cosine, "ladder", 1, 4.4, 4.0, 4.0)
    fake_run(cosine, "ladder", 2, 4.4, 4.0, 4.0)  # no baseline of seed 2
    legends = []
    monkeypatch.setattr(atomic_files, "save_figure",
                        lambda fig, path: legends.append([t.get_text() for lg in fig.legends for t in lg.get_texts()]))
    assert curves.plot_curves(curves.cosine_runs(str(cosine)), str(tmp_path / "c.png"), "t") == 1
    assert legends == [["the baseline's seeds", "seed 1"]]


def test_layers_draw_where_an_unsteady_runs_norm_sat(tmp_path):
    """layers.py: each layer's share of norm² at every logged iteration (emb first, blocks by number, final last),
    the blocks after whose MLP a policy syncs, and a panel only for a policy run that logged its layers and whose
    norm ran above twice its seed's baseline's."""
    from experiments.large_budgets import layers
    records = [{"type": "train", "iter": 0, "grad_norm_layers": {"emb": 9.0}},  # iteration 0 is left out
               {"type": "train", "iter": 10, "grad_norm_layers": {"h10": 0.0, "final": 1.0, "h2": 1.0, "emb": 2.0}},
               {"type": "train", "iter": 20, "grad_norm_layers": {"h10": 3.0, "final": 0.0, "h2": 0.0, "emb": 4.0}},
               {"type": "eval", "iter": 20}]
    series = layers.layer_series(records)
    assert [i for i, _ in series] == [10, 20]
    iters, names, rows = layers.shares(series)
    assert iters == [10, 20] and names == ["emb", "h2", "h10", "final"]
    assert rows == [[pytest.approx(4 / 6), pytest.approx(16 / 25)], [pytest.approx(1 / 6), 0.0],
                    [0.0, pytest.approx(9 / 25)], [pytest.approx(1 / 6), 0.0]]
    assert layers.synced_blocks("grouped:4", 12) == [3, 7, 11] and layers.synced_blocks("spd", 4) == [0, 1, 2, 3]
    assert layers.synced_blocks("grouped:4", 11) == []  # a policy that does not fit the blocks logged: no lines
    grad = lambda norm: [(i, norm) for i in range(10, 70, 10)]  # 6 logged iterations
    series = [(i, {"emb": 1.0, "h0": 2.0, "h1": 0.5, "h2": 0.1, "h3": i / 10, "final": 0.1}) for i, _ in grad(1)]
    base = dict(policy="baseline", seed=1, grad=grad(1.0), curve=[(0, 5.0), (60, 4.0)], layers=series)
    unsteady = dict(policy="grouped:4", seed=1, grad=grad(3.0), curve=[(0, 5.0), (60, 4.4)], layers=series,
                    name="d256-b60-grouped4-s1")
    steady = dict(unsteady, policy="spd", grad=grad(1.5), name="d256-b60-spd-s1")
    unlogged = dict(unsteady, policy="ladder", layers=[], name="d256-b60-ladder-s1")
    orphan = dict(unsteady, seed=2, name="d256-b60-grouped4-s2")  # no baseline of seed 2
    runs = {("baseline", 1): base, ("grouped:4", 1): unsteady, ("spd", 1): steady, ("ladder", 1): unlogged,
            ("grouped:4", 2): orphan}
    [(run, since, final_gap)] = layers.unsteady_runs(runs)
    assert run is unsteady and since == 10 and final_gap == pytest.approx(10.0)
    assert layers.first_group("grouped:2", ["emb", "h0", "h1", "h2", "h3"]) == ["h0", "h1"]
    assert layers.first_group("grouped:4", ["emb", "h0", "h2"]) == []  # 3 blocks: grouped:4 does not fit
    # the phases: before the norm left the baseline's (iteration 10: none logged before it), from there to the
    # largest norm (stability's max_at, 40: iterations 10-30), from it on (40-60); h0-h1 is grouped:2's first group
    unsteady["policy"], unsteady["stability"] = "grouped:2", {"max_at": 40}
    unsteady["layers"] = [(i, {"emb": 1.0, "h0": 1.0, "h1": 1.0, "h2": 1.0, "h3": 2.0 if i < 40 else 0.0})
                          for i, _ in grad(1)]
    rows = layers.phase_rows(256, layers.unsteady_runs(runs))
    assert [(r[2], r[3], r[4]) for r in rows] == [("from there to the largest norm", 10, 30),
                                                  ("from the largest norm on", 40, 60)]
    assert rows[0][5][0] == ("h3", pytest.approx(0.5)) and rows[0][6] == pytest.approx(0.25)
    assert rows[0][7] == ["h0", "h1"] and rows[1][6] == pytest.approx(0.5) and rows[1][5][-1][1] == pytest.approx(0.25)
    assert ("| 256 | d256-b60-grouped4-s1 | from there to the largest norm (10-30) | h3 50%, emb 12%, h0 12% | "
            "h0-h1: 25% |") in layers.render_phases(rows)
    one_block = [rows[0][:7] + (["h0"],)]  # spd syncs after every MLP: its first group is block 0 alone
    assert layers.render_phases(one_block).endswith("| h3 50%, emb 12%, h0 12% | h0: 25% |\n")
    out = tmp_path / "layers.png"
    assert layers.plot_layers(layers.unsteady_runs(runs), str(out), "t") == 1 and out.stat().st_size > 10_000
    assert layers.plot_layers([], str(tmp_path / "none.png"), "t") == 0 and not (tmp_path / "none.png").exists()
