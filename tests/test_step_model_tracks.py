"""The step-time model's tracks term (bench/steptime/): what running k tracks per GPU adds to a policy's step beyond
baseline's. By hand: the counted elementwise passes at k = 1, the streams' term at k >= 2 (its per-rank and per-track
parts, its features by kind, the width law past two tracks per GPU, its carry to another device), and the streams'
fits (non-negative least squares, the MLP coefficient, a family's own k, borrowing across families and sizes).
The rest of the model (the all-reduce law, the collectives, the calibration, the fits' rows and their validation, the
answers): tests/test_step_model.py."""
import pytest

from bench import steptime as sm
from bench.steptime import validation


def test_tracks_term_by_k():
    """k = 1: only the policy's counted elementwise passes (none for baseline, ladder, parallel; one per spd layer, two
    per grouped region; in training at tp > 1 one bias add per Megatron sublayer); k >= 2 adds the streams' term,
    whose part 1 - q shrinks with the rank's share of tp=1's work."""
    ops = {p: sm.policy_ops(p, 12, "decode_b1", 2) for p in ("baseline", "ladder", "parallel", "spd", "grouped:4")}
    assert ops == {"baseline": 0, "ladder": 0, "parallel": 0, "spd": 12, "grouped:4": 6}
    assert [sm.policy_ops(p, 12, "train_b8", tp) for p in ("baseline", "spd", "grouped:4") for tp in (1, 2)] == \
        [0, 24, 12, 12, 6, 6]
    e = dict(scale=2.0, c1=1.0, c_streams=(5.0, 3.0, 4.0), q=0.25)
    one_pass = 2.0 * sm.op_pass("124m", "decode_b1", "H200") * 1e3  # ms, scaled
    for policy, n in ops.items():
        assert sm.tracks_ms(e, "124m", "decode_b1", policy, 1, 2, "H200") == pytest.approx(n * one_pass)
    n_entry, n_attn, n_mlp = sm.tracks_features("grouped:4", 12)
    streams = 2.0 * sm.stream_pass("124m", "decode_b1", 2, "H200") * 1e3 * (5.0 * n_entry + 3.0 * n_attn + 4.0 * n_mlp)
    share = sum(sm.roofline(sm.sublayers("124m", "decode_b1", 2), "H200").values()) / sum(
        sm.roofline(sm.sublayers("124m", "decode_b1", 1), "H200").values())
    assert 0.4 < share < 1  # a rank at tp=2 does about half of tp=1's work, and the fixed latencies don't halve
    assert sm.tracks_ms(e, "124m", "decode_b1", "grouped:4", 2, 2, "H200") == pytest.approx(6 * one_pass + streams * (0.75 * share + 0.25))
    assert sm.tracks_ms(e, "124m", "decode_b1", "grouped:4", 2, 1, "H200") == pytest.approx(6 * one_pass + streams)
    assert sm.tracks_ms(dict(e, c_streams=(0.0, 0.0, 0.0)), "124m", "decode_b1", "grouped:4", 4, 2, "H200") == \
        pytest.approx(6 * one_pass)


def test_past_two_tracks_per_gpu_the_streams_bytes_follow_the_width_law():
    """From k = WIDTH_LAW_MIN_K, where the family measured one GPU at n_tracks = tp k, a tp rank's streams take 1/tp of
    that row's term for their bytes (1 - latency_fraction) and keep the rank's own for their launches; below it, or
    without that row, the term is the one carried from tp=1 at k. Decode's passes are launches: no law there."""
    c_k, c_n = (1.0, 2.0, 3.0), (4.0, 5.0, 6.0)
    for w in ("prefill_b8", "decode_b1"):
        f = sm.latency_fraction(w, "H100")
        assert (0.1 < f < 0.3) if w == "prefill_b8" else f > 0.99
        for k, tp in ((3, 2), (2, 2)):
            e = dict(scale=2.0, c1=0.0, c_streams=c_k, q=0.25, device="H100", streams_by_k={k: c_k, tp * k: c_n})
            per = lambda c: sum(ci * ni for ci, ni in zip(c, sm.tracks_features("grouped:4", 12)))
            share = sm.step_roofline("124m", w, tp, "H100") / sm.step_roofline("124m", w, 1, "H100")
            own = sm.stream_pass("124m", w, k, "H100", 0.25, share) * per(c_k)
            law = sm.stream_pass("124m", w, tp * k, "H100", 0.25) * per(c_n) / tp
            want = own if k < sm.WIDTH_LAW_MIN_K else f * own + (1 - f) * law
            assert sm.tracks_ms(e, "124m", w, "grouped:4", k, tp, "H100") == pytest.approx(2.0 * want * 1e3)
            del e["streams_by_k"][tp * k]  # no tp=1 row at n_tracks = tp k: the term carried from k alone
            assert sm.tracks_ms(e, "124m", w, "grouped:4", k, tp, "H100") == pytest.approx(2.0 * own * 1e3)


def test_tracks_term_carries_to_another_device_as_the_step_does():
    """A family fitted on H200 prices its own work on H200 and carries it to H100 by the ratio of the two devices'
    step rooflines at that tp, not by their HBM bandwidths (1.43x); on its own device nothing is carried."""
    e = dict(scale=2.0, c1=1.0, c_streams=(5.0, 3.0, 4.0), q=0.25, device="H200")
    for workload, tp, k in (("train_b8", 2, 2), ("prefill_b8", 2, 1), ("decode_b1", 4, 3)):
        on_h200 = sm.tracks_ms(e, "medium", workload, "grouped:4", k, tp, "H200")
        no_device = {key: v for key, v in e.items() if key != "device"}  # a family that names none: the row's device
        assert on_h200 == pytest.approx(sm.tracks_ms(no_device, "medium", workload, "grouped:4", k, tp, "H200"))
        ratio = sm.step_roofline("medium", workload, tp, "H100") / sm.step_roofline("medium", workload, tp, "H200")
        assert 1.0 < ratio < 4.8 / 3.35  # the compute-bound parts run at one datasheet FLOP rate on both
        assert sm.tracks_ms(e, "medium", workload, "grouped:4", k, tp, "H100") == pytest.approx(on_h200 * ratio)


def _growth_rows(q, workload="prefill_b8", extra2=3.0, ks=(4,)):
    """tp=1 rows of one family at n_tracks 2 and each k of ks whose extra over baseline at k is extra2 times
    (1 - q) + q (k - 1)."""
    row = lambda n, policy, ms: dict(tp=1, impl="post-49", device="H200", size="124m", workload=workload, mode="graph",
                                     n_tracks=n, policy=policy, ms=ms)
    rows = [row(2, "baseline", 10.0), row(2, "spd", 10.0 + extra2)]
    for k in ks:
        rows += [row(k, "baseline", 10.5), row(k, "spd", 10.5 + extra2 * ((1 - q) + q * (k - 1)))]
    return rows


def test_replicated_part_recovers_a_known_q():
    """fit_replicated finds the q the rows were made with, per workload kind (a kind without pairs takes every kind's);
    a pair whose k = 2 extra is under 5% of baseline, or no pair at all, leaves q = 1."""
    fit = sm.fit_replicated(_growth_rows(0.25) + _growth_rows(0.5, "train_b8", ks=(3, 6)))
    assert fit["q"]["prefill"] == pytest.approx(0.25) and fit["q"]["train"] == pytest.approx(0.5)
    assert fit["q"]["decode"] == pytest.approx((0.25 * 2 * 2 + 0.5 * (1 + 16)) / (4 + 1 + 16))  # every pair's
    small = sm.fit_replicated(_growth_rows(0.5, extra2=0.4))
    assert (small["q"]["prefill"], small["n"]) == (1.0, 0)
    assert sm.fit_replicated(_growth_rows(0.5)[:3])["q"]["prefill"] == 1.0


def test_stream_pass_splits_per_rank_and_per_track_parts():
    """u(k) = one pass x ((1 - q) share + q (k - 1)): one pass at k = 2 on one GPU for any q; at tp > 1 only the
    (1 - q) part shrinks with the share; with q = 1 it is linear in k - 1 and does not shrink."""
    u = lambda k, q, share=1.0: sm.stream_pass("124m", "prefill_b8", k, "H200", q, share)
    one = sm.LAT + 8 * 1024 * 768 * 4 / sm.DEVICES["H200"]["hbm"]
    assert u(2, 0.3) == pytest.approx(one) and u(2, 0.0) == pytest.approx(one)
    assert u(6, 0.3, 0.5) == pytest.approx(one * (0.7 * 0.5 + 0.3 * 5))
    assert u(4, 1.0, 0.5) == pytest.approx(3 * one)


def test_streams_prefer_a_current_code_fit():
    """resolve_streams: a family with only an older-code streams fit takes a current-code fit of its workload kind
    (train_b12 from train_b8), one without any fit the same, and a current-code family keeps its own."""
    fam = lambda size, w, mode, dev, c, code: dict(size=size, workload=w, mode=mode, device=dev,
                                                   c_streams=None if c is None else (c, c, c),
                                                   streams_how=f"{code} fit" if code else "no k >= 2 row", streams_code=code)
    old = fam("124m", "train_b12", "compiled", "H100", 9.0, "pre-49")
    none = fam("124m", "train_b12", "graph", "H200", None, None)
    cur = fam("medium", "train_b8", "graph", "H200", 2.0, "post-49")
    dec = fam("124m", "decode_b1", "graph", "H200", 5.0, "post-49")
    sm.resolve_streams({"H100": {"a": old}, "H200": {"b": none, "c": cur, "d": dec}})
    assert (old["c_streams"], old["streams_code"]) == ((2.0,) * 3, "post-49") and "its own, not used: pre-49 fit" in old["streams_how"]
    assert (none["c_streams"][0], cur["c_streams"][0], dec["c_streams"][0]) == (2.0, 2.0, 5.0)
    assert "borrowed from medium" in none["streams_how"]


def test_rows_of_one_policy_shape_scale_another_familys_coefficients():
    """Rows whose feature vectors are parallel (one policy, any k) cannot fit the coefficients apart: such a family
    takes the nearest current-code family's, times the factor that reproduces its rows at that family's own k
    (scale_to); two shapes fit their own, and no family borrows from a one-shape one."""
    assert sm.one_shape([(1.0, 2.0, 0.0), (2.0, 4.0, 0.0)]) and not sm.one_shape([(1.0, 2.0, 0.0), (1.0, 0.0, 2.0)])
    src_by_k = {2: (1.0, 2.0, 3.0)}
    A, ks = [(0.5, 1.0, 1.0)], [2]
    y = [3.0 * (0.5 * 1.0 + 1.0 * 2.0 + 1.0 * 3.0)]  # three times what the source's k = 2 coefficients give
    c, f = sm.scale_to((9.0, 9.0, 9.0), A, y, src_by_k, ks)
    assert f == pytest.approx(3.0) and c == pytest.approx((27.0, 27.0, 27.0))
    fam = lambda size, c, points: dict(size=size, workload="train_b12", mode="compiled-graphs", device="H100",
                                       c_streams=c, streams_how="own fit", streams_code="post-49",
                                       streams_by_k=dict(src_by_k) if points is None else {2: (0.0, 0.0, 0.0)},
                                       shape_points=points)
    src, one = fam("124m", (9.0, 9.0, 9.0), None), fam("medium", (0.0, 0.0, 0.0), (A, y, ks))
    sm.resolve_streams({"H100": {"a": src, "b": one}})
    assert one["streams_by_k"][2] == pytest.approx((3.0, 6.0, 9.0)) and one["c_streams"] == pytest.approx((27.0,) * 3)
    assert "x 3.00" in one["streams_how"] and src["c_streams"] == (9.0, 9.0, 9.0)


def test_an_unmeasured_size_takes_the_nearest_scale_and_the_mean_of_the_measured_streams():
    """family_on: a size with no tp=1 row takes the compute scale of the nearest measured size (size_distance: medium
    is nearer large than 124m is) and, by hand, the mean of every measured size's own streams fit, at each k they
    share."""
    fam = lambda size, s, c, by_k: dict(
        size=size, workload="decode_b1", mode="graph", device="H200", scale=s, c_streams=c,
        streams_by_k=by_k, streams_how="own", streams_code="post-49", own_streams=(c, "own", "post-49"))
    table = {"124m|decode_b1|graph": fam("124m", 1.5, (2.0, 0.0, 1.0), {2: (2.0, 0.0, 1.0), 4: (1.0, 0.0, 1.0)}),
             "large|decode_b1|graph": fam("large", 1.7, (4.0, 1.0, 3.0), {2: (3.0, 1.0, 2.0)})}
    assert sm.size_distance("medium", "large") < sm.size_distance("medium", "124m")
    e, how = sm.family_on(table, "medium", "decode_b1", "graph")
    assert how.startswith("scaled from large") and e["scale"] == 1.7
    assert (e["c_streams"], e["streams_by_k"]) == ((3.0, 0.5, 2.0), {2: (2.5, 0.5, 1.5)})
    e, how = sm.family_on(table, "xl", "decode_b1", "graph")
    assert how.startswith("scaled from large") and e["c_streams"][0] == 3.0
    assert table["large|decode_b1|graph"]["c_streams"] == (4.0, 1.0, 3.0)  # the measured family itself is left as fitted


def test_streams_features_count_regions_and_per_track_sublayers_by_kind():
    """tracks_features (regions entered, per-track attention, per-track MLP) by hand at 12 layers: spd enters a region
    at each of 12 attentions, which run per track; grouped:4 enters 3 regions, each with 4 attentions and 3 MLPs per
    track; a selective set baseline in layers 0-5 and spd in 6-11 has half of spd's (its Megatron layers run one
    stream); attention-only syncs enter a region at each MLP but the last, which must sync; parallel and ladder never
    diverge a stream."""
    assert sm.tracks_features("spd", 12) == (12, 12, 0)
    assert sm.tracks_features("grouped:4", 12) == (3, 12, 9)
    assert sm.tracks_features("selective:0-5,m6-11", 12) == (6, 6, 0)
    assert sm.tracks_features("selective:a0-11,m11", 12) == (11, 0, 11)
    assert sm.tracks_features("parallel", 12) == sm.tracks_features("ladder", 12) == (0, 0, 0)


def test_nonneg_lstsq_by_hand():
    """Three columns, an exact non-negative solution; a negative unconstrained one clipped to the best subset."""
    A = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (1.0, 1.0, 1.0)]
    assert sm.nonneg_lstsq(A, [1.0, 2.0, 3.0, 6.0]) == pytest.approx((1.0, 2.0, 3.0))
    # y = 2 a0 - 1 a1 exactly; with c >= 0 the best is c1 = 0 and c0 = the least squares of y on a0 alone
    A2 = [(1.0, 1.0), (2.0, 1.0), (3.0, 2.0)]
    y2 = [2 * a - b for a, b in A2]
    c0 = sum(a * v for (a, _), v in zip(A2, y2)) / sum(a * a for a, _ in A2)
    assert sm.nonneg_lstsq(A2, y2) == pytest.approx((c0, 0.0))


def test_mlp_coefficient_fitted_only_where_a_policy_runs_mlps_alone_per_track():
    """fit_streams by hand on a family whose rows follow known coefficients (entry 1, attention 2, MLP 6, in u(k)
    units): with spd, grouped:4 and attention-only syncs it recovers all three; with spd and grouped:4 alone it
    ties the MLP's to the attention's by the ratio given (1 where none is), and mlp_ratios reads that ratio back from
    the families that fitted it; every row's extra is taken over its own run's baseline (run_baseline)."""
    base = lambda source, ms: dict(size="124m", workload="decode_b1", mode="graph", tp=1, n_tracks=2, policy="baseline",
                                   ms=ms, impl="post-49", source=source)
    u = 1.5 * sm.stream_pass("124m", "decode_b1", 2, "H200") * 1e3
    truth = (1.0, 2.0, 6.0)
    row = lambda policy, source, b: dict(base(source, b), policy=policy, ms=b + u * sum(
        c * n for c, n in zip(truth, sm.tracks_features(policy, 12))) + 1.5 * sm.policy_ops(policy, 12, "decode_b1", 1)
        * sm.op_pass("124m", "decode_b1", "H200") * 1e3)
    rs = [base("run1", 0.5), base("run2", 0.6), row("spd", "run1", 0.5), row("grouped:4", "run1", 0.5),
          row("selective:a0-11,m11", "run2", 0.6)]
    c, _, code, fitted = sm.fit_streams(rs, 0.55, 1.5, 1.0, "H200")
    assert fitted and code == "post-49" and c == pytest.approx(truth)
    c2, _, _, fitted2 = sm.fit_streams(rs[:4], 0.55, 1.5, 1.0, "H200", mlp_ratio=3.0)
    assert not fitted2 and c2[2] == pytest.approx(3.0 * c2[1])
    assert sm.mlp_ratios({"H200": {"f": dict(workload="decode_b1", mlp_fitted=True, c_streams=c)}}) == \
        {"decode_b1": pytest.approx(3.0), "decode_b8": pytest.approx(3.0)}


def test_an_extra_streams_pass_grows_with_the_width_in_latency_bound_steps_too():
    """stream_pass by hand: decode_b1 (one token) at medium, k = 2, q = 0, share 1 is 1024 x (2 us / 768 + 4 B / 3.35
    TB/s); 124m's is 768 / 1024 of it, so a latency-bound family borrowed across sizes scales with C; training x3."""
    medium = sm.stream_pass("medium", "decode_b1", 2, "H100", q=0.0, share=1.0)
    assert medium == pytest.approx(1024 * (2.0e-6 / 768 + 4 / 3.35e12))
    assert sm.stream_pass("124m", "decode_b1", 2, "H100", q=0.0, share=1.0) == pytest.approx(medium * 768 / 1024)
    assert sm.stream_pass("124m", "train_b8", 3, "H100", q=0.5, share=0.8) == pytest.approx(
        3 * 768 * (2.0e-6 / 768 + 8 * 1024 * 4 / 3.35e12) * (0.5 * 0.8 + 0.5 * 2))


def test_streams_term_fitted_at_the_rows_own_k_where_measured():
    """A family measured at k = 2, 3, 4 and 12 (H200, 124m train_b8, current code; 3 from h200_tp1_k3_k5/, 12 from
    h200_tp1_width/) prices k = 2 from its k = 2 rows alone (their least squares, by hand from fit_streams on that
    subset), and a k it did not measure (5) from every k."""
    rows = sm.stored_rows()
    tables = sm.fit_split(rows)["tables"]
    e = tables["H200"]["124m|train_b8|graph"]
    assert sorted(e["streams_by_k"]) == [2, 3, 4, 12]
    rs = [r for r in rows if (r["size"], r["workload"], r["mode"], r["device"], r["tp"]) == ("124m", "train_b8", "graph", "H200", 1)
          and sm.feeds_fits(r) and r["n_tracks"] in (1, 2)]
    ratio = sm.fit_split(rows)["fit"]["mlp_ratios"].get("train_b8")
    c2, _, _, _ = sm.fit_streams(rs, e["base_ms"], e["scale"], e["c1"], "H200", e["q"], ratio)
    assert e["streams_by_k"][2] == pytest.approx(c2)
    assert c2 != pytest.approx(e["c_streams"])  # the pooled fit differs
    feats = sm.tracks_features("grouped:4", 12)
    at = lambda k, c: e["scale"] * (6 * sm.op_pass("124m", "train_b8", "H200") * e["c1"]
                                    + sm.stream_pass("124m", "train_b8", k, "H200", e["q"]) * sum(
                                        ci * n for ci, n in zip(c, feats))) * 1e3
    assert sm.tracks_ms(e, "124m", "train_b8", "grouped:4", 2, 1, "H200") == pytest.approx(at(2, c2))
    assert sm.tracks_ms(e, "124m", "train_b8", "grouped:4", 5, 1, "H200") == pytest.approx(at(5, e["c_streams"]))


def test_training_streams_are_fp32():
    """Under training's bf16 autocast the stream, its LayerNorms and residual adds are fp32 (as op_pass counts them);
    inference runs them in bf16. By hand for 124m (12 layers, C = 768): train_b8 (8 x 1024 tokens, backward 2x
    the forward) and prefill_b8 (the same tokens, no backward)."""
    N, C, L = 8 * 1024, 768, 12
    train, prefill = sm.sublayers("124m", "train_b8", 2), sm.sublayers("124m", "prefill_b8", 2)
    assert train["layernorm"][1] == 3 * L * 2 * 2 * N * C * 4 and prefill["layernorm"][1] == L * 2 * 2 * N * C * 2
    assert train["residual"][1] == 3 * L * 2 * 3 * N * C * 4 and prefill["residual"][1] == L * 2 * 3 * N * C * 2


def test_width_law_pairs_by_hand(monkeypatch):
    # H100: tp=1 extra 3.0 ms at n_tracks 2 (k), 4.4 at n_tracks 4 (2k); tp=2 at n_tracks 4: floors 6.0 over 4.0.
    # H200: tp=1 extra 3.0 at n_tracks 2, 6.0 at n_tracks 8 (tp k); tp=4 at n_tracks 8: floors 4.2 over 3.0
    def row(tp, n, policy, ms, floor=None, device="H100"):
        return dict(size="124m", workload="prefill_b8", mode="graph", tp=tp, n_tracks=n, policy=policy, ms=ms,
                    floor_ms=floor, device=device, commit="x", source="s", prospective=None, impl="post-49")
    rows = [row(1, 2, "baseline", 4.0), row(1, 2, "spd", 7.0), row(1, 4, "baseline", 4.1), row(1, 4, "spd", 8.5),
            row(2, 4, "baseline", 5.0, 4.0), row(2, 4, "spd", 6.5, 6.0), row(2, 4, "parallel", 4.5, 4.0)]
    rows += [row(1, 2, "baseline", 4.0, device="H200"), row(1, 2, "spd", 7.0, device="H200"),
             row(1, 8, "baseline", 4.2, device="H200"), row(1, 8, "spd", 10.2, device="H200"),
             row(4, 8, "baseline", 3.5, 3.0, "H200"), row(4, 8, "spd", 4.5, 4.2, "H200")]
    monkeypatch.setattr(validation, "stored_rows", lambda: [dict(r) for r in rows])
    q = {"train": 0.3, "prefill": 0.25, "decode": 0.0}
    p, p4 = sm.width_law_pairs(q)  # parallel is left out: its tp=1 extra is no streams term
    assert (p4["device"], p4["tp"], p4["k"], p4["e_tp"], p4["e1_n"]) == ("H200", 4, 2, pytest.approx(1.2), pytest.approx(6.0))
    assert any("| H200 | 4 | prefill_b8 | 2 | 1 | 0.80-0.80 (0.80) | 0.40-0.40 (0.40) |" in line
               for line in sm.width_law_lines(q))
    share = sum(sm.roofline(sm.sublayers("124m", "prefill_b8", 2), "H100").values()) / sum(
        sm.roofline(sm.sublayers("124m", "prefill_b8", 1), "H100").values())
    assert (p["k"], p["policy"]) == (2, "spd")
    assert p["e_tp"] == pytest.approx(2.0) and p["e1_k"] == pytest.approx(3.0) and p["e1_n"] == pytest.approx(4.4)
    assert p["model"] == pytest.approx(0.75 * share + 0.25)  # ((1 - q) share + q (k - 1)) / ((1 - q) + q (k - 1)), k = 2
    assert any("| H100 | 2 | prefill_b8 | 2 | 1 | 0.91-0.91 (0.91) | 0.67-0.67 (0.67) |" in line for line in sm.width_law_lines(q))
