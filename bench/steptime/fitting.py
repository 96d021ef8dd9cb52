"""Every fitted quantity from the rows a split keeps (fit_split): the families, the all-reduce law per tp, the gap
between kernels and ladder's hidden fraction; and the full fit's annotated all-reduce record (comm_fit)."""
import statistics

from bench.steptime.comm import (PROFILE_CONFIG, PUBLIC_BUSBW, allreduce_ms, comm_by_tp, ddp_flat_check,
                                 extrapolate_regimes, fit_comm, fit_comm_rows, load_sweeps, profile_points,
                                 row_comm_points, rows_regimes, sweep_regimes)
from bench.steptime.compute import kernel_count, measured_sublayers, roofline, sublayers
from bench.steptime.families import calibrate_from_rows, fit_replicated, mlp_ratios, resolve_streams
from bench.steptime.predict import predict
from bench.steptime.rows import feeds_fits, saving_config
from bench.steptime.shapes import DEVICES, WORKLOADS


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
