"""--pareto: the budget study's loss gaps against modeled time (figures), and the 70B-class table beside the papers."""
import json
import os

from bench.steptime.predict import predict
from bench.steptime.shapes import SHAPES, TRAINER_MODE, shape_of
from model.sync_policy import parse_sync_policy
from training.config import REPO, save_figure, write_text


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


def nearest_sync_spec(pol, n_layer, ref_layers=12):
    """The spec at n_layer whose syncs per forward are nearest the 124M (ref_layers) policy's: grouped:G of 124M
    becomes grouped:G' at n_layer; other policies keep their spec. Returns (spec, its syncs, 124M's syncs)."""
    ref = parse_sync_policy(pol, ref_layers).n_syncs
    if not pol.startswith("grouped:"):
        return pol, parse_sync_policy(pol, n_layer).n_syncs, ref
    cands = [g for g in range(1, n_layer + 1) if n_layer % g == 0]
    g = min(cands, key=lambda g: (abs(parse_sync_policy(f"grouped:{g}", n_layer).n_syncs - ref), g))
    return f"grouped:{g}", parse_sync_policy(f"grouped:{g}", n_layer).n_syncs, ref


def pareto(tables, fit, err, out_dir, device="H100"):
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
            path = os.path.join(out_dir, f"step_model_pareto_{size}_tp{tp}.png")
            save_figure(fig, path, dpi=110)
            made.append(os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path)
    return made


def paper_table(tables, fit, err, out_dir, device="H100"):
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
    write_text(os.path.join(out_dir, "step_model_70b_tp8.md"), "\n".join(lines) + "\n")
    return lines
