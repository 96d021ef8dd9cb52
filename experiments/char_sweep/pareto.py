#!/usr/bin/env python3
"""Loss against measured time: each policy's val loss (mean ± std over seeds, from
compare_runs.py --stats-json) against its measured ms per training iteration at tp=2 (from
bench/train_throughput.py's JSON, on GPUs), for the same model shape; the Pareto front marked.

    torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size char384 --batch_size 64 \\
        --variants tp2 --tp2_n_tracks 2,6 --modes compiled-graphs \\
        --policies 'baseline;spd;parallel;ladder;grouped:2;grouped:3;grouped:6' --out_dir OUT   # on 2 GPUs
    python -m experiments.char_sweep.pareto --stats experiments/char_sweep/stats.json \\
        --throughput bench/results/train_throughput_char384.json --out experiments/char_sweep/pareto_w384.png

A stats cell (setting = dataset, n_layer, n_embd, n_tracks, max_iters) joins the throughput rows of
group tp2 with the same n_layer and n_embd (the JSON's meta) and n_tracks, the same policy and --mode.
A point is on the front when no other point of its n_tracks is both faster and lower in loss. Writes
the PNG and a markdown table beside it (same name, .md); cells without a timed row are listed as such.
"""
import json
import sys

if __name__ == "__main__" and not __package__:  # run by its path: the imports below need the repository root
    sys.exit("run it from the repository root as: python -m experiments.char_sweep.pareto " + " ".join(sys.argv[1:]))

from bench.common import pyplot
from training.config import HelpFormatter, OneLineArgumentParser, save_figure, write_text
from training.cli import guarded


def load_points(stats_path, throughput_path, mode, metric):
    with open(stats_path) as f:
        cells = json.load(f)["stats"]["cells"]
    with open(throughput_path) as f:
        bench = json.load(f)
    meta = bench["meta"]
    ms = {(r["n_tracks"], r["policy"]): r["ms"] for r in bench["rows"]
          if r["group"] == "tp2" and r["mode"] == mode and r.get("error") is None and r.get("ms") is not None
          and not r.get("floor")}  # a --floors twin: no communication, not the row
    points, missing = [], []
    for cell in cells:
        _, n_layer, n_embd, n_tracks, _ = cell["setting"]
        if (n_layer, n_embd) != (meta["n_layer"], meta["n_embd"]):
            continue
        time_ms = ms.get((n_tracks, cell["policy"]))
        if time_ms is None:
            missing.append(f"{cell['label']} {cell['policy']}")
            continue
        points.append(dict(label=cell["label"], n_tracks=n_tracks, policy=cell["policy"], syncs=cell["syncs"],
                           ms=time_ms, loss=cell[metric]["mean"], std=cell[metric]["std"], seeds=len(cell["seeds"])))
    for p in points:
        p["front"] = not any(q is not p and q["n_tracks"] == p["n_tracks"] and q["ms"] <= p["ms"]
                             and q["loss"] <= p["loss"] and (q["ms"], q["loss"]) != (p["ms"], p["loss"])
                             for q in points)
    return points, missing, meta


def table(points, missing, meta, mode, metric):
    lines = [f"# {metric.replace('_', ' ')} against ms/iter at tp=2 ({mode}; {meta.get('device', '?')}, "
             f"{meta.get('n_gpus', '?')} GPUs, torch {meta.get('torch', '?')}, commit {meta.get('commit', '?')}, "
             f"batch {meta.get('batch_size', '?')} x {meta.get('seq_len', '?')})\n",
             "| setting | policy | syncs/fwd | ms/iter | loss (mean ± std) | seeds | Pareto front |",
             "|---|---|---:|---:|---|---:|---|"]
    for p in sorted(points, key=lambda p: (p["n_tracks"], p["ms"])):
        lines.append(f"| {p['label']} | {p['policy']} | {p['syncs']} | {p['ms']:.2f} | {p['loss']:.4f} ± "
                     f"{p['std']:.4f} | {p['seeds']} | {'yes' if p['front'] else ''} |")
    if missing:
        lines.append(f"\nNo timed row for: {', '.join(missing)}")
    return "\n".join(lines) + "\n"


def plot(points, path, title):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n in sorted({p["n_tracks"] for p in points}):
        mine = sorted((p for p in points if p["n_tracks"] == n), key=lambda p: p["ms"])
        bars = ax.errorbar([p["ms"] for p in mine], [p["loss"] for p in mine], yerr=[p["std"] for p in mine],
                           fmt="o", capsize=3, label=f"n_tracks {n}")
        front = [p for p in mine if p["front"]]
        ax.plot([p["ms"] for p in front], [p["loss"] for p in front], "--", color=bars[0].get_color(), alpha=0.6)
        for p in mine:
            ax.annotate(p["policy"], (p["ms"], p["loss"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("ms per training iteration at tp=2 (measured)")
    ax.set_ylabel("val loss (mean ± std over seeds)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main(argv=None):
    p = OneLineArgumentParser(formatter_class=HelpFormatter, prog="python -m experiments.char_sweep.pareto", description=__doc__.split("\n\n")[0])
    p.add_argument("--stats", required=True, help="compare_runs.py --stats-json output")
    p.add_argument("--throughput", required=True, help="bench/train_throughput.py's train_throughput.json")
    p.add_argument("--mode", default="compiled-graphs", help="the throughput rows' mode")
    p.add_argument("--metric", choices=("final_val", "best_val"), default="final_val")
    p.add_argument("--out", required=True, help="PNG path (the table goes beside it as .md)")
    args = p.parse_args(argv)
    if not args.out.endswith(".png"):
        p.error(f"--out must end in .png, got {args.out!r}")
    try:
        points, missing, meta = load_points(args.stats, args.throughput, args.mode, args.metric)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot join {args.stats} and {args.throughput}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not points:
        print(f"error: no stats cell of {args.stats} has a tp2 '{args.mode}' row of the same shape in "
              f"{args.throughput} (missing: {', '.join(missing) or 'every cell has another shape'})", file=sys.stderr)
        return 1
    text = table(points, missing, meta, args.mode, args.metric)
    print(text)
    plot(points, args.out, text.splitlines()[0].lstrip("# "))
    write_text(args.out[:-4] + ".md", text)
    print(f"wrote {args.out} and {args.out[:-4]}.md")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))
