"""The communication law: one all-reduce's time at tp, t = alpha(tp) + 2(tp-1)/tp * bytes / bw, with its two
regimes where a sweep measured the protocol change, and the fits that give alpha and bw (sweeps, rows over their
floors, the stored profiles), tp=8 extrapolated."""
import glob
import json
import os
import statistics

from bench.steptime.policy import collectives
from bench.steptime.shapes import RESULTS, SHAPES, WORKLOADS, device_name, mode_class
from training.config import REPO


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


def law_text(e):
    """One tp's all-reduce law in a few words: its two regimes where it has them, else its one line."""
    if e.get("regimes"):
        lo, hi = e["regimes"]
        return (f"{lo['alpha_us']:.1f} us + bytes at {lo['bw_GBps']:.0f} GB/s up to {lo['max_bytes'] / 2 ** 20:.2f} MiB, "
                f"{hi['alpha_us']:.1f} us + bytes at {hi['bw_GBps']:.0f} GB/s above")
    return f"{e['alpha_us']:.1f} us + bytes at {e['bw_GBps']:.0f} GB/s"
