"""The runner's --hold: which runs a sweep starts so that they end before the machine is given back, and on which GPU.

A run cut at the hold is lost (its checkpoints cannot leave the machine), so a run starts only when its expected
seconds (experiments/run_time.py) plus HOLD_MARGIN_S fit in what is left of the hold (hold_check). Before the
sweep starts, the plan (hold_plan) picks whole chains:

    chain     a run that waits for no pending run, with the pending runs whose own processes start from its
              checkpoints; kept or left out whole, at the sum of its runs' estimates;
    one GPU   of the chains with an estimate for every run, taken in the grid's order, each chain that still lets
              the GPU be filled to within FILL_SLACK (5%) of the fullest packing of the hold less HOLD_MARGIN_S
              (subset sums in whole seconds); so the plan fills the GPU nearly as well as it can be filled, and
              of such plans keeps the one earliest in the grid: the fullest plan alone took no baseline of width
              384's 18 chains on two GPUs, where each seed's gaps need its baseline (tests/test_run_time.py);
    G GPUs    the same G times, GPU 0 first, each over the chains the GPUs before it did not take; each
              kept chain's runs then start on their GPU only, one run at a time there, so every GPU runs the chains
              packed for it, one after another, as on one GPU;
    pairs     a chain of a seed whose baseline chain is waiting to start too is kept only if that baseline is:
              the plan is redone without the chains it kept alone, until it keeps none (their gaps need it);
    balance   the kept chains are then spread over the GPUs longest first, each to the GPU with the least so far,
              where that ends the sweep sooner and keeps every GPU within the hold: packing GPU 0 first put
              width 384's last three chains on it and one on GPU 1 (1,305 s against 332), where spread they end
              by 854 s and a sweep queued behind them (gpu.sh's AFTER=1) gets the rest.

Starting runs first-fit in the grid's order instead held two width-768 WSD chains where three fitted
(experiments/large_budgets/w768/calls/README.md). The G packings one after another are not the best packing of G
bins in general, but each GPU is filled as one GPU would be, which is what the estimates are for: a run alone on
its GPU (--jobs should be the GPUs' count). A chain longer than the hold is left to hold_check, which says so;
chains without an estimate start as without --hold, on any GPU free.
"""
import math
import os

import numpy as np

from experiments.run_time import expected_seconds, stored_rates, study_folders

HOLD_MARGIN_S = 30.0  # what --hold leaves after a run's expected end: packing the logs, the call's return
FILL_SLACK = 0.05  # the share of a GPU's hold the plan gives up, at most, to keep the grid's earlier chains


def study_rates(run, root, cache):
    """stored_rates of the run's study folders, read once a sweep (cache: {folders: rates})."""
    folders = tuple(study_folders(run, root))
    if folders not in cache:
        cache[folders] = stored_rates(folders)
    return cache[folders]


def run_estimate(run, argv, root, rates):
    """expected_seconds of the run launched with argv, its study's rates read once a sweep (rates: the cache)."""
    return expected_seconds(run, argv, root, study_rates(run, root, rates))


def hold_check(run, argv, root, time_left, rates):
    """None when the run is expected to end within time_left seconds (or has no estimate), else the line that
    says why it is not started. rates: study_rates' cache."""
    expected = run_estimate(run, argv, root, rates)
    if expected is None or expected + HOLD_MARGIN_S <= time_left:
        return None
    return f"not started: expected {expected:.0f} s, {time_left:.0f} s of the hold left"


def trunk_of(run):
    """The name of the run whose end (Run.after) or checkpoint (Run.needs, in its scratch dir) this run waits for,
    else None."""
    return run.after or (run.needs and os.path.basename(os.path.dirname(run.needs))) or None


def fullest(weights, capacity, candidates):
    """The most seconds within capacity that a subset of candidates' weights sums to (subset sums, in seconds)."""
    reach = np.zeros(capacity + 1, dtype=bool)
    reach[0] = True
    for i in candidates:
        if weights[i] <= capacity:
            reach[weights[i]:] = reach[weights[i]:] | reach[:capacity + 1 - weights[i]]
    return int(np.flatnonzero(reach)[-1])


def pack_one_gpu(weights, capacity, candidates):
    """The indices among candidates that one GPU runs: in the grid's order, each chain is kept when the GPU can still
    be filled to within FILL_SLACK of the fullest packing with it, so no plan fills less than that and an earlier
    chain (a seed's baseline, first in the grid) is not traded for a few seconds of fill."""
    best = fullest(weights, capacity, candidates)
    floor = best - FILL_SLACK * capacity
    kept, room, order = [], capacity, sorted(candidates)
    for n, i in enumerate(order):
        if weights[i] <= room and (capacity - room + weights[i]
                                   + fullest(weights, room - weights[i], order[n + 1:])) >= floor:
            kept.append(i)
            room -= weights[i]
    return kept


def balanced(gpu_of, weights, gpus, capacity):
    """gpu_of ({chain: GPU}) spread longest first, each chain to the GPU with the fewest seconds so far (ties to the
    lower GPU, then the earlier chain), if that lowers the largest GPU's seconds within capacity; else gpu_of."""
    loads, spread = [0] * gpus, {}
    for i in sorted(gpu_of, key=lambda i: (-weights[i], i)):
        spread[i] = min(range(gpus), key=lambda g: (loads[g], g))
        loads[spread[i]] += weights[i]
    packed = [sum(weights[i] for i, g in gpu_of.items() if g == gpu) for gpu in range(gpus)]
    return spread if max(loads) < max(packed) and max(loads) <= capacity else gpu_of


def hold_plan(runs, states, scratch, root, hold, rates, gpus=1):
    """The plan of a sweep under --hold on `gpus` GPUs (the module docstring): ({name: why} of the chains it leaves
    out, {name: GPU} of the runs of the chains it keeps; the second is empty on one GPU)."""
    startable = [r for r in runs if states[r.name] in ("start", "resume") and not r.after]
    names = {r.name for r in startable}
    chains = {}  # head name -> its runs, in the grid's order
    for r in startable:
        trunk = trunk_of(r)
        chains.setdefault(trunk if trunk in names else r.name, []).append(r)
    items = []  # (head, seconds), the chains with an estimate for every run
    for head, chain in chains.items():
        seconds = [run_estimate(r, r.argv(scratch), root, rates) for r in chain]
        if None not in seconds:
            items.append((head, sum(seconds)))
    capacity = int(hold - HOLD_MARGIN_S)
    weights = [math.ceil(s) for _, s in items]
    if capacity < 0 or (gpus == 1 and sum(weights) <= capacity):  # none fits, or all do on the one GPU
        return {}, {}
    # a seed's gaps need its baseline: a chain whose seed's baseline chain waits to start is kept only beside it
    # (else the fill chose spd and grouped:4 of a seed whose baseline it left out: w384/calls/README.md)
    firsts = [chains[head][0] for head, _ in items]
    baseline_of = {(r.group, r.seed): i for i, r in enumerate(firsts) if r.policy == "baseline"}
    partner = [None if r.policy == "baseline" else baseline_of.get((r.group, r.seed)) for r in firsts]
    unpaired = set()
    while True:
        left, gpu_of = set(range(len(items))) - unpaired, {}
        for gpu in range(gpus):
            for i in pack_one_gpu(weights, capacity, left):
                gpu_of[i] = gpu
                left.discard(i)
        orphans = {i for i in gpu_of if partner[i] is not None and partner[i] not in gpu_of}
        if not orphans:
            break
        unpaired |= orphans
    gpu_of = balanced(gpu_of, weights, gpus, capacity)
    fill = f"the {len(gpu_of)} chains it starts fill {sum(weights[i] for i in gpu_of)} of {gpus * capacity} s"
    out = {head: (f"not started: left out of the hold's plan, expected {seconds:.0f} s; " +
                  (f"its seed's baseline {items[partner[i]][0]} is not in it; " if i in unpaired else "") + fill)
           for i, (head, seconds) in enumerate(items) if i not in gpu_of and weights[i] <= capacity}
    placed = {} if gpus == 1 else {r.name: gpu_of[i] for i, (head, _) in enumerate(items) if i in gpu_of
                                   for r in chains[head]}
    # the runs that wait for a kept chain's trunk to end (Run.after: trained in its process) go with it
    for r in runs:
        if r.after in placed:
            placed[r.name] = placed[r.after]
    return out, placed
