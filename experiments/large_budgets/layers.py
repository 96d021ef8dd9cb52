"""Where an unsteady run's gradient norm sits, layer by layer: for the budget study's cosine runs that logged each
layer's gradient norm (the trainer's --log_layer_grad_norms) and whose norm ran above twice their seed's baseline's
(curves.unsteady_from), each layer's share of the squared norm at every log interval, under the total norm.

    share_l(i) = ||g_l(i)||^2 / sum_k ||g_k(i)||^2,   l in (emb, h0, ..., h<n_layer - 1>, final)

emb: the token and position embeddings (the LM head is the token embedding's tied weight); h<k>: block k; final:
the last LayerNorm. python -m experiments.large_budgets.report draws layers_w<width>.png beside this file for every
width with such a run, and checks/<check>/layers.png for a check's, and tables in answer.md, per run, the median
shares over three phases: before the norm left the baseline's, from there to the run's largest norm, and from that
norm on (phase_rows); with the share of the blocks up to the policy's first sync, where the tracks' streams first
meet again (the first group).
"""
import re
import statistics

from experiments.large_budgets.curves import gap_curve, unsteady_from
from model.sync_policy import parse_sync_policy
from training.step import layer_rank


def layer_series(records):
    """[(iter, {layer: gradient norm})] of a run's train records that logged grad_norm_layers, iteration 0 left
    out (every run's first, large norm)."""
    return [(r["iter"], r["grad_norm_layers"]) for r in records
            if r.get("type") == "train" and r.get("grad_norm_layers") and r["iter"] > 0]


def shares(series):
    """(iters, layers in the trainer's order (training.step.layer_rank), rows: for each layer its share of norm² at
    each iteration)."""
    layers = sorted({name for _, norms in series for name in norms}, key=layer_rank)
    iters = [i for i, _ in series]
    totals = [sum(v * v for v in norms.values()) or 1.0 for _, norms in series]
    rows = [[norms.get(name, 0.0) ** 2 / total for (_, norms), total in zip(series, totals)] for name in layers]
    return iters, layers, rows


def synced_blocks(policy, n_layer):
    """The blocks after whose MLP the policy's tracks all-reduce (model/sync_policy.py), 0-based; none where the
    policy does not fit n_layer (a run that logged only some of its blocks)."""
    try:
        sync = parse_sync_policy(policy, n_layer).sync
    except ValueError:
        return []
    return [block for block in range(n_layer) if sync[2 * block + 1]]


def blocks_of(layers):
    """n_layer as the layer names say: one more than the largest block number."""
    return 1 + max((int(name[1:]) for name in layers if re.fullmatch(r"h\d+", name)), default=-1)


def first_group(policy, layers):
    """The blocks (layer names) up to and including the first one after whose MLP the policy syncs."""
    synced = synced_blocks(policy, blocks_of(layers))
    return [f"h{k}" for k in range(synced[0] + 1)] if synced else []


def unsteady_runs(runs):
    """[(run, the iteration its norm left the baseline's, its final gap %)] of by_policy_seed's runs with a layer
    series and a baseline of the same seed, whose norm ran above twice the baseline's, by policy and seed."""
    found = []
    for (policy, seed), run in sorted(runs.items()):
        base = runs.get(("baseline", seed))
        if policy != "baseline" and base is not None and run.get("layers"):
            since, gaps = unsteady_from(run, base), gap_curve(run, base)
            if since is not None and gaps:
                found.append((run, since, gaps[-1][1]))
    return found


def plot_layers(panels, path, title):
    """One row a run: a heatmap of each layer's share of norm² against the iteration, the total norm over it (log,
    right axis) and a dashed line where the norm left the baseline's. Returns the number of runs drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    from atomic_files import save_figure

    if not panels:
        return 0
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 0.5 + 2.4 * len(panels)), squeeze=False)
    for ax, (run, since, final_gap) in zip((row[0] for row in axes), panels):
        iters, layers, rows = shares(run["layers"])
        edges = iters + [iters[-1] + (iters[-1] - iters[-2] if len(iters) > 1 else 1)]
        mesh = ax.pcolormesh(edges, range(len(layers) + 1), rows, cmap="viridis", vmin=0, vmax=1, shading="flat")
        ax.set_yticks([k + 0.5 for k in range(len(layers))], layers, fontsize=6)
        ax.invert_yaxis()  # emb on top, as the model reads
        ax.axvline(since, color="white", ls="--", lw=1)
        for block in synced_blocks(run["policy"], blocks_of(layers)):  # where the tracks' streams are summed again
            ax.axhline(layers.index(f"h{block}") + 1, color="white", ls=":", lw=0.8)
        norm = ax.twinx()
        norm.plot(*zip(*run["grad"]), color="white", lw=0.7)
        norm.plot(*zip(*run["grad"]), color="black", lw=0.3)
        norm.set_yscale("log")
        # plain numbers at 1-2-5: matplotlib labels the minor ticks of a short log range as 3x10^0, which runs into
        # the colour bar
        values = [g for _, g in run["grad"]]
        norm.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5) if max(values) < 100 * min(values) else (1,)))
        norm.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        norm.yaxis.set_minor_formatter(NullFormatter())
        norm.tick_params(labelsize=6)
        norm.set_ylabel("grad norm (log)", fontsize=7)
        ax.set_title(f"{run['name']}: final gap {final_gap:+.2f}%; norm above twice the baseline's from "
                     f"iteration {since:,} (dashed); dotted: a sync after the block's MLP", fontsize=8)
        ax.set_ylabel("layer", fontsize=7)
        fig.colorbar(mesh, ax=norm, pad=0.08, fraction=0.03, label="share of norm²")
    axes[-1][0].set_xlabel("iteration")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return len(panels)


def phase_rows(label, unsteady):
    """Per unsteady run (unsteady_runs' list) and phase: (label, run name, phase, first and last iteration logged in
    it, [(layer, median share)] of the three largest, the first group's median share, the first group's blocks)."""
    rows = []
    for run, since, _ in unsteady:
        iters, layers, table = shares(run["layers"])
        peak = (run.get("stability") or {}).get("max_at") or max(run["grad"], key=lambda g: g[1])[0]
        group = [layers.index(name) for name in first_group(run["policy"], layers) if name in layers]
        for phase, low, high in (("before the norm left the baseline's", 0, since),
                                 ("from there to the largest norm", since, peak),
                                 ("from the largest norm on", peak, float("inf"))):
            at = [k for k, i in enumerate(iters) if low <= i < high]
            if not at:
                continue
            medians = {name: statistics.median(row[k] for k in at) for name, row in zip(layers, table)}
            top = sorted(medians.items(), key=lambda item: -item[1])[:3]
            together = statistics.median(sum(table[j][k] for j in group) for k in at) if group else None
            rows.append((label, run["name"], phase, iters[at[0]], iters[at[-1]], top, together,
                         [layers[j] for j in group]))
    return rows


def render_phases(rows):
    """The markdown section of phase_rows' rows (report.py puts it in answer.md)."""
    lines = ["## Where the unsteady runs' gradient norm sat", "",
             "Per cosine run that logged each layer's gradient norm and whose norm ran above twice its seed's "
             "baseline's (layers.py; the figures layers_w<width>.png): each layer's share of the squared norm at "
             "every log interval, its median over three phases (split where the norm left the baseline's and at "
             "the run's largest norm), the three largest, and the median share of the blocks up to the policy's "
             "first sync (the first group, where the tracks' streams first meet again).", "",
             "| width | run | phase (iterations) | largest median shares | first group (median share) |",
             "|---:|---|---|---|---|"]
    for label, name, phase, first, last, top, together, group in rows:
        shares_text = ", ".join(f"{layer} {100 * share:.0f}%" for layer, share in top)
        blocks = group[0] if len(group) == 1 else f"{group[0]}-{group[-1]}"  # spd's first group is block 0 alone
        group_text = f"{blocks}: {100 * together:.0f}%" if together is not None else ""
        lines.append(f"| {label} | {name} | {phase} ({first:,}-{last:,}) | {shares_text} | {group_text} |")
    return "\n".join(lines) + "\n"
