"""How steadily a run trained, from its metrics.jsonl: the budget study's stability tables (report.py's answer.md,
and `python -m experiments.large_budgets.report --stability FOLDER` for any folder of runs).

Per run: the median gradient norm (before clipping) over the last quarter of its iterations, the largest after the
first 5% (where every run starts high) and where, the val loss at 3/4 of the run and at its end (a loss that rises
while the learning rate decays is an instability, not the policy's cost at its best). Runs that logged each layer's
gradient norm (the trainer's --log_layer_grad_norms: the embeddings, each block, the final LayerNorm) also give the
layer with the largest share of the squared norm at the peak, and the layer with the largest median share over the
last quarter.
"""
import json
import os
import statistics

from experiments.runner import read_records


def stability(records):
    """How steady one run trained: the median gradient norm (before clipping) over its last quarter of iterations,
    its largest after the first 5% (where every run starts high), and the val loss at 3/4 of the run and at its
    end (a loss that rises while the learning rate decays is an instability, not the policy's cost at its best)."""
    train = [r for r in records if r.get("type") == "train" and r.get("grad_norm") is not None]
    evals = sorted((r["iter"], r["val_loss"]) for r in records if r.get("type") == "eval")
    if not train or not evals:
        return None
    end = evals[-1][0]
    late = sorted(r["grad_norm"] for r in train if r["iter"] >= 0.75 * end)
    steady = [r for r in train if r["iter"] >= 0.05 * end] or train
    peak = max(steady, key=lambda r: r["grad_norm"])
    three_quarters = min(evals, key=lambda e: abs(e[0] - 0.75 * end))
    if not late:  # a run stopped before its last quarter was logged
        return None
    median = (late[(len(late) - 1) // 2] + late[len(late) // 2]) / 2
    result = {"late_median_grad_norm": median, "max_grad_norm": peak["grad_norm"], "max_at": peak["iter"],
              "val_at_three_quarters": three_quarters[1], "three_quarters_iter": three_quarters[0],
              "val_final": evals[-1][1], "iters": end}
    layers = peak.get("grad_norm_layers")  # logged with --log_layer_grad_norms: where the largest norm sat
    if layers:
        name = max(layers, key=layers.get)
        result["peak_layer"] = (name, layers[name] ** 2 / sum(v * v for v in layers.values()))
    # and where the norm sat over the last quarter: each layer's median share of norm², the largest of them (a
    # peak can be one step; the late share says which layer kept the norm up while the learning rate decayed)
    shares = {}
    for r in train:
        if r["iter"] >= 0.75 * end and r.get("grad_norm_layers"):
            total = sum(v * v for v in r["grad_norm_layers"].values()) or 1.0
            for layer, v in r["grad_norm_layers"].items():
                shares.setdefault(layer, []).append(v * v / total)
    if shares:
        medians = {layer: statistics.median(x) for layer, x in shares.items()}
        name = max(medians, key=medians.get)
        result["late_layer"] = (name, medians[name])
    return result


def stability_table(rows):
    """Markdown lines of (width, run name, stability() or None) rows; a run without train records is left out."""
    # runs that logged each layer's norm add two columns: the layer with the largest norm at the peak, and its
    # share of the squared norm there; the layer with the largest median share over the last quarter
    by_layer = any(s and "peak_layer" in s for _, _, s in rows)
    lines = ["| width | run | late median grad norm | largest grad norm (iter) | val at 3/4 (iter) | val at end |"
             + (" largest layer at the peak (share of norm²) | largest layer, last quarter (median share) |"
                if by_layer else ""),
             "|---:|---|---:|---:|---:|---:|" + ("---|---|" if by_layer else "")]

    def layer_cell(s, key):
        return f" {s[key][0]} ({100 * s[key][1]:.0f}%) |" if key in s else " |"
    for width, name, s in rows:
        if s is not None:
            layer = layer_cell(s, "peak_layer") + layer_cell(s, "late_layer") if by_layer else ""
            lines.append(f"| {width} | {name} | {s['late_median_grad_norm']:.2f} | {s['max_grad_norm']:.1f} "
                         f"({s['max_at']}) | {s['val_at_three_quarters']:.4f} ({s['three_quarters_iter']}) | "
                         f"{s['val_final']:.4f} |" + layer)
    return lines


def folder_stability(folder):
    """stability_table's rows for every run folder (one holding metrics.jsonl and config.json) under folder."""
    rows = []
    for name in sorted(os.listdir(folder)):
        run = os.path.join(folder, name)
        if os.path.isfile(os.path.join(run, "metrics.jsonl")) and os.path.isfile(os.path.join(run, "config.json")):
            with open(os.path.join(run, "config.json")) as f:
                width = json.load(f).get("n_embd", "?")
            rows.append((width, name, stability(read_records(os.path.join(run, "metrics.jsonl")))))
    return rows
