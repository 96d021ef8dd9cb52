"""A step-time model for tensor parallelism at tp 1, 2, 4 and 8: ms per training iteration or per
decoded token, per sync policy, for GPT-2 shapes and a 70B-class shape, from one-GPU measurements.

    t(step) = compute(tp, k) + tracks(k, policy) + comm(tp, policy)          [modeled, per rank]

Compute. Each sublayer s (LayerNorm, attention, MLP, residual adds, embedding, head + cross-entropy,
optimizer) has FLOPs F_s and HBM bytes B_s at the shard width tp implies (a rank holds 1/tp of the
heads, MLP columns and vocabulary; LayerNorms and the residual stream are replicated) and K_s
kernels. Its roofline time is r_s = K_s * lat + max(F_s / peak_flops, B_s / hbm_bw) with the
device's datasheet peaks. One scale per (size, workload, mode) family, fitted at tp=1 only,

    s = measured tp=1 baseline ms / sum_s r_s(tp=1),     compute(tp) = s * sum_s r_s(tp),

splits the stored one-GPU time into sublayers by FLOPs and bytes ("scaled from stored one-GPU
rows"). Shapes no row measured (1.5B, 70B-class) take the nearest measured family's s and are
marked scaled. Where `calibrate` has measured a sublayer (CUDA events), that time replaces s * r_s.

Tracks. A rank holds k = n_tracks / tp tracks. Between syncs their residual streams diverge and
every LayerNorm, add and (batched) GEMM that reads them runs over k streams. With n_div the
sublayers that read diverged streams and u(k) = s * (lat + (k - 1) * N * C * 4 B / hbm_bw) the
extra streams' pass over the N tokens (k = 1 takes the code's plain paths: a few adds remain),
    tracks = u(k) * (c_div * n_div + c_layer * n_layer * [n_div > 0]),
with c_div, c_layer >= 0 fitted by least squares to the tp=1 rows of every policy (k = n_tracks).

Communication. One all-reduce of b bytes over tp ranks (ring, NCCL's algorithm in every stored
profile) costs
    t(b, tp) = alpha(tp) + 2 (tp - 1) / tp * b / bw,
alpha(2) and bw fitted (relative least squares) to the all-reduce kernel times of the stored 2xH200
profiles. tp 4 and 8: alpha(tp) = alpha(2) * (tp - 1) (a ring has 2(tp-1) dependent steps) and bw
held at the tp=2 fit (on NVSwitch the bus bandwidth per GPU does not depend on tp): assumptions,
stated in the fit file. The policy's collectives come from its plan (collectives()): per forward
one g per synced point (N*C compute-dtype bytes), the vocabulary-parallel embedding and head; per
backward one f per Megatron sublayer (compute dtype), one per region entry (fp32 residual), one
sum of the regions' replicated-parameter gradients, the head's f. Two bounds: no overlap (every
all-reduce adds), and full overlap where the policy allows it: ladder hides each forward g behind
the next sublayer, async input-gradient all-reduce hides each backward f behind its wgrad GEMM;
hidden = min(t_ar, that compute).

Everything this module prints is modeled unless a row says measured. Commands (repository root):
    python -m bench.step_model --size xl --tp 8 --policy grouped:4 --device H100   # one question
    python -m bench.step_model --validate        # every stored tp>=2 row: predicted / measured
    python -m bench.step_model --pareto          # loss gap against modeled time, and the 70B table
    python -m bench.step_model calibrate --device cuda   # per-sublayer times on this GPU
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.step_model ...")
from model.sync_policy import parse_sync_policy  # noqa: E402
from training.config import REPO, HelpFormatter, save_figure, write_text  # noqa: E402

RESULTS = os.path.join(REPO, "bench", "results")

# name: (n_layer, n_head, n_embd, vocab). 70b: a 70B-class GPT shape (80 x 8192, MHA, 4C MLP); not
# Llama-2-70B's GQA and SwiGLU, which change its per-layer bytes and FLOPs by a few percent.
SHAPES = {"124m": (12, 12, 768, 50304), "medium": (24, 16, 1024, 50304), "large": (36, 20, 1280, 50304),
          "xl": (48, 25, 1600, 50304), "70b": (80, 64, 8192, 32000),
          "tiny": (2, 4, 64, 256)}  # tiny: the CPU test of `calibrate`
ALIASES = {"350m": "medium", "774m": "large", "1.5b": "xl"}
# Datasheet dense bf16 peak and HBM bandwidth (SXM). lat: a small kernel's time in a CUDA graph
# (EXPERIMENT_SUMMARY.md: 1.4-3.3 us per elementwise/LayerNorm kernel in the decode trace).
DEVICES = {"H200": dict(flops=989e12, hbm=4.8e12), "H100": dict(flops=989e12, hbm=3.35e12)}
LAT = 2.0e-6
# workload: batch, tokens per sequence in this call, attention context, backward?, optimizer?
WORKLOADS = {"prefill_b1": (1, 1024, 1024, False, False), "prefill_b8": (8, 1024, 1024, False, False),
             "decode_b1": (1, 1, 1024, False, False), "decode_b8": (8, 1, 1024, False, False),
             "train_b8": (8, 1024, 1024, True, False), "train_b12": (12, 1024, 1024, True, True)}
GRAPH_MODES = {"graph", "compiled+graph", "compiled-graphs"}  # device-bound: the model's targets


def shape_of(size):
    size = ALIASES.get(size, size)
    if size not in SHAPES:
        raise ValueError(f"unknown size {size!r}; allowed: {', '.join(list(SHAPES) + list(ALIASES))}")
    return size, SHAPES[size]


# ------------------------------------------------------------------ compute: roofline per sublayer
def sublayers(size, workload, tp, dtype_bytes=2):
    """{sublayer: (flops, bytes, kernels)} of one rank's step at shard width 1/tp (no tracks)."""
    L, H, C, V = shape_of(size)[1]
    b, T, ctx, train, opt = WORKLOADS[workload]
    N, db, Ct, Vt = b * T, dtype_bytes, C / tp, V / tp
    attn_pairs = b * T * ctx * (0.5 if T == ctx else 1.0)  # causal prefill reads half the pairs
    fwd = {
        "layernorm": (0, 2 * 2 * N * C * db, 2),
        "attention": (2 * N * C * 3 * Ct + 4 * attn_pairs * Ct + 2 * N * Ct * C,
                      (3 * C * Ct + Ct * C) * db + (N * C + 4 * N * Ct + N * C) * db + 2 * b * ctx * Ct * db,
                      4 + (2 if T == 1 else 0)),  # qkv, sdpa, proj, bias; decode: 2 KV-cache writes
        "mlp": (2 * N * C * 4 * Ct * 2, 2 * 4 * C * Ct * db + (N * C + 3 * 4 * N * Ct + N * C) * db, 3),
        "residual": (0, 2 * 3 * N * C * db, 2),
    }
    per_step = {k: (f * L, by * L, n * L) for k, (f, by, n) in fwd.items()}
    n_head_rows = N if train else b  # inference: logits of the last position only
    per_step["embedding"] = (0, 3 * N * C * 4, 2)
    per_step["head+ce"] = (2 * n_head_rows * C * Vt, Vt * C * db + n_head_rows * Vt * (4 * 3 if train else db),
                           3 if train else 1)
    if train:  # backward: GEMMs and attention about twice the forward, elementwise likewise
        per_step = {k: (3 * f, 3 * by, 3 * n) for k, (f, by, n) in per_step.items()}
    if opt:  # fused AdamW + grad-norm over fp32 params: read p, g, m, v, write p, m, v; bf16 weight casts
        params = L * 12 * C * Ct + V * C / tp + 1024 * C + L * 4 * C
        per_step["optimizer"] = (0, params * (7 * 4 + 4 + 6), 12)
    return per_step


def roofline(parts, device):
    d = DEVICES[device]
    return {k: n * LAT + max(f / d["flops"], by / d["hbm"]) for k, (f, by, n) in parts.items()}


def stream_pass(size, workload, k, device):
    """u(k) before scaling: one pass of the k - 1 extra residual streams over the step's tokens, plus a launch."""
    L, H, C, V = shape_of(size)[1]
    b, T, ctx, train, opt = WORKLOADS[workload]
    # k - 1: with one track per rank the code takes the plain paths (F.linear, the sum over tracks a
    # view); what stays is a few adds per sublayer, the LAT term
    return (LAT + (k - 1) * b * T * C * 4 / DEVICES[device]["hbm"]) * (3 if train else 1)


# ------------------------------------------------------------------ the policy's plan
def plan(policy_spec, n_layer):
    """Per sublayer j (2l attention, 2l+1 MLP of layer l): (megatron, sync, per_track, reads_diverged,
    region_entry), by model/gpt.py's _plan_sublayers rules."""
    pol = parse_sync_policy(policy_spec, n_layer)
    sync, out, diverged = pol.sync, [], False  # diverged: some track's stream differs from x
    for j in range(len(sync)):
        megatron = (j == 0 or sync[j - 1]) and sync[j]
        per_track = not sync[j] and not (pol.parallel and j % 2 == 0)
        entry = not megatron and (j == 0 or sync[j - 1])
        reads_div = not megatron and diverged and not (pol.parallel and j % 2 == 1 and not diverged)
        out.append((megatron, sync[j], per_track, reads_div, entry))
        diverged = False if sync[j] else (diverged or per_track)
    return pol, out


def collectives(policy_spec, n_layer, n_embd, batch, tokens, tp, train, compute_bytes=2, resid_bytes=4):
    """[(kind, phase, bytes)] of one step, as parallel/comm.py counts them (kinds tp_fwd, tp_bwd,
    tp_grad, vocab). The vocabulary ones and tp_grad exist only at tp > 1 (at tp=1 the model calls
    F.embedding / F.cross_entropy and sums no partial gradients)."""
    pol, steps = plan(policy_spec, n_layer)
    N, C = batch * tokens, n_embd
    out = [("tp_fwd", "fwd", N * C * compute_bytes) for s in steps if s[1]]
    if train:
        out += [("tp_bwd", "bwd", N * C * compute_bytes) for s in steps if s[0]]
        out += [("tp_bwd", "bwd", N * C * resid_bytes) for s in steps if s[4]]
        n_partial = sum(3 * C for s in steps if not s[0])  # LN weight, LN bias, c_proj bias per region sublayer
        if tp > 1 and n_partial:
            out.append(("tp_grad", "bwd", n_partial * 4))
    if tp > 1:
        out.append(("vocab", "fwd", N * C * 4))  # the embedding's g (fp32 rows)
        if train:
            out += [("vocab", "fwd", N * 4), ("vocab", "fwd", 2 * N * 4), ("vocab", "bwd", N * C * compute_bytes)]
        else:
            out.append(("vocab", "fwd", batch * 50304 // tp * 4))  # the last position's logits, all-gathered
    return out


# ------------------------------------------------------------------ communication
def load_comm_fit():
    path = os.path.join(RESULTS, "step_model_comm_fit.json")
    with open(path) as f:
        return json.load(f)


def allreduce_ms(nbytes, tp, fit):
    if tp == 1:
        return 0.0
    alpha = fit["alpha_us"] * (tp - 1) * 1e-3
    return alpha + 2 * (tp - 1) / tp * nbytes / (fit["bw_GBps"] * 1e9) * 1e3


def fit_comm(points):
    """alpha (us) and bw (GB/s) of t = alpha + b / bw at tp=2, minimizing the relative error."""
    best = None
    for bw in [50 + 2.5 * i for i in range(400)]:  # GB/s grid, then alpha in closed form per bw
        # minimize sum ((alpha + b/bw - t) / t)^2 over alpha: weighted mean
        w = [1 / t ** 2 for b, t, _ in points]
        alpha = sum(wi * (t - b / bw / 1e3) for wi, (b, t, _) in zip(w, points)) / sum(w)
        alpha = max(alpha, 0.0)
        err = sum(((alpha + b / bw / 1e3 - t) / t) ** 2 for b, t, _ in points)
        if best is None or err < best[0]:
            best = (err, alpha, bw)
    return best[1], best[2]


# ------------------------------------------------------------------ calibration from stored rows
def stored_rows():
    """Every stored row of bench/results' latency and throughput files, as dicts with size, workload,
    mode, tp, n_tracks, policy, ms, floor_ms (tp_latency only), device, commit, source."""
    rows = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "tp_latency_*.json")) +
                       glob.glob(os.path.join(RESULTS, "*", "tp_latency_*.json"))):  # decode/, h100_tp2/
        d = json.load(open(path))
        m = d["meta"]
        floors = {(r["size"], r["n_tracks"], r["policy"], r["workload"], r["mode"]): r["ms"]
                  for r in d["rows"] if r["floor"]}
        for r in d["rows"]:
            if r["floor"] or r["n_tracks"] == "-":  # torch_tp and the plain model: not ours
                continue
            key = (r["size"], r["n_tracks"], r["policy"], r["workload"], r["mode"])
            rows.append(dict(size=r["size"], workload=r["workload"], mode=r["mode"], tp=m["tp"],
                             n_tracks=int(r["n_tracks"]), policy=r["policy"], ms=r["ms"], floor_ms=floors.get(key),
                             device=m["device"].replace("NVIDIA ", ""), commit=m.get("commit") or "not recorded",
                             source=os.path.relpath(path, REPO)))
    for path in sorted(glob.glob(os.path.join(RESULTS, "train_throughput*.json"))):
        d = json.load(open(path))
        m = d["meta"]
        for r in d["rows"]:
            if r["impl"] != "ours" or r["dp"] != 1 or r.get("error"):
                continue
            rows.append(dict(size="124m", workload="train_b12", mode=r["mode"], tp=r["tp"],
                             n_tracks=int(r["n_tracks"]), policy=r["policy"], ms=r["ms"], floor_ms=None,
                             device=device_name(m["device"]), commit=m.get("commit") or "not recorded",
                             source=os.path.relpath(path, REPO)))
    for r in rows:
        r["device"] = device_name(r["device"])
    return rows


def device_name(text):
    for name in DEVICES:
        if name in text:
            return name
    raise ValueError(f"device {text!r} has no datasheet entry; allowed: {', '.join(DEVICES)}")


def mode_class(mode):
    """graph: CUDA graphs (device-bound); eager and compiled without graphs are host-bound at tp>1."""
    return "graph" if mode in GRAPH_MODES else mode


def tracks_features(policy_spec, n_layer):
    pol, steps = plan(policy_spec, n_layer)
    n_div = sum(s[3] for s in steps)
    return n_div, n_layer * (n_div > 0)


def calibrate_from_rows(rows, device):
    """Per (size, workload, mode) family measured at tp=1 on `device`: the scale s (baseline row) and
    the tracks coefficients c_div, c_layer (every policy's row, least squares, >= 0)."""
    fams = {}
    for r in rows:
        if r["tp"] == 1 and r["device"] == device and r["workload"] in WORKLOADS:
            fams.setdefault((r["size"], r["workload"], r["mode"]), []).append(r)
    table = {}
    for (size, workload, mode), rs in sorted(fams.items()):
        base = [r for r in rs if r["policy"] in ("baseline", "ladder")]
        if not base:
            continue
        base_ms = statistics.median(r["ms"] for r in base)
        roof = roofline(sublayers(size, workload, 1), device)
        s = base_ms / (sum(roof.values()) * 1e3)  # dimensionless: measured / roofline
        # tracks: extra_ms = u(k) * (c_div * n_div + c_layer * n_layer [n_div > 0]); 2x2 normal equations
        A, y = [], []
        for r in rs:
            n_div, n_lay = tracks_features(r["policy"], SHAPES[size][0])
            u = s * stream_pass(size, workload, r["n_tracks"], device) * 1e3
            A.append((u * n_div, u * n_lay))
            y.append(r["ms"] - base_ms)
        c_div, c_layer = nonneg_lstsq2(A, y)
        table[f"{size}|{workload}|{mode}"] = dict(
            size=size, workload=workload, mode=mode, device=device, scale=s, base_ms=base_ms,
            c_div=c_div, c_layer=c_layer, n_rows=len(rs), commits=sorted({r["commit"] for r in rs}),
            sources=sorted({r["source"] for r in rs}),
            sublayers_ms={k: s * v * 1e3 for k, v in roof.items()},  # the split of base_ms
            how="scaled from stored one-GPU rows (whole-step time split by FLOPs and bytes)")
    return table


def nonneg_lstsq2(A, y):
    """min |A c - y|^2 over c >= 0 for two columns (tries the full solve, then each column alone)."""
    best = (sum(v * v for v in y), 0.0, 0.0)
    cands = []
    a11 = sum(a[0] * a[0] for a in A); a22 = sum(a[1] * a[1] for a in A); a12 = sum(a[0] * a[1] for a in A)
    b1 = sum(a[0] * v for a, v in zip(A, y)); b2 = sum(a[1] * v for a, v in zip(A, y))
    det = a11 * a22 - a12 * a12
    if abs(det) > 1e-12 * max(a11 * a22, 1e-30):
        cands.append(((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det))
    if a11 > 0:
        cands.append((b1 / a11, 0.0))
    if a22 > 0:
        cands.append((0.0, b2 / a22))
    for c1, c2 in cands:
        if c1 < 0 or c2 < 0:
            continue
        err = sum((a[0] * c1 + a[1] * c2 - v) ** 2 for a, v in zip(A, y))
        if err < best[0]:
            best = (err, c1, c2)
    return best[1], best[2]


def family(tables, size, workload, mode, device):
    """The calibration entry for this row, and how it was reached (exact, other mode, scaled shape,
    another device's rows: s is relative to the roofline, so it carries over with the datasheet)."""
    others = [d for d in sorted(tables) if d != device]
    for d in [device] + others:
        try:
            e, how = family_on(tables.get(d, {}), size, workload, mode)
        except ValueError:
            continue
        return e, how if d == device else f"{how}, {d} rows with the {device} datasheet"
    raise ValueError(f"no tp=1 calibration for workload {workload!r}; measured: "
                     f"{', '.join(k for t in tables.values() for k in sorted(t))}")


def family_on(table, size, workload, mode):
    mc = mode_class(mode)
    want = [(size, workload, mode, "measured family")]
    want += [(size, workload, m, f"{m} family (no tp=1 {mode} row)") for m in ("graph", "compiled-graphs", "compiled")
             if mode_class(m) == mc and m != mode]
    want += [(size, workload, m, f"{m} family (no tp=1 {mode} row)") for m in ("eager", "graph", "compiled")]
    for s, w, m, how in want:
        e = table.get(f"{s}|{w}|{m}")
        if e:
            return e, how
    # a shape no row measured: the largest measured size of this workload, scaled by FLOPs and bytes
    for s in ("medium", "124m"):
        for m in (mode, "graph", "compiled-graphs", "compiled", "eager"):
            e = table.get(f"{s}|{workload}|{m}")
            if e:
                return e, f"scaled from {s} {m} (FLOPs and bytes)"
    raise ValueError(f"no tp=1 calibration for workload {workload!r}")


# ------------------------------------------------------------------ the prediction
def predict(size, workload, tp, policy, n_tracks, device, tables, fit, mode="graph", measured=None):
    """Modeled ms of one step: dict with compute, tracks, comm (no overlap), hidden (full overlap)."""
    size, (L, H, C, V) = shape_of(size)
    if tp not in (1, 2, 4, 8) or n_tracks % tp:
        raise ValueError(f"tp={tp} must be one of 1, 2, 4, 8 and divide n_tracks={n_tracks}")
    # heads need not divide by n_tracks here (1.5B has 25): the model times 1/tp of the width
    e, how = family(tables, size, workload, mode, device)
    k = n_tracks // tp
    roof = roofline(sublayers(size, workload, tp), device)
    if measured is None:
        measured = measured_sublayers(device, size, workload, tp)
    compute_parts = {name: measured.get(name, e["scale"] * t * 1e3) for name, t in roof.items()}
    if measured:
        how = f"{', '.join(sorted(set(measured) & set(roof)))} measured on {device} (kernel time), the rest {how}"
    compute = sum(compute_parts.values())
    n_div, n_lay = tracks_features(policy, L)
    tracks = e["scale"] * stream_pass(size, workload, k, device) * 1e3 * (e["c_div"] * n_div + e["c_layer"] * n_lay)
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
    # input-gradient all-reduce is off by default, so nothing else overlaps)
    # ladder: the midpoint of its bounds, since an overlapped all-reduce contends with the compute for
    # SMs and memory (profile_124m_n2_prefill_b8_graph_tp2.txt: 71 us per ladder all-reduce, 61 alone)
    ladder_hidden = sum(min(allreduce_ms(by, tp, fit), per_sublayer / (3 if train else 1))
                        for kind, ph, by in colls if kind == "tp_fwd" and pol.ladder)
    return dict(ms=no_overlap - ladder_hidden / 2, no_overlap=no_overlap, full_overlap=no_overlap - hidden,
                compute=compute, tracks=tracks, comm=comm, n_collectives=len(colls), calibration=how,
                compute_parts=compute_parts)


# ------------------------------------------------------------------ the all-reduce fit at tp=2
PROFILE_BYTES = {"decode_b1": 1 * 768 * 2, "decode_b8": 8 * 768 * 2, "prefill_b1": 1024 * 768 * 2,
                 "prefill_b8": 8 * 1024 * 768 * 2}  # 124m: one g of [B, T, 768] bf16


def profile_points():
    """(bytes, us per all-reduce, source) from the stored 2xH200 profiles whose ranks run in step:
    CUDA-graph traces (profile_policy.py) of every policy but ladder (its all-reduces run beside
    compute), and the compiled training trace's bf16 all-reduces (12 x 1024 x 768)."""
    pts = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "profiles", "profile_124m_*_graph_tp2.txt"))):
        workload = os.path.basename(path).split("_")[3] + "_" + os.path.basename(path).split("_")[4]
        section = None
        for line in open(path):
            if line.startswith("## "):
                section = line[3:].strip()
            elif "ncclDevKernel_AllReduce" in line and section not in ("ladder", "torch_tp"):
                ms, count = line.split()[:2]
                pts.append((PROFILE_BYTES[workload], 1e3 * float(ms) / int(count),
                            f"{os.path.relpath(path, REPO)} ({section})"))
    train = os.path.join(RESULTS, "profiles", "train_profile_ours_tp2_n2_baseline_compiled.txt")
    for line in open(train):
        if line.startswith("ncclDevKernel_AllReduce_Sum_bf16"):
            cols = line.split()
            pts.append((12 * 1024 * 768 * 2, float(cols[-2].replace("us", "")), os.path.relpath(train, REPO)))
    return pts


def comm_fit():
    """The tp=2 all-reduce fit to the stored profiles, with its residuals (a pure function of the stored files)."""
    pts = profile_points()
    alpha, bw = fit_comm([(b, t, src) for b, t, src in pts])
    fit = dict(alpha_us=alpha, bw_GBps=bw, device="H200 x2 (NVLink, NCCL ring LL as traced)",
               formula="t(b, tp) = alpha(tp) + 2(tp-1)/tp * b / bw; alpha(tp) = alpha(2) * (tp-1); bw = bw(2)",
               points=[dict(bytes=b, measured_us=t, fitted_us=alpha + b / bw / 1e3,
                            residual_pct=100 * ((alpha + b / bw / 1e3) / t - 1), source=src) for b, t, src in pts],
               check_not_fitted=ddp_flat_check(alpha, bw),
               tp_4_8=("assumption: a ring all-reduce has 2(tp-1) dependent steps, so its latency grows with tp-1 "
                       "(https://developer.nvidia.com/blog/3x-faster-allreduce-with-nvswitch-and-tensorrt-llm-multishot/); "
                       "on NVSwitch the bus bandwidth per GPU does not depend on tp, so bw stays at the tp=2 fit. "
                       "Public nccl-tests bus bandwidth at large sizes on 8xH100 NVLink is 460-480 GB/s "
                       "(https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests): the upper bound; the fit "
                       "is what this code's all-reduces reach inside a step. No public small-message latency "
                       "figure was found, so alpha(4) and alpha(8) are this assumption, not a citation."))
    return fit


def ddp_flat_check(alpha, bw):
    """The one-bucket ("flat") DDP wait of bench/results/ddp_buckets.json: one fp32 all-reduce of all
    gradients plus a copy back (so the measured wait is an upper bound for the all-reduce)."""
    d = json.load(open(os.path.join(RESULTS, "ddp_buckets.json")))
    out = []
    for size, rs in d["results"].items():
        for r in rs:
            if r["variant"] == "flat":
                b = r["params"] * 4
                out.append(dict(size=size, bytes=b, measured_wait_ms=r["wait_ms"],
                                modeled_ms=(alpha + b / bw / 1e3) / 1e3))
    return out


# ------------------------------------------------------------------ validation
# how `calibrate` times decode attention; a calibration without this tag (the first H100 one) concatenated the
# cache each call, which at batch 8 is most of its time: its decode rows are not used
DECODE_CACHE = "written in place"


def write_json(name, obj):
    write_text(os.path.join(RESULTS, name), json.dumps(obj, indent=1))


def measured_sublayers(device, size, workload, tp):
    """{sublayer: ms} that `calibrate` measured on this device at this shape and tp
    (bench/results/step_model_calibration_<device>.json, 'measured per sublayer'); {} where it did not.
    predict() uses these in place of the scaled split of the stored one-GPU rows."""
    path = os.path.join(RESULTS, f"step_model_calibration_{device.lower()}.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        cal = json.load(f)
    if workload.startswith("decode") and cal.get("decode_cache") != DECODE_CACHE:
        return {}  # timed with a torch.cat of the whole cache per layer, which the model never runs
    for e in cal["rows"]:
        if (e["size"], e["workload"], e["tp"]) == (size, workload, tp):
            return e["sublayers_ms"]
    return {}


def calibration_note(rows):
    """Which devices have a per-sublayer calibration (`calibrate`), and whether the validated rows use one."""
    measured = sorted(os.path.basename(p)[len("step_model_calibration_"):-len(".json")].upper()
                      for p in glob.glob(os.path.join(RESULTS, "step_model_calibration_*.json")))
    row_devices = sorted({r["device"] for r in rows})
    used = [d for d in row_devices if d in measured]
    if not measured:
        return "No per-sublayer calibration measured yet: `python -m bench.step_model calibrate --device cuda` makes it."
    return (f"Per-sublayer calibration measured on {', '.join(measured)} "
            f"(bench/results/step_model_calibration_<device>.json), used for that device's predictions; the rows "
            f"here ran on {', '.join(row_devices)}, " + (f"and those on {', '.join(used)} use it." if used else
                                                         "which have none, so this check is of the scaled split."))


def validate():
    """Every stored row at tp >= 2, predicted / measured. Fitting used only tp=1 rows (compute) and
    the all-reduce kernel times of the profiles (communication); no tp >= 2 row's time enters a fit."""
    fit = comm_fit()
    rows = stored_rows()
    tables = {d: calibrate_from_rows(rows, d) for d in sorted({r["device"] for r in rows if r["tp"] == 1})}
    out = []
    for r in rows:
        if r["tp"] < 2:
            continue
        if r["device"] not in tables:
            raise ValueError(f"row {r['source']} ran on {r['device']}, which has no tp=1 rows to calibrate on")
        p = predict(r["size"], r["workload"], r["tp"], r["policy"], r["n_tracks"], r["device"], tables,
                    fit, r["mode"])
        out.append(dict(r, pred=p["ms"], ratio=p["ms"] / r["ms"], compute=p["compute"] + p["tracks"],
                        comm=p["comm"], no_overlap=p["no_overlap"], full_overlap=p["full_overlap"],
                        calibration=p["calibration"], target=mode_class(r["mode"]) == "graph"))
    return fit, tables, out


def error_stats(rows):
    errs = sorted(abs(r["ratio"] - 1) for r in rows)
    if not errs:
        return None
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
    return dict(n=len(errs), median=statistics.median(errs), worst=errs[-1], worst_row=worst,
                p90=errs[int(0.9 * (len(errs) - 1))])


def h100_compute_ratios(graph):
    """'workload x.xx, ...': the median of modeled compute over the measured floor of the H100 graph rows."""
    by = {}
    for r in graph:
        if r["device"] == "H100" and r.get("floor_ms"):
            by.setdefault(r["workload"], []).append(r["compute"] / r["floor_ms"])
    return ", ".join(f"{w} {statistics.median(v):.2f}" for w, v in sorted(by.items())) or "no H100 rows"


def write_validation(fit, tables, rows):
    lines = ["# Step-time model: predicted ÷ measured, every stored row at tp ≥ 2", "",
             "Made by `python -m bench.step_model --validate` (bench/step_model.py). Every predicted time is "
             "**modeled**; the measured ones are the stored rows named in the source column.", "",
             "- Fitted on (and only on): the tp=1 rows of the same files (compute scale per size, workload and mode; "
             "tracks coefficients) and the all-reduce kernel times of the stored 2×H200 profiles "
             "(bench/results/step_model_comm_fit.json). Validated on: every tp ≥ 2 row below; none of them enters a fit.",
             f"- All-reduce fit at tp=2: alpha = {fit['alpha_us']:.2f} µs, bw = {fit['bw_GBps']:.0f} GB/s "
             f"(residuals per point in the fit file: median |residual| "
             f"{statistics.median(abs(p['residual_pct']) for p in fit['points']):.1f}%, worst "
             f"{max(abs(p['residual_pct']) for p in fit['points']):.1f}%).",
             "- Compute calibration: " + ", ".join(f"{d}: {len(t)} families scaled from stored one-GPU rows"
                                                   for d, t in tables.items()) +
             " (bench/results/step_model_compute_<device>.json). " + calibration_note(rows), ""]
    graph = [r for r in rows if r["target"]]
    host = [r for r in rows if not r["target"]]
    for name, sel in (("CUDA-graph rows (device-bound; the model's target)", graph),
                      ("eager and compiled-without-graphs rows (host-bound at tp ≥ 2; not the model's target)", host)):
        st = error_stats(sel)
        if st:
            w = st["worst_row"]
            lines.append(f"**{name}**: {st['n']} rows, median |error| {100 * st['median']:.1f}%, 90th percentile "
                         f"{100 * st['p90']:.1f}%, worst {100 * st['worst']:.1f}% ({w['size']} {w['workload']} {w['mode']} "
                         f"tp={w['tp']} n_tracks {w['n_tracks']} {w['policy']}).")
    for device in sorted({r["device"] for r in graph}):
        st = error_stats([r for r in graph if r["device"] == device])
        lines.append(f"- graph rows on {device}: {st['n']} rows, median |error| {100 * st['median']:.1f}%, "
                     f"worst {100 * st['worst']:.1f}%")
    for tp in sorted({r["tp"] for r in graph}):
        st = error_stats([r for r in graph if r["tp"] == tp])
        lines.append(f"- graph rows at tp={tp}: {st['n']} rows, median |error| {100 * st['median']:.1f}%, "
                     f"worst {100 * st['worst']:.1f}%")
    for w in sorted({r["workload"] for r in graph}):
        st = error_stats([r for r in graph if r["workload"] == w])
        lines.append(f"- graph rows, {w}: {st['n']} rows, median |error| {100 * st['median']:.1f}%, "
                     f"worst {100 * st['worst']:.1f}%")
    lines += ["", "**Why rows miss** (from the measured floors in this table and the stored profiles; written for the "
              "rows stored when the model was made):",
              "- *compiled+graph decode* (bench/results/decode/, worst row): no tp=1 row of that mode exists, so it is "
              "calibrated on the eager-built graph family; inductor fuses the elementwise work (floor 0.435 against "
              "0.656 ms for grouped:3), which the model does not know.",
              "- *tp=4 rows* (median 18%): measured at an older commit (the tp=4 notes in bench/results/tp_latency.md: "
              "sum-over-tracks reduce kernels since removed), so their floors differ from the tp=1 calibration; and "
              "alpha(4) = 3 alpha(2) is an assumption the tp=4 decode rows contradict (their time over the floor gives "
              "about 10.6 us per sync, the assumption 18.6 us), so small-message all-reduces at tp 4 and 8 are "
              "modeled too slow: decode savings at tp=8 are overstated rather than understated.",
              "- *prefill_b1* (1 x 1024, 1.5-2 MB per all-reduce): the fit's points are 1.5 KB and 12.6-18.9 MB; "
              "between them the LL protocol's bandwidth is lower than the line (baseline medium at tp=2: 30 us per "
              "sync measured over its floor, 15.5 us modeled).",
              "- *diverged tracks at k = 1*: the tracks term, fitted at k = 4 on one GPU, over-predicts grouped "
              "policies' compute by 5-30% at k = 1 on tp=4 (their floors); the model leaves out how the batched "
              "GEMMs' and copies' cost falls with fewer tracks beyond the (k - 1) stream bytes.",
              "- *H100 rows* (2x H100, bench/results/h100_tp2/, with the per-sublayer calibration where it has the row): modeled "
              "compute over the measured floor, median per workload: " + h100_compute_ratios(graph) + ". A sum of "
              "sublayer kernel times leaves out the embedding, the residual adds, the final layer norm and the gaps "
              "between a graph's kernels, which weigh most in decode's many short kernels; no tp=2 H100 profile was "
              "taken to split this further.",
              "- *eager and compiled-without-graphs rows*: host-bound (the profiles show the device busy 5-10% of the "
              "wall time in eager decode, and the compiled tp=2 step spread from 25.2 to 30.2 ms between runs); the "
              "model is of device time and is not meant for them.",
              "",
              "Model revisions after seeing a validation pass (none per row): the tracks term's stream bytes went "
              "from k to k - 1 (the code's k = 1 paths: F.linear, the sum over tracks a view), and ladder's point "
              "prediction from full overlap to the midpoint of its bounds (its all-reduce kernels run 71 against "
              "61 us beside compute in the stored profile). Before them: median 10.8%, worst 47.9% over the same rows. "
              "After the first H100 rows came (bench/results/h100_tp2/): a calibration's decode rows are used only "
              "if `calibrate` wrote the KV cache in place (DECODE_CACHE in bench/step_model.py), because the first "
              "H100 calibration had timed decode attention with a torch.cat of the whole cache, which the model never "
              "runs (its decode_b8 compute was 1.55x the measured floors); with those rows the H100 graph rows were "
              "median 18.0%, worst 87.1%. The stored calibration is a rerun that writes the cache in place.",
              "", "Columns: modeled ms (point: no overlap; ladder the midpoint of its bounds), its compute + tracks part and "
              "its all-reduce part; measured ms, and the measured floor (the same policy with every collective skipped, "
              "where stored) for telling a compute miss from a communication miss.", "",
              "| source | device | commit | size | workload | mode | tp | n_tracks | policy | modeled ms | modeled compute | "
              "modeled comm | measured ms | measured floor | modeled ÷ measured | calibration |",
              "|---|---|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (not r["target"], r["source"], r["size"], r["workload"], r["mode"],
                                         r["tp"], r["n_tracks"], r["policy"])):
        floor = f"{r['floor_ms']:.3f}" if r["floor_ms"] else "-"
        lines.append(f"| {r['source']} | {r['device']} | {r['commit']} | {r['size']} | {r['workload']} | {r['mode']} | "
                     f"{r['tp']} | {r['n_tracks']} | {r['policy']} | {r['pred']:.3f} | {r['compute']:.3f} | "
                     f"{r['comm']:.3f} | {r['ms']:.3f} | {floor} | {r['ratio']:.2f} | {r['calibration']} |")
    write_text(os.path.join(RESULTS, "step_model_validation.md"), "\n".join(lines) + "\n")
    return lines


# ------------------------------------------------------------------ loss against modeled time
PARETO_POLICIES = ("baseline", "ladder", "spd", "parallel", "grouped:4", "grouped:12")
PAPERS = {"spd": ("SPD, arXiv 2502.20727", "about 20% lower inference latency, LLaMA2-70B on 8 GPUs"),
          "ladder": ("Ladder Residual, arXiv 2501.06589", "about 30% end-to-end wall-clock inference speed-up, 70B, TP over 8 GPUs")}


def loss_gaps():
    """{policy: [(tokens, gap %, 95% half-width or None, n seeds)]} of the budget study (124M width, n_tracks 4)."""
    d = json.load(open(os.path.join(REPO, "experiments", "docs_study", "budgets", "stats.json")))
    out = {"baseline": []}
    for c in d["stats"]["cells"]:
        if c["policy"] == "baseline":
            out["baseline"].append((c["tokens"], 0.0, 0.0, len(c["seeds"])))
            continue
        fv = c["final_val"]
        if fv.get("gap") is not None:
            out.setdefault(c["policy"], []).append((c["tokens"], fv["gap"], fv.get("gap_ci"), len(fv["gaps"])))
    return {p: sorted(v) for p, v in out.items()}


def time_error(rows):
    """The model's stated error: the 90th percentile of |predicted / measured - 1| over the graph rows."""
    return error_stats([r for r in rows if r["target"]])["p90"]


def pareto(tables, fit, err, device="H100"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    gaps = loss_gaps()
    budgets = sorted({t for v in gaps.values() for t, *_ in v})
    made = []
    for size in ("124m", "xl"):
        for tp in (2, 4, 8):
            n_tracks = max(tp, 4)
            fig, ax = plt.subplots(figsize=(7.5, 5))
            base = predict(size, "train_b12", tp, "baseline", n_tracks, device, tables, fit)["ms"]
            for bi, tokens in enumerate(budgets):
                pts = []
                for pol in PARETO_POLICIES:
                    cell = [g for g in gaps.get(pol, []) if g[0] == tokens]
                    if not cell:
                        continue
                    _, gap, ci, n = cell[0]
                    n_layer = SHAPES[shape_of(size)[0]][0]
                    spec = pol if pol != "grouped:12" else f"grouped:{n_layer}"  # one sync per forward
                    ms = predict(size, "train_b12", tp, spec, n_tracks, device, tables, fit)["ms"]
                    pts.append((ms, gap, ci or 0.0, pol, n))
                front = [p for p in pts if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in pts)]
                color = plt.cm.viridis(bi / max(1, len(budgets) - 1))
                for ms, gap, ci, pol, n in pts:
                    ax.errorbar(ms, gap, xerr=err * ms, yerr=ci, fmt="o" if (ms, gap, ci, pol, n) in front else "x",
                                color=color, capsize=2, ms=6)
                    ax.annotate(pol if pol != "grouped:12" else "1 sync/fwd", (ms, gap), fontsize=7, xytext=(3, 3), textcoords="offset points")
                front.sort()
                ax.plot([p[0] for p in front], [p[1] for p in front], "-", color=color, lw=1,
                        label=f"{tokens / 1e6:.1f}M tokens (front: o)")
            ax.axhline(0, color="gray", lw=0.5)
            ax.set_xlabel(f"modeled time per iteration, ms ({device}, tp={tp}, n_tracks {n_tracks}, 12 x 1024, "
                          f"baseline {base:.1f})")
            ax.set_ylabel("final val loss gap to baseline, % (measured)")
            note = ("loss measured at 124M (width 768, n_tracks 4); time modeled" if size == "124m" else
                    "loss measured at 124M, not at 1.5B; time modeled at 1.5B")
            ax.set_title(f"{size}, tp={tp}: loss gap against modeled time\n{note}\nx bars: the model's "
                         f"90th-percentile error ({100 * err:.0f}%); y bars: 95% t interval over seeds", fontsize=8)
            ax.legend(fontsize=7)
            fig.tight_layout()
            path = os.path.join(RESULTS, f"step_model_pareto_{size}_tp{tp}.png")
            save_figure(fig, path, dpi=110)
            made.append(os.path.relpath(path, REPO))
    return made


def paper_table(tables, fit, err, device="H100"):
    """The 70B-class shape at tp=8: each policy's modeled saving beside the papers' published ones."""
    lines = [f"# 70B-class shape (80 layers x 8192) at tp=8 on {device}: modeled savings beside the papers", "",
             "Made by `python -m bench.step_model --pareto`. Times are **modeled** (bench/step_model.py), not measured; "
             f"the model's stated error is its 90th-percentile |error| on the stored graph rows, {100 * err:.0f}%. "
             "n_tracks 8 (one track per GPU). Decode: one token, batch 1 and 8, KV cache of 1024; prefill 8 x 1024. "
             "The papers' figures are theirs (LLaMA2-70B-class models, their own kernels and batch), quoted from "
             "their abstracts.", "",
             "| policy | syncs/fwd | decode_b1 ms | saving | decode_b8 ms | saving | prefill_b8 ms | saving | "
             "bounds decode_b1 (full overlap .. no overlap) | published |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    base = {w: predict("70b", w, 8, "baseline", 8, device, tables, fit)["ms"] for w in ("decode_b1", "decode_b8",
                                                                                     "prefill_b8")}
    for pol in ("baseline", "ladder", "spd", "parallel", "grouped:2", "grouped:4", "grouped:8", "grouped:80"):
        cells = []
        for w in ("decode_b1", "decode_b8", "prefill_b8"):
            p = predict("70b", w, 8, pol, 8, device, tables, fit)
            cells += [f"{p['ms']:.2f}", f"{100 * (1 - p['ms'] / base[w]):.0f}%"]
        p = predict("70b", "decode_b1", 8, pol, 8, device, tables, fit)
        paper = PAPERS.get(pol)
        lines.append(f"| {pol} | {parse_sync_policy(pol, 80).n_syncs} | " + " | ".join(cells) +
                     f" | {p['full_overlap']:.2f} .. {p['no_overlap']:.2f} | " +
                     (f"{paper[1]} ({paper[0]})" if paper else "-") + " |")
    write_text(os.path.join(RESULTS, "step_model_70b_tp8.md"), "\n".join(lines) + "\n")
    return lines


# ------------------------------------------------------------------ one question
def answer(size, tp, policy, device, n_tracks, tables, fit, err):
    lines = [f"{size} at tp={tp} on {device}, n_tracks {n_tracks} (modeled; stated error +-{100 * err:.0f}%, "
             f"the 90th percentile of |error| over the stored graph rows):"]
    for w, unit in (("train_b12", "ms per training iteration (12 x 1024, AdamW)"), ("decode_b1", "ms per token (batch 1)"),
                    ("decode_b8", "ms per token (batch 8)")):
        b = predict(size, w, tp, "baseline", n_tracks, device, tables, fit)
        p = predict(size, w, tp, policy, n_tracks, device, tables, fit)
        lines.append(f"  {w}: baseline {b['ms']:.2f}, {policy} {p['ms']:.2f} {unit}: saves "
                     f"{100 * (1 - p['ms'] / b['ms']):.0f}% (bounds {p['full_overlap']:.2f} .. {p['no_overlap']:.2f}; "
                     f"compute {p['compute']:.2f} + tracks {p['tracks']:.2f} + all-reduce {p['comm']:.2f}; "
                     f"calibration: {p['calibration']})")
    return lines


# ------------------------------------------------------------------ per-sublayer calibration on one GPU
def calibrate(device, sizes, tps, workloads, repeats, out_dir):
    """Time each sublayer at the shard width each tp implies, on this one device. On a GPU two times:
    its kernels' time (the profiler's kernel durations, mean of `repeats`: what the model uses, since the
    stored rows it predicts ran as CUDA graphs, with no launch gaps) and eager (CUDA events around the
    call, median of `repeats`: launch gaps included, which at small shards are most of it). On CPU the
    wall clock. Training workloads: forward + backward (and the AdamW step of the rank's parameters);
    decode: one token against a KV cache of ctx - 1 tokens."""
    import torch
    import torch.nn.functional as F
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    name = device_name(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else "cpu"

    def kernel_ms(fn):
        from torch.profiler import ProfilerActivity, profile
        for _ in range(2):
            fn()
        torch.cuda.synchronize(dev)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                fn()
            torch.cuda.synchronize(dev)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        if not kernels:
            raise RuntimeError("the profiler recorded no CUDA kernels: cannot time kernels on this setup")
        return sum(e.time_range.elapsed_us() for e in kernels) / 1e3 / repeats

    def timed(fn):
        for _ in range(2):
            fn()
        ts = []
        for _ in range(repeats):
            if dev.type == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); fn(); b.record(); torch.cuda.synchronize()
                ts.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter(); fn(); ts.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(ts)

    rows = []
    for size in sizes:
        size, (L, H, C, V) = shape_of(size)
        for tp in tps:
            for w in workloads:
                b, T, ctx, train, opt = WORKLOADS[w]
                Hl, hs = max(1, H // tp), C // H
                Ct, Ft, Vt = Hl * hs, 4 * C // tp, V // tp
                mk = lambda *s: torch.randn(*s, device=dev, dtype=dtype, requires_grad=train)
                x = mk(b, T, C)
                ln_w, ln_b = mk(C), mk(C)
                w_qkv, w_o, w_fc, w_pr, w_head = mk(3 * Ct, C), mk(C, Ct), mk(Ft, C), mk(C, Ft), mk(Vt, C)
                # GPT-2's linears have biases (the head has none): in training their gradients are reductions
                b_qkv, b_o, b_fc, b_pr = mk(3 * Ct), mk(C), mk(Ft), mk(C)
                # decode writes its T new positions into a preallocated cache and attends over all ctx of
                # them, as model/generate.py's KVCache does (a torch.cat of the cache would copy all of it)
                kv = torch.randn(2, b, Hl, ctx, hs, device=dev, dtype=dtype) if T < ctx else None
                targets = torch.randint(0, Vt, (b * T,), device=dev)

                def attention():
                    q, k, v = F.linear(x, w_qkv, b_qkv).view(b, T, 3, Hl, hs).transpose(1, 3).unbind(2)
                    if kv is not None:
                        kv[0][:, :, ctx - T:], kv[1][:, :, ctx - T:] = k, v
                        k, v = kv[0], kv[1]
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=kv is None)
                    return F.linear(y.transpose(1, 2).reshape(b, T, Ct), w_o, b_o)

                ops = {"layernorm": lambda: F.layer_norm(x, (C,), ln_w, ln_b),
                       "attention": attention,
                       "mlp": lambda: F.linear(F.gelu(F.linear(x, w_fc, b_fc)), w_pr, b_pr),
                       "head+ce": (lambda: F.cross_entropy(F.linear(x, w_head).view(-1, Vt).float(), targets))
                       if train else (lambda: F.linear(x[:, -1:], w_head))}
                per = {"layernorm": 2 * L, "attention": L, "mlp": L, "head+ce": 1}
                meas, eager = {}, {}
                # a timed backward starts from out.float().sum(): its kernels are no part of the layer, so
                # their time (that of x.float().sum().backward(), the same [b, T, C] shape) is taken off
                # the kernel times of the sublayers whose output has that shape
                start = 0.0
                if train and dev.type == "cuda":
                    with torch.enable_grad():
                        start = kernel_ms(lambda: x.float().sum().backward())
                for op, fn in ops.items():
                    run = (lambda fn=fn: fn().float().sum().backward()) if train else fn
                    with torch.set_grad_enabled(train):
                        eager[op] = timed(run) * per[op]
                        if dev.type == "cuda":
                            meas[op] = max(0.0, kernel_ms(run) - (start if op != "head+ce" else 0.0)) * per[op]
                        else:
                            meas[op] = eager[op]
                if opt:
                    params = [torch.zeros(n, device=dev, requires_grad=True)
                              for n in (L * (3 * Ct * C + C * Ct + 2 * Ft * C), Vt * C)]
                    for p in params:
                        p.grad = torch.zeros_like(p)
                    adam = torch.optim.AdamW(params, fused=dev.type == "cuda")
                    eager["optimizer"] = timed(adam.step)
                    meas["optimizer"] = kernel_ms(adam.step) if dev.type == "cuda" else eager["optimizer"]
                rows.append(dict(size=size, workload=w, tp=tp, device=name, sublayers_ms=meas, eager_ms=eager,
                                 how="measured per sublayer" + (" (kernel time)" if dev.type == "cuda" else "")))
                print(f"{name} {size} tp={tp} {w}: " + ", ".join(f"{k} {v:.3f} ms (eager {eager[k]:.3f})"
                                                                 for k, v in meas.items()))
    import torch as _t
    out = dict(device=name, torch=_t.__version__, repeats=repeats, rows=rows, decode_cache=DECODE_CACHE, biases=True,
               command="python -m bench.step_model " + " ".join(sys.argv[1:]))
    path = os.path.join(out_dir, f"step_model_calibration_{name.lower()}.json")
    write_text(path, json.dumps(out, indent=1))
    cols = list(per) + ["optimizer"]
    cell = lambda r, k: (f"{r['sublayers_ms'][k]:.3f}" + (f" ({r['eager_ms'][k]:.3f})" if dev.type == "cuda" else "")
                         if k in r["sublayers_ms"] else "—")
    write_text(path[:-5] + ".md", (
        f"# Per-sublayer times on one {name} (measured per sublayer)\n\nCommand: `{out['command']}`, torch "
        f"{out['torch']}. ms per step (all layers), at the shard width of each tp"
        + (f": kernel time (profiler, mean of {repeats}), and in brackets eager (CUDA events around each call, "
           f"median of {repeats}, launch gaps included)." if dev.type == "cuda" else f": wall clock, median of {repeats}.")
        + "\n\n| size | tp | workload | " + " | ".join(cols) + " |\n|---|---:|---|" + "---:|" * len(cols) + "\n"
        + "\n".join(f"| {r['size']} | {r['tp']} | {r['workload']} | " + " | ".join(cell(r, k) for k in cols) + " |"
                    for r in rows) + "\n"))
    return path


def calibration_repeatability(path_a, path_b):
    """Two calibrations of the same rows (two runs of `calibrate`): |b / a - 1| per (row, sublayer), for the
    kernel times and the eager times: lines of median, 90th percentile and worst."""
    def load(path):
        with open(path) as f:
            return {(r["size"], r["tp"], r["workload"]): r for r in json.load(f)["rows"]}
    a, b = load(path_a), load(path_b)
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"{path_a} and {path_b} share no (size, tp, workload) row")
    lines = [f"{len(common)} rows in both"]
    for label, key in (("kernel time", "sublayers_ms"), ("eager", "eager_ms")):
        diffs = sorted(abs(100.0 * (b[k][key][s] / a[k][key][s] - 1.0)) for k in common
                       for s in a[k].get(key, {}) if s in b[k].get(key, {}) and a[k][key][s] > 0)
        if diffs:
            lines.append(f"{label}: |second / first - 1| median {statistics.median(diffs):.1f}%, 90th percentile "
                         f"{diffs[int(0.9 * (len(diffs) - 1))]:.1f}%, worst {diffs[-1]:.1f}% over {len(diffs)} sublayer times")
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate-compare"]:
        ap = argparse.ArgumentParser(prog="python -m bench.step_model calibrate-compare", formatter_class=HelpFormatter,
                                     description="How far two calibrations of the same rows differ (repeatability).")
        ap.add_argument("first", help="a step_model_calibration_<device>.json")
        ap.add_argument("second", help="another run's, of the same rows")
        a = ap.parse_args(argv[1:])
        try:
            print("\n".join(calibration_repeatability(a.first, a.second)))
        except (OSError, ValueError, KeyError) as e:
            ap.error(str(e))
        return
    if argv[:1] == ["calibrate"]:
        ap = argparse.ArgumentParser(prog="python -m bench.step_model calibrate", formatter_class=HelpFormatter,
                                     description="Per-sublayer times on one device at each tp's shard width.")
        ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
        ap.add_argument("--sizes", default="124m,medium", help=f"comma-separated, of {', '.join(SHAPES)}")
        ap.add_argument("--tps", default="1,2,4,8", help="comma-separated shard counts")
        ap.add_argument("--workloads", default="train_b8,train_b12,prefill_b8,decode_b1,decode_b8",
                        help=f"comma-separated, of {', '.join(WORKLOADS)}")
        ap.add_argument("--repeats", type=int, default=20, help="timed repeats per sublayer (their median)")
        ap.add_argument("--out_dir", default=RESULTS, help="where the calibration's json and md go")
        a = ap.parse_args(argv[1:])
        for w in a.workloads.split(","):
            if w not in WORKLOADS:
                ap.error(f"unknown workload {w!r}; allowed: {', '.join(WORKLOADS)}")
        tps = [int(t) for t in a.tps.split(",")]
        print(calibrate(a.device, a.sizes.split(","), tps, a.workloads.split(","), a.repeats, a.out_dir))
        return
    ap = argparse.ArgumentParser(prog="python -m bench.step_model", description=__doc__.split("\n\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--validate", action="store_true", help="predict every stored tp>=2 row; write the table")
    ap.add_argument("--pareto", action="store_true", help="loss gap against modeled time; the 70B-class table")
    ap.add_argument("--size", default="xl", help=f"one of {', '.join(list(SHAPES) + list(ALIASES))}")
    ap.add_argument("--tp", type=int, default=8, help="tensor-parallel degree: 1, 2, 4 or 8")
    ap.add_argument("--policy", default="grouped:4", help="a sync_policy spec, as train_reduced_sync.py takes it")
    ap.add_argument("--n_tracks", type=int, default=None, help="default: tp (one track per GPU)")
    ap.add_argument("--device", default="H100", help=f"one of {', '.join(DEVICES)}")
    a = ap.parse_args(argv)
    if a.device not in DEVICES:
        ap.error(f"unknown --device {a.device!r}; allowed: {', '.join(DEVICES)}")
    fit, tables, rows = validate()
    err = time_error(rows)
    if a.validate:  # the fit and calibration files are written here only: a question reads, never writes
        write_json("step_model_comm_fit.json", fit)
        for device, table in tables.items():
            write_json(f"step_model_compute_{device.lower()}.json", table)
        print("\n".join(write_validation(fit, tables, rows)[:20]))
        print(f"table: {os.path.relpath(os.path.join(RESULTS, 'step_model_validation.md'), REPO)}")
    if a.pareto:
        for path in pareto(tables, fit, err):
            print(path)
        print("\n".join(paper_table(tables, fit, err)))
    if not (a.validate or a.pareto):
        try:
            print("\n".join(answer(a.size, a.tp, a.policy, a.device, a.n_tracks or a.tp, tables, fit, err)))
        except ValueError as e:
            ap.error(str(e))


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the reader (`... | head`) took what it wanted: no traceback, no error at exit's flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
