"""One question (size, tp, policy, device): modeled times and the saving with its interval, the law that prices its
all-reduces, and what stored rows measured for it."""
from bench.steptime.comm import PUBLIC_BUSBW, law_text, load_sweeps
from bench.steptime.families import family
from bench.steptime.predict import predict
from bench.steptime.scores import held_out_saving_error, saving_stats, savings, time_stats
from bench.steptime.shapes import DEVICES, TRAINER_MODE, answer_mode, shape_of


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
