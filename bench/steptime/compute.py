"""The compute model: each sublayer's FLOPs, bytes and kernels at a shard width, their roofline time, the extra
streams' and counted passes' units, and the per-sublayer times `calibrate` measured."""
import json
import os

from bench.steptime.shapes import DEVICES, LAT, RESULTS, WORKLOADS, shape_of


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


def op_pass(size, workload, device):
    """One elementwise pass over the step's stream before scaling, in s: read two [N, C], write one (fp32 in
    training under autocast, bf16 in inference, as bench.tp_latency runs them), plus a kernel's latency."""
    L, H, C, V = shape_of(size)[1]
    b, T, ctx, train, opt = WORKLOADS[workload]
    return LAT + 3 * b * T * C * (4 if train else 2) / DEVICES[device]["hbm"]


def kernel_count(size, workload, tp):
    return sum(n for f, by, n in sublayers(size, workload, tp).values())


def step_roofline(size, workload, tp, device):
    """The roofline of one rank's step, in s: the sum over its sublayers."""
    return sum(roofline(sublayers(size, workload, tp), device).values())


def latency_fraction(workload, device):
    """The part of an extra stream's pass (stream_pass) that is launch latency rather than bytes."""
    b, T = WORKLOADS[workload][:2]
    lat, by = LAT / STREAM_WIDTH, b * T * 4 / DEVICES[device]["hbm"]
    return lat / (lat + by)


# how `calibrate` times decode attention; a calibration without this tag (the first H100 one) concatenated the
# cache each call, which at batch 8 is most of its time: its decode rows are not used
DECODE_CACHE = "written in place"


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
