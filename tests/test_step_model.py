"""The step-time model (bench/step_model.py, bench/steptime/): the all-reduce cost against hand-computed cases and its
fits (per tp, from sweeps and from rows), each policy's collectives against the model's own counter (tp=1, and tp=2
on gloo), monotonicity, the fit's data and what enters it, the saving metric and its held-out splits, the
per-sublayer calibration on CPU, and the lines of an answer. The tracks term (what k tracks per GPU add beyond
baseline): tests/test_step_model_tracks.py."""
import json

import pytest
import torch

from bench import steptime as sm
from bench.steptime import compute
from bench.steptime import rows as rows_module
from model.gpt import GPT, GPTConfig
from model.sync_policy import parse_sync_policy
from parallel import comm
from parallel.launch import run_on_gloo

FIT = {"alpha_us": 10.0, "bw_GBps": 100.0}
POLICIES = ["baseline", "spd", "parallel", "ladder", "grouped:2", "grouped:4", "selective:m0,a2,m2-3"]
TINY = dict(n_layer=4, n_head=4, n_embd=32, n_tracks=4, vocab_size=64, block_size=16, dropout=0.0)


def test_allreduce_cost_by_hand():
    # t = alpha(2) (tp - 1) + 2 (tp - 1) / tp * bytes / bw
    assert sm.allreduce_ms(1e6, 1, FIT) == 0.0
    assert sm.allreduce_ms(1e6, 2, FIT) == pytest.approx(0.010 + 1.0 * 1e6 / 100e9 * 1e3)    # 0.020 ms
    assert sm.allreduce_ms(1e6, 4, FIT) == pytest.approx(0.030 + 1.5 * 1e6 / 100e9 * 1e3)    # 0.045 ms
    assert sm.allreduce_ms(2e6, 8, FIT) == pytest.approx(0.070 + 1.75 * 2e6 / 100e9 * 1e3)   # 0.105 ms


def test_fit_recovers_known_parameters():
    points = [(b, 7.0 + b / 300e9 * 1e6, "synthetic") for b in (1e3, 1e5, 1e6, 1e7, 3e7)]
    alpha, bw = sm.fit_comm(points)
    assert alpha == pytest.approx(7.0, rel=0.02) and bw == pytest.approx(300.0, rel=0.02)


def _counted(model, B, T, autocast=False):
    comm.stats.reset()
    idx = torch.randint(0, 64, (B, T))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(idx, idx)[1]
    loss.backward()
    return dict(comm.stats.counts), dict(comm.stats.bytes)


def _modeled(policy, B, T, tp, compute_bytes=4):  # 4: fp32 on CPU without autocast
    counts, nbytes = {}, {}
    for kind, phase, b in sm.collectives(policy, TINY["n_layer"], TINY["n_embd"], B, T, tp, True,
                                         compute_bytes=compute_bytes):
        counts[kind] = counts.get(kind, 0) + 1
        nbytes[kind] = nbytes.get(kind, 0) + b
    return counts, nbytes


@pytest.mark.parametrize("policy", POLICIES)
def test_collectives_match_the_counter_at_tp1(policy):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY, sync_policy=policy))
    counts, nbytes = _counted(model, 2, 8)
    want_counts, want_bytes = _modeled(policy, 2, 8, 1)
    assert want_counts["tp_fwd"] == model.syncs_per_forward == parse_sync_policy(policy, 4).n_syncs
    assert counts == want_counts and nbytes == want_bytes


def _worker(rank, world_size, policies):
    import torch.distributed as dist
    group, out = dist.new_group([0, 1]), []
    for policy in policies:
        for autocast in (False, True):
            torch.manual_seed(0)
            out.append(_counted(GPT(GPTConfig(**TINY, sync_policy=policy), tp_group=group), 2, 8, autocast))
    return out


def test_collectives_match_the_counter_at_tp2_gloo():
    """Counts and bytes by kind, in fp32 and under bf16 autocast (where every f and g but the embedding's and the
    cross-entropy's moves bf16, a region's entry included: 240c34d)."""
    policies = ["baseline", "grouped:2", "spd"]
    counted = iter(run_on_gloo(_worker, 2, policies)[0])
    for policy in policies:
        assert tuple(next(counted)) == _modeled(policy, 2, 8, 2), policy
        assert tuple(next(counted)) == _modeled(policy, 2, 8, 2, compute_bytes=2), policy


def test_monotonic():
    # more syncs never cost less communication; larger tp never lowers an all-reduce's cost
    comm_ms = [sum(sm.allreduce_ms(b, 8, FIT) for *_, b in sm.collectives(f"grouped:{g}", 48, 1600, 12, 1024, 8, True))
               for g in (48, 24, 12, 8, 4, 2, 1)]
    assert comm_ms == sorted(comm_ms)
    for nbytes in (1e3, 1e6, 1e8):
        costs = [sm.allreduce_ms(nbytes, tp, FIT) for tp in (1, 2, 4, 8)]
        assert costs == sorted(costs)
    # a rank's share of compute shrinks with tp
    roof = [sum(sm.roofline(sm.sublayers("xl", "train_b12", tp), "H100").values()) for tp in (1, 2, 4, 8)]
    assert roof == sorted(roof, reverse=True)


def test_no_overlap_bound_grows_with_syncs_at_equal_tracks():
    # same policy family and tracks features, one more synced point: ladder vs baseline have the same
    # syncs, and their no-overlap bounds are equal; full overlap only lowers ladder's
    tables = {"H200": sm.calibrate_from_rows(sm.stored_rows(), "H200")}
    fit = sm.load_comm_fit()
    base = sm.predict("medium", "prefill_b8", 4, "baseline", 4, "H200", tables, fit)
    lad = sm.predict("medium", "prefill_b8", 4, "ladder", 4, "H200", tables, fit)
    assert lad["no_overlap"] == pytest.approx(base["no_overlap"])
    assert lad["full_overlap"] < lad["ms"] < lad["no_overlap"] and base["full_overlap"] == base["no_overlap"]


def test_fit_uses_no_row_at_tp_ge_2():
    rows = sm.stored_rows()
    before = sm.calibrate_from_rows(rows, "H200")
    changed = [dict(r, ms=r["ms"] * 3) if r["tp"] >= 2 else r for r in rows]
    assert sm.calibrate_from_rows(changed, "H200") == before


def test_bad_input_names_the_value():
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        sm.shape_of("huge")
    with pytest.raises(ValueError, match="tp=3 is not modeled"):
        sm.predict("124m", "decode_b1", 3, "baseline", 3, "H200", {}, FIT)


def test_calibrate_runs_on_cpu(tmp_path):
    path = sm.calibrate("cpu", ["tiny"], [4], ["decode_b1", "train_b12"], 1, str(tmp_path))
    rows = json.load(open(path))["rows"]
    assert [r["workload"] for r in rows] == ["decode_b1", "train_b12"]
    for r in rows:
        assert r["how"] == "measured per sublayer" and r["tp"] == 4
        assert set(r["sublayers_ms"]) >= {"layernorm", "attention", "mlp", "head+ce"}
        assert all(v > 0 for v in r["sublayers_ms"].values())
    assert "optimizer" in rows[1]["sublayers_ms"]
    assert (tmp_path / "step_model_calibration_cpu.md").read_text().count("| tiny |") == 2
    assert json.load(open(path))["decode_cache"] == sm.DECODE_CACHE


def test_decode_rows_of_an_untagged_calibration_are_not_used(tmp_path, monkeypatch):
    """A calibration made before decode attention wrote its cache in place (no decode_cache tag) timed a
    torch.cat of the whole cache: predictions take its training rows but not its decode rows."""
    rows = [{"size": "124m", "tp": 2, "workload": w, "sublayers_ms": {"mlp": ms}}
            for w, ms in (("decode_b8", 1.5), ("train_b8", 7.0))]
    monkeypatch.setattr(compute, "RESULTS", str(tmp_path))
    cal = tmp_path / "step_model_calibration_h100.json"
    cal.write_text(json.dumps({"rows": rows}))
    assert sm.measured_sublayers("H100", "124m", "decode_b8", 2) == {}
    assert sm.measured_sublayers("H100", "124m", "train_b8", 2) == {"mlp": 7.0}
    cal.write_text(json.dumps({"rows": rows, "decode_cache": sm.DECODE_CACHE}))
    assert sm.measured_sublayers("H100", "124m", "decode_b8", 2) == {"mlp": 1.5}
    assert sm.measured_sublayers("H200", "124m", "decode_b8", 2) == {}


def test_calibration_repeatability_against_a_case_by_hand(tmp_path):
    """calibrate-compare: |second / first - 1| per (row, sublayer), kernel and eager times apart; rows only one
    file has are left out."""
    import json
    first = {"rows": [{"size": "124m", "tp": 1, "workload": "decode_b1",
                       "sublayers_ms": {"mlp": 1.0, "attention": 2.0}, "eager_ms": {"mlp": 4.0, "attention": 8.0}},
                      {"size": "124m", "tp": 2, "workload": "decode_b1",
                       "sublayers_ms": {"mlp": 9.0}, "eager_ms": {"mlp": 9.0}}]}
    second = {"rows": [{"size": "124m", "tp": 1, "workload": "decode_b1",
                        "sublayers_ms": {"mlp": 1.1, "attention": 1.9}, "eager_ms": {"mlp": 6.0, "attention": 8.0}}]}
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "b.json").write_text(json.dumps(second))
    lines = sm.calibration_repeatability(str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    # kernel: |1.1/1 - 1| = 10%, |1.9/2 - 1| = 5%: median 7.5%, 90th percentile (index 0 of 2) 5%, worst 10%
    assert lines == ["1 rows in both",
                     "kernel time: |second / first - 1| median 7.5%, 90th percentile 5.0%, worst 10.0% over 2 sublayer times",
                     "eager: |second / first - 1| median 25.0%, 90th percentile 0.0%, worst 50.0% over 2 sublayer times"]


def test_allreduce_cost_per_tp_entry():
    # a fit with its own entry at tp=4 uses it; tp=8 without one falls back to the ring law from tp=2
    fit = dict(FIT, by_tp={"4": {"alpha_us": 20.0, "bw_GBps": 200.0}})
    assert sm.allreduce_ms(1e6, 4, fit) == pytest.approx(0.020 + 1.5 * 1e6 / 200e9 * 1e3)
    assert sm.allreduce_ms(2e6, 8, fit) == pytest.approx(0.070 + 1.75 * 2e6 / 100e9 * 1e3)
    by = sm.comm_by_tp(6.0, 200.0, "t", [], (10.0, 300.0, "t4", []))
    assert (by["8"]["alpha_us"], by["8"]["bw_GBps"]) == (pytest.approx(18.0), 300.0)  # 10 + 4 * (10 - 6) / 2


def test_row_fit_recovers_known_parameters():
    # ms over floor = n * alpha + B / bw with alpha 8 us, bw 250 GB/s
    pts = [(n, B, n * 8e-3 + B / 250e9 * 1e3, None) for n, B in ((10, 1e4), (30, 1e6), (50, 3e7), (100, 2e8))]
    alpha, bw = sm.fit_comm_rows(pts)
    assert alpha == pytest.approx(8.0, rel=1e-6) and bw == pytest.approx(250.0, rel=1e-6)


def _row(policy, ms, pred, **kw):
    r = dict(source="s", device="H200", size="124m", workload="decode_b1", mode="graph", tp=2, n_tracks=2,
             policy=policy, ms=ms, pred=pred, target=True)
    r.update(kw)
    return r


def test_saving_metric_by_hand():
    rows = [_row("baseline", 10.0, 9.0), _row("grouped:4", 8.0, 8.1),     # measured 20%, predicted 10%: 10 points
            _row("spd", 11.0, 8.55),                                    # measured -10%, predicted 5%: 15 points, sign
            _row("ladder", 9.8, 9.0),                                   # measured 2% (< 5%: no sign test), predicted 0
            _row("grouped:4", 5.0, 5.0, n_tracks=4),                    # no baseline at n_tracks 4: left out
            _row("grouped:4", 5.0, 5.0, source="other")]                # another run: left out
    pairs = sm.savings(rows)
    assert [(p["row"]["policy"], round(p["measured"], 6), round(p["predicted"], 6)) for p in pairs] == \
        [("grouped:4", 0.2, 0.1), ("spd", -0.1, 0.05), ("ladder", 0.02, 0.0)]
    st = sm.saving_stats(pairs)
    assert (st["n"], st["median"], st["p90"], st["worst"]) == (3, pytest.approx(10.0), pytest.approx(15.0), pytest.approx(15.0))
    assert (st["sign_errors"], st["n_sign"]) == (1, 2) and st["sign_rows"][0]["policy"] == "spd"


@pytest.mark.parametrize("field", ["size", "device"])
def test_held_out_split_never_sees_its_own_configuration(field):
    """Leave one size (device) out: the fit for a held-out value uses no row of it: tables, alpha/bw and their
    sources are unchanged when every row of that value is changed, and name none of it."""
    rows = sm.stored_rows()
    for value in sorted({r[field] for r in rows if r["tp"] >= 2}):
        test = (lambda size, device, v=value: size == v) if field == "size" else (lambda size, device, v=value: device == v)
        try:
            split = sm.fit_split(rows, test)
        except ValueError:
            continue  # nothing left to fit alpha/bw: validate() predicts no row with it
        changed = [dict(r, ms=r["ms"] * 3, floor_ms=r["floor_ms"] and r["floor_ms"] * 2) if r[field] == value else r
                   for r in rows]
        again = sm.fit_split(changed, test)
        assert again["tables"] == split["tables"] and again["fit"] == split["fit"]
        assert not split["calibration"]
        for t in split["tables"].values():
            assert all(e[field] != value for e in t.values())
        idx = 0 if field == "size" else 1
        for e in split["fit"]["by_tp"].values():
            assert all(c[idx] != value for c in e["fitted_on"])


def test_rows_labelled_by_the_code_they_measured():
    assert [sm.implementation(c) for c in ("099cb48", "not recorded", "d71e3f7")] == ["pre-49", "pre-49", "post-49"]
    assert sm.implementation("ac51463") == "pre-49" and sm.implementation("cec91f0") == "post-49"  # by git ancestry
    rows = sm.stored_rows()
    by_source = {}
    for r in rows:
        by_source.setdefault(r["source"], set()).add(r["impl"])
    assert by_source["bench/results/issue49/final/after/medium_tp2.json"] == {"post-49", "fp32-regions"}  # its train rows
    assert by_source["bench/results/tp_latency_tp4.json"] == {"pre-49"}
    assert not [s for s in by_source if "final/before" in s or "issue49/after" in s]  # SKIPPED_ROW_FILES
    for r in rows:  # each scored row in exactly one code group; the older code at k = 1 in the third
        groups = [name for name, keep in sm.CODE_GROUPS if keep(r)]
        assert len(groups) == 1 and (groups[0] == sm.CODE_GROUPS[2][0]) == (r["impl"] == "pre-49" and r["n_tracks"] == r["tp"])
    # training at tp >= 2 before 240c34d moved fp32 in its regions' all-reduces: its own group, the run's baseline too
    fp32 = {(r["source"], r["workload"]) for r in rows if r["impl"] == "fp32-regions"}
    assert ("bench/results/h100_tp2_large/tp_latency_tp2.json", "train_b8") in fp32
    assert all(w.startswith("train") for _, w in fp32)
    assert {r["impl"] for r in rows if "bf16_regions/after" in r["source"]} == {"post-49"}
    assert {r["impl"] for r in rows if r["source"].endswith("h100_tp2_large/tp_latency_tp2.json")
            and not r["workload"].startswith("train")} == {"post-49"}
    assert sm.row_implementation(dict(tp=1, workload="train_b8", commit="1bdb054"), "post-49") == "post-49"
    assert sm.row_implementation(dict(tp=2, workload="train_b8", commit="1bdb054"), "post-49") == "fp32-regions"
    assert sm.row_implementation(dict(tp=2, workload="train_b8", commit="240c34d"), "post-49") == "post-49"


def test_current_code_rows_at_tp_ge_2_enter_no_fit():
    """The current code's rows at tp >= 2 are held out from every fit: changing their times changes no fitted quantity,
    in the full fit or any held-out refit."""
    rows = sm.stored_rows()
    held = [r for r in rows if r["impl"] == "post-49" and r["tp"] >= 2]
    assert held and not any(sm.feeds_fits(r) for r in held)
    changed = [dict(r, ms=r["ms"] * 3, floor_ms=r["floor_ms"] and r["floor_ms"] / 2) if r in held else r for r in rows]
    for exclude in (None, lambda size, device: size == "124m", lambda size, device: size == "medium"):
        assert sm.fit_split(changed, exclude) == sm.fit_split(rows, exclude)


def test_prospective_rows_enter_no_fit():
    """Rows of a PROSPECTIVE folder (measured after the model was committed) feed no fit, their tp=1 rows included:
    changing their times changes no fitted quantity, in the full fit or a held-out refit."""
    rows = sm.stored_rows()
    pro = [r for r in rows if r["prospective"]]
    assert pro and any(r["tp"] == 1 for r in pro) and not any(sm.feeds_fits(r) for r in pro)
    changed = [dict(r, ms=r["ms"] * 3, floor_ms=r["floor_ms"] and r["floor_ms"] / 2) if r["prospective"] else r
               for r in rows]
    for exclude in (None, lambda size, device: size == "124m"):
        assert sm.fit_split(changed, exclude) == sm.fit_split(rows, exclude)


def test_held_out_saving_error_keeps_to_its_side_of_two_tracks_per_gpu():
    """Past two tracks per GPU the interval takes the rows past it, where the k itself has fewer than 10 rows: the
    saving error there is not the one- and two-track rows' (bench/results/step_model_validation.md, by k)."""
    rows = []
    for i, (n, err) in enumerate([(4, 0.01)] * 12 + [(8, 0.30)] * 6 + [(12, 0.20)] * 6):
        b = _row("baseline", 10.0, 10.0, workload="train_b8", n_tracks=n, source=str(i), impl="post-49")
        p = _row("spd", 8.0, 8.0 - 10 * err, workload="train_b8", n_tracks=n, source=str(i), impl="post-49")
        rows += [dict(r, pred_loso=r["pred"]) for r in (b, p)]
    assert sm.held_out_saving_error(rows, "train_b12", 1) == (pytest.approx(1.0), "current-code train rows at k <= 2 "
                                                                                  "held out by size, n 12")
    err, how = sm.held_out_saving_error(rows, "train_b12", 5)
    assert (err, how) == (pytest.approx(30.0), "current-code train rows at k > 2 held out by size, n 12")
    assert sm.held_out_saving_error(rows, "train_b12", 2)[1] == "current-code train rows at k = 2 held out by size, n 12"


def test_ladder_hides_the_fraction_its_older_rows_hid():
    """fit_ladder_overlap: (baseline - ladder) / the hideable time, median per workload, from the older code's ladder
    rows only, clipped to [0, 1]; ladder_fraction falls back to the workload's kind, then 0.5; predict's ladder point
    is no overlap less that fraction of the hideable time."""
    split = sm.fit_split(sm.stored_rows())
    tables, fit = split["tables"], split["fit"]
    hideable = sm.predict("124m", "decode_b1", 2, "ladder", 2, "H200", tables, fit, measured={})["ladder_hidden"]
    row = lambda policy, ms, impl="pre-49", source="a": dict(size="124m", workload="decode_b1", mode="graph", tp=2,
                                                          n_tracks=2, policy=policy, ms=ms, device="H200", impl=impl,
                                                          source=source)
    rows = [row("baseline", 1.0), row("ladder", 1.0 - 0.6 * hideable),
            row("baseline", 1.0, source="b"), row("ladder", 1.0 - 0.8 * hideable, source="b"),
            row("baseline", 1.0, source="c"), row("ladder", 1.0 - 0.7 * hideable, source="c"),
            row("baseline", 1.0, "post-49", "d"), row("ladder", 0.0, "post-49", "d")]  # current code: no fit
    got = sm.fit_ladder_overlap(rows, tables, fit)
    assert list(got) == ["decode_b1"] and got["decode_b1"]["n"] == 3 and got["decode_b1"]["h"] == pytest.approx(0.7)
    assert got["decode_b1"]["by_tp"] == {"2": dict(h=pytest.approx(0.7), n=3)}
    by = {"ladder_hidden": {"decode_b1": dict(h=0.8, n=3, by_tp={"4": dict(h=0.95, n=1)}), "train_b8": dict(h=0.3, n=2)}}
    assert [sm.ladder_fraction(by, w, 2) for w in ("decode_b1", "train_b12", "prefill_b8")] == [0.8, 0.3, 0.5]
    assert sm.ladder_fraction(by, "decode_b1", 4) == 0.95  # a tp the rows measured takes its own
    assert sm.ladder_fraction({}, "decode_b1", 2) == 0.5
    p = sm.predict("124m", "decode_b1", 2, "ladder", 2, "H200", tables, dict(fit, **by), measured={})
    assert p["ms"] == pytest.approx(p["no_overlap"] - 0.8 * p["ladder_hidden"])


def _tp_latency_file(path, tp, commit, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": {"tp": tp, "commit": commit, "device": "NVIDIA H200"}, "rows": [
        dict(size="124m", n_tracks=n, policy=p, workload="decode_b1", mode="graph", ms=ms, floor=False)
        for n, p, ms in rows]}))


def test_new_row_files_are_picked_up_and_fit_the_k1_passes(tmp_path, monkeypatch):
    """A tp_latency file in any folder under bench/results joins the rows (ROW_FILES); the current code's tp=1 rows at
    k = 1 fit the coefficient of the counted passes: spd's 12 passes measured at 3 x their modeled time give c1 = 3.
    A file in a skipped folder is not read."""
    monkeypatch.setattr(rows_module, "RESULTS", str(tmp_path))
    monkeypatch.setattr(rows_module, "REPO", str(tmp_path))
    base_ms = 0.5
    s = base_ms / (sum(sm.roofline(sm.sublayers("124m", "decode_b1", 1), "H200").values()) * 1e3)
    spd_ms = base_ms + 3 * s * 12 * sm.op_pass("124m", "decode_b1", "H200") * 1e3
    _tp_latency_file(tmp_path / "fresh" / "tp_latency_tp1.json", 1, "d71e3f7",
                     [(1, "baseline", base_ms), (1, "spd", spd_ms), (1, "grouped:4", base_ms)])
    _tp_latency_file(tmp_path / "issue49" / "final" / "before" / "medium_tp2.json", 2, "d71e3f7", [(2, "spd", 9.0)])
    rows = sm.stored_rows()
    assert {r["source"] for r in rows} == {"fresh/tp_latency_tp1.json"} and {r["impl"] for r in rows} == {"post-49"}
    e = sm.calibrate_from_rows(rows, "H200")["124m|decode_b1|graph"]
    # least squares over spd (12 passes, 3x) and grouped:4 (6 passes, 0x): c1 = (12 * 36) / (144 + 36) = 2.4
    assert e["scale"] == pytest.approx(s) and e["c1"] == pytest.approx(2.4) and "fitted to 2" in e["c1_how"]
    assert (e["c_streams"], e["streams_how"]) == (None, "no k >= 2 row")


def test_gap_between_kernels_anchors_a_calibration(tmp_path, monkeypatch):
    """With a per-sublayer calibration and a tp=1 CUDA-graph baseline row on the same device, the gap per kernel is the
    row's time less the measured sublayers and the roofline of the rest, over the kernel count; predict() then gives
    the row's own time at tp=1, and without the gap uses the scaled split."""
    monkeypatch.setattr(compute, "RESULTS", str(tmp_path))
    cal = {"mlp": 0.2, "attention": 0.1}
    (tmp_path / "step_model_calibration_h200.json").write_text(json.dumps({"decode_cache": sm.DECODE_CACHE, "rows": [
        dict(size="124m", workload="decode_b1", tp=1, sublayers_ms=cal)]}))
    roof = sm.roofline(sm.sublayers("124m", "decode_b1", 1), "H200")
    rest = sum(1e3 * t for k, t in roof.items() if k not in cal)
    K = sm.kernel_count("124m", "decode_b1", 1)
    ms = 0.3 + rest + K * 0.8e-3  # 0.8 us per kernel
    row = dict(size="124m", workload="decode_b1", mode="graph", tp=1, n_tracks=1, policy="baseline", ms=ms,
               floor_ms=None, device="H200", commit="d71e3f7", impl="post-49", source="x")
    over = sm.fit_overhead([row], "H200")
    assert over["gap_us"] == pytest.approx(0.8) and over["fitted_on"] == [["124m", "decode_b1", "H200", 1]]
    tables = {"H200": sm.calibrate_from_rows([row], "H200")}
    fit = dict(FIT, overhead={"H200": over})
    p = sm.predict("124m", "decode_b1", 1, "baseline", 1, "H200", tables, fit)
    assert p["compute"] == pytest.approx(ms) and "0.80 us between kernels" in p["calibration"]
    assert sm.overhead_for(dict(FIT, overhead={"H200": over}), "H100") is None  # no device borrows another's gap
    assert "between kernels" not in sm.predict("124m", "decode_b1", 1, "baseline", 1, "H200", tables, FIT)["compute_parts"]


def two_line_sweep():
    """A sweep whose law is known: 7.5 us + b / 190 GB/s up to 2 MiB, 22 us + b / 310 GB/s above (tp=2: f = 1)."""
    return [dict(bytes=b, us=(7.5 + b / 190e3) if b <= 2**21 else (22.0 + b / 310e3)) for b in (2**k for k in range(10, 27))]


def test_sweep_regimes_recover_a_known_change_point():
    low, high = sm.sweep_regimes(two_line_sweep(), 2)
    assert low["max_bytes"] == 2**21 and high["max_bytes"] is None
    assert (low["alpha_us"], low["bw_GBps"]) == (pytest.approx(7.5), pytest.approx(190.0))
    assert (high["alpha_us"], high["bw_GBps"]) == (pytest.approx(22.0), pytest.approx(310.0))
    # at tp=4 the bytes enter as 2(tp-1)/tp b = 1.5 b: the same times give bw 1.5x, the change point unmoved
    low4, high4 = sm.sweep_regimes(two_line_sweep(), 4)
    assert low4["max_bytes"] == 2**21 and low4["bw_GBps"] == pytest.approx(285.0)
    with pytest.raises(ValueError, match="5 sizes"):
        sm.sweep_regimes(two_line_sweep()[:5], 2)


def test_a_stored_sweep_prices_every_split_by_size():
    """A sweep is measured apart from the model's rows, so every split (full and held out) takes its law, moved to
    that split's own fitted alpha (the sweep's level is back-to-back collectives): a message below the change point
    costs the low regime, above it the high one, by hand."""
    rows = sm.stored_rows()
    sweeps = {2: [(two_line_sweep(), "a sweep by hand", False, "H100")]}
    for exclude in (None, lambda size, device: size == "124m"):
        fit = sm.fit_split(rows, exclude, sweeps=sweeps)["fit"]
        assert fit["by_tp"]["2"]["regimes_from"] == "a sweep by hand" and "regimes" not in fit["by_tp"]["4"]
        alpha = fit["by_tp"]["2"]["alpha_us"]
        assert fit["by_tp"]["2"]["regimes_shift_us"] == pytest.approx(alpha - 7.5)
        assert sm.allreduce_ms(2**20, 2, fit) == pytest.approx((alpha + 2**20 / 190e3) / 1e3)
        assert sm.allreduce_ms(2**23, 2, fit) == pytest.approx((alpha + 14.5 + 2**23 / 310e3) / 1e3)
    # with no sweep, the kept rows' time over their floor per message size gives tp=2 its two regimes (rows_regimes)
    no_sweep = sm.fit_split(rows, sweeps={})["fit"]["by_tp"]["2"]
    kept = [r for r in rows if sm.feeds_fits(r)]
    assert no_sweep["regimes"] == sm.rows_regimes(sm.row_comm_points(kept, 2), 2) and no_sweep["regimes_in_step"]
    assert "rows' time over their floor" in no_sweep["regimes_from"] and no_sweep["fitted_on"]


def test_an_in_step_sweep_is_the_tp2_law_as_measured_and_fits_on_no_row():
    """An in-step sweep (what an all-reduce adds to a step) prices tp=2 unmoved in every split: the low regime's
    alpha and bw are tp=2's alpha/bw, no row's configuration is listed as having fed them (so none is scored
    in-sample), and the tp=4 and tp=8 entries keep their own fits (tp=8's alpha extrapolates from tp=2's 7.5). A split
    that holds out the device the sweep ran on (H100) does not take it: tp=2 falls back to the kept (H200) rows' time
    over their floor, per message size."""
    rows = sm.stored_rows()
    sweeps = {2: [(two_line_sweep(), "an in-step sweep by hand", True, "H100")]}
    for exclude in (None, lambda size, device: size == "124m", lambda size, device: device == "H200"):
        fit = sm.fit_split(rows, exclude, sweeps=sweeps)["fit"]
        e = fit["by_tp"]["2"]
        assert (e["alpha_us"], e["bw_GBps"], e["fitted_on"]) == (pytest.approx(7.5), pytest.approx(190.0), [])
        assert e["regimes_shift_us"] == 0.0 and e["regimes_in_step"]
        assert sm.allreduce_ms(2**20, 2, fit) == pytest.approx((7.5 + 2**20 / 190e3) / 1e3)
        assert sm.allreduce_ms(2**23, 2, fit) == pytest.approx((22.0 + 2**23 / 310e3) / 1e3)
        a4 = fit["by_tp"]["4"]["alpha_us"]
        assert fit["by_tp"]["8"]["alpha_us"] == pytest.approx(a4 + 2 * max(0.0, a4 - 7.5))
        assert not any(sm.in_comm_fit(dict(size=size, device=device, tp=2), fit)
                       for size in ("124m", "medium", "large") for device in ("H100", "H200"))
    without_h100 = sm.fit_split(rows, lambda size, device: device == "H100", sweeps=sweeps)["fit"]["by_tp"]["2"]
    assert "rows' time over their floor" in without_h100["regimes_from"]
    assert without_h100["fitted_on"] and all(device == "H200" for _, device, _ in without_h100["fitted_on"])
    # with a second device's in-step sweep stored, the split that holds out H100 takes that one, the rest H100's
    slower = [dict(r, us=r["us"] + 1.0) for r in two_line_sweep()]
    both = {2: sweeps[2] + [(slower, "an H200 in-step sweep by hand", True, "H200")]}
    for exclude, alpha, source in ((None, 7.5, "an in-step sweep by hand"),
                                   (lambda size, device: device == "H100", 8.5, "an H200 in-step sweep by hand")):
        e = sm.fit_split(rows, exclude, sweeps=both)["fit"]["by_tp"]["2"]
        assert (e["alpha_us"], e["regimes_from"], e["fitted_on"]) == (pytest.approx(alpha), source, [])


def four_rank_sweep():
    """A 4-rank sweep whose law is known: 10 us + f b / 200 GB/s up to 4 MiB, 24 us + f b / 330 GB/s above (f = 1.5)."""
    return [dict(bytes=b, us=(10.0 + 1.5 * b / 200e3) if b <= 2**22 else (24.0 + 1.5 * b / 330e3))
            for b in (2**k for k in range(10, 27))]


def test_an_in_step_sweep_at_four_ranks_prices_tp4_and_tp8_extrapolates_each_regime():
    """With in-step sweeps at 2 and 4 ranks, tp=4 is its sweep's law as measured (no row's configuration fed it, so none
    is scored in-sample) and tp=8 takes each regime's alpha linear in tp - 1 through tp 2 and 4, its bw and change point
    held at tp=4's: low 10 + 4 (10 - 7.5) / 2 = 15 us, high 24 + 4 (24 - 22) / 2 = 28 us. A split that holds out
    the device of the 4-rank sweep (H200, whose are every stored tp=4 row too) has no two-regime law at tp=4 or 8."""
    rows = sm.stored_rows()
    sweeps = {2: [(two_line_sweep(), "tp=2 by hand", True, "H100")], 4: [(four_rank_sweep(), "tp=4 by hand", True, "H200")]}
    for exclude in (None, lambda size, device: size == "medium"):
        by = sm.fit_split(rows, exclude, sweeps=sweeps)["fit"]["by_tp"]
        assert (by["4"]["alpha_us"], by["4"]["bw_GBps"], by["4"]["fitted_on"]) == (pytest.approx(10.0), pytest.approx(200.0), [])
        assert by["8"]["regimes"] == [dict(max_bytes=pytest.approx(2**22), alpha_us=pytest.approx(15.0), bw_GBps=pytest.approx(200.0)),
                                      dict(max_bytes=None, alpha_us=pytest.approx(28.0), bw_GBps=pytest.approx(330.0))]
        fit = dict(by_tp=by)
        assert sm.allreduce_ms(2**20, 4, fit) == pytest.approx((10.0 + 1.5 * 2**20 / 200e3) / 1e3)
        assert sm.allreduce_ms(2**24, 8, fit) == pytest.approx((28.0 + 1.75 * 2**24 / 330e3) / 1e3)
        assert not any(sm.in_comm_fit(dict(size=s, device=d, tp=4), fit) for s in ("124m", "medium") for d in ("H100", "H200"))
    without_h200 = sm.fit_split(rows, lambda size, device: device == "H200", sweeps=sweeps)["fit"]["by_tp"]
    assert "regimes" not in without_h200["4"] and "regimes" not in without_h200["8"]
    # a later regime whose alpha falls from tp=2 to 4 is held, not extrapolated down
    assert sm.extrapolate_regimes([dict(max_bytes=1.0, alpha_us=12.0, bw_GBps=1.0)],
                                  [dict(max_bytes=2.0, alpha_us=10.0, bw_GBps=3.0)]) == [dict(max_bytes=2.0, alpha_us=10.0, bw_GBps=3.0)]


def test_tp8_sensitivity_holds_tp4s_law_and_moves_only_its_large_messages_to_the_public_bound():
    fit = dict(by_tp={"4": dict(alpha_us=10.0, bw_GBps=200.0, fitted_on=[], regimes=[
        dict(max_bytes=2**22, alpha_us=10.0, bw_GBps=200.0), dict(max_bytes=None, alpha_us=24.0, bw_GBps=330.0)]),
        "8": dict(alpha_us=15.0, bw_GBps=200.0, fitted_on=[])})
    held, public = sm.with_tp8(fit, "held"), sm.with_tp8(fit, "public", 470.0)
    assert sm.allreduce_ms(2**24, 8, held) == pytest.approx((24.0 + 1.75 * 2**24 / 330e3) / 1e3)
    assert sm.allreduce_ms(2**24, 8, public) == pytest.approx((24.0 + 1.75 * 2**24 / 470e3) / 1e3)
    assert sm.allreduce_ms(2**20, 8, public) == pytest.approx((10.0 + 1.75 * 2**20 / 200e3) / 1e3)
    assert fit["by_tp"]["4"]["regimes"][1]["bw_GBps"] == 330.0  # the fit passed in is not changed


def test_rows_regimes_recover_a_known_law_from_rows_over_their_floor():
    """Rows whose time over the floor follows two_line_sweep's law, n all-reduces each, some sizes twice (the median
    is taken per size): rows_regimes recovers it. Fewer than six message sizes give no law."""
    pts = [(n, n * row["bytes"], n * row["us"] / 1e3, None) for row in two_line_sweep() for n in (4, 8)]
    low, high = sm.rows_regimes(pts, 2)
    assert low["max_bytes"] == 2**21 and high["max_bytes"] is None
    assert (low["alpha_us"], low["bw_GBps"]) == (pytest.approx(7.5), pytest.approx(190.0))
    assert (high["alpha_us"], high["bw_GBps"]) == (pytest.approx(22.0), pytest.approx(310.0))
    assert sm.rows_regimes(pts[:10], 2) is None  # five sizes


def test_vocab_parallel_cross_entropy_passes_counted_in_eager_training_at_tp_above_1():
    """At tp > 1 the trainer's loss is model/tp_layers.py's vocab-parallel CE: 60 bytes per logit of the rank's
    [N, V/tp] slice over its forward and backward passes, against the fused CE's 36 that head+ce counts. By hand for
    124m train_b8 at tp=2 (N = 8 x 1024, V/tp = 50304 / 2); none at tp=1 or in inference, and a compiled step
    (inductor fuses the passes) leaves it out."""
    L, H, C, V = sm.shape_of("124m")[1]
    assert sm.sublayers("124m", "train_b8", 2)["vocab-parallel ce"] == (0, 24 * 8 * 1024 * (V / 2), 8)
    assert "vocab-parallel ce" not in sm.sublayers("124m", "train_b8", 1)
    assert "vocab-parallel ce" not in sm.sublayers("124m", "prefill_b8", 2)
    tables = sm.fit_split(sm.stored_rows())["tables"]
    e = tables["H200"]["124m|train_b8|graph"]
    graph, _ = sm.compute_of("124m", "train_b8", 2, "H200", e, "", {}, "graph", {})
    compiled, _ = sm.compute_of("124m", "train_b8", 2, "H200", e, "", {}, "compiled-graphs", {})
    assert "vocab-parallel ce" in graph and "vocab-parallel ce" not in compiled


def test_an_answer_shows_what_stored_runs_measured_beside_the_model():
    """measured_saving_line: per run (source) that measured the question's configuration in the mode it is priced in,
    the policy's saving against that run's baseline; nothing where no run has both, or for another device or mode."""
    def row(policy, ms, source="a.json", **kw):
        r = dict(impl="post-49", mode="graph", size="medium", workload="decode_b1", tp=4, n_tracks=4, device="H200",
                 policy=policy, ms=ms, source=source)
        r.update(kw)
        return r
    rows = [row("baseline", 2.0), row("grouped:4", 1.5), row("grouped:4", 1.0, source="b.json"),  # b: no baseline
            row("baseline", 4.0, source="c.json"), row("grouped:4", 3.0, source="c.json"),
            row("baseline", 2.0, source="d.json", device="H100"), row("grouped:4", 0.5, source="d.json", device="H100"),
            row("baseline", 2.0, source="e.json", mode="eager"), row("grouped:4", 0.5, source="e.json", mode="eager")]
    line = sm.measured_saving_line(rows, "350m", "decode_b1", 4, 4, "grouped:4", "H200")
    assert line.endswith("saves +25.0% in a.json; +25.0% in c.json")
    assert sm.measured_saving_line(rows, "medium", "decode_b1", 4, 8, "grouped:4", "H200") is None
    assert sm.measured_saving_line(rows, "medium", "train_b12", 4, 4, "grouped:4", "H200") is None


def test_an_answer_names_where_its_all_reduce_law_was_measured():
    """comm_law_line: the law at the question's tp with its source; where that source ran on another device than the
    question's, it says so and whether that device's own sweep is stored; tp=8 names the devices of the two laws it
    is extrapolated from; tp=1 has no line."""
    def law(how):
        return dict(alpha_us=10.0, bw_GBps=200.0, how=how)
    fit = {"by_tp": {"2": law("in-step law (n2.json (NVIDIA H100 80GB HBM3))"), "4": law("in-step law (n4.json (NVIDIA H200))"),
                     "8": law("extrapolated")}}
    sweeps = {2: [([], "n2.json (NVIDIA H100 80GB HBM3)", True, "H100"), ([], "h200/n2.json (NVIDIA H200)", True, "H200")],
              4: [([], "n4.json (NVIDIA H200)", True, "H200")]}
    assert sm.comm_law_line(fit, 1, "H100", sweeps) is None and sm.comm_law_line(fit, 3, "H100", sweeps) is None
    assert sm.comm_law_line(fit, 4, "H200", sweeps) == "  all-reduce at tp=4: 10.0 us + bytes at 200 GB/s; in-step law (n4.json (NVIDIA H200))"
    assert sm.comm_law_line(fit, 4, "H100", sweeps).endswith("Measured on H200, not H100: no H100 all-reduce at 4 ranks is stored")
    assert sm.comm_law_line(fit, 2, "H200", sweeps).endswith(
        "Measured on H100, not H200: H200's own sweep is stored beside it (h200/n2.json (NVIDIA H200))")
    assert sm.comm_law_line(fit, 8, "H100", sweeps).endswith("from tp=2's law (measured on H100) and tp=4's (measured on H200)")


def test_an_answer_past_two_tracks_per_gpu_states_the_model_error_there():
    """far_k_line: the full fit's time and saving error on the stored current-code graph rows at the question's k
    tracks per GPU (else every k past 2), with the policies' measured time over their run's baseline, by hand."""
    def row(policy, ms, pred, tp=2, n_tracks=6, **kw):
        r = dict(impl="post-49", target=True, mode="graph", size="124m", workload="prefill_b8", tp=tp,
                 n_tracks=n_tracks, device="H100", policy=policy, ms=ms, pred=pred, source="a.json")
        r.update(kw)
        return r
    rows = [row("baseline", 2.0, 2.2), row("spd", 3.0, 2.7),  # k = 3: saving -50% measured, -22.7% modeled
            row("baseline", 2.0, 2.0, n_tracks=10, source="b.json"), row("spd", 4.0, 4.0, n_tracks=10, source="b.json"),
            row("baseline", 1.0, 1.0, n_tracks=2, source="c.json"), row("spd", 0.5, 0.9, n_tracks=2, source="c.json")]
    line = sm.far_k_line(rows, 3)
    assert "at k = 3 (2 rows, full fit)" in line and "times are within 10%" in line
    assert "savings within 27 points" in line and "ran 1.50-1.50x" in line
    far = sm.far_k_line(rows, 4)  # no row at k = 4: every row past k = 2 (k = 3 and 5), not the k = 1 one
    assert "past k = 2 (none at this k) (4 rows" in far and "ran 1.50-2.00x" in far
    assert "no stored current-code row" in sm.far_k_line(rows[4:], 3)


@pytest.mark.parametrize("argv, named", [
    (["--n_tracks", "100000000"], "--n_tracks 100000000: allowed: a multiple of --tp 8 up to 25, the n_head of xl"),
    (["--size", "124m", "--n_tracks", "16"], "--n_tracks 16: allowed: a multiple of --tp 8 up to 12, the n_head of 124m"),
    (["--size", "huge"], "unknown size 'huge'"),
])
def test_n_tracks_out_of_range_is_one_line_before_the_fits(argv, named, monkeypatch, capsys):
    """`bench.step_model --n_tracks 100000000` printed savings of -7379% and more, past any model the size has
    (a track holds at least one head): refused now, before the fits load."""
    from bench import step_model
    monkeypatch.setattr(step_model, "validate", lambda: pytest.fail("the fits loaded"))
    with pytest.raises(SystemExit) as stop:
        step_model.main(argv)
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {named}"), err


def test_n_tracks_range_reaches_the_model_s_limit():
    assert sm.tracks_problem("xl", 8, 24) is None and sm.tracks_problem("1.5b", 1, 25) is None
    assert "up to 25" in sm.tracks_problem("1.5b", 1, 26)
