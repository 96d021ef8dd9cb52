"""A step-time model for tensor parallelism at tp 1, 2, 4 and 8: ms per training iteration or per
decoded token, per sync policy, for GPT-2 shapes and a 70B-class shape, from one-GPU measurements.

    t(step) = compute(tp, k) + tracks(k, policy) + comm(tp, policy)          [modeled, per rank]

Compute. Each sublayer s (LayerNorm, attention, MLP, residual adds, embedding, head + cross-entropy,
optimizer) has FLOPs F_s and HBM bytes B_s at the shard width tp implies (a rank holds 1/tp of the
heads, MLP columns and vocabulary; LayerNorms and the residual stream are replicated, fp32 in training; in
eager training at tp > 1 the vocab-parallel cross-entropy's extra passes over the rank's logits) and K_s
kernels. Its roofline time is r_s = K_s * lat + max(F_s / peak_flops, B_s / hbm_bw) with the
device's datasheet peaks. One scale per (size, workload, mode) family, fitted at tp=1 only,

    s = measured tp=1 baseline ms / sum_s r_s(tp=1),     compute(tp) = s * sum_s r_s(tp),

splits the stored one-GPU time into sublayers by FLOPs and bytes ("scaled from stored one-GPU
rows"). Shapes no row measured (1.5B, 70B-class) take the nearest measured family's s and are
marked scaled.

Where `calibrate` has measured a sublayer on a device whose own whole tp=1 CUDA-graph steps (eager kernels captured)
of a calibrated size and workload fit a gap per kernel (fit_overhead), that device's CUDA-graph predictions take the
measured kernel times, the roofline of the rest and that gap per kernel; elsewhere the scaled split. A device without
such a step does not borrow another device's gap (overhead_for); H100 and H200 each have their own.

Tracks. A rank holds k = n_tracks / tp tracks. At any k the policy runs a few elementwise passes over the stream
that a Megatron layer does not (policy_ops, counted from model/gpt.py: one per spd region, two per grouped region,
and in training at tp > 1 one bias add per Megatron sublayer), each costing s * op_pass; their coefficient c1 is 1
(the code's count) unless tp=1 rows of the current code at k = 1 fit it, and 0 in a compiled family (inductor fuses
them: fit_ops). At k >= 2 the diverged streams cost more:
with n_entry the regions entered from a synced stream and n_attn, n_mlp the attention and MLP sublayers that run
per track, where any stream diverges (tracks_features), and u(k) = s * C * (lat / 768 + N * 4 B / hbm_bw) *
((1 - q) share + q (k - 1)) the extra streams' pass over the N tokens (stream_pass: its latency-bound part grows
with the width C; q, the part each further track repeats),
    tracks = c1 * s * policy_ops * op_pass + [k >= 2] u(k) * (c_entry * n_entry + c_attn * n_attn + c_mlp * n_mlp),
share = the rank's roofline time at tp over tp=1's (the streams' extra is a fraction of the rank's work: measured
on 2x H100, a floor at tp=2 and k=2 is the tp=1 row's multiple of baseline, not its extra ms), and
with c_entry, c_attn, c_mlp >= 0 fitted by least squares to a family's tp=1 rows at the row's k where it measured
that k, else to its rows at every k >= 2 (c_mlp only where a policy ran its MLPs per track without its attention,
else c_attn times the ratio such families fitted: mlp_ratios); a family uses the current code's
fit, its own or, where it has none, another family's of the same workload kind (times the factor that fits its own
rows where they are of one policy shape: scale_to), and the older code's only where no family has a current-code
fit (resolve_streams). At tp >= 2 and k >= 3, where one GPU was measured at n_tracks = tp k, the streams' bytes
follow the width law, 1/tp of that row's term, weighted by their share of the pass (latency_fraction; tracks_ms).
Priced on the family's device, the term carries to another device as the step's roofline does. Rows are told apart
by the code they measured
(implementation(): issue 49 changed what a policy computes at one track per GPU), and the current code's rows at
tp >= 2 enter no fit (feeds_fits). Row files: ROW_FILES.

Communication. One all-reduce of b bytes over tp ranks (ring, NCCL's algorithm in every stored
profile) costs
    t(b, tp) = alpha(tp) + 2 (tp - 1) / tp * b / bw,
at tp=2 a two-regime law (sweep_regimes: NCCL changes protocol with the message size, and the stored tp=2 rows
jump between 1.57 and 2.1 MB) fitted to what an all-reduce adds to a step, measured apart from every model row
(bench/allreduce_sweep.py --between 1024 --producer gemm: each all-reduce's message written by a GEMM and read by a
residual add, less the same CUDA graph without the all-reduces; bench/results/allreduce/allreduce_instep_gemm_n2.json,
and H200's in instep_h200/ for a split that holds H100 out).
Where no such in-step sweep is stored, alpha(2) and bw(2) are fitted (relative least squares) to the all-reduce
kernel times of the stored 2xH200 profiles, and a back-to-back sweep (allreduce_sweep_n<tp>.json) gives the
regimes' shape, moved to that alpha. tp=4 likewise takes the in-step sweep at 4 ranks
(bench/results/allreduce/instep_h200/allreduce_instep_gemm_n4.json, on 4x H200: change point 3.25 MiB), and where a
split holds that device out, alpha(4), bw(4) fitted to the older code's tp=4 rows' time over their floor. tp=8 is
extrapolated regime by regime (extrapolate_regimes: alpha linear in tp - 1 through tp 2 and 4, bw and the change point
held at tp=4's), with the public nccl-tests busbw as the bound (PUBLIC_BUSBW).
--validate scores time and saving (1 - policy / baseline, same run and n_tracks) for this fit and for refits
that leave the row's size, or device, out of every fitted quantity (fit_split). The policy's collectives come from its plan (collectives()): per forward
one g per synced point (N*C compute-dtype bytes), the vocabulary-parallel embedding and head; per
backward one f per Megatron sublayer (compute dtype), one per region entry (compute dtype since 240c34d, fp32
before it, as the older rows that fit alpha/bw ran it), one
sum of the regions' replicated-parameter gradients, the head's f. Two bounds: no overlap (every
all-reduce adds), and full overlap where the policy allows it: ladder hides each forward g behind
the next sublayer, async input-gradient all-reduce hides each backward f behind its wgrad GEMM;
hidden = min(t_ar, that compute).

A question about training is priced as the trainer runs its step, compiled with CUDA graphs (TRAINER_MODE); prefill
and decode as CUDA graphs of eager kernels. Everything this module prints is modeled unless a row says measured.
Commands (repository root):
    python -m bench.step_model --size xl --tp 8 --policy grouped:4 --device H100   # one question
    python -m bench.step_model --validate        # every stored tp>=2 row: predicted / measured
    python -m bench.step_model --pareto          # loss gap against modeled time, and the 70B table
    python -m bench.step_model calibrate --device cuda   # per-sublayer times on this GPU
"""
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import time

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.step_model ...")
from model.sync_policy import parse_sync_policy  # noqa: E402
from training.cli import guarded, positive_int  # noqa: E402
from training.config import REPO, HelpFormatter, OneLineArgumentParser, save_figure, write_text  # noqa: E402

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
MODELED_TPS = (1, 2, 4, 8)  # the tp the all-reduce laws cover (measured at 2 and 4, extrapolated to 8)
# workload: batch, tokens per sequence in this call, attention context, backward?, optimizer?
WORKLOADS = {"prefill_b1": (1, 1024, 1024, False, False), "prefill_b8": (8, 1024, 1024, False, False),
             "decode_b1": (1, 1, 1024, False, False), "decode_b8": (8, 1, 1024, False, False),
             "train_b8": (8, 1024, 1024, True, False), "train_b12": (12, 1024, 1024, True, True)}
GRAPH_MODES = {"graph", "compiled+graph", "compiled-graphs"}  # device-bound: the model's targets
# The trainer's step runs compiled with CUDA graphs (train_reduced_sync.py's compile='auto', bench.train_throughput's
# compiled-graphs rows): a question about it is priced by that mode's families, where the rows of train_b12 were
# validated. The eager kernels that `calibrate` times price it a third slower at 124m tp=2 (30.5 ms against 23.0
# modeled compiled and 23.2 measured on 2x H100: bench/results/ladder_compiled_overlap/tt_after/).
TRAINER_MODE = "compiled-graphs"


def answer_mode(workload):
    """The mode a question about `workload` is priced in: the trainer's for its step, CUDA graphs of eager kernels
    (bench.tp_latency's 'graph') for prefill and decode."""
    return TRAINER_MODE if workload == "train_b12" else "graph"


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
    eb = 4 if train else db  # the stream, LayerNorm and residual adds are fp32 under training's bf16 autocast
    fwd = {
        "layernorm": (0, 2 * 2 * N * C * eb, 2),
        "attention": (2 * N * C * 3 * Ct + 4 * attn_pairs * Ct + 2 * N * Ct * C,
                      (3 * C * Ct + Ct * C) * db + (N * C + 4 * N * Ct + N * C) * db + 2 * b * ctx * Ct * db,
                      4 + (2 if T == 1 else 0)),  # qkv, sdpa, proj, bias; decode: 2 KV-cache writes
        "mlp": (2 * N * C * 4 * Ct * 2, 2 * 4 * C * Ct * db + (N * C + 3 * 4 * N * Ct + N * C) * db, 3),
        "residual": (0, 2 * 3 * N * C * eb, 2),
    }
    per_step = {k: (f * L, by * L, n * L) for k, (f, by, n) in fwd.items()}
    n_head_rows = N if train else b  # inference: logits of the last position only
    per_step["embedding"] = (0, 3 * N * C * 4, 2)
    per_step["head+ce"] = (2 * n_head_rows * C * Vt, Vt * C * db + n_head_rows * Vt * (4 * 3 if train else db),
                           3 if train else 1)
    if train:  # backward: GEMMs and attention about twice the forward, elementwise likewise
        per_step = {k: (3 * f, 3 * by, 3 * n) for k, (f, by, n) in per_step.items()}
    if train and tp > 1:  # model/tp_layers.py's vocab-parallel CE beyond the fused CE counted above (36 B a logit):
        # forward the fp32 copy (6 B), max (4), subtract (8), exp (8), sum (4); backward exp's (8), the gather's
        # zeros (4), the two gradients' sum (12), the cast back (6): 60 B a logit of this rank's [N, V/tp]
        per_step["vocab-parallel ce"] = (0, (60 - 36) * N * Vt, 8)
    if opt:  # fused AdamW + grad-norm over fp32 params: read p, g, m, v, write p, m, v; bf16 weight casts
        params = L * 12 * C * Ct + V * C / tp + 1024 * C + L * 4 * C
        per_step["optimizer"] = (0, params * (7 * 4 + 4 + 6), 12)
    return per_step


def roofline(parts, device):
    d = DEVICES[device]
    return {k: n * LAT + max(f / d["flops"], by / d["hbm"]) for k, (f, by, n) in parts.items()}


STREAM_WIDTH = 768  # the width at which an extra stream's latency-bound part is one launch (GPT-2 124M's)


def stream_pass(size, workload, k, device, q=1.0, share=1.0):
    """u(k) before scaling: one pass over a residual stream of the step's tokens plus a launch's latency per
    STREAM_WIDTH channels, times (1 - q) * share + q * (k - 1). The latency-bound part grows with the width C: with a
    width-free launch, the tp=1 fits' diverged-reads coefficient in decode_b1 (of the two-count streams term before
    tracks_features counted three) was 2.05, 2.80, 3.28 at 124m, medium and large on H100 (per unit C: 2.67, 2.73,
    2.56 x 1e-3); a size that borrows its streams (pooled_streams) takes them per channel.
    Having tracks at all costs a part that is the rank's work, which shrinks with its
    share of tp=1's work (share: thinner batched GEMMs, their launches); each stream beyond the first costs a part q
    that every rank repeats, since a track's stream is full width (model/gpt.py, "Regions"). q (fit_replicated) is
    that part's fraction at k = 2, so u(2) at tp=1 is one pass at any q. Used at k >= 2 only: at k = 1 a region runs
    a Megatron sublayer's kernels, and what it runs beyond them is counted by policy_ops."""
    L, H, C, V = shape_of(size)[1]
    b, T, ctx, train, opt = WORKLOADS[workload]
    one = C * (LAT / STREAM_WIDTH + b * T * 4 / DEVICES[device]["hbm"]) * (3 if train else 1)
    return one * ((1 - q) * share + q * (k - 1))


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


def collectives(policy_spec, n_layer, n_embd, batch, tokens, tp, train, compute_bytes=2, entry_bytes=None):
    """[(kind, phase, bytes)] of one step, as parallel/comm.py counts them (kinds tp_fwd, tp_bwd,
    tp_grad, vocab). The vocabulary ones and tp_grad exist only at tp > 1 (at tp=1 the model calls
    F.embedding / F.cross_entropy and sums no partial gradients). entry_bytes: per element of a region
    entry's gradient, compute_bytes unless given (240c34d; the code before it sent the fp32 stream's, 4)."""
    pol, steps = plan(policy_spec, n_layer)
    N, C = batch * tokens, n_embd
    entry_bytes = compute_bytes if entry_bytes is None else entry_bytes
    out = [("tp_fwd", "fwd", N * C * compute_bytes) for s in steps if s[1]]
    if train:
        out += [("tp_bwd", "bwd", N * C * compute_bytes) for s in steps if s[0]]
        out += [("tp_bwd", "bwd", N * C * entry_bytes) for s in steps if s[4]]
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


# Public all-reduce figures, cited (not measured here): nccl-tests' bus bandwidth (busbw = algbw * 2(n-1)/n, the
# bw of this model's formula) at large sizes on one 8xH100 SXM5 NVLink node. No public small-message latency
# figure for 8xH100 was found, so the bound keeps alpha at the tp=4 fit.
PUBLIC_BUSBW = dict(GBps=(460.0, 480.0), what="nccl-tests all_reduce_perf busbw at large sizes, 8xH100 SXM5 NVLink",
                    url="https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests",
                    definition="https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md")


def comm_params(tp, fit):
    """(alpha us, bw GB/s) at tp: the fit's own entry (fit['by_tp'][str(tp)]) where it has one, else the ring law
    from tp=2 alone: alpha(2) (tp - 1), bw(2)."""
    e = fit.get("by_tp", {}).get(str(tp))
    if e:
        return e["alpha_us"], e["bw_GBps"]
    return fit["alpha_us"] * (tp - 1), fit["bw_GBps"]


def allreduce_ms(nbytes, tp, fit):
    if tp == 1:
        return 0.0
    alpha_us, bw = comm_params(tp, fit)
    for r in fit.get("by_tp", {}).get(str(tp), {}).get("regimes", ()):  # a measured sweep's law, where stored
        if r["max_bytes"] is None or nbytes <= r["max_bytes"]:
            alpha_us, bw = r["alpha_us"], r["bw_GBps"]
            break
    return alpha_us * 1e-3 + 2 * (tp - 1) / tp * nbytes / (bw * 1e9) * 1e3


def sweep_regimes(rows, tp, min_points=3):
    """A two-regime law from a measured all-reduce sweep (bench/allreduce_sweep.py rows: bytes, median us): NCCL
    changes protocol with the message size, so below a change point t = alpha_1 + f b / bw_1 and above it
    t = alpha_2 + f b / bw_2 (f = 2(tp-1)/tp). The change point is the size, between two measured ones, that
    minimizes the summed squared relative error, each side fitted by fit_comm_rows (one all-reduce per point) with
    >= min_points sizes; a cut whose side shows no positive bandwidth (flat latency-bound sizes) is not a candidate.
    Returns [{max_bytes, alpha_us, bw_GBps}, {max_bytes: None, ...}], smallest messages first."""
    f = 2 * (tp - 1) / tp
    pts = sorted((f * r["bytes"], r["us"]) for r in rows)
    if len(pts) < 2 * min_points:
        raise ValueError(f"{len(pts)} sizes: a two-regime law needs {2 * min_points} or more")

    def sse(part):
        a, bw = fit_comm_rows([(1, b, t / 1e3, None) for b, t in part])  # us -> ms, as its rows are
        return sum(((a + b / bw / 1e3) / t - 1) ** 2 for b, t in part), a, bw
    best = None
    for i in range(min_points, len(pts) - min_points + 1):
        try:
            (e1, a1, bw1), (e2, a2, bw2) = sse(pts[:i]), sse(pts[i:])
        except ValueError:
            continue
        if best is None or e1 + e2 < best[0]:
            best = (e1 + e2, pts[i - 1][0] / f, a1, bw1, a2, bw2)
    if best is None:
        raise ValueError("no change point leaves a positive bandwidth on both sides")
    _, cut, a1, bw1, a2, bw2 = best
    return [dict(max_bytes=cut, alpha_us=a1, bw_GBps=bw1), dict(max_bytes=None, alpha_us=a2, bw_GBps=bw2)]


def load_sweeps():
    """{tp: [(rows, source, in_step, device), ...]} of the stored all-reduce sweeps, in the order a split takes the
    first whose device it keeps: bench/results/allreduce/'s own (at each tp the in-step sweep,
    allreduce_instep_gemm_n<tp>.json: what an all-reduce adds to a step, in_step True, where one is stored, else the
    back-to-back one, allreduce_sweep_n<tp>.json), then the in-step sweeps of other devices in its folders
    (instep_<device>/). device: the GPU it ran on (H100, H200)."""
    def read(path, in_step):
        with open(path) as fh:
            data = json.load(fh)
        return int(data["ranks"]), (data["rows"], f"{os.path.relpath(path, REPO)} ({data['device']})", in_step,
                                    device_name(data["device"]))
    out = {}
    for name, in_step in (("allreduce_sweep_n*.json", False), ("allreduce_instep_gemm_n*.json", True)):
        for path in sorted(glob.glob(os.path.join(RESULTS, "allreduce", name))):
            tp, entry = read(path, in_step)
            out[tp] = [entry]
    for path in sorted(glob.glob(os.path.join(RESULTS, "allreduce", "instep_*", "allreduce_instep_gemm_n*.json"))):
        tp, entry = read(path, True)
        if all(e[3] != entry[3] for e in out.get(tp, [])):
            out.setdefault(tp, []).append(entry)
    return out


def row_comm_points(rows, tp):
    """[(n all-reduces, sum of 2(tp-1)/tp * bytes over them, measured ms over the floor, row)] of the CUDA-graph
    rows at tp with a stored floor (the same policy with every collective skipped): the time the step's
    collectives add. Ladder is left out (its all-reduces run beside compute), and rows not above their floor."""
    pts = []
    for r in rows:
        if r["tp"] != tp or mode_class(r["mode"]) != "graph" or not r.get("floor_ms") or r["policy"] == "ladder":
            continue
        L, H, C, V = SHAPES[r["size"]]
        b, T, ctx, train, opt = WORKLOADS[r["workload"]]
        colls = collectives(r["policy"], L, C, b, T, tp, train, entry_bytes=2 if r["impl"] == "post-49" else 4)
        y = r["ms"] - r["floor_ms"]
        if y > 0:
            pts.append((len(colls), sum(2 * (tp - 1) / tp * by for *_, by in colls), y, r))
    return pts


def rows_regimes(pts, tp, min_points=3):
    """sweep_regimes of the rows' time over their floor (row_comm_points) as a sweep: per message size (each row's
    mean 2(tp-1)/tp-scaled bytes per all-reduce, back to bytes), the median over rows of their ms over the floor per
    all-reduce, in us. None where the rows measured fewer than 2 * min_points message sizes, or no change point fits."""
    f = 2 * (tp - 1) / tp
    by = {}
    for n, B, y, r in pts:
        by.setdefault(round(B / n / f), []).append(y / n * 1e3)
    if len(by) < 2 * min_points:
        return None
    try:
        return sweep_regimes([dict(bytes=b, us=statistics.median(us)) for b, us in sorted(by.items())], tp, min_points)
    except ValueError:
        return None


def fit_comm_rows(pts):
    """alpha (us), bw (GB/s) of  ms over floor = n * alpha + B / bw  (B: the summed 2(tp-1)/tp * bytes),
    minimizing the relative error (weights 1/y^2), alpha >= 0."""
    if len(pts) < 2:
        raise ValueError(f"{len(pts)} rows with a floor: too few to fit alpha and bw")
    w = [1 / y ** 2 for n, B, y, _ in pts]
    a11 = sum(wi * n * n for wi, (n, B, y, _) in zip(w, pts)); a22 = sum(wi * B * B for wi, (n, B, y, _) in zip(w, pts))
    a12 = sum(wi * n * B for wi, (n, B, y, _) in zip(w, pts))
    b1 = sum(wi * n * y for wi, (n, B, y, _) in zip(w, pts)); b2 = sum(wi * B * y for wi, (n, B, y, _) in zip(w, pts))
    det = a11 * a22 - a12 * a12
    alpha, beta = ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det) if det > 0 else (-1.0, 0.0)
    if alpha < 0:
        alpha, beta = 0.0, b2 / a22
    if beta <= 0:
        raise ValueError("the rows give no positive bandwidth")
    return alpha * 1e3, 1 / beta / 1e6  # ms -> us; bytes per ms -> GB/s


def comm_by_tp(a2, bw2, how2, on2, tp4=None):
    """alpha and bw per tp. tp=2 as given; tp=4 fitted (tp4 = (alpha, bw, how, fitted_on)) or, without tp=4 data,
    the ring law alpha(2) * 3 and bw(2); tp=8 extrapolated: alpha linear in tp - 1 through tp 2 and 4 (a ring's
    2(tp-1) dependent steps; slope >= 0), bw held at tp=4's (NVSwitch: bus bandwidth per GPU does not depend on tp)."""
    a4, bw4, how4, on4 = tp4 or (a2 * 3, bw2, "ring law from tp=2 (no tp=4 rows allowed): alpha(2) * 3, bw(2)", [])
    return {"2": dict(alpha_us=a2, bw_GBps=bw2, how=how2, fitted_on=on2),
            "4": dict(alpha_us=a4, bw_GBps=bw4, how=how4, fitted_on=on4),
            "8": dict(alpha_us=alpha_at_8(a2, a4), bw_GBps=bw4, fitted_on=[],
                      how="extrapolated: alpha(8) = alpha(4) + 4 * (alpha(4) - alpha(2)) / 2 (linear in tp - 1), "
                          "bw(8) = bw(4)")}


def alpha_at_8(a2, a4):
    """alpha(8) linear in tp - 1 through alpha(2) and alpha(4) (slope >= 0)."""
    return a4 + 4 * max(0.0, (a4 - a2) / 2)


def extrapolate_regimes(at2, at4):
    """tp=8's two-regime law from the measured ones at tp=2 and 4, regime by regime as comm_by_tp extrapolates one
    line: alpha linear in tp - 1 (slope >= 0), bw and the change point held at tp=4's. The change point grew from
    1.5 MiB at tp=2 to 3.25 MiB at tp=4 (bench/results/allreduce/); holding it prices 3.25-6.5 MiB messages at tp=8
    in the high regime, which the ratio of the two would not."""
    return [dict(max_bytes=r4["max_bytes"], bw_GBps=r4["bw_GBps"], alpha_us=alpha_at_8(r2["alpha_us"], r4["alpha_us"]))
            for r2, r4 in zip(at2, at4)]


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
# The stored rows' files, in one place: (glob under bench/results, format). Every file a glob matches is read
# (a path two globs match, once). A new file of rows joins the validation by landing where one of these matches
# (e.g. bench/results/<any folder>/tp_latency_*.json); what it feeds is decided per row, not per file
# (row_role): tp=1 rows feed the compute and tracks fits and are never scored; rows at tp >= 2 are scored, and
# only those of the code before issue 49's model change may feed a fit (alpha/bw at tp 4, and at tp=2 where the
# profiles' configuration is held out).
ROW_FILES = (("tp_latency_*.json", "tp_latency"),
             ("*/tp_latency_*.json", "tp_latency"),  # decode/, h100_tp2/, and any new folder of rows
             ("issue49/final/after/*_tp2.json", "tp_latency"),
             ("train_throughput*.json", "train_throughput"),
             ("*/train_throughput*.json", "train_throughput"),
             ("issue49/final/train_loop/tp2_124m*.json", "train_throughput"),
             ("issue49/bf16_regions/after/*_train_tp2.json", "tp_latency"),
             ("issue49/bf16_regions/after/train_throughput_*.json", "train_throughput"),
             ("issue50/prospective_*/tp_latency_*.json", "tp_latency"),
             ("issue50/prospective_*/train_throughput_*.json", "train_throughput"),
             ("ladder_compiled_overlap/tlc_after/tp_latency_*.json", "tp_latency"),
             ("ladder_compiled_overlap/*_after/train_throughput*.json", "train_throughput"))
# (commit, what changed in the model after its prospective rows were seen): their scores since are no longer prospective
PROSPECTIVE_REVISIONS = (
    ("d257300", "the streams term's growth with k, (k - 1)^gamma with gamma fitted to the tp=1 rows at k = 2 and 4 "
                "(fit_track_growth), where it had been linear in k - 1: d257300's model put medium's k = 4 floors on "
                "tp=2 at 3x k = 2's extra (saving worst 39.4 points, full fit); the rows at k = 2 and 4 of one tp=1 "
                "family had grown 0.8-1.7x (e03b4bc; 55cbbac replaced it, below)"),
    ("e03b4bc", "(after these rows and tp=1 rows at k = 3 and 6 on H100, bench/results/h100_tp1_k3_k6/) the streams "
                "term in two parts (stream_pass, fit_replicated): a part that shrinks with the rank's share of the work "
                "and a part q that every rank repeats per further track, linear in k - 1, with q per workload kind "
                "fitted to the tp=1 rows at k = 2 and k > 2; it replaces (k - 1)^gamma times the share. The tp=1 "
                "extra at k = 6 had carried to tp=2 at 0.94 where the share was 0.66"),
    ("f0dd202", "the streams term's per-layer part counts the layers that hold a region's sublayer (tracks_features), "
                "where it had counted every layer once any stream diverged: a selective set half baseline and half spd "
                "had been charged spd's per-layer cost at two tracks per GPU (saving error median 10.7, worst 30.0 "
                "points on its 15 rows at k = 2, full fit; 1.5 and 4.9 after). Every fitted policy (spd, grouped:4) "
                "has a region in every layer, so no fitted quantity moved"),
    ("f0dd202", "(1e1d05d, after every batch above) tp=2's all-reduces priced by an in-step sweep (what one adds to a "
                "CUDA graph, its message written by a GEMM: bench/results/allreduce/allreduce_instep_gemm_n2.json), "
                "where the profiles' alpha moved a back-to-back sweep; and GPT-2 large's tp=1 rows on H100 "
                "(bench/results/h100_tp1_large/), where H100's large family had borrowed medium's. Every batch's "
                "score above is the current model's"),
    ("1e1d05d", "the extra streams' pass (stream_pass) has its latency-bound part grow with the width, a launch per "
                "768 channels, where it was one launch at any width: the tp=1 fits' decode_b1 c_div had grown with C "
                "(2.05, 2.80, 3.28 at 124m, medium, large on H100). A family with its own rows fits the same "
                "prediction (the factor is one per family); a size that borrows (held out, or unmeasured: xl, 70b) "
                "takes its streams per channel. Held out by size, k <= 2: saving worst 11.7 -> 9.2 points, sign "
                "errors 3 -> 1"),
    ("1e1d05d", "(session of 57ee9e3, after leave one device out's sign errors were split at the floors) a split "
                "without an in-step sweep prices tp=2 by the kept rows' time over their floors per message size, with "
                "two regimes (rows_regimes), before the profiles' kernel times, which leave out what an all-reduce adds "
                "around its kernel and had no protocol jump (a 2 MiB all-reduce at 15.5 us where the sweep measured "
                "28.0). Only the split holding out H100 uses it: held out by device, k <= 2, time 6.5% / 16.1% / 29.1% "
                "-> 5.1% / 10.3% / 20.3%, saving 2.6 / 10.6 / 30.5 -> 2.1 / 8.8 / 25.8 points, sign errors 12 -> 7 of "
                "325; the full fit and leave one size out do not move"),
    ("000c2f1", "(after these rows' attention-only misses, with tp=1 rows of attention-only syncs measured for it: "
                "bench/results/h100_tp1_attn_only/) the streams term counts the regions entered and the attention and "
                "MLP sublayers that run per track (tracks_features), where it had counted diverged reads and region "
                "layers, which give attention-only syncs spd's values; c_mlp is fitted where a family ran attention-only "
                "syncs and tied to c_attn elsewhere by the ratio those families fitted (mlp_ratios). And each tp=1 row's "
                "extra is taken over its own run's baseline (run_baseline), where it had been over the family's pooled "
                "median. This batch, full fit: saving worst 19.4 -> 6.2 points; every current-code row at k <= 2, full "
                "fit: 19.4 -> 6.5; held out by size at k <= 2: 16.2 -> 10.6 (the H200 row, 9.2 before this batch)"),
    ("eb3dcda", "(after every batch above, seeing leave one size out's worst at one track per GPU: 124m prefill_b1 "
                "ladder, 8.1-8.3 points) ladder's hidden fraction per tp where the older code's rows measured that tp "
                "(fit_ladder_overlap, ladder_fraction): their tp=4 rows hide 0.81-1.1 of the hideable time, their tp=2 "
                "rows 0.2-1.0, and the pooled median had priced tp=2 with tp=4's. At k = 1, held out by size: saving "
                "worst 8.1 -> 7.7 points; full fit 6.5 -> 5.6. This batch has no ladder row and does not move"),
    ("55cbbac", "(after 043b28b, data rather than a model change) H100 tp=1 rows at the k of the batches past k = 2 "
                "(bench/results/h100_tp1_k4_k10/: medium at k = 4 and 8, large at 5 and 10), so that their families "
                "price their own k where they had carried k = 2's fit by q: the full fit's time worst over every k "
                "went from 20.8% to 12.1%, its saving worst from 63.6 to 25.9 points"),
    ("eb3dcda", "(session of 0104f33, after every batch above, seeing leave one device out's seven sign errors at k <= "
                "2) the policy's own work (counted passes and streams) priced on the device whose rows fitted the "
                "family and carried to another as the step's roofline carries (tracks_ms), where it had been priced "
                "at the row's datasheet HBM: H100's tp=1 extras ran 0.94-2.09x H200's (median 1.05) over 49 pairs "
                "measured on both, against the HBM ratio 1.43. Held out by device, k <= 2: time 5.1% / 10.6% / 20.0% "
                "-> 4.1% / 9.8% / 20.0%, saving 2.4 / 9.9 / 29.4 -> 2.3 / 7.2 / 17.4 points, sign errors 7 -> 3 of "
                "443; every k: saving worst 41.8 -> 76.0 points (H100 at k = 5-10, extrapolated from H200's tp=1 rows "
                "at k <= 4, now falls short as the full fit does past k = 4, where the HBM ratio had raised it). "
                "The full fit and leave one size out do not move"),
    ("e9b815e", "(data: the tp=1 rows measured beside these, bench/results/h200_tp1_train_b12/) the trainer's compiled "
                "step at tp=1, n_tracks 2 and 4 on H200, so that the train_b12 families fit their own streams term, "
                "where they had borrowed train_b8's fit of eager kernels in a graph: compiled, inductor fuses the "
                "streams' LayerNorm, residual add and cast, and 124m grouped:4 at n_tracks 2 costs 4.5 ms over "
                "baseline's 27.1 where eager it costs 16.6 over 35.6. This batch, full fit: time median 28.6% -> 1.7%, "
                "worst 33.8% -> 8.2%; saving median 19.7 -> 7.5 points, worst 20.2 -> 8.2 (missed). What is left is "
                "one way: the model gives the dropped all-reduces more than the compiled step saves, as on the stored "
                "compiled rows at one track per GPU (2-4 points there)"),
    ("e9b815e", "the in-step all-reduce sweep on 2x H200 (bench/results/allreduce/instep_h200/, by the ninth session's "
                "H200 script): 0.95-1.05x H100's at every size (median 1.00; 2 MiB 27.8 us against 28.0), so the "
                "full fit's tp=2 law, H100's, does not move. The split that holds out H100 now takes it (load_sweeps: "
                "the first sweep whose device a split keeps), where it took the H200 rows' time over their floors. "
                "Held out by device, k <= 2: saving 2.3 / 7.2 / 22.4 -> 2.1 / 6.4 / 22.4 points, sign errors 4 -> 4 "
                "of 460; k = 1: 2.1 / 5.3 / 7.6 -> 1.8 / 4.0 / 5.9, no sign error; every k: worst 76.0 -> 89.5"),
    ("6760e19", "(after these rows, seeing the compiled step's savings modeled 7.6-8.4 points high at two tracks per "
                "GPU and 2-5 at one, its baselines 6-8% slow) the counted passes cost nothing in a compiled family "
                "(fit_ops: c1 = 0; inductor fuses a Megatron sublayer's bias add and a region's extra add into the "
                "kernel beside them, as it fuses the vocab-parallel cross-entropy's passes), where they had been "
                "priced as eager kernels. The compiled 124m step's device timeline on H200 (ladder_compiled_train/) "
                "ran 16.03 ms of kernels other than all-reduces, modeled 16.70 with baseline's bias passes and 15.68 "
                "without. This batch, full fit: saving 7.9 / 8.4 / 8.4 -> 3.1 / 4.1 / 4.1 points; every current-code "
                "compiled training row's baseline modeled 0.99-1.03x its time (1.06-1.08x before); every "
                "current-code row at k <= 2, full fit: saving worst 8.4 -> 6.2 points. 1.5B tp=8 grouped:4 training: "
                "133.78 -> 89.57 ms (33%) became 123.49 -> 87.00 ms (30%)"),
    ("6760e19", "(data and a rule: bench/results/h100_tp1_train_b12/, the compiled step on one H100 at n_tracks 2, "
                "grouped:4 alone) a family whose current-code rows are of one policy shape takes the nearest "
                "multi-shape family's coefficients times the factor that reproduces its rows (one_shape, scale_to, "
                "resolve_streams), and a k whose rows are one shape scales the family's own fit to them; fitted "
                "apart, one policy had priced spd at -74% at medium tp=2 in analysis.plan. The H100 family takes "
                "H200's x 1.02. Held out by device, k <= 2: time worst 23.6% -> 20.0%, saving 2.1 / 6.6 / 29.1 -> "
                "2.1 / 6.1 / 17.0 points (the H200 compiled training rows at k = 2 now priced from H100's own "
                "compiled row, not train_b8's eager streams), sign errors 4 -> 4; the full fit and leave one size "
                "out do not move; 1.5B tp=8 grouped:4 training 123.49 -> 87.00 became 123.19 -> 86.70 ms (30%)"),
    ("6760e19", "(after every batch above) the width law's tp=1 rows (bench/results/h100_tp1_width/, measured in the "
                "ninth session to test it) feed the fits, and from k = 3 (WIDTH_LAW_MIN_K) a tp rank's streams take "
                "1/tp of one GPU's at n_tracks = tp k for their bytes (tracks_ms, latency_fraction), where they had "
                "been carried from tp=1 at k. Every k, full fit: saving worst 24.5 -> 16.3 points; held out by "
                "size: 48.2 -> 22.8; k <= 4: 7.5 -> 7.3, and k <= 2 does not move (fed at k = 2 too, its worst went "
                "to 9.3). What is left past k = 4 is prefill_b1, half launches, which the law overshoots (large "
                "grouped:4 at k = 10: -96% modeled against -80%)"),
    ("2b98aa0", "(after these rows) tp=4's all-reduces priced by the in-step sweep at 4 ranks measured in the same "
                "call (bench/results/allreduce/instep_h200/allreduce_instep_gemm_n4.json, apart from every row), as "
                "tp=2's are, where the older code's tp=4 rows' time over their floor had given 9.75 us + bytes at 341 "
                "GB/s (19.0 us for 2 MiB; the sweep: 27.6); tp=8 extrapolates each regime from the in-step laws at 2 "
                "and 4 (extrapolate_regimes). This batch, full fit: time 7.0% / 16.2% / 27.5% -> 4.9% / 10.2% / "
                "15.6%, saving 3.0 / 8.3 / 16.6 -> 2.0 / 4.4 / 6.9 points, sign errors 1 -> 0 of 90 (medium prefill_b1 "
                "grouped:4 at n_tracks 8: +13.0% measured, -3.6% modeled); held out by size: saving worst 17.0 -> "
                "7.1. 1.5B tp=8 grouped:4: training 123.19 -> 86.70 ms (30%) became 126.59 -> 87.18 (31%), decode_b1 "
                "32% became 35%"),
    ("845bb6f", "(data, planned before the call: bench/results/h100_tp1_train_b12/) the trainer's compiled step on one "
                "H100 with spd and grouped:4 at n_tracks 2 and 4 (124m) and at 2 (medium), so that H100's train_b12 "
                "families fit their own streams term, where they had scaled H200's to one grouped:4 row (one_shape). "
                "Before they fed it, the model gave their extras within 0.9 ms (124m n_tracks 4 grouped:4: +11.09 "
                "modeled, +12.00 measured; medium's baseline 70.38 against 72.54). No row of these batches moves; "
                "1.5B tp=8 grouped:4 training, now priced from medium's own H100 family, 126.59 -> 87.18 ms became "
                "129.06 -> 89.65 (31%). "
                "Not kept: the width law's tp=1 coefficients borrowed from the other device where a family has none at "
                "n_tracks = tp k (H200 has no tp=1 row past n_tracks 4): this batch's full-fit saving worst 35.8 -> "
                "11.8 points (17.6 scaled to the family's own fit), but the first tp=4 batch's 6.9 -> 8.6 (15.6)"),
    ("845bb6f", "(data: bench/results/h200_tp1_width/, H200's tp=1 rows at n_tracks 12, 16, 20, which H100's families had "
                "and H200's lacked) the width law reads H200's own rows at n_tracks = tp k: on these rows it held at "
                "0.89-1.05 in prefill_b8 and 0.93-1.03 in training (width_law_lines). This batch, full fit: saving "
                "2.7 / 5.8 / 35.8 -> 2.3 / 6.7 / 13.6 points (k = 4: 13.9 -> 6.9, k = 5: 35.8 -> 13.5); held out by "
                "size: worst 24.0 -> 19.8. The 124m rows at k = 3 moved the other way (their prefill_b8 floors ran "
                "0.89-1.00 of the law's): full-fit worst 5.7 -> 13.6 in this batch, 6.9 -> 12.0 in the first tp=4 "
                "batch. Large train_b8 at n_tracks 20 ran out of the H200's 140 GiB at tp=1, so that family still "
                "carries k = 4's fit"),
    ("1d4e68c", "(data, planned before the call: bench/results/h200_tp1_k3_k5/) H200's tp=1 rows at k = 3 (124m) and 5 "
                "(large), the k of the tp=4 rows whose H200 families had carried another k's fit, as H100's families "
                "had their own k = 3-10. Before they fed the fits, the model gave their extras over baseline within "
                "14% (large prefill_b8 grouped:4 at n_tracks 5: 27.71 ms modeled, 24.31 measured; 124m train_b8 spd "
                "at 3: 10.42 against 11.53). The first tp=4 batch, full fit: saving worst 12.0 -> 10.3 points; the "
                "second: 13.6 -> 11.5 (held out by size 19.8 -> 20.2); rows over 8 points in every current-code "
                "full-fit saving 15 -> 12. What is left at k = 3 is 124m prefill_b8's streams at tp=4, modeled "
                "1.11x the measured floor's extra (grouped:4: 3.04 ms against 2.75)"),
    ("1d4e68c", "(data, planned before the call: bench/results/h200_tp1_attn_only/) H200's tp=1 rows of attention-only "
                "syncs at n_tracks 2, the twins of H100's, so that the split holding H100 out fits c_mlp from H200's own "
                "rows, where it had no family with attention-only rows. Before they fed the fits the model gave their "
                "extras 0.67-1.15x the measured (medium decode_b1: 0.34 ms against 0.50). Held out by device at tp=2, "
                "k <= 2: saving worst 17.0 -> 10.5 points, sign errors 4 -> 3 of 460 (two are the H200 medium "
                "decode_b1 grouped:4 rows that leave one size out misses too); k = 1 does not move (5.8, none). The "
                "full fit and leave one size out move by a tenth of a point"),)
# Rows measured after the model that scores them was committed: out of sample by construction (issue 50). They
# enter no fit (feeds_fits), their tp=1 rows included, so every split scores them as rows it never saw. Each
# folder names the commit whose model was fixed when they ran; a later model revision is said in the validation.
PROSPECTIVE = (("issue50/prospective_d257300/*.json", "d257300",
                "2x H100 at d257300: medium at n_tracks 8 (k = 4 tracks per GPU, which no stored tp >= 2 row has), "
                "124m train_b8 at tp=2, and the medium training loop (train_b12, compiled with CUDA graphs)"),
               ("issue50/prospective_e03b4bc/*.json", "e03b4bc",
                "2x H100 after e03b4bc's revision: k = 3 and 6 tracks per GPU (124m at n_tracks 6 and 12) and k = 5 "
                "(large at n_tracks 10) on tp=2, which no stored row has (the rows record d257300, whose measured code "
                "e03b4bc did not change)"),
               ("issue50/prospective_55cbbac/*.json", "55cbbac",
                "2x H100 after 55cbbac's two-part streams term: k = 8 (medium at n_tracks 16, training too) and k = 10 "
                "(large at n_tracks 20, inference) on tp=2, past every tp=1 row's k (the rows record d257300, whose "
                "measured code 55cbbac did not change)"),
               ("ladder_compiled_overlap/*_after/*.json", "cac417c",
                "2x H100 after 57b00c9 let the compiled ladder overlap its all-reduces (the step model of cac417c, "
                "unchanged by it): 124m and medium at tp=2, one track per GPU, the training step compiled with CUDA graphs, and 124m "
                "compiled+graph prefill and decode (the rows record 6c0e2c5, the device copy's lagging git metadata)"),
               ("issue50/prospective_f0dd202/*.json", "f0dd202",
                "2x H100 after f0dd202 (large's tp=1 rows, the nearest size and the sizes' mean streams): policies no "
                "current-code row at tp >= 2 had (grouped:2, 3, 6, selective half baseline and half spd, ladder) at "
                "n_tracks 2 and 4 on tp=2, 124m, medium and large (the rows record 6c0e2c5, whose measured code "
                "f0dd202 did not change)"),
               ("issue50/prospective_1e1d05d/*.json", "1e1d05d",
                "2x H100 after 1e1d05d (the in-step all-reduce law, large's H100 tp=1 rows): the fewest syncs, "
                "grouped:12 at every size and one sync per forward (grouped:24 at medium, grouped:36 at large), and "
                "at 124m a selective set spd in its first half, at n_tracks 2 and 4 on tp=2 (the rows record 89b7bd0, "
                "the device copy's lagging git metadata; its measured code is 1e1d05d's)"),
               ("issue50/prospective_000c2f1/*.json", "000c2f1",
                "2x H100 after 000c2f1 (whose full fit and leave-one-size-out are a2a8e9f's): policy shapes no "
                "stored tp >= 2 row had, attention-only syncs at every size (selective:a0-<L-1>,m<L-1>), 124m spd "
                "keeping its first and last attention syncs, grouped:8 at medium, grouped:9 and 18 at large, at "
                "n_tracks 2 and 4 on tp=2 (the rows record 06b4f1a, the device copy's lagging git metadata; its "
                "measured code is 000c2f1's)"),
               ("issue50/prospective_eb3dcda/*.json", "eb3dcda",
                "2x H100 after eb3dcda (the streams term counting per-track attention and MLP sublayers): shapes no row "
                "had with MLPs per track, spd in the first half and attention-only in the second at every size, "
                "attention-only in the first half (large), every other MLP per track (124m), three of every four "
                "(medium), at n_tracks 2 and 4 on tp=2 (the rows record 06b4f1a, the device copy's lagging git "
                "metadata; its measured code is eb3dcda's)"),
               ("issue50/prospective_e9b815e/*.json", "e9b815e",
                "2x H200 (the call asked for H100s; the lender moved it) after e9b815e: the trainer's own step "
                "(train_b12, compiled with CUDA graphs) at two tracks per GPU, which no row of that workload had, "
                "124m and medium at tp=2, n_tracks 4 (the rows record 0104f33, the device copy's lagging git "
                "metadata; its measured code is e9b815e's)"),
               ("h200_medium_remeasure/*.json", "e9b815e",
                "2x H200 after e9b815e, by the script the ninth session committed for an H200 (s24.sh): medium's "
                "inference rows at tp=2, n_tracks 2 and 4, again, the configuration of the H200 row that every "
                "held-out split missed, and its tp=1 rows at n_tracks 1 and 2 (the rows record 0104f33)"),
               ("issue50/prospective_6760e19/*.json", "6760e19",
                "2x H200 again (the call asked for H100s) after 6760e19 fitted the compiled step's streams: 124m's "
                "compiled training step at tp=2, n_tracks 4, e9b815e's configuration measured again (the rows record "
                "0104f33)"),
               ("issue50/prospective_2b98aa0/*.json", "2b98aa0",
                "4x H200 (the call asked for H100s; the lender moved it) after 2b98aa0: the current code at tp=4, "
                "which no row had (every stored tp=4 row is the older code at one track per GPU), 124m at n_tracks 4 "
                "and 12, medium at 4 and 8, large at 4, baseline, ladder, spd, parallel, grouped:4, every workload "
                "(the rows record 2b98aa0)"),
               ("issue50/prospective_845bb6f/*.json", "845bb6f",
                "4x H200 again (the call asked for H100s) after 845bb6f priced tp=4 by the in-step sweep at 4 ranks: "
                "tp=4 policies and k the first tp=4 batch did not have, 124m grouped:2, 3, 6, 12 and a selective set "
                "(baseline then spd) at n_tracks 4 and 12, medium spd, grouped:8, 24 at 4 and 16 (k = 4), large spd, "
                "grouped:4, 36 at 4 and 20 (k = 5) (the rows record 2b98aa0, the device copy's lagging git metadata; "
                "its measured code is 845bb6f's)"),
               ("issue50/prospective_567dd68/*.json", "567dd68",
                "4x H200 (the call asked for H100s) after 567dd68: the trainer's own step (train_b12, compiled with "
                "CUDA graphs, AdamW) at tp=4, one track per GPU, which no row of that step had: baseline, spd and "
                "grouped:4 at 124m, baseline and spd at medium, baseline at large (the call's budget ran out before "
                "the rest; the rows record 2b98aa0, the device copy's lagging git metadata)"),
               ("issue50/prospective_1d4e68c/*.json", "1d4e68c",
                "4x H200 (two calls asked for H100s) after 1d4e68c: the trainer's own step at tp=4 that "
                "prospective_567dd68 ran out of budget for, baseline, spd and grouped:4 at medium, and at large "
                "baseline with spd (the first call's grouped:4 timed out compiling) and baseline with grouped:4 (a "
                "second call), each against its own run's baseline (the rows record 1d4e68c)"))
# tp=1 rows at n_tracks = tp * k (bench/results/h100_tp1_width/, h200_tp1_width/) were measured to test the width law
# (width_law_lines) before any term used it; the test is in bench/results/h100_tp1_width/README.md. Since the session
# of 968d560 they feed the fits, and tracks_ms prices a rank's stream bytes by the law from k = WIDTH_LAW_MIN_K on: on
# H100 at tp=2 the law held at k = 6-10 (0.98-1.04) and the stored pairs at k = 3-5 run 0.98-1.10, where 124m at k = 2
# ran 0.87 (fed at k = 2 too, the k <= 2 full fit's saving worst went from 6.2 to 9.3 points).
WIDTH_LAW_MIN_K = 3
# Row files that no glob above reads, and why (printed in the validation table, so that none is dropped unsaid).
SKIPPED_ROW_FILES = (
    ("issue49/final/before/*.json", "the code of dcba9e8 (before issue 49's model change) run from a git archive "
     "inside a d71e3f7 checkout, so the commit in its meta is not the code it ran; final/after holds the same "
     "configurations on the current code"),
    ("issue49/before/*.json", "the same configurations as issue49/final/before, an earlier call"),
    ("issue49/after/*.json", "an intermediate model (d961aa1: streams carried whole, the sync biases not yet one "
     "matmul), recorded as dcba9e8; superseded by issue49/final/after"),
    ("issue49/bf16_regions/before/*.json", "the same configurations as issue49/bf16_regions/after, on 1bdb054's "
     "regions (fp32 all-reduces): a git archive run in the session of 240c34d"),
    ("issue49/compiled_floors/*.json", "compiled+graph prefill and decode rows at 1bdb054, read as issue 49's floors; "
     "their configurations' graph rows are in h100_tp2_large and h100_tp2_current"),
    ("issue49/final/train_loop/tp2_medium.json", "batch 8 with the optimizer step: no workload of this model "
     "(train_b8 has no optimizer, train_b12 is batch 12)"),
    ("ladder_compiled_train/train_throughput.json", "the compiled ladder before 57b00c9, whose traced all-reduce "
     "blocked (no overlap: timeline_h200/); ladder_compiled_overlap/ measures the same step on the current code"))
# The implementation a row measured. Issue 49 changed what each policy computes at one track per GPU
# (model/gpt.py, "Regions": a track's stream carried whole, the regions' sync biases in one matmul); its final
# measurements ran at d71e3f7 (bench/results/issue49/README.md), and every commit from there on has that model.
# The commits the stored rows recorded before it, so that telling them apart needs no git history (a shallow
# clone); any other commit is placed by `git merge-base --is-ancestor`.
POST49_COMMIT = "d71e3f7"
PRE49_COMMITS = ("not recorded", "099cb48", "76e2b85", "2a47e6f", "2825bf8", "e74a26b", "6be8fc9", "57049e6",
                 "dcba9e8")  # "not recorded": the tp=4 rows, older than tp_latency's commit field


# 240c34d made a region's all-reduces move bf16 under autocast: its entry f had sent the fp32 stream's gradient and,
# on CUDA, spd's sum over k tracks went to g in fp32 (bench/results/issue49/bf16_regions/). The model prices the
# current code's (collectives()), so a training row at tp >= 2 measured before it ran another implementation: 'fp32-regions'
# (the run's baseline and ladder rows too, which that commit leaves alone, so that each saving pairs within the run).
BF16_REGIONS_COMMIT = "240c34d"
FP32_REGIONS_COMMITS = ("d71e3f7", "cec91f0", "a12a466", "1bdb054")  # the stored rows' commits before it


def descends(commit, base):
    """Whether `commit` is `base` or a descendant of it (git merge-base --is-ancestor)."""
    if commit == base:
        return True
    run = subprocess.run(["git", "merge-base", "--is-ancestor", base, commit], cwd=REPO, capture_output=True, text=True)
    if run.returncode in (0, 1):
        return run.returncode == 0
    raise ValueError(f"commit {commit!r} of a stored row is not in this clone's history, so which implementation it "
                     f"measured cannot be told: {run.stderr.strip()}")


def implementation(commit):
    """'post-49' where the commit has issue 49's model (POST49_COMMIT or a descendant), else 'pre-49'."""
    if commit in PRE49_COMMITS:
        return "pre-49"
    return "post-49" if descends(commit, POST49_COMMIT) else "pre-49"


def row_implementation(row, code):
    """code (implementation() of the row's commit), or 'fp32-regions' for a training row at tp >= 2 of the post-49
    code before BF16_REGIONS_COMMIT."""
    if code != "post-49" or row["tp"] < 2 or not row["workload"].startswith("train"):
        return code
    if row["commit"] in FP32_REGIONS_COMMITS or not descends(row["commit"], BF16_REGIONS_COMMIT):
        return "fp32-regions"
    return code


def row_files():
    """[(path, format)] of every stored row file ROW_FILES names, each once, sorted."""
    seen = {}
    for pattern, fmt in ROW_FILES:
        for path in glob.glob(os.path.join(RESULTS, pattern)):
            seen.setdefault(os.path.normpath(path), fmt)
    skipped = {os.path.normpath(p) for pattern, _ in SKIPPED_ROW_FILES for p in glob.glob(os.path.join(RESULTS, pattern))}
    return sorted((p, f) for p, f in seen.items() if p not in skipped)


def tp_latency_rows(d, source):
    m = d["meta"]
    floors = {(r["size"], r["n_tracks"], r["policy"], r["workload"], r["mode"]): r["ms"] for r in d["rows"] if r["floor"]}
    for r in d["rows"]:
        if r["floor"] or r["n_tracks"] == "-":  # torch_tp and the plain model: not ours
            continue
        key = (r["size"], r["n_tracks"], r["policy"], r["workload"], r["mode"])
        yield dict(size=r["size"], workload=r["workload"], mode=r["mode"], tp=m["tp"], n_tracks=int(r["n_tracks"]),
                   policy=r["policy"], ms=r["ms"], floor_ms=floors.get(key), device=m["device"],
                   commit=m.get("commit") or "not recorded", source=source)


def train_throughput_rows(d, source):
    """The trainer's step (bf16 autocast, AdamW): workload train_b12 at batch 12 x 1024; the asynchronous
    input-gradient all-reduce's rows are left out (the model's point is the default, off) and so is a model
    without biases (the model's shapes have them)."""
    m = d["meta"]
    if (m.get("batch_size", 12), m.get("seq_len", 1024)) != (12, 1024) or m.get("bias") is False:
        return
    for r in d["rows"]:
        if r["impl"] != "ours" or r["dp"] != 1 or r.get("error") or r.get("async_grad") == "on":
            continue
        yield dict(size=m.get("size", "124m"), workload="train_b12", mode=r["mode"], tp=r["tp"],
                   n_tracks=int(r["n_tracks"]), policy=r["policy"], ms=r["ms"], floor_ms=None, device=m["device"],
                   commit=m.get("commit") or "not recorded", source=source)


def stored_rows():
    """Every stored row of the files ROW_FILES names, as dicts with size, workload, mode, tp, n_tracks, policy, ms,
    floor_ms (tp_latency only), device, commit, impl (implementation()), source, prospective (for
    a PROSPECTIVE file's row: its folder's pattern, else None)."""
    rows, impl = [], {}
    prospective = {os.path.normpath(p): pattern for pattern, commit, _ in PROSPECTIVE
                   for p in glob.glob(os.path.join(RESULTS, pattern))}
    for path, fmt in row_files():
        with open(path) as f:
            d = json.load(f)
        parse = tp_latency_rows if fmt == "tp_latency" else train_throughput_rows
        rows += [dict(r, prospective=prospective.get(path)) for r in parse(d, os.path.relpath(path, REPO))]
    for r in rows:
        r["device"] = device_name(r["device"])
        if r["commit"] not in impl:
            impl[r["commit"]] = implementation(r["commit"])
        r["impl"] = row_implementation(r, impl[r["commit"]])
    return rows


def feeds_fits(row):
    """Whether a row may enter a fit: tp=1 rows (compute, tracks, the overhead per kernel), and rows at tp >= 2 of
    the code before issue 49 (alpha/bw). Rows at tp >= 2 of the current code are held out from every fit, and so is
    every row of a PROSPECTIVE file."""
    return not row.get("prospective") and (row["tp"] == 1 or row["impl"] == "pre-49")


def device_name(text):
    for name in DEVICES:
        if name in text:
            return name
    raise ValueError(f"device {text!r} has no datasheet entry; allowed: {', '.join(DEVICES)}")


def mode_class(mode):
    """graph: CUDA graphs (device-bound); eager and compiled without graphs are host-bound at tp>1."""
    return "graph" if mode in GRAPH_MODES else mode


def tracks_features(policy_spec, n_layer):
    """(n_entry, n_attn, n_mlp) where some stream diverges, else zeros: the regions entered from a synced stream, and
    the attention and the MLP sublayers that run per track (model/gpt.py, "Regions"). The per-track sublayers are
    counted by kind because attention-only syncs (every MLP per track) and spd (every attention per track) have as
    many regions and diverged reads, yet at tp=1, k = 2 on H100 the first's extra is 1.8-2.7x the second's in decode
    and 0.71-0.83x in prefill_b8 and training (bench/results/h100_tp1_attn_only/)."""
    pol, steps = plan(policy_spec, n_layer)
    if not any(step[3] for step in steps):
        return 0, 0, 0
    return (sum(step[4] for step in steps), sum(step[2] for step in steps[0::2]), sum(step[2] for step in steps[1::2]))


def policy_ops(policy_spec, n_layer, workload, tp):
    """Elementwise passes over the [N, C] stream that the policy's forward runs beyond a Megatron layer's two
    residual adds, counted by model/gpt.py's rules at any k (its "Regions" and Block.region_sublayer): a region whose
    one per-track sublayer's output the stream holds (spd) adds it to the synced sum (+1); a region of several
    per-track sublayers sends sum_t (s_t - xin) (+2: the subtraction and its add); parallel's sum of its two
    outputs replaces the add it saves (0). In training at tp > 1 a Megatron sublayer adds its bias after the
    all-reduce (+1 each; Block.bias_into_partial), where a region's GEMM adds it. Backward passes are not counted:
    an add's gradient is routed to its inputs."""
    pol, steps = plan(policy_spec, n_layer)
    train, ops, n_per_track = WORKLOADS[workload][3], 0, 0
    for megatron, sync, per_track, reads_div, entry in steps:
        if megatron:
            ops += train and tp > 1
            continue
        n_per_track += per_track
        if sync:
            ops += min(n_per_track, 2)
            n_per_track = 0
    return ops


def op_pass(size, workload, device):
    """One elementwise pass over the step's stream before scaling, in s: read two [N, C], write one (fp32 in
    training under autocast, bf16 in inference, as bench.tp_latency runs them), plus a kernel's latency."""
    L, H, C, V = shape_of(size)[1]
    b, T, ctx, train, opt = WORKLOADS[workload]
    return LAT + 3 * b * T * C * (4 if train else 2) / DEVICES[device]["hbm"]


def run_baseline(rs, r, base_ms):
    """The baseline ms a row's extra is taken over: the median of the baseline rows of its own run (source), n_tracks
    and code, as a saving pairs them; the family's base_ms where its run has none. Two runs of one configuration
    differ by 6% in baseline (medium prefill_b8 at n_tracks 2 on H100: 12.15 and 11.48 ms), which a pooled baseline
    would put into every policy's extra."""
    same = [x["ms"] for x in rs if x["policy"] == "baseline" and (x["source"], x["n_tracks"], x["impl"]) == (
        r["source"], r["n_tracks"], r["impl"])]
    return statistics.median(same) if same else base_ms


def streams_points(rs, base_ms, s, c1, device, q=1.0):
    """The streams term's data in one family's rows: (rows, code, A, y), the k >= 2 rows of the current code where
    the family has any (else the older code's), each row's u(k) * (n_entry, n_attn, n_mlp) (tracks_features) and its
    time over its run's baseline less the policy's counted passes."""
    size, workload = rs[0]["size"], rs[0]["workload"]
    L = SHAPES[size][0]
    many = [r for r in rs if r["n_tracks"] > 1 and r["policy"] not in ("baseline", "ladder")]
    impl = "post-49" if any(r["impl"] == "post-49" for r in many) else "pre-49"
    many = [r for r in many if r["impl"] == impl]
    A, y = [], []
    for r in many:
        u = s * stream_pass(size, workload, r["n_tracks"], device, q) * 1e3
        A.append(tuple(u * n for n in tracks_features(r["policy"], L)))
        y.append(r["ms"] - run_baseline(rs, r, base_ms)
                 - c1 * s * policy_ops(r["policy"], L, workload, 1) * op_pass(size, workload, device) * 1e3)
    return many, impl, A, y


def one_shape(A):
    """Whether the rows' feature vectors are all parallel (one policy shape, at any k): they fit one multiple of a
    coefficient vector, not the coefficients apart."""
    unit = {tuple(round(x / sum(a), 9) for x in a) for a in A if sum(a) > 0}
    return len(unit) < 2


def scale_to(c_streams, A, y, by_k=None, ks=None):
    """c_streams times the factor f >= 0 that fits the rows (A, y) best: f = sum(y x) / sum(x x), x = A . c, where a
    row at a k of by_k (ks: each row's k) takes by_k's coefficients, as tracks_ms prices it. Returns (c, f)."""
    cs = [(by_k or {}).get(k, c_streams) for k in (ks or [None] * len(A))]
    x = [sum(ai * ci for ai, ci in zip(a, c)) for a, c in zip(A, cs)]
    xx = sum(v * v for v in x)
    f = max(0.0, sum(v * w for v, w in zip(x, y)) / xx) if xx > 0 else 1.0
    return tuple(f * c for c in c_streams), f


def fit_streams(rs, base_ms, s, c1, device, q=1.0, mlp_ratio=None, points=None):
    """c_streams = (c_entry, c_attn, c_mlp) >= 0 of one family's k >= 2 rows (streams_points), least squares: their
    time over baseline less the policy's counted passes, against u(k) * (n_entry, n_attn, n_mlp). c_mlp is fitted only
    where a policy ran its MLPs per track without its attention (attention-only syncs): spd and grouped:G alone cannot
    tell it from c_attn, so elsewhere c_mlp = mlp_ratio * c_attn (mlp_ratios; 1 where none is given, which prices
    every spd, grouped:G and selective shape as the two-feature term before it did). Returns (c_streams, how, code:
    'post-49', 'pre-49' or None, whether c_mlp was fitted). points: streams_points of the same arguments, if the
    caller has them."""
    L = SHAPES[rs[0]["size"]][0]
    many, impl, A, y = points or streams_points(rs, base_ms, s, c1, device, q)
    if not many:  # no k >= 2 row: resolve_streams takes another family's
        return None, "no k >= 2 row", None, False
    mlp_alone = any(n_mlp > 0 and n_attn == 0 for _, n_attn, n_mlp in (tracks_features(r["policy"], L) for r in many))
    if mlp_alone:
        c = nonneg_lstsq(A, y)
    else:
        rho = 1.0 if mlp_ratio is None else mlp_ratio
        c_entry, c_attn = nonneg_lstsq([(a[0], a[1] + rho * a[2]) for a in A], y)
        c = (c_entry, c_attn, rho * c_attn)
    ks = sorted({r["n_tracks"] for r in many})
    srcs = ", ".join(sorted({r["source"] for r in many}))
    return c, f"{len(many)} rows of the {impl} code at k = {', '.join(map(str, ks))}: {srcs}", impl, mlp_alone


def mlp_ratios(tables):
    """{workload: c_mlp / c_attn}, the median over the families that fitted c_mlp on their own rows (fit_streams) with
    c_attn > 0; a workload none fitted takes its kind's (train, prefill, decode), and one whose kind has none is left
    out (1 in fit_streams)."""
    fitted = [e for t in tables.values() for e in t.values()
              if e.get("mlp_fitted") and e["c_streams"] is not None and e["c_streams"][1] > 0]
    ratio = lambda es: statistics.median(e["c_streams"][2] / e["c_streams"][1] for e in es)
    out = {}
    for w in WORKLOADS:
        same = [e for e in fitted if e["workload"] == w] or [e for e in fitted if e["workload"].split("_")[0] == w.split("_")[0]]
        if same:
            out[w] = ratio(same)
    return out


def fit_replicated(rows):
    """q of stream_pass per workload kind (train, prefill, decode): the fraction of the streams' extra at k = 2 that
    grows with each further track, from the current code's tp=1 rows that feed fits. Where one (device, size,
    workload, mode, policy) was measured at n_tracks 2 and at a k > 2, and k = 2's time over baseline is over 5% of
    it, R = extra(k) / extra(2) = (1 - q) + q (k - 1): q = sum (R - 1)(k - 2) / sum (k - 2)^2 over the kind's pairs,
    in [0, 1]. A kind without pairs takes every kind's; 1 (all of it per track, linear in k - 1) where none has any.
    Returns dict(q={kind: q}, n, how)."""
    ms = {}
    for r in rows:
        if r["tp"] == 1 and r["impl"] == "post-49" and feeds_fits(r) and r["workload"] in WORKLOADS:
            ms.setdefault((r["device"], r["size"], r["workload"], r["mode"], r["n_tracks"], r["policy"]), []).append(r["ms"])
    med = lambda key: statistics.median(ms[key]) if key in ms else None
    pairs = []
    for (device, size, workload, mode, k, policy) in sorted(ms):
        b2, bk = med((device, size, workload, mode, 2, "baseline")), med((device, size, workload, mode, k, "baseline"))
        p2, pk = med((device, size, workload, mode, 2, policy)), med((device, size, workload, mode, k, policy))
        if k > 2 and policy != "baseline" and None not in (b2, bk, p2) and p2 - b2 > 0.05 * b2:
            pairs.append((workload.split("_")[0], k, (pk - bk) / (p2 - b2), f"{size} {workload} {device} k={k}"))
    fit = lambda ps: min(1.0, max(0.0, sum((R - 1) * (k - 2) for _, k, R, _ in ps) / sum((k - 2) ** 2 for _, k, _, _ in ps)))
    if not pairs:
        return dict(q={kind: 1.0 for kind in ("train", "prefill", "decode")}, n=0,
                    how="no family measured at k = 2 and a k > 2: all of it per track")
    q = {kind: fit([p for p in pairs if p[0] == kind] or pairs) for kind in ("train", "prefill", "decode")}
    return dict(q=q, n=len(pairs), how=f"{len(pairs)} (family, policy) pairs of tp=1 rows at k = 2 and a k > 2 ("
                + ", ".join(sorted({p[3] for p in pairs})) + "): q " + ", ".join(f"{k} {v:.2f}" for k, v in q.items()))


def size_distance(a, b):
    """How far apart two shapes are, |log| of their ratio of per-layer-times-layers weights (L * C^2): a size no row
    measured, or one held out, borrows from the nearest measured size (the streams' coefficients and the compute
    scale vary with it: bench/results/h200_tp1_large/README.md)."""
    (La, _, Ca, _), (Lb, _, Cb, _) = shape_of(a)[1], shape_of(b)[1]
    return abs(math.log(La * Ca * Ca / (Lb * Cb * Cb)))


def resolve_streams(tables):
    """The streams coefficients each family uses, from the families' own fits (fit_streams, in the tables passed, so a
    held-out refit borrows only from what it kept): the family's own where they come from the current code's rows;
    else a family's fitted on the current code's rows, of the same workload kind (train, prefill, decode; the same
    workload first, then the same size, the nearest size (size_distance), its own device, its own mode), since the model describes the
    current code and issue 49 changed the kernels the tracks run; else its own older-code fit; else an older-code
    family's of the same workload; else 0. A family whose current-code rows are of one policy shape (shape_points)
    takes another's the same way, times the factor that fits its rows (scale_to). The coefficients multiply u(k),
    which is in the family's own scale, so they carry over between sizes, workloads of one kind, and devices. What
    was taken is said in streams_how."""
    fams = [e for t in tables.values() for e in t.values()]
    for e in fams:  # the own fits, before any family takes another's
        e.setdefault("own_streams", (e["c_streams"], e["streams_how"], e.get("streams_code")))
        e.setdefault("own_by_k", e.get("streams_by_k", {}))

    def rank(x, e):
        return (x["workload"] != e["workload"], x["size"] != e["size"],
                size_distance(x["size"], e["size"]), x["device"] != e["device"],
                x["mode"] != e["mode"])
    for e in fams:
        c_streams, how, code = e["own_streams"]
        by_k = e["own_by_k"]
        kind = e["workload"].split("_")[0]
        cur = [x for x in fams if x is not e and x["own_streams"][2] == "post-49" and not x.get("shape_points")
               and x["workload"].split("_")[0] == kind]
        if code == "post-49" and e.get("shape_points") and cur:  # one policy shape: another's, scaled to its rows
            src = min(cur, key=lambda x: rank(x, e))
            A, y, ks = e["shape_points"]
            c_streams, f = scale_to(src["own_streams"][0], A, y, src["own_by_k"], ks)
            by_k = {k: tuple(f * v for v in c) for k, c in src["own_by_k"].items()}
            how = (f"{src['size']} {src['workload']} {src['mode']} on {src['device']}'s coefficients x {f:.2f}, the "
                   f"factor that fits its own rows of one policy shape ({how})")
        elif code != "post-49":
            old = [x for x in fams if x is not e and x["own_streams"][2] == "pre-49" and x["workload"] == e["workload"]]
            src = min(cur, key=lambda x: rank(x, e)) if cur else None if code else min(old, key=lambda x: rank(x, e),
                                                                                      default=None)
            if src:
                c_streams, src_how, code = src["own_streams"]
                by_k = src["own_by_k"]
                how = (f"borrowed from {src['size']} {src['workload']} {src['mode']} on {src['device']} ({src_how})"
                       + (f"; its own, not used: {how}" if e["own_streams"][2] else ""))
            elif not code:
                c_streams, how, by_k = (0.0, 0.0, 0.0), "no k >= 2 row in any family: 0", {}
        e.update(c_streams=c_streams, streams_how=how, streams_code=code, streams_by_k=by_k)
    return tables


def fit_ops(rs, base_ms, s, device):
    """c1 of the counted passes (policy_ops): 0 in a compiled family, whose inductor fuses each pass into the add or
    GEMM epilogue beside it, as it fuses the vocab-parallel cross-entropy's (compute_of). The compiled 124m step at
    tp=2 ran 16.03 ms of kernels other than all-reduces on H200 (bench/results/ladder_compiled_train/README.md,
    the device timeline), where the model gives 16.70 with baseline's 24 bias passes and 15.68 without; with them the
    stored compiled rows' baselines were modeled 1.06-1.08x their time, 0.99-1.03x without. Else c1 is fitted
    (>= 0) to the family's tp=1 rows of the current code at one track (k = 1), where it has some with passes to
    count; else 1, the code's count, with no fit."""
    if rs[0]["mode"].startswith("compiled"):
        return 0.0, "0: compiled, inductor fuses each counted pass into the kernel beside it"
    size, workload = rs[0]["size"], rs[0]["workload"]
    L = SHAPES[size][0]
    pts = [(s * policy_ops(r["policy"], L, workload, 1) * op_pass(size, workload, device) * 1e3,
            r["ms"] - run_baseline(rs, r, base_ms))
           for r in rs if r["n_tracks"] == 1 and r["impl"] == "post-49"]
    pts = [(x, y) for x, y in pts if x > 0]
    if not pts:
        return 1.0, "1, the code's count (no tp=1 row of the current code at k = 1)"
    return max(0.0, sum(x * y for x, y in pts) / sum(x * x for x, y in pts)), f"fitted to {len(pts)} tp=1 rows at k = 1"


def calibrate_from_rows(rows, device, q=None, mlp_ratio=None):
    """Per (size, workload, mode) family measured at tp=1 on `device` (rows that feed fits): the scale s (baseline
    rows, the current code's where there are some), the coefficient c1 of the policy's counted passes (fit_ops) and
    the streams coefficients c_streams of k >= 2 (fit_streams), against u(k) at q, {workload kind: q} of
    fit_replicated (1 where not given), with c_mlp tied to c_attn by {workload: ratio} of mlp_ratios where the
    family's rows cannot fit it."""
    fams = {}
    for r in rows:
        if r["tp"] == 1 and r["device"] == device and r["workload"] in WORKLOADS and feeds_fits(r):
            fams.setdefault((r["size"], r["workload"], r["mode"]), []).append(r)
    table = {}
    for (size, workload, mode), rs in sorted(fams.items()):
        base = [r for r in rs if r["policy"] in ("baseline", "ladder")]
        if not base:
            continue
        base_ms = statistics.median(r["ms"] for r in ([r for r in base if r["impl"] == "post-49"] or base))
        roof = roofline(sublayers(size, workload, 1), device)
        s = base_ms / (sum(roof.values()) * 1e3)  # dimensionless: measured / roofline
        c1, c1_how = fit_ops(rs, base_ms, s, device)
        qk = (q or {}).get(workload.split("_")[0], 1.0)
        rho = (mlp_ratio or {}).get(workload)
        pts = streams_points(rs, base_ms, s, c1, device, qk)
        c_streams, streams_how, streams_code, mlp_fitted = fit_streams(rs, base_ms, s, c1, device, qk, rho, pts)
        many, _, A, y = pts
        # rows of one policy shape cannot fit the coefficients apart: resolve_streams scales another family's to them
        shape_points = (A, y, [r["n_tracks"] for r in many]) if streams_code == "post-49" and one_shape(A) else None
        # where the family measured a k, that k's rows alone (exact at the k it measured; the fit over every k scaled
        # to them where they are one shape); other k take the fit over every k, carried by u(k)'s two parts
        # (stream_pass, q of fit_replicated)
        by_k = {}
        for k in sorted({r["n_tracks"] for r in rs if r["n_tracks"] > 1}):
            at_k = [r for r in rs if r["n_tracks"] in (1, k)]
            pts_k = streams_points(at_k, base_ms, s, c1, device, qk)
            ck, _, ck_code, _ = fit_streams(at_k, base_ms, s, c1, device, qk, rho, pts_k)
            if ck_code == streams_code and ck is not None:
                by_k[k] = scale_to(c_streams, *pts_k[2:])[0] if one_shape(pts_k[2]) and not shape_points else ck
        table[f"{size}|{workload}|{mode}"] = dict(
            size=size, workload=workload, mode=mode, device=device, scale=s, base_ms=base_ms, c1=c1, c1_how=c1_how,
            c_streams=c_streams, mlp_fitted=mlp_fitted, streams_by_k=by_k, streams_how=streams_how,
            streams_code=streams_code, shape_points=shape_points, q=qk,
            n_rows=len(rs),
            streams_sources=sorted({r["source"] for r in rs if r["n_tracks"] > 1 and r["impl"] == streams_code}),
            commits=sorted({r["commit"] for r in rs}), sources=sorted({r["source"] for r in rs}),
            sublayers_ms={k: s * v * 1e3 for k, v in roof.items()},  # the split of base_ms
            how="scaled from stored one-GPU rows (whole-step time split by FLOPs and bytes)")
    return table


def nonneg_lstsq(A, y):
    """min |A c - y|^2 over c >= 0 for a few columns: the unconstrained solve on every subset of the columns (the
    rest held at 0), the best that is non-negative; all zeros where none is."""
    n = len(A[0])
    best, best_err = (0.0,) * n, sum(v * v for v in y)
    for mask in range(1, 2 ** n):
        cols = [j for j in range(n) if mask >> j & 1]
        G = [[sum(a[i] * a[j] for a in A) for j in cols] for i in cols]
        b = [sum(a[i] * v for a, v in zip(A, y)) for i in cols]
        sol = solve_small(G, b)
        if sol is None or any(x < 0 for x in sol):
            continue
        c = [0.0] * n
        for j, x in zip(cols, sol):
            c[j] = x
        err = sum((sum(ai * ci for ai, ci in zip(a, c)) - v) ** 2 for a, v in zip(A, y))
        if err < best_err:
            best, best_err = tuple(c), err
    return best


def solve_small(G, b):
    """x of G x = b by Gaussian elimination with partial pivoting, or None where G is (near) singular."""
    n = len(b)
    M = [list(row) + [v] for row, v in zip(G, b)]
    scale = max((abs(x) for row in G for x in row), default=0.0)
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(M[r][col]))
        if abs(M[piv][col]) <= 1e-12 * max(scale, 1e-30):
            return None
        M[col], M[piv] = M[piv], M[col]
        for r in range(n):
            if r != col:
                f = M[r][col] / M[col][col]
                M[r] = [x - f * z for x, z in zip(M[r], M[col])]
    return [M[i][n] / M[i][i] for i in range(n)]


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
    # a shape no row measured: the nearest measured size of this workload, scaled by FLOPs and bytes
    for s in sorted({e["size"] for e in table.values()}, key=lambda x: (size_distance(x, size), x)):
        for m in (mode, "graph", "compiled-graphs", "compiled", "eager"):
            e = table.get(f"{s}|{workload}|{m}")
            if e:
                return pooled_streams(table, e), f"scaled from {s} {m} (FLOPs and bytes)"
    raise ValueError(f"no tp=1 calibration for workload {workload!r}")


def pooled_streams(table, e):
    """e with the streams coefficients averaged over every size of its workload and mode that fitted its own on the
    current code (a size no row measured takes what the measured sizes share, not one neighbour's)."""
    same = [x for x in table.values() if (x["workload"], x["mode"]) == (e["workload"], e["mode"])
            and x.get("own_streams", (None, "", None))[2] == "post-49" and x["streams_code"] == "post-49"]
    if len(same) < 2:
        return e
    mean = lambda vs: sum(vs) / len(vs)
    ks = set.intersection(*(set(x["streams_by_k"]) for x in same))
    by_k = {k: tuple(mean([x["streams_by_k"][k][i] for x in same]) for i in range(3)) for k in ks}
    return dict(e, c_streams=tuple(mean([x["c_streams"][i] for x in same]) for i in range(3)), streams_by_k=by_k,
                streams_how=f"the mean of {', '.join(sorted(x['size'] for x in same))}'s fits")


# ------------------------------------------------------------------ the prediction
def kernel_count(size, workload, tp):
    return sum(n for f, by, n in sublayers(size, workload, tp).values())


def fit_overhead(rows, device):
    """The graph's time between kernels, per kernel (us), on `device`: over its tp=1 CUDA-graph baseline rows (rows
    that feed fits) of each (size, workload) that `calibrate` measured on the same device at tp=1, the whole step's
    time less the measured sublayers' kernel time and the roofline of the rest, over the step's kernel count; the
    median, >= 0. None where no such pair exists (then the device's predictions use the scaled split, which is
    fitted to whole steps and holds this time already)."""
    gaps, on = [], []
    # mode "graph" only: a compiled step runs inductor's fused kernels, not the eager sublayers `calibrate` timed, so
    # its time less their sum is no gap between them (124m train_b12 compiled-graphs on H200 gave -15 us per kernel)
    for size, workload in sorted({(r["size"], r["workload"]) for r in rows if r["tp"] == 1 and r["device"] == device
                                  and r["mode"] == "graph" and r["workload"] in WORKLOADS}):
        cal = measured_sublayers(device, size, workload, 1)
        base = [r["ms"] for r in rows if (r["size"], r["workload"], r["tp"], r["device"]) == (size, workload, 1, device)
                and r["mode"] == "graph" and r["policy"] == "baseline" and feeds_fits(r)]
        if not cal or not base:
            continue
        rest = sum(1e3 * t for name, t in roofline(sublayers(size, workload, 1), device).items() if name not in cal)
        gaps.append((statistics.median(base) - sum(cal.values()) - rest) / kernel_count(size, workload, 1) * 1e3)
        on.append([size, workload, device, 1])
    if not gaps:
        return None
    return dict(gap_us=max(0.0, statistics.median(gaps)), fitted_on=on, range_us=[min(gaps), max(gaps)],
                how=f"tp=1 CUDA-graph baseline rows less the measured sublayers, per kernel, median of {len(gaps)} "
                    f"(size, workload) pairs, which range {min(gaps):.2f} .. {max(gaps):.2f} us")


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


def step_roofline(size, workload, tp, device):
    """The roofline of one rank's step, in s: the sum over its sublayers."""
    return sum(roofline(sublayers(size, workload, tp), device).values())


def latency_fraction(workload, device):
    """The part of an extra stream's pass (stream_pass) that is launch latency rather than bytes."""
    b, T = WORKLOADS[workload][:2]
    lat, by = LAT / STREAM_WIDTH, b * T * 4 / DEVICES[device]["hbm"]
    return lat / (lat + by)


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


def fit_ladder_overlap(rows, tables, fit):
    """{workload: dict(h, n, by_tp={tp: dict(h, n)})}: the median, over the older code's CUDA-graph ladder rows at
    tp >= 2 that feed fits (ladder syncs every sublayer, as baseline, so issue 49's region change left its kernels
    alone), of its run's baseline time less its own over the time the model says it can hide (predict's
    ladder_hidden), in [0, 1]; over every tp and per tp, since a tp=4 ring hides more of it (0.81-1.1 on the stored
    rows) than tp=2 (0.2-1.0). Rows at tp >= 2 of the current code enter no fit, as everywhere."""
    base = {saving_config(r): r for r in rows if r["policy"] == "baseline"}
    out = {}
    for r in rows:
        b = base.get(saving_config(r))
        if (r["policy"] != "ladder" or r["tp"] < 2 or r["mode"] != "graph" or not feeds_fits(r) or b is None
                or r["workload"] not in WORKLOADS or r["device"] not in tables):
            continue
        p = predict(r["size"], r["workload"], r["tp"], "ladder", r["n_tracks"], r["device"], tables, fit, r["mode"],
                    measured={})
        if p["ladder_hidden"] > 0:
            out.setdefault(r["workload"], {}).setdefault(str(r["tp"]), []).append((b["ms"] - r["ms"]) / p["ladder_hidden"])
    fraction = lambda v: dict(h=min(1.0, max(0.0, statistics.median(v))), n=len(v))
    return {w: dict(fraction([x for v in by.values() for x in v]), by_tp={tp: fraction(v) for tp, v in sorted(by.items())})
            for w, by in sorted(out.items())}


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


PROFILE_CONFIG = ("124m", "H200")  # the stored profiles: 124m CUDA-graph configurations on 2x H200, tp=2


def fit_split(rows, exclude=None, pts=None, sweeps=None):
    """Every fitted quantity from the data exclude(size, device) leaves in: compute scales and tracks terms (tp=1
    rows), alpha and bw at tp=2 (an in-step sweep's, where one is stored and its device kept; else the kept tp=2 rows'
    time over their floor, two regimes by message size where they measured six sizes (rows_regimes); else the
    profiles if their configuration is let in; else the rows' one line), at tp=4 (the in-step sweep at 4 ranks
    where its device is kept, else the tp=4 rows' time over their floor) and tp=8 (extrapolated, comm_by_tp; regime by
    regime where tp=2 and 4 both have an in-step law, extrapolate_regimes). The per-sublayer calibration (`calibrate`) and the gap between
    kernels that anchors it to whole tp=1 steps (fit_overhead) are used only by the full fit (exclude None): the
    calibration measures a row's own size and device. Rows at tp >= 2 of the current code enter no fit (feeds_fits).
    A stored all-reduce sweep at a tp (sweeps: load_sweeps(), the first whose device the split keeps) gives that tp's
    all-reduces its two-regime law: an in-step sweep's as measured, a back-to-back one's moved to the split's own
    alpha at that tp. Returns dict(tables, fit, calibration: bool)."""
    ex = exclude or (lambda size, device: False)
    kept = [r for r in rows if not ex(r["size"], r["device"]) and feeds_fits(r)]
    replicated, devices = fit_replicated(kept), sorted({r["device"] for r in kept if r["tp"] == 1})
    # twice: the families whose rows fit c_mlp give the ratio that ties it to c_attn in every other family
    ratios = mlp_ratios({d: calibrate_from_rows(kept, d, replicated["q"]) for d in devices})
    tables = {d: t for d in devices if (t := calibrate_from_rows(kept, d, replicated["q"], ratios))}
    resolve_streams(tables)
    sweeps = {tp: kept_sweeps[0] for tp, vs in (load_sweeps() if sweeps is None else sweeps).items()
              if (kept_sweeps := [v for v in vs if not ex(None, v[3])])}
    regimes = {tp: sweep_regimes(sweep, tp) for tp, (sweep, *_) in sweeps.items()}
    rp2 = row_comm_points(kept, 2)
    from_rows = None if 2 in sweeps else rows_regimes(rp2, 2)
    if from_rows:  # what an all-reduce adds to a step, as the rows measured it
        sweeps[2] = (None, f"{len(rp2)} tp=2 rows' time over their floor, per message size", True, None)
        regimes[2] = from_rows
    if 2 in sweeps and sweeps[2][2]:  # alpha/bw at tp=2 from an in-step law's small messages
        low = regimes[2][0]
        a2, bw2 = low["alpha_us"], low["bw_GBps"]
        on2 = [] if sweeps[2][0] is not None else sorted({(r["size"], r["device"], 2) for *_, r in rp2})
        how2 = f"in-step law ({sweeps[2][1]}), messages up to the change point"
    elif not ex(*PROFILE_CONFIG):
        a2, bw2 = fit_comm([(b, t, src) for b, t, src in (profile_points() if pts is None else pts)])
        how2, on2 = "all-reduce kernel times of the stored 2xH200 profiles (124m)", [list(PROFILE_CONFIG) + [2]]
    else:
        a2, bw2 = fit_comm_rows(rp2)
        how2 = f"{len(rp2)} tp=2 rows' time over their floor"
        on2 = sorted({(r["size"], r["device"], 2) for *_, r in rp2})
    rp4 = row_comm_points(kept, 4)
    tp4 = None
    if 4 in sweeps and sweeps[4][2]:  # as tp=2: an in-step sweep at 4 ranks, measured apart from every row
        tp4 = (regimes[4][0]["alpha_us"], regimes[4][0]["bw_GBps"],
               f"in-step law ({sweeps[4][1]}), messages up to the change point", [])
    elif len(rp4) >= 2:
        tp4 = fit_comm_rows(rp4) + (f"{len(rp4)} tp=4 rows' time over their floor",
                                     sorted({(r["size"], r["device"], 4) for *_, r in rp4}))
    fit = dict(alpha_us=a2, bw_GBps=bw2, by_tp=comm_by_tp(a2, bw2, how2, on2, tp4), replicated=replicated,
               mlp_ratios=ratios)
    for tp, (_, source, in_step, _) in sweeps.items():
        if str(tp) in fit["by_tp"]:  # measured apart from every model row: no row's configuration enters it
            # an in-step sweep is the law itself; a back-to-back one gives only its shape (where NCCL changes
            # protocol, what each byte costs on each side): its level is collectives with nothing between them,
            # 12 us per small message on 2x H100 against the 6 us that one adds to a step, so both regimes move
            # by the fitted alpha's difference
            shift = 0.0 if in_step else fit["by_tp"][str(tp)]["alpha_us"] - regimes[tp][0]["alpha_us"]
            fit["by_tp"][str(tp)].update(regimes=[dict(r, alpha_us=r["alpha_us"] + shift) for r in regimes[tp]],
                                         regimes_from=source, regimes_shift_us=shift, regimes_in_step=in_step)
    in_step = [fit["by_tp"][t] for t in ("2", "4") if fit["by_tp"][t].get("regimes_in_step")]
    if len(in_step) == 2:
        fit["by_tp"]["8"].update(regimes=extrapolate_regimes(*(e["regimes"] for e in in_step)),
                                 regimes_from="the in-step laws at tp=2 and 4, regime by regime (extrapolate_regimes)",
                                 regimes_shift_us=0.0, regimes_extrapolated=True)
    fit["overhead"] = {d: fit_overhead(kept, d) for d in sorted(DEVICES)} if exclude is None else {}
    fit["ladder_hidden"] = fit_ladder_overlap(kept, tables, fit)
    return dict(tables=tables, fit=fit, calibration=exclude is None)


def in_comm_fit(row, fit):
    """Whether the row's (size, device, tp) configuration fed alpha/bw at its tp."""
    on = fit.get("by_tp", {}).get(str(row["tp"]), {}).get("fitted_on", [])
    return [row["size"], row["device"], row["tp"]] in [list(c) for c in on]


def comm_fit(fit):
    """The full fit's alpha/bw per tp (fit: fit_split(rows)["fit"], annotated in place and returned), with the stored
    2xH200 profiles' kernel times beside the law that prices tp=2 (a pure function of the stored files)."""
    pts = profile_points()
    alpha, bw = fit["alpha_us"], fit["bw_GBps"]
    law = lambda b: 1e3 * allreduce_ms(b, 2, fit)  # what prices tp=2: the in-step sweep's two regimes where stored
    fit.update(device=("H100 x2 (NVLink), in-step sweep" if fit["by_tp"]["2"].get("regimes_in_step") else
                       "H200 x2 (NVLink, NCCL ring LL as traced)") + " at tp=2; H200 x4 rows at tp=4",
               formula="t(b, tp) = alpha(tp) + 2(tp-1)/tp * b / bw(tp); by_tp says where each came from",
               points=[dict(bytes=b, measured_us=t, fitted_us=law(b), residual_pct=100 * (law(b) / t - 1), source=src)
                       for b, t, src in pts],
               check_not_fitted=ddp_flat_check(alpha, bw),
               public_bound=PUBLIC_BUSBW,
               tp_4_8=("tp=4: the in-step sweep at 4 ranks on 4x H200 (bench/results/allreduce/instep_h200/"
                       "allreduce_instep_gemm_n4.json), two regimes; a split without it fits the stored older-code tp=4 "
                       "H200 rows' time over their floor (bench/results/tp_latency_tp4*.json). tp=8: no row; each "
                       "regime's alpha extrapolated linearly in tp - 1 through tp 2 and 4 (a ring all-reduce has 2(tp-1) "
                       "dependent steps, https://developer.nvidia.com/blog/3x-faster-allreduce-with-nvswitch-and-"
                       "tensorrt-llm-multishot/), bw held at tp=4's (on NVSwitch the bus bandwidth per GPU does not "
                       "depend on tp), the change point held at tp=4's. Bound: public nccl-tests busbw at large sizes on 8xH100 NVLink, "
                       f"{PUBLIC_BUSBW['GBps'][0]:.0f}-{PUBLIC_BUSBW['GBps'][1]:.0f} GB/s ({PUBLIC_BUSBW['url']}; "
                       f"busbw as defined in {PUBLIC_BUSBW['definition']}); no public small-message latency figure "
                       "was found, so the bound keeps tp=4's law and moves its large messages' bw."))
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


def validate():
    """Every stored row at tp >= 2, predicted / measured, three ways: the full fit (every fitted quantity from
    every stored row it can use; a row whose (size, device, tp) fed alpha/bw is marked in_sample), leave one size
    out (pred_loso: every fit without the row's size) and leave one device out (pred_lodo; None where the other
    device has no tp=1 row of that workload). Compute never fits a tp >= 2 row's time."""
    rows = stored_rows()
    full = fit_split(rows)
    fit, tables = comm_fit(full["fit"]), full["tables"]
    held = {"loso": {}, "lodo": {}}
    out = []
    for r in rows:
        if r["tp"] < 2:
            continue
        if r["device"] not in tables:
            raise ValueError(f"row {r['source']} ran on {r['device']}, which has no tp=1 rows to calibrate on")
        p = predict(r["size"], r["workload"], r["tp"], r["policy"], r["n_tracks"], r["device"], tables,
                    fit, r["mode"])
        o = dict(r, pred=p["ms"], ratio=p["ms"] / r["ms"], compute=p["compute"] + p["tracks"],
                 comm=p["comm"], no_overlap=p["no_overlap"], full_overlap=p["full_overlap"],
                 calibration=p["calibration"], target=mode_class(r["mode"]) == "graph", in_sample=in_comm_fit(r, fit))
        for name, key, test in (("loso", r["size"], lambda size, device, k=r["size"]: size == k),
                                ("lodo", r["device"], lambda size, device, k=r["device"]: device == k)):
            if key not in held[name]:
                try:
                    held[name][key] = fit_split(rows, test)
                except ValueError:  # too little left to fit alpha/bw
                    held[name][key] = None
            sp = held[name][key]
            try:
                q = predict(r["size"], r["workload"], r["tp"], r["policy"], r["n_tracks"], r["device"],
                            sp["tables"], sp["fit"], r["mode"], measured={}) if sp else None
            except ValueError:  # no tp=1 row of this workload left
                q = None
            o[f"pred_{name}"] = q["ms"] if q else None
            o[f"ct_{name}"] = q["compute"] + q["tracks"] if q else None  # the floor's model: miss_lines splits by it
        out.append(o)
    return fit, tables, out, held


def error_stats(rows):
    errs = sorted(abs(r["ratio"] - 1) for r in rows)
    if not errs:
        return None
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
    return dict(n=len(errs), median=statistics.median(errs), worst=errs[-1], worst_row=worst, p90=p90(errs))


def time_stats(rows, key="pred"):
    """|predicted / measured - 1| over the rows that have a prediction in column `key`: n, median, p90, worst."""
    errs = sorted(abs(r[key] / r["ms"] - 1) for r in rows if r.get(key) is not None)
    if not errs:
        return None
    return dict(n=len(errs), median=statistics.median(errs), p90=p90(errs), worst=errs[-1])


def p90(sorted_values):
    """The 90th percentile, nearest rank: the smallest value with at least 90% of the values at or below it."""
    return sorted_values[max(0, math.ceil(0.9 * len(sorted_values)) - 1)]


def saving_config(r):
    return (r["source"], r["device"], r["size"], r["workload"], r["mode"], r["tp"], r["n_tracks"])


def savings(rows, key="pred"):
    """[dict(row, measured, predicted)]: saving = 1 - policy / baseline, measured from the two rows' ms and
    predicted from their column `key`, for each non-baseline row with a baseline row of the same run (source) and
    configuration (device, size, workload, mode, tp, n_tracks). Rows without a prediction in `key` are left out."""
    base = {saving_config(r): r for r in rows if r["policy"] == "baseline"}
    out = []
    for r in rows:
        b = base.get(saving_config(r))
        if r["policy"] == "baseline" or b is None or r.get(key) is None or b.get(key) is None:
            continue
        out.append(dict(row=r, measured=1 - r["ms"] / b["ms"], predicted=1 - r[key] / b[key]))
    return out


def saving_stats(pairs, min_sign=0.05):
    """The saving's error in percentage points (|predicted - measured| x 100): n, median, p90, worst (and its row);
    sign errors: rows with |measured| >= min_sign whose predicted saving has the other sign (or is 0)."""
    if not pairs:
        return None
    errs = sorted(100 * abs(p["predicted"] - p["measured"]) for p in pairs)
    worst = max(pairs, key=lambda p: abs(p["predicted"] - p["measured"]))
    eligible = [p for p in pairs if abs(p["measured"]) >= min_sign]
    wrong = [p for p in eligible if (p["predicted"] > 0) != (p["measured"] > 0) or p["predicted"] == 0]
    return dict(n=len(errs), median=statistics.median(errs), p90=p90(errs), worst=errs[-1],
                worst_row=worst["row"], n_sign=len(eligible), sign_errors=len(wrong), sign_rows=[p["row"] for p in wrong])


SPLITS = (("full fit, rows in the alpha/bw fit (in-sample)", "pred", lambda r: r["in_sample"]),
          ("full fit, rows outside the alpha/bw fit", "pred", lambda r: not r["in_sample"]),
          ("leave one size out (held out)", "pred_loso", lambda r: True),
          ("leave one device out (held out)", "pred_lodo", lambda r: True))
# The rows by the code they measured (implementation()): the model describes the current code, so its targets are
# scored on those rows. The older code's rows at k >= 2 are the implementation the streams term was fitted on;
# at k = 1 the older code ran other kernels than the current one (bench/results/issue49/README.md), so those rows
# are scored apart and are no target; so are training rows at tp >= 2 whose regions all-reduced fp32 (row_implementation).
CODE_GROUPS = (("current code", lambda r: r["impl"] == "post-49"),
               ("older code, k ≥ 2", lambda r: r["impl"] == "pre-49" and r["n_tracks"] > r["tp"]),
               ("older code, k = 1 (no target)", lambda r: r["impl"] == "pre-49" and r["n_tracks"] == r["tp"]),
               ("training with fp32 region all-reduces (before 240c34d; no target)",
                lambda r: r["impl"] == "fp32-regions"))
TARGETS = dict(time_median=10.0, time_p90=20.0, saving_median=3.0, saving_worst=8.0)


def score_cells(sel, key):
    """Table cells of time and saving scores of rows `sel` by prediction column `key`; None without a time score."""
    t, sv = time_stats(sel, key), saving_stats(savings(sel, key))
    if not t:
        return None
    cells = [f"{t['n']}", f"{100 * t['median']:.1f}%", f"{100 * t['p90']:.1f}%", f"{100 * t['worst']:.1f}%"]
    return cells + ([f"{sv['n']}", f"{sv['median']:.1f}", f"{sv['p90']:.1f}", f"{sv['worst']:.1f}",
                     f"{sv['sign_errors']} of {sv['n_sign']}"] if sv else ["0", "-", "-", "-", "-"])


def score_table(rows):
    """Markdown lines: time and saving scores of the CUDA-graph rows, per code group (CODE_GROUPS), split (SPLITS) and
    (device, tp); then held out by size per code group, workload kind and k."""
    graph = [r for r in rows if r["target"]]
    lines = ["| code | rows | prediction | time: n | median | 90th pct | worst | saving: n | median (points) | 90th pct | "
             "worst | sign errors (\\|measured\\| ≥ 5%) |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for code, in_code in CODE_GROUPS:
        sel_code = [r for r in graph if in_code(r)]
        groups = [("all", sel_code)] + [(f"{d} tp={tp}", [r for r in sel_code if (r["device"], r["tp"]) == (d, tp)])
                                        for d, tp in sorted({(r["device"], r["tp"]) for r in sel_code})]
        for gname, sel in groups:
            for sname, key, keep in SPLITS:
                cells = score_cells([r for r in sel if keep(r)], key)
                if cells:
                    lines.append(f"| {code} | {gname} | {sname} | " + " | ".join(cells) + " |")
    lines += ["", "Held out by size, by code, workload kind and tracks per GPU (k = n_tracks / tp):", "",
              "| code | workload | k | time: n | median | 90th pct | worst | saving: n | median (points) | 90th pct | worst | "
              "sign errors |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for code, in_code in CODE_GROUPS:
        for kind in ("train", "prefill", "decode"):
            for k in sorted({r["n_tracks"] // r["tp"] for r in graph}):
                sub = [r for r in graph if in_code(r) and r["workload"].startswith(kind) and r["n_tracks"] // r["tp"] == k]
                cells = score_cells(sub, "pred_loso")
                if cells:
                    lines.append(f"| {code} | {kind} | {k} | " + " | ".join(cells) + " |")
    return lines


def headline(rows):
    """Lines: per code group (CODE_GROUPS), the time and saving scores of its CUDA-graph rows held out by size, and
    of the full fit's rows outside the alpha/bw fit."""
    out = []
    for code, in_code in CODE_GROUPS:
        graph = [r for r in rows if r["target"] and in_code(r)]
        for label, key, keep in (("leave one size out", "pred_loso", lambda r: True),
                                 ("full fit, outside the alpha/bw fit", "pred", lambda r: not r["in_sample"])):
            t, sv = time_stats([r for r in graph if keep(r)], key), saving_stats(savings([r for r in graph if keep(r)], key))
            if not t:
                continue
            sv_text = (f"saving error median {sv['median']:.1f} points, 90th pct {sv['p90']:.1f}, worst {sv['worst']:.1f} "
                       f"({sv['n']} rows), sign errors {sv['sign_errors']} of {sv['n_sign']} with |measured saving| >= 5%"
                       if sv else "no saving pair")
            out.append(f"{code}, {label}: time |error| median {100 * t['median']:.1f}%, 90th pct {100 * t['p90']:.1f}%, "
                       f"worst {100 * t['worst']:.1f}% ({t['n']} graph rows); {sv_text}")
    return out


def target_lines(rows):
    """Whether the targets (TARGETS; no sign error where |measured saving| >= 5%) are met on the current code's CUDA-graph
    rows, held out by size and in the full fit outside the alpha/bw fit, at every k, at k <= 2 (one and two tracks
    per GPU, where a reduced-sync policy can save time) and at k = 1 (one track per GPU, the trainer's default and
    the answers'), and held out by device at tp=2 for k <= 2 and k = 1 (every tp=4 row and 4-rank sweep ran on H200,
    so held out by device tp=4 has no measured law: the table per device and tp shows it): one line each."""
    graph = [r for r in rows if r["target"] and CODE_GROUPS[0][1](r)]
    out = []
    k_le = lambda k: lambda r: r["n_tracks"] // r["tp"] <= k
    outside = lambda keep: lambda r: not r["in_sample"] and keep(r)
    for label, key, keep in (("leave one size out", "pred_loso", lambda r: True),
                             ("full fit, outside the alpha/bw fit", "pred", outside(lambda r: True)),
                             ("leave one size out, k <= 2", "pred_loso", k_le(2)),
                             ("full fit, outside the alpha/bw fit, k <= 2", "pred", outside(k_le(2))),
                             ("leave one size out, k = 1", "pred_loso", k_le(1)),
                             ("full fit, outside the alpha/bw fit, k = 1", "pred", outside(k_le(1))),
                             ("leave one device out, tp=2, k <= 2", "pred_lodo", lambda r: r["tp"] == 2 and k_le(2)(r)),
                             ("leave one device out, tp=2, k = 1", "pred_lodo", lambda r: r["tp"] == 2 and k_le(1)(r))):
        sel = [r for r in graph if keep(r)]
        t, sv = time_stats(sel, key), saving_stats(savings(sel, key))
        if not (t and sv):
            out.append(f"{label}: no current-code rows to score")
            continue
        checks = [("time median", 100 * t["median"], TARGETS["time_median"], "%"),
                  ("time 90th pct", 100 * t["p90"], TARGETS["time_p90"], "%"),
                  ("saving median", sv["median"], TARGETS["saving_median"], " points"),
                  ("saving worst", sv["worst"], TARGETS["saving_worst"], " points")]
        text = [f"{name} {v:.1f}{u} (<= {lim:.0f}: {'met' if v <= lim else 'missed'})" for name, v, lim, u in checks]
        text.append(f"sign errors {sv['sign_errors']} of {sv['n_sign']} ({'met' if not sv['sign_errors'] else 'missed'})")
        out.append(f"{label} ({t['n']} rows, {sv['n']} savings): " + ", ".join(text))
    return out


def prospective_lines(rows):
    """Lines: for each PROSPECTIVE folder, its CUDA-graph rows scored by the full fit and held out by size (no fit has
    them, so both are out of sample), with the targets; and the model revisions made after those rows were seen."""
    out = []
    for i, (pattern, commit, what) in enumerate(PROSPECTIVE):
        sel = [r for r in rows if r["target"] and r.get("prospective") == pattern]
        for label, key in (("full fit", "pred"), ("leave one size out", "pred_loso")):
            t, sv = time_stats(sel, key), saving_stats(savings(sel, key))
            if not (t and sv):
                continue
            out.append(f"`bench/results/{pattern}` ({what}), {label}: time |error| median {100 * t['median']:.1f}% "
                       f"(<= 10: {'met' if 100 * t['median'] <= TARGETS['time_median'] else 'missed'}), 90th pct "
                       f"{100 * t['p90']:.1f}%, worst {100 * t['worst']:.1f}% ({t['n']} rows); saving error median "
                       f"{sv['median']:.1f} points, 90th pct {sv['p90']:.1f}, worst {sv['worst']:.1f} ({sv['n']} rows; "
                       f"<= 8: {'met' if sv['worst'] <= TARGETS['saving_worst'] else 'missed'}), sign errors "
                       f"{sv['sign_errors']} of {sv['n_sign']}")
        if all(c != commit for _, c, _ in PROSPECTIVE[i + 1:]):  # after the last batch the model of `commit` scored
            out += [f"revised after seeing them: {rev}" for c, rev in PROSPECTIVE_REVISIONS if c == commit]
    return out


def held_out_saving_error(rows, workload, k):
    """The 90th percentile saving error (points) of the leave-one-size-out predictions of the current code's graph rows
    of this workload's kind (train, decode or prefill) at k tracks per GPU; where that has fewer than 10, the kind's
    rows on the same side of k = 2 (at most two tracks per GPU, or more: the error grows fast past k = 2), then at any
    k; then every current-code graph row, then every graph row but the older code's at k = 1."""
    kind = workload.split("_")[0]
    cur = [r for r in rows if r["target"] and CODE_GROUPS[0][1](r)]
    scored = [r for r in rows if r["target"] and not CODE_GROUPS[2][1](r)]
    same_side = lambda r: (r["n_tracks"] // r["tp"] > 2) == (k > 2)
    for sel, how in (([r for r in cur if r["workload"].startswith(kind) and r["n_tracks"] // r["tp"] == k],
                      f"current-code {kind} rows at k = {k}"),
                     ([r for r in cur if r["workload"].startswith(kind) and same_side(r)],
                      f"current-code {kind} rows at k {'> 2' if k > 2 else '<= 2'}"),
                     ([r for r in cur if r["workload"].startswith(kind)], f"current-code {kind} rows at any k"),
                     (cur, "current-code rows"), (scored, "graph rows but the older code's at k = 1")):
        st = saving_stats(savings(sel, "pred_loso"))
        if st and st["n"] >= 10:
            return st["p90"], f"{how} held out by size, n {st['n']}"
    st = saving_stats(savings(scored, "pred_loso"))
    return st["p90"], f"graph rows held out by size, n {st['n']}"


def h100_compute_ratios(graph):
    """'workload x.xx, ...': the median of modeled compute over the measured floor of the H100 graph rows."""
    by = {}
    for r in graph:
        if r["device"] == "H100" and r.get("floor_ms"):
            by.setdefault(r["workload"], []).append(r["compute"] / r["floor_ms"])
    return ", ".join(f"{w} {statistics.median(v):.2f}" for w, v in sorted(by.items())) or "no H100 rows"


def calibration_note(rows, fit):
    """Which devices have a per-sublayer calibration (`calibrate`), and whether it is used: only with a gap per kernel
    (fit_overhead) that ties the sum of its kernels to whole tp=1 steps."""
    measured = sorted(os.path.basename(p)[len("step_model_calibration_"):-len(".json")].upper()
                      for p in glob.glob(os.path.join(RESULTS, "step_model_calibration_*.json")))
    if not measured:
        return "No per-sublayer calibration measured yet: `python -m bench.step_model calibrate --device cuda` makes it."
    gaps = {d: e for d, e in (fit.get("overhead") or {}).items() if e}
    without = [d for d in measured if d not in gaps]
    return (f"Per-sublayer calibration measured on {', '.join(measured)} (bench/results/step_model_calibration_<device>"
            ".json). It is used for a device's CUDA-graph predictions only with the time between a graph's kernels, "
            "fitted from that device's own tp=1 CUDA-graph ('graph' mode) baseline rows of a calibrated size and "
            "workload (a sum of sublayer kernel times leaves it out: modeled compute was 0.84-0.85 of the H100 floors "
            "with it left out), and only in the full fit. "
            + ("; ".join(f"{d}: {e['gap_us']:.2f} us per kernel ({e['how']})" for d, e in gaps.items()) if gaps else
               "No device has both a calibration and tp=1 CUDA-graph rows, so every prediction here uses the scaled "
               "split (whole one-GPU steps, which hold that time)") + "."
            + (f" {', '.join(without)}: no such row, so the scaled split; another device's gap is not carried over "
               "(it is a residual of whole steps over kernels timed alone, not only a launch gap)." if without and gaps
               else ""))


def streams_text(tables):
    """Where the families' streams coefficients came from (resolve_streams): counts by own fit or borrowed, and code."""
    fams = [e for t in tables.values() for e in t.values()]
    count = lambda keep: sum(1 for e in fams if keep(e))
    own = lambda e: not e["streams_how"].startswith("borrowed")
    cur_src = sorted({src for e in fams if own(e) and e.get("streams_code") == "post-49" for src in e["streams_sources"]})
    return (f"of {len(fams)} families, {count(lambda e: own(e) and e.get('streams_code') == 'post-49')} fitted on their own "
            f"current-code rows ({', '.join(cur_src) or 'none stored'}), "
            f"{count(lambda e: not own(e) and e.get('streams_code') == 'post-49')} borrowing a current-code family's fit, "
            f"{count(lambda e: e.get('streams_code') == 'pre-49')} on the older code's rows (own or borrowed), "
            f"{count(lambda e: e.get('streams_code') is None)} with none")


def validation_header(fit, tables, rows):
    by = fit["by_tp"]
    skipped = [f"`bench/results/{g}` ({why})" for g, why in SKIPPED_ROW_FILES if glob.glob(os.path.join(RESULTS, g))]
    return ["# Step-time model: predicted ÷ measured, every stored row at tp ≥ 2", "",
            "Made by `python -m bench.step_model --validate` (bench/step_model.py). Every predicted time is "
            "**modeled**; the measured ones are the stored rows named in the source column.", "",
            "**Headline** (CUDA-graph rows; saving = 1 − policy ÷ baseline from the same run and n_tracks, its error "
            "in percentage points). Rows are grouped by the code they measured: *current code* (commit "
            f"{POST49_COMMIT} or later, issue 49's model: bench/results/issue49/README.md; no fit sees these rows), "
            "*older code* at k ≥ 2 tracks per GPU, and *older code at k = 1*, which ran other kernels than the "
            "current code and is no target:", ""] + [f"- {h}" for h in headline(rows)] + [
            "", "**Targets** on the current code's rows (time median ≤ 10%, 90th pct ≤ 20%; saving median ≤ 3 points, "
            "worst ≤ 8; no sign error where |measured saving| ≥ 5%):", ""] + [f"- {t}" for t in target_lines(rows)] + [
            "", "**Prospective rows**, measured after the model that scores them was committed (PROSPECTIVE in "
            "bench/step_model.py; no fit has them, their tp=1 rows included):", ""] + [
            f"- {t}" for t in prospective_lines(rows)] + [
            "",
            "- Row files: " + ", ".join(f"`{os.path.relpath(p, REPO)}`" for p, _ in row_files()) + " (ROW_FILES in "
            "bench/step_model.py). Not read: " + "; ".join(skipped) + ".",
            "- Full fit: compute scale per size, workload and mode from the tp=1 baseline rows; the policy's counted "
            "elementwise passes at any k (policy_ops, coefficient 1 unless tp=1 rows of the current code at k = 1 "
            "fit it); the extra streams' term at k ≥ 2 from the tp=1 rows at k ≥ 2, each row's time over its own run's "
            "baseline (run_baseline), against the regions entered and the per-track attention and MLP sublayers "
            "(tracks_features; c_mlp fitted where attention-only syncs ran, else c_attn times the ratio those families "
            "fitted, mlp_ratios: " + ", ".join(f"{w} {v:.2f}" for w, v in fit.get("mlp_ratios", {}).items()) + ") ("
            + streams_text(tables) + "); a part q of it at k = 2 repeats per further track on every rank, the rest shrinks "
            f"with the rank's share of the work ({fit['replicated']['how']}); "
            + ("the all-reduce law at tp=2 from the in-step sweep (measured apart from every row, the same in every "
               "split)" if by.get("2", {}).get("regimes_in_step") else "alpha/bw at tp=2 from the all-reduce kernel "
               "times of the stored 2×H200 profiles (124m)")
            + (", at tp=4 from the in-step sweep at 4 ranks (the same in every split that keeps its device), at "
               "tp=8 extrapolated from the two regime by regime" if by.get("4", {}).get("regimes_in_step") else
               ", at tp=4 from the older code's tp=4 rows' time over their floor")
            + " (bench/results/step_model_comm_fit.json). Rows whose (size, device, tp) fed alpha/bw are scored apart "
            "(in-sample). No tp ≥ 2 time enters a compute fit, and no current-code row at tp ≥ 2 enters any fit.",
            "- Held out: *leave one size out* refits every quantity without the row's size (compute and tracks from "
            "the other sizes' tp=1 rows"
            + ("" if by.get("4", {}).get("regimes_in_step") else "; alpha/bw at tp=4 from the other sizes' older-code rows")
            + ("" if by.get("2", {}).get("regimes_in_step") else ", tp=2 from the rows' time over the floor where the "
               "profiles are the held-out size")
            + "; no per-sublayer calibration); *leave one device out* "
            "likewise without the row's device, the all-reduce sweeps measured on it included (H100's: its rows then "
            "take tp=2 from the kept rows' time over their floors, the H200 older-code rows, per message size with "
            "two regimes: rows_regimes; H200's: tp=4 then has no measured law and takes the ring law from tp=2), "
            "the kept device's compute, and its policy's own work carried as the step's roofline carries (tracks_ms).",
            "- alpha/bw of the full fit: " + "; ".join(f"tp={tp} {e['alpha_us']:.2f} µs, {e['bw_GBps']:.0f} GB/s "
                                                       f"({e['how']})" for tp, e in sorted(by.items())) +
            f". tp=2 profile residuals: median |residual| "
            f"{statistics.median(abs(p['residual_pct']) for p in fit['points']):.1f}%, worst "
            f"{max(abs(p['residual_pct']) for p in fit['points']):.1f}%. Bound at tp=8: public nccl-tests busbw "
            f"{PUBLIC_BUSBW['GBps'][0]:.0f}-{PUBLIC_BUSBW['GBps'][1]:.0f} GB/s on 8×H100 NVLink ({PUBLIC_BUSBW['url']}).",
            *regimes_lines(by),
            "- Compute calibration: " + ", ".join(f"{d}: {len(t)} families scaled from stored one-GPU rows"
                                                  for d, t in tables.items()) +
            " (bench/results/step_model_compute_<device>.json). " + calibration_note(rows, fit), "",
            "## Scores per code, device and tp", ""] + score_table(rows) + [""]


def validation_errors(rows):
    """Lines: the time error of the graph and host-bound rows, then of the graph rows per device, tp and workload."""
    graph, host, lines = [r for r in rows if r["target"]], [r for r in rows if not r["target"]], []
    for name, sel in (("CUDA-graph rows (device-bound; the model's target)", graph),
                      ("eager and compiled-without-graphs rows (host-bound at tp ≥ 2; not the model's target)", host)):
        st = error_stats(sel)
        if st:
            w = st["worst_row"]
            lines.append(f"**{name}**, every code: {st['n']} rows, median |error| {100 * st['median']:.1f}%, 90th "
                         f"percentile {100 * st['p90']:.1f}%, worst {100 * st['worst']:.1f}% ({w['size']} {w['workload']} "
                         f"{w['mode']} tp={w['tp']} n_tracks {w['n_tracks']} {w['policy']}).")
    for label, field in (("on", "device"), ("at tp=", "tp"), (",", "workload")):
        for v in sorted({r[field] for r in graph}):
            st = error_stats([r for r in graph if r[field] == v])
            lines.append(f"- graph rows {label}{'' if label.endswith('=') else ' '}{v}: {st['n']} rows, median |error| "
                         f"{100 * st['median']:.1f}%, worst {100 * st['worst']:.1f}%")
    return lines


def miss_lines(rows, n_worst=6, split="loso"):
    """Lines: the current code's CUDA-graph rows with the largest held-out saving errors (split 'loso': leave one size
    out, 'lodo': leave one device out) and those with a sign error, each with the policy's time less baseline's split
    at the measured floors: compute + tracks (the floor) against the model's, and the all-reduces' part (time over the
    floor) against the model's comm."""
    pred, ct = f"pred_{split}", f"ct_{split}"
    cur = [r for r in rows if r["target"] and CODE_GROUPS[0][1](r)]
    pairs = savings(cur, pred)
    st = saving_stats(pairs)
    if not st:
        return []
    base = {saving_config(r): r for r in cur if r["policy"] == "baseline"}
    pick = sorted(pairs, key=lambda p: -abs(p["predicted"] - p["measured"]))[:n_worst]
    pick += [p for p in pairs if any(p["row"] is r for r in st["sign_rows"]) and p not in pick]
    out = []
    for p in pick:
        r = p["row"]
        b = base[saving_config(r)]
        text = (f"- {r['device']} {r['size']} {r['workload']} tp={r['tp']} n_tracks {r['n_tracks']} {r['policy']} "
                f"({r['source']}): saving measured {100 * p['measured']:+.1f}%, held out {100 * p['predicted']:+.1f}% "
                f"(error {100 * (p['predicted'] - p['measured']):+.1f} points"
                + (", a sign error" if any(p["row"] is x for x in st["sign_rows"]) else "") + ")")
        if r.get("floor_ms") and b.get("floor_ms") and r.get(ct) is not None:
            mf, pf = r["floor_ms"] - b["floor_ms"], r[ct] - b[ct]
            mc, pc = (r["ms"] - r["floor_ms"]) - (b["ms"] - b["floor_ms"]), (r[pred] - r[ct]) - (b[pred] - b[ct])
            text += (f"; policy − baseline, ms: floor (compute + tracks) measured {mf:+.3f}, modeled {pf:+.3f}; over the "
                     f"floor (all-reduces) measured {mc:+.3f}, modeled {pc:+.3f}: mostly the "
                     + ("all-reduce part" if abs(mc - pc) > abs(mf - pf) else "compute + tracks part"))
        out.append(text)
    return out


def lodo_h100_law_text(fit, held, nbytes=2 ** 21):
    """What the split holding out H100 (validate()'s held["lodo"]["H100"]) prices a 2 MiB tp=2 all-reduce at, beside
    the full fit's in-step law."""
    held = held["lodo"]["H100"]["fit"]
    return (f"{allreduce_ms(nbytes, 2, held) * 1e3:.1f} us for a {nbytes / 2 ** 20:g} MiB all-reduce where the in-step "
            f"sweep prices {allreduce_ms(nbytes, 2, fit) * 1e3:.1f}")


def per_sync_text(rows, fit, device="H100"):
    """'size workload (x MB): measured y us, modeled z us; ...': per size and inference workload, the median over the
    current code's baseline CUDA-graph rows at tp=2 on `device` (scored rows, none in a fit) of their time over the
    floor per all-reduce, beside the law that prices tp=2 (allreduce_ms over the same collectives, per all-reduce)."""
    by = {}
    for n, B, y, r in row_comm_points([r for r in rows if r["impl"] == "post-49" and r["policy"] == "baseline"
                                       and r["device"] == device and not WORKLOADS[r["workload"]][3]], 2):
        L, H, C, V = SHAPES[r["size"]]
        b, T = WORKLOADS[r["workload"]][:2]
        modeled = sum(allreduce_ms(nbytes, 2, fit) for *_, nbytes in collectives("baseline", L, C, b, T, 2, False)) / n
        by.setdefault((L, r["size"], r["workload"], b * T * C * 2), []).append((1e3 * y / n, 1e3 * modeled))
    return "; ".join(f"{size} {workload} ({nbytes / 1e6:.3g} MB): {statistics.median(m for m, _ in v):.1f} us, "
                     f"modeled {v[0][1]:.1f} us" for (_, size, workload, nbytes), v in sorted(by.items())) or "none stored"


def law_text(e):
    """One tp's all-reduce law in a few words: its two regimes where it has them, else its one line."""
    if e.get("regimes"):
        lo, hi = e["regimes"]
        return (f"{lo['alpha_us']:.1f} us + bytes at {lo['bw_GBps']:.0f} GB/s up to {lo['max_bytes'] / 2 ** 20:.2f} MiB, "
                f"{hi['alpha_us']:.1f} us + bytes at {hi['bw_GBps']:.0f} GB/s above")
    return f"{e['alpha_us']:.1f} us + bytes at {e['bw_GBps']:.0f} GB/s"


def regimes_lines(by):
    """The two-regime law each tp with a stored sweep prices its all-reduces by (sweep_regimes, fit_split)."""
    return [f"- tp={tp} all-reduces by message size, from {e['regimes_from']}: up to "
            f"{e['regimes'][0]['max_bytes'] / 2 ** 20:.2f} MiB {e['regimes'][0]['alpha_us']:.2f} µs + bytes at "
            f"{e['regimes'][0]['bw_GBps']:.0f} GB/s, above it {e['regimes'][1]['alpha_us']:.2f} µs + bytes at "
            f"{e['regimes'][1]['bw_GBps']:.0f} GB/s ("
            + ("extrapolated: no row or sweep at this tp" if e.get("regimes_extrapolated") else
               "what an all-reduce adds to a CUDA graph, its message written by a GEMM and read by a residual add, "
               "as measured" if e.get("regimes_in_step") else
               f"the sweep's back-to-back level moved by {e['regimes_shift_us']:+.2f} µs to the fitted alpha")
            + f"; this law prices tp={tp})"
            for tp, e in sorted(by.items()) if e.get("regimes")]


def validation_notes(rows, fit, held):
    graph = [r for r in rows if r["target"]]
    return ["", "**Why rows miss** (from the measured floors in this table and the stored profiles):",
            "- *compiled+graph decode* (bench/results/decode/): no tp=1 row of that mode exists, so it is calibrated on "
            "the eager-built graph family; inductor fuses the elementwise work (floor 0.435 against 0.656 ms for "
            "grouped:3), which the model does not know.",
            "- *tp=4 rows*: the older code at one track per GPU, measured at an older commit still (sum-over-tracks "
            "reduce kernels since removed: bench/results/tp_latency.md); their alpha/bw are fitted to their own time "
            "over the floor (in-sample in the full fit; held out by size, each size's from the other size's).",
            "- *all-reduces in a step*: tp=2 is priced by what an all-reduce adds to a CUDA graph, measured apart "
            "from every row (bench/results/allreduce/allreduce_instep_gemm_n2.json; NCCL changes protocol between "
            "1.5 and 1.75 MiB, so two regimes). The current code's baseline rows on 2x H100, time over the floor per "
            "all-reduce (the message a g sums): " + per_sync_text(rows, fit) + ". At 2.1-2.6 MB (medium and large prefill_b1) "
            "a step pays 3-5 us more per all-reduce than the sweep: its profiles put 2.2-2.7 us of it in idle time "
            "around the NCCL kernels and 0.8-0.9 us in slower compute (bench/results/issue50/profiles_prefill_b1_h100/"
            "README.md).",
            "- *two tracks per GPU (k = 2) in the current code*: the streams term is fitted on the current code's tp=1 "
            "rows at k = 2 and 4 (bench/results/tp1_h200_cec91f0/, h100_20261126/, h200_tp1_tracks2/); at k = 2 the current code's floors are 1.4-1.6 of baseline's in training and prefill "
            "(unfused fp32 passes over two streams, bench/results/issue49/README.md). A family prices a k it measured "
            "at tp=1 from that k's rows, times the rank's share of the work (roofline at tp over tp=1); measured, the "
            "floor at tp=2 keeps the tp=1 row's multiple of baseline (bench/results/h100_tp2_current/), and the "
            "roofline's share (0.63 for medium train_b8) is below the "
            "measured floors' (about 0.73), so training at k = 2 is under-predicted.",
            "- *older code at k = 1*: it ran 5-22% over baseline's kernels with every collective skipped, which the "
            "current model (what the current code runs) leaves out: those rows are scored apart and are no target.",
            "- *H100 rows* (2x H100): modeled compute over the measured floor, median per workload: "
            + h100_compute_ratios(graph) + ". The H100 tp=1 graph rows of bench/results/h100_20261126/ anchor the "
            "H100 calibration's gap between kernels (calibration note above).",
            "- *eager and compiled-without-graphs rows*: host-bound (the profiles show the device busy 5-10% of the "
            "wall time in eager decode, and the compiled tp=2 step spread from 25.2 to 30.2 ms between runs); the "
            "model is of device time and is not meant for them.",
            "",
            "Largest held-out saving errors and the sign errors (current code, leave one size out), split at the "
            "measured floors:",
            ""] + miss_lines(rows) + [
            "", "The sign errors held out by device (current code), split at the measured floors. A split holding out H100 "
            "drops both all-reduce sweeps (they ran on H100) and prices tp=2 by the H200 older-code rows' time over "
            "their floors, per message size with two regimes (rows_regimes; before, by the H200 profiles' kernel "
            "times, one line with no protocol jump): " + lodo_h100_law_text(fit, held) + ":", ""] + miss_lines(
            rows, n_worst=0, split="lodo") + [
            "",
            "Model revisions after seeing a validation pass (none per row): the streams term's bytes from k to k - 1, "
            "and ladder's point from full overlap to the midpoint of its bounds (first pass: median 10.8%, worst "
            "47.9%); a calibration's decode rows used only if `calibrate` wrote the KV cache in place (DECODE_CACHE). "
            "With the current code's rows added (issue 49's model): the tracks term at k = 1 replaced by the counted "
            "passes (policy_ops; from the code, not fitted); a calibration used only with its gap between kernels (the "
            "H100 predictions had been 0.84-0.85 of the floors without it); and a family without k ≥ 2 rows takes "
            "another family's streams coefficients, a fault seen on the held-out 124m train_b12 rows at "
            "n_tracks 4, which had been predicted as at n_tracks 2. With the current code's tp=1 rows at k = 4 "
            "(bench/results/tp1_h200_cec91f0/) and the H200 calibration added, after this table's held-out rows had "
            "been looked at: a family takes a current-code streams fit (its own, else one of the same workload kind) "
            "before an older-code one (resolve_streams; the design, not a per-row choice); the gap between kernels "
            "fitted on, and applied to, 'graph'-mode steps only (a compiled step's kernels are not the ones `calibrate` "
            "times; seen on the in-sample 124m train_b12 compiled-graphs rows, predicted 1.2-1.4x) and "
            "no longer carried to another device (the H100 answers had used the H200 gap). Neither changed a score of the "
            "current code's rows (held-out refits use no calibration, and every current-code graph family kept its own "
            "streams fit); in the full fit they moved the older code's H100 rows (now the scaled split); "
            "the worst held-out saving errors above were left as they are: the changes that would remove them "
            "(an all-reduce law per message-size range, a streams term per k) were not determined by the fit data. "
            "Later (session of a12a466), with data measured for them: the all-reduce sweep's two-regime law "
            "(bench/results/allreduce/; its level moved to the fitted alpha, chosen over the sweep's own level after "
            "both were scored: saving median 2.4 against 4.0 points, worst 12.5 against 13.4, 1 against 0 sign "
            "errors); then, from the 2x H100 tp=2 rows measured after that model was committed, the streams term "
            "times the rank's share of the work, and a family's own k where measured (with H200 tp=1 rows at k = 2 "
            "measured for it); then the training step's LayerNorm and residual bytes at fp32 (autocast's, as op_pass "
            "already counted them), after the modeled compute was seen at 0.78-0.81 of the current code's tp=2 "
            "training floors on both devices against 0.91-0.99 of the tp=1 floors (with the bias adds of the "
            "tracks term, 0.88-0.92 at tp=2); then, located in the code, the vocab-parallel cross-entropy's passes "
            "at tp > 1 (model/tp_layers.py: 60 bytes per logit of the rank's slice against the fused CE's 36 that "
            "`calibrate` times at every tp; eager kernels only, since inductor fuses them). In the session of 55cbbac, "
            "after the current code's ladder decode savings were seen under-predicted by 8-9 points: ladder's point "
            "is the fraction of its hideable time that the older code's ladder rows hid in the same workload "
            "(fit_ladder_overlap), no longer the midpoint of its bounds; the current code's ladder rows, looked at "
            "too, hid the same fractions. In the session after 6c0e2c5, with GPT-2 large's tp=1 rows on H200 added "
            "(bench/results/h200_tp1_large/, a third measured size): a size that no tp=1 row measured, or that a "
            "split holds out, takes the nearest measured size's compute scale (size_distance) where the largest had "
            "been taken, and the mean of every measured size's streams fit (pooled_streams) where that one size's had "
            "been; three rules were scored (that folder's README) and this one kept, on the principle and with its "
            "scores said: held out by size at k <= 2, saving worst 12.0 points and 1 sign error, against 10.3 and 1 "
            "with the old rule on the new rows and 14.9 and 2 with the nearest size alone."]


def width_law_pairs(q):
    """Per current-code CUDA-graph row at tp >= 2 of a policy with tp=1 rows on its device (its floor and its run's
    baseline floor stored) at k >= 2 tracks per GPU: its floor's extra over baseline's (e_tp), the tp=1 extra at the
    same k (e1_k) and at n_tracks = tp k (e1_n: the same tracks, as wide; h100_tp1_width/, h200_tp1_width/ among the
    fits' rows), and the ratio the model carries from tp=1's k to tp's: r = ((1 - q) share + q (k - 1)) / ((1 - q) +
    q (k - 1)), q the full fit's {workload kind: q} (fit_replicated), and from k = WIDTH_LAW_MIN_K on
    f r + (1 - f) (e1_n / tp) / e1_k with f the stream pass's latency_fraction (tracks_ms). Medians over repeats."""
    ms, floor = {}, {}
    for r in stored_rows():
        if r["impl"] == "post-49" and r["mode"] == "graph" and r["workload"] in WORKLOADS:
            key = (r["device"], r["size"], r["workload"], r["tp"], r["n_tracks"], r["policy"])
            ms.setdefault(key, []).append(r["ms"])
            if r["floor_ms"] is not None:
                floor.setdefault(key, []).append(r["floor_ms"])
    med = lambda d, key: statistics.median(d[key]) if key in d else None

    def extra1(dev, size, w, n, pol):
        p, b = med(ms, (dev, size, w, 1, n, pol)), med(ms, (dev, size, w, 1, n, "baseline"))
        return None if None in (p, b) else p - b
    out = []
    for (dev, size, w, tp, n, pol) in sorted(floor):
        k = n // tp
        if tp < 2 or k < 2 or pol in ("baseline", "ladder", "parallel") or (dev, size, w, tp, n, "baseline") not in floor:
            continue
        e1_k, e1_n = extra1(dev, size, w, k, pol), extra1(dev, size, w, n, pol)
        if e1_n is None:
            continue
        share = step_roofline(size, w, tp, dev) / step_roofline(size, w, 1, dev)
        qk = q[w.split("_")[0]]
        r = ((1 - qk) * share + qk * (k - 1)) / ((1 - qk) + qk * (k - 1))
        if k >= WIDTH_LAW_MIN_K and e1_k is not None:
            f = latency_fraction(w, dev)
            r = f * r + (1 - f) * (e1_n / tp) / e1_k
        r = None if e1_k is None else r  # no tp=1 row at k: the model's ratio to it is not defined
        out.append(dict(device=dev, size=size, workload=w, tp=tp, k=k, policy=pol, e1_k=e1_k, e1_n=e1_n, model=r,
                        e_tp=med(floor, (dev, size, w, tp, n, pol)) - med(floor, (dev, size, w, tp, n, "baseline"))))
    return out


def width_law_lines(q):
    """The width law's table (width_law_pairs) per device, tp, workload and k: tp's extra against 1/tp of tp=1's at
    n_tracks = tp k, and against tp=1's at k beside the ratio the model carries."""
    pairs = width_law_pairs(q)
    def rng(xs):
        xs = [x for x in xs if x is not None]
        return f"{min(xs):.2f}-{max(xs):.2f} ({statistics.median(xs):.2f})" if xs else "- (no tp=1 row at k)"
    lines = ["", "**Past k = 2: the width law** (current-code rows of spd and grouped:4 at k tracks per GPU, with the "
             "tp=1 rows at n_tracks = tp k on their device: h100_tp1_width/, h200_tp1_width/ and the fits' tp=1 rows; "
             "ranges, median in brackets). A rank at tp holding k tracks runs 1/tp of what one GPU runs at n_tracks = "
             "tp k: the same tracks, as wide. At k = 2 the model carries tp=1's extra at the same k, whose tracks are "
             f"wider; from k = {WIDTH_LAW_MIN_K} it takes the law for the streams' bytes, weighted by their share of a "
             "stream's pass (tracks_ms, latency_fraction: about 0.8 in prefill_b8 and training, 0.3 in prefill_b1, "
             "none in decode):", "",
             "| device | tp | workload | k | pairs | tp extra / (tp=1 extra at n_tracks tp k / tp) | tp extra / tp=1 "
             "extra at k | the model's ratio to tp=1 at k |", "|---|---:|---|---:|---:|---|---|---|"]
    for dev, tp in sorted({(p["device"], p["tp"]) for p in pairs}):
        for w in WORKLOADS:
            for k in sorted({p["k"] for p in pairs if (p["device"], p["tp"], p["workload"]) == (dev, tp, w)}):
                ps = [p for p in pairs if (p["device"], p["tp"], p["workload"], p["k"]) == (dev, tp, w, k)]
                lines.append(f"| {dev} | {tp} | {w} | {k} | {len(ps)} | {rng([p['e_tp'] / (p['e1_n'] / tp) for p in ps])} | "
                             f"{rng([p['e_tp'] / p['e1_k'] if p['e1_k'] else None for p in ps])} | "
                             f"{rng([p['model'] for p in ps])} |")
    return lines


def validation_table(rows):
    lines = ["", "Columns: modeled ms (point: no overlap; ladder the midpoint of its bounds), its compute + tracks part and "
             "its all-reduce part; measured ms, and the measured floor (the same policy with every collective skipped, "
             "where stored) for telling a compute miss from a communication miss.", "",
             "| source | device | commit | code | size | workload | mode | tp | n_tracks | policy | modeled ms | modeled "
             "compute | modeled comm | measured ms | measured floor | modeled ÷ measured | in alpha/bw fit | held out by "
             "size ÷ measured | held out by device ÷ measured | calibration |",
             "|---|---|---|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (not r["target"], r["source"], r["size"], r["workload"], r["mode"],
                                         r["tp"], r["n_tracks"], r["policy"])):
        floor = f"{r['floor_ms']:.3f}" if r["floor_ms"] else "-"
        lines.append(f"| {r['source']} | {r['device']} | {r['commit']} | {r['impl']} | {r['size']} | {r['workload']} | "
                     f"{r['mode']} | {r['tp']} | {r['n_tracks']} | {r['policy']} | {r['pred']:.3f} | {r['compute']:.3f} | "
                     f"{r['comm']:.3f} | {r['ms']:.3f} | {floor} | {r['ratio']:.2f} | {'yes' if r['in_sample'] else 'no'} | "
                     + " | ".join(f"{r[k] / r['ms']:.2f}" if r[k] is not None else "-" for k in ("pred_loso", "pred_lodo"))
                     + f" | {r['calibration']} |")
    return lines


def write_validation(fit, tables, rows, held):
    lines = (validation_header(fit, tables, rows) + validation_errors(rows) + validation_notes(rows, fit, held)
             + width_law_lines(fit["replicated"]["q"]) + validation_table(rows))
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


def nearest_sync_spec(pol, n_layer, ref_layers=12):
    """The spec at n_layer whose syncs per forward are nearest the 124M (ref_layers) policy's: grouped:G of 124M
    becomes grouped:G' at n_layer; other policies keep their spec. Returns (spec, its syncs, 124M's syncs)."""
    ref = parse_sync_policy(pol, ref_layers).n_syncs
    if not pol.startswith("grouped:"):
        return pol, parse_sync_policy(pol, n_layer).n_syncs, ref
    cands = [g for g in range(1, n_layer + 1) if n_layer % g == 0]
    g = min(cands, key=lambda g: (abs(parse_sync_policy(f"grouped:{g}", n_layer).n_syncs - ref), g))
    return f"grouped:{g}", parse_sync_policy(f"grouped:{g}", n_layer).n_syncs, ref


def pareto(tables, fit, err, device="H100"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    gaps = loss_gaps()
    budgets = sorted({t for v in gaps.values() for t, *_ in v})
    made = []
    for size in ("124m", "xl"):
        n_layer = SHAPES[shape_of(size)[0]][0]
        for tp in (2, 4, 8):
            n_tracks = max(tp, 4)
            fig, ax = plt.subplots(figsize=(7.5, 5.4))
            labels = []
            base = predict(size, "train_b12", tp, "baseline", n_tracks, device, tables, fit, TRAINER_MODE)["ms"]
            for bi, tokens in enumerate(budgets):
                pts = []
                for pol in PARETO_POLICIES:
                    cell = [g for g in gaps.get(pol, []) if g[0] == tokens]
                    if not cell:
                        continue
                    _, gap, ci, n = cell[0]
                    spec, syncs, ref = nearest_sync_spec(pol, n_layer)
                    ms = predict(size, "train_b12", tp, spec, n_tracks, device, tables, fit, TRAINER_MODE)["ms"]
                    label = spec if size == "124m" or spec == pol else f"{spec} ({syncs}/fwd; loss: 124M {pol}, {ref}/fwd)"
                    pts.append((ms, gap, ci or 0.0, label, n))
                front = [p for p in pts if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in pts)]
                color = plt.cm.viridis(bi / max(1, len(budgets) - 1))
                for p in pts:
                    ax.errorbar(p[0], p[1], yerr=p[2], fmt="o" if p in front else "x", color=color, capsize=2, ms=6)
                    labels.append(ax.annotate(p[3], (p[0], p[1]), fontsize=6, xytext=(3, 3), textcoords="offset points"))
                front.sort()
                ax.plot([p[0] for p in front], [p[1] for p in front], "-", color=color, lw=1,
                        label=f"{tokens / 1e6:.1f}M tokens (front: o)")
                if bi == len(budgets) - 1:  # the model's error moves every point together: one shared shift
                    for f, ls in ((1 - err, ":"), (1 + err, "--")):
                        ax.plot([p[0] * f for p in front], [p[1] for p in front], ls, color="gray", lw=0.8,
                                label=f"that front, all times x{f:.2f} (shared error)")
            ax.axhline(0, color="gray", lw=0.5)
            ax.set_xlabel(f"modeled time per iteration, ms ({device}, tp={tp}, n_tracks {n_tracks}, 12 x 1024, "
                          f"baseline {base:.1f})")
            ax.set_ylabel("final val loss gap to baseline, % (measured at 124M, n_tracks 4)")
            note = (f"loss measured at 124M with n_tracks 4; time modeled with n_tracks {n_tracks}" if size == "124m" else
                    f"loss borrowed from 124M (n_tracks 4) at its nearest sync count, not measured at 1.5B; "
                    f"time modeled at 1.5B with n_tracks {n_tracks}")
            ax.set_title(f"{size}, tp={tp}: loss gap against modeled time\n{note}\nthe model's 90th-percentile time "
                         f"error ({100 * err:.0f}%) shifts all points together (gray lines); y bars: 95% t interval "
                         "over seeds", fontsize=8)
            ax.legend(fontsize=6)
            right = sum(ax.get_xlim()) / 2  # labels of the right half point left, so that none leaves the axes
            for a in labels:
                if a.xy[0] > right:
                    a.xyann = (-3, 3)
                    a.set_horizontalalignment("right")
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
def with_tp8(fit, how, bw=None):
    """The fit with tp=8's law replaced by tp=4's; with bw, its large messages (the high regime, or the one line) at
    that bus bandwidth."""
    e = dict(fit["by_tp"]["4"], how=how, fitted_on=[])
    if bw is not None and e.get("regimes"):
        e["regimes"] = e["regimes"][:-1] + [dict(e["regimes"][-1], bw_GBps=bw)]
    elif bw is not None:
        e["bw_GBps"] = bw
    return dict(fit, by_tp=dict(fit["by_tp"], **{"8": e}))


def comm_variants(tp, fit, held):
    """[(label, fit)]: the full fit and every held-out refit of validate() (the alpha/bw uncertainty at tp), and at
    tp=8 the sensitivity fits: tp=4's law held, and tp=4's with its large messages at the public busbw bound."""
    out = [("full fit", fit)] + [(f"without {key}", sp["fit"]) for d in held.values() for key, sp in sorted(d.items()) if sp]
    if tp > 2:  # only refits with a measured tp=4 law (its sweep or its rows): without, the ring law they contradict
        out = [(label, f) for label, f in out
               if f["by_tp"]["4"]["fitted_on"] or f["by_tp"]["4"].get("regimes_in_step")]
    if tp == 8:
        out.append(("tp=4 law held", with_tp8(fit, "tp=4's law held at tp=8")))
        out += [(f"public {g:.0f} GB/s", with_tp8(fit, "tp=4's law, large messages at public nccl-tests busbw", g))
                for g in PUBLIC_BUSBW["GBps"]]
    return out


def saving_with_interval(size, workload, tp, policy, n_tracks, device, tables, fit, rows, held):
    """One workload's answer as numbers, in its answer_mode: baseline's and the policy's predictions (b, p), the
    saving % under each alpha/bw fit (by), their range (lo, hi) and the held-out saving error that widens it (err,
    err_how). answer() prints it; analysis/plan.py reads it."""
    saving = lambda b, p: 100 * (1 - p["ms"] / b["ms"])
    at = lambda pol, f: predict(size, workload, tp, pol, n_tracks, device, tables, f, answer_mode(workload))
    b, p = at("baseline", fit), at(policy, fit)
    by = {label: saving(at("baseline", f), at(policy, f)) for label, f in comm_variants(tp, fit, held)}
    err, err_how = held_out_saving_error(rows, workload, n_tracks // tp)
    return dict(b=b, p=p, saving=saving(b, p), by=by, lo=min(by.values()), hi=max(by.values()), err=err,
                err_how=err_how)


def measured_saving_line(rows, size, workload, tp, n_tracks, policy, device):
    """A line with what stored current-code rows measured for the question, where some did: per run (source), the
    policy's saving against its baseline in that run, in the mode the question is priced in (answer_mode). None where
    no run measured both."""
    size = shape_of(size)[0]
    mode = answer_mode(workload)
    same = [r for r in rows if r["impl"] == "post-49" and r["mode"] == mode and (r["size"], r["workload"], r["tp"],
            r["n_tracks"], r["device"]) == (size, workload, tp, n_tracks, device) and r["policy"] in ("baseline", policy)]
    pairs = [p for p in savings(same, key="ms") if p["row"]["policy"] == policy]  # "ms": every row has it
    if not pairs:
        return None
    runs = "; ".join(f"{100 * p['measured']:+.1f}% in {p['row']['source']}" for p in pairs)
    return f"    measured (a stored run of this configuration, not the model): saves {runs}"


def comm_law_line(fit, tp, device, sweeps):
    """Which all-reduce law prices this tp and where it was measured; where that is not the asked device, whether
    any sweep on the asked device is stored at this tp (sweeps: load_sweeps()). None at tp=1 or a tp not modeled."""
    if str(tp) not in fit["by_tp"]:  # tp=1 has no all-reduce; another tp is refused by predict
        return None
    e = fit["by_tp"][str(tp)]
    line = f"  all-reduce at tp={tp}: {law_text(e)}; {e['how']}"
    measured_on = lambda how: next((d for d in DEVICES if d in how), None)  # the sweep's GPU, named in its source
    if tp == 8:  # extrapolated from the two measured laws: say where each was measured
        ons = {t: measured_on(fit["by_tp"][t]["how"]) or "?" for t in ("2", "4")}
        return line + f", from tp=2's law (measured on {ons['2']}) and tp=4's (measured on {ons['4']})"
    on = measured_on(e["how"])
    if on and on != device:
        own = [source for _, source, _, on_device in sweeps.get(tp, []) if on_device == device]
        line += (f". Measured on {on}, not {device}: " + (f"{device}'s own sweep is stored beside it ({own[0]})"
                 if own else f"no {device} all-reduce at {tp} ranks is stored"))
    return line


def far_k_line(rows, k):
    """How the full fit did on the stored current-code graph rows at this k tracks per GPU (else at every k past 2):
    time and saving error, and the policies' measured time over their run's baseline there."""
    def at(test):
        return [r for r in rows if r["impl"] == "post-49" and r["target"] and test(r["n_tracks"] // r["tp"])]
    sel, where = at(lambda kk: kk == k), f"at k = {k}"
    if not savings(sel):
        sel, where = at(lambda kk: kk > 2), "past k = 2 (none at this k)"
    t, pairs = time_stats(sel), savings(sel)
    if not t or not pairs:
        return f"  k = {k} tracks per GPU: no stored current-code row past k = 2 scores the model here"
    sv, ratios = saving_stats(pairs), [1 - p["measured"] for p in pairs]
    return (f"  k = {k} tracks per GPU: on the stored rows {where} ({t['n']} rows, full fit) the model's times are "
            f"within {100 * t['worst']:.0f}% and its savings within {sv['worst']:.0f} points, where the policies ran "
            f"{min(ratios):.2f}-{max(ratios):.2f}x their run's baseline (bench/results/step_model_validation.md)")


def answer(size, tp, policy, device, n_tracks, tables, fit, err, rows, held):
    """The question's lines: per workload the modeled times and the saving with an interval: the range of the
    saving over the alpha/bw fits (comm_variants), widened by the held-out saving error (held_out_saving_error);
    at tp=8 a sensitivity line."""
    lines = [f"{size} at tp={tp} on {device}, n_tracks {n_tracks} (modeled; times: stated error +-{100 * err:.0f}%, "
             f"the 90th percentile of |error| over the stored graph rows; savings: interval = their range over "
             f"the alpha/bw fits at tp={tp}, widened by the 90th-percentile held-out saving error):"]
    law = comm_law_line(fit, tp, device, load_sweeps())
    lines += [law] if law else []
    for w, unit in (("train_b12", "ms per training iteration (12 x 1024, AdamW)"), ("decode_b1", "ms per token (batch 1)"),
                    ("decode_b8", "ms per token (batch 8)")):
        a = saving_with_interval(size, w, tp, policy, n_tracks, device, tables, fit, rows, held)
        b, p, by, e, e_how, lo, hi = a["b"], a["p"], a["by"], a["err"], a["err_how"], a["lo"], a["hi"]
        lines.append(f"  {w}: baseline {b['ms']:.2f}, {policy} {p['ms']:.2f} {unit}: saves {a['saving']:.0f}% "
                     f"(interval {lo - e:.0f}% .. {hi + e:.0f}%: {lo:.0f}% .. {hi:.0f}% over {len(by)} alpha/bw fits, "
                     f"+-{e:.0f} points held-out error [{e_how}]; time bounds {p['full_overlap']:.2f} .. "
                     f"{p['no_overlap']:.2f}; compute {p['compute']:.2f} + tracks {p['tracks']:.2f} + all-reduce "
                     f"{p['comm']:.2f}; calibration: {p['calibration']})")
        seen = measured_saving_line(rows, size, w, tp, n_tracks, policy, device)
        lines += [seen] if seen else []
        if tp == 8:
            pub = [v for k, v in by.items() if k.startswith("public")]
            lines.append(f"    sensitivity at tp=8: saves {by['full fit']:.0f}% with the extrapolated law "
                         f"({law_text(fit['by_tp']['8'])}); {by['tp=4 law held']:.0f}% with tp=4's held "
                         f"({law_text(fit['by_tp']['4'])}); {min(pub):.0f}% .. {max(pub):.0f}% with tp=4's and its large "
                         f"messages at the public nccl-tests busbw {PUBLIC_BUSBW['GBps'][0]:.0f}-"
                         f"{PUBLIC_BUSBW['GBps'][1]:.0f} GB/s ({PUBLIC_BUSBW['url']})")
    e, k = family(tables, size, "train_b12", TRAINER_MODE, device)[0], n_tracks // tp
    measured_k = sorted({kk for t in tables.values() for f in t.values() for kk in f.get("streams_by_k", {})})
    if k > 2:  # past two tracks per GPU the saving's error in points outgrows the targets: say by how much
        lines += [far_k_line(rows, k)]
    if k > max(measured_k, default=1):
        lines.append(f"  k = {k} tracks per GPU is past every tp=1 row's k ({', '.join(map(str, measured_k))}): the "
                     f"streams term's per-track part is carried linearly in k - 1 (q {e.get('q', 1.0):.2f} in training, "
                     f"fit_replicated). `bench.tp_latency --n_tracks {k}` at tp=1 measures this k.")
    lines.append(f"  tracks term: at one track per GPU the policy's counted elementwise passes only (coefficient "
                 f"{e.get('c1', 1.0):.2f}: {e.get('c1_how', '-')}); at k >= 2 also the extra streams' term "
                 f"({e.get('streams_how', '-')}). Validated on the current code's rows: "
                 "bench/results/step_model_validation.md.")
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
        ap = OneLineArgumentParser(prog="python -m bench.step_model calibrate-compare", formatter_class=HelpFormatter,
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
        ap = OneLineArgumentParser(prog="python -m bench.step_model calibrate", formatter_class=HelpFormatter,
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
    ap = OneLineArgumentParser(prog="python -m bench.step_model", description=__doc__.split("\n\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--validate", action="store_true", help="predict every stored tp>=2 row; write the table")
    ap.add_argument("--pareto", action="store_true", help="loss gap against modeled time; the 70B-class table")
    ap.add_argument("--size", default="xl", help=f"one of {', '.join(list(SHAPES) + list(ALIASES))}")
    ap.add_argument("--tp", type=positive_int, default=8, help="tensor-parallel degree: 1, 2, 4 or 8")
    ap.add_argument("--policy", default="grouped:4", help="a sync_policy spec, as train_reduced_sync.py takes it")
    ap.add_argument("--n_tracks", type=positive_int, default=None, help="default: tp (one track per GPU)")
    ap.add_argument("--device", default="H100", help=f"one of {', '.join(DEVICES)}")
    a = ap.parse_args(argv)
    if a.device not in DEVICES:
        ap.error(f"unknown --device {a.device!r}; allowed: {', '.join(DEVICES)}")
    if a.tp not in MODELED_TPS:  # before the fits, which take seconds
        ap.error(f"--tp {a.tp}: tp={a.tp} is not modeled; allowed: {', '.join(map(str, MODELED_TPS))}")
    fit, tables, rows, held = validate()
    err = time_error(rows)
    if a.validate:  # the fit and calibration files are written here only: a question reads, never writes
        write_json("step_model_comm_fit.json", fit)
        for device, table in tables.items():
            write_json(f"step_model_compute_{device.lower()}.json", table)
        lines = write_validation(fit, tables, rows, held)
        print("\n".join(lines[:lines.index("## Scores per code, device and tp") + 2 + len(score_table(rows))]))
        print(f"table: {os.path.relpath(os.path.join(RESULTS, 'step_model_validation.md'), REPO)}")
    if a.pareto:
        for path in pareto(tables, fit, err):
            print(path)
        print("\n".join(paper_table(tables, fit, err)))
    if not (a.validate or a.pareto):
        try:
            print("\n".join(answer(a.size, a.tp, a.policy, a.device, a.n_tracks or a.tp, tables, fit, err, rows, held)))
        except ValueError as e:
            ap.error(str(e))


if __name__ == "__main__":
    sys.exit(guarded(main))  # Ctrl-C, SIGTERM and a closed stdout end in one line
