"""Fitting a family's compute and tracks terms from its tp=1 rows: the scale over the roofline, the counted passes'
coefficient, the extra streams' coefficients and how a family without its own borrows another's."""
import math
import statistics

from bench.steptime.compute import op_pass, roofline, stream_pass, sublayers
from bench.steptime.policy import policy_ops, tracks_features
from bench.steptime.rows import feeds_fits
from bench.steptime.shapes import SHAPES, WORKLOADS, mode_class, shape_of


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
