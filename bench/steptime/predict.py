"""The prediction of one step: compute (scaled split or per-sublayer calibration), the policy's tracks term, and its
all-reduces with the overlap bounds."""
from bench.steptime.comm import allreduce_ms
from bench.steptime.compute import (kernel_count, latency_fraction, measured_sublayers, op_pass, roofline, step_roofline,
                                    stream_pass, sublayers)
from bench.steptime.families import family
from bench.steptime.policy import collectives, policy_ops, tracks_features
from bench.steptime.shapes import MODELED_TPS, SHAPES, WORKLOADS, shape_of
from model.sync_policy import parse_sync_policy


# tp=1 rows at n_tracks = tp * k (bench/results/h100_tp1_width/, h200_tp1_width/) were measured to test the width law
# (width_law_lines) before any term used it; the test is in bench/results/h100_tp1_width/README.md. Since the session
# of 968d560 they feed the fits, and tracks_ms prices a rank's stream bytes by the law from k = WIDTH_LAW_MIN_K on: on
# H100 at tp=2 the law held at k = 6-10 (0.98-1.04) and the stored pairs at k = 3-5 run 0.98-1.10, where 124m at k = 2
# ran 0.87 (fed at k = 2 too, the k <= 2 full fit's saving worst went from 6.2 to 9.3 points).
WIDTH_LAW_MIN_K = 3


def overhead_for(fit, device):
    """The gap per kernel (us) fitted on `device` itself, else None. Another device's is not carried over: the gap is
    the residual of whole tp=1 steps over the measured kernels and the roofline of the rest, so it holds whatever the
    kernels timed alone miss on that device (memory state, the roofline's error), not only the graph's launch gap;
    on H200 it ranges over workloads (fit_overhead's range_us), and no H100 whole-step graph row checks it there."""
    e = (fit.get("overhead") or {}).get(device)
    return e["gap_us"] if e else None


def compute_of(size, workload, tp, device, e, how, fit, mode, measured):
    """(sublayer parts ms, how). With a per-sublayer calibration of this shape, tp and device, and a gap per kernel
    (overhead_for), CUDA-graph rows of eager kernels (mode 'graph') take the measured kernel times, the roofline of the rest and the gaps between
    kernels; otherwise the family's scaled split (whole one-GPU steps split by FLOPs and bytes)."""
    roof = roofline(sublayers(size, workload, tp), device)
    if mode.startswith("compiled"):  # inductor fuses the vocab-parallel CE's elementwise passes into a few kernels
        roof.pop("vocab-parallel ce", None)
    scaled = {name: e["scale"] * t * 1e3 for name, t in roof.items()}
    if measured is None:
        measured = measured_sublayers(device, size, workload, tp)
    gap = overhead_for(fit, device)
    if not measured or mode != "graph":  # compiled modes run inductor's fused kernels, not the ones `calibrate` times
        return scaled, how
    if gap is None:  # said, so that an answer does not look calibrated on this device when it is not
        return scaled, (f"{how}; the {device} per-sublayer calibration is not used: no {device} tp=1 CUDA-graph step "
                        f"of a calibrated size and workload to fit its gap between kernels (another device's is not "
                        f"carried over)")
    parts = {name: measured.get(name, t * 1e3) for name, t in roof.items()}
    parts["between kernels"] = gap * 1e-3 * kernel_count(size, workload, tp)
    return parts, (f"{', '.join(sorted(set(measured) & set(roof)))} measured on {device} (kernel time), the rest its "
                   f"roofline, {gap:.2f} us between kernels (the {device} gap)")


def tracks_ms(e, size, workload, policy, k, tp, device):
    """The policy's own work beyond baseline's: its counted passes (policy_ops, at any k) and, at k >= 2, the extra
    streams' term u(k) (c_entry n_entry + c_attn n_attn + c_mlp n_mlp; tracks_features). At tp >= 2 and k >=
    WIDTH_LAW_MIN_K, where the family measured one GPU at n_tracks = tp k, the streams' bytes follow the width law (a
    rank holding k of tp k tracks runs 1/tp of what one GPU runs at tp k) and their launches (latency_fraction) stay
    the rank's own. It is priced on the device whose rows fitted the family, and carried to another device (a split
    that holds that device out) as the whole step's roofline carries, not at the datasheets' HBM ratio: of the tp=1
    extras over baseline measured on both H100 and H200 (49 size, workload, policy and k pairs, the current code),
    H100's ran 0.94-2.09x H200's (median 1.05), nearer the step's roofline ratio (1.04-1.21) than the HBM ratio
    (1.43) in 44 of them."""
    L, on = SHAPES[size][0], e.get("device", device)
    ops = e.get("c1", 1.0) * policy_ops(policy, L, workload, tp) * op_pass(size, workload, on)
    per_pass = lambda c_streams: sum(c * n for c, n in zip(c_streams, tracks_features(policy, L)))
    by_k, q = e.get("streams_by_k", {}), e.get("q", 1.0)
    # the streams' per-rank part shrinks with the rank's share of tp=1's work, its per-track part does not
    rank = step_roofline(size, workload, tp, on)
    share = rank / step_roofline(size, workload, 1, on)
    streams = stream_pass(size, workload, k, on, q, share) * per_pass(by_k.get(k, e["c_streams"])) if k > 1 else 0.0
    if tp > 1 and k >= WIDTH_LAW_MIN_K and tp * k in by_k:
        law = stream_pass(size, workload, tp * k, on, q) * per_pass(by_k[tp * k]) / tp
        f = latency_fraction(workload, on)
        streams = f * streams + (1 - f) * law
    carry = step_roofline(size, workload, tp, device) / rank
    return e["scale"] * (ops + streams) * carry * 1e3


def predict(size, workload, tp, policy, n_tracks, device, tables, fit, mode="graph", measured=None):
    """Modeled ms of one step: dict with compute, tracks, comm (no overlap), hidden (full overlap)."""
    size, (L, H, C, V) = shape_of(size)
    if tp not in MODELED_TPS:
        raise ValueError(f"tp={tp} is not modeled; allowed: {', '.join(map(str, MODELED_TPS))}")
    if n_tracks < 1 or n_tracks % tp:
        raise ValueError(f"n_tracks={n_tracks} must be a positive multiple of tp={tp}")
    # heads need not divide by n_tracks here (1.5B has 25): the model times 1/tp of the width
    e, how = family(tables, size, workload, mode, device)
    compute_parts, how = compute_of(size, workload, tp, device, e, how, fit, mode, measured)
    compute = sum(compute_parts.values())
    tracks = tracks_ms(e, size, workload, policy, n_tracks // tp, tp, device)
    b, T, ctx, train, opt = WORKLOADS[workload]
    colls = collectives(policy, L, C, b, T, tp, train)
    if opt and tp > 1:
        colls.append(("grad_norm", "bwd", 4))
    comm = sum(allreduce_ms(by, tp, fit) for kind, ph, by in colls)
    # full-overlap bound: ladder hides each forward g behind the next sublayer; the async input-gradient
    # all-reduce hides each backward f (tp_bwd) behind its wgrad GEMM (half a sublayer's backward)
    pol = parse_sync_policy(policy, L)
    per_sublayer = (compute_parts["attention"] + compute_parts["mlp"]) / (2 * L)
    hidden = 0.0
    for kind, ph, by in colls:
        t = allreduce_ms(by, tp, fit)
        if kind == "tp_fwd" and pol.ladder:
            hidden += min(t, per_sublayer / (3 if train else 1))
        elif kind == "tp_bwd" and train:
            hidden += min(t, per_sublayer * (2 / 3) / 2)
    no_overlap = compute + tracks + comm
    # the point prediction: what the code does by default (ladder overlaps in its forward; the async
    # input-gradient all-reduce is off by default, so nothing else overlaps). Ladder hides the fraction of its
    # hideable all-reduce time that the older code's ladder rows hid in this workload (fit_ladder_overlap): an
    # overlapped all-reduce contends with the compute for SMs and memory (profile_124m_n2_prefill_b8_graph_tp2.txt:
    # 71 us per ladder all-reduce, 61 alone), little in latency-bound decode, much in bandwidth-bound training
    ladder_hidden = sum(min(allreduce_ms(by, tp, fit), per_sublayer / (3 if train else 1))
                        for kind, ph, by in colls if kind == "tp_fwd" and pol.ladder)
    h = ladder_fraction(fit, workload, tp)
    return dict(ms=no_overlap - h * ladder_hidden, no_overlap=no_overlap, full_overlap=no_overlap - hidden,
                ladder_hidden=ladder_hidden,
                compute=compute, tracks=tracks, comm=comm, n_collectives=len(colls), calibration=how,
                compute_parts=compute_parts)


def ladder_fraction(fit, workload, tp=None):
    """The fraction of ladder's hideable forward all-reduce time it hides in `workload` at tp (fit_ladder_overlap):
    the workload's own (else its kind's: train_b12 takes train_b8's) at that tp where rows measured it, else over
    every tp; 0.5, the midpoint of the bounds, where no row measured the kind."""
    by = fit.get("ladder_hidden") or {}
    e = by.get(workload) or next((v for w, v in sorted(by.items()) if w.split("_")[0] == workload.split("_")[0]), None)
    if not e:
        return 0.5
    return e.get("by_tp", {}).get(str(tp), e)["h"]
