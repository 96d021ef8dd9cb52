"""How long a sweep's run is expected to take, from the stored runs like it: the runner's --hold starts only the
runs that end before the machine is given back (a run cut there is lost: its checkpoints cannot leave the machine).

    expected(run) = START_S + first + iterations x rate
    iterations    max_iters less the iteration the run starts at (a branch: its branch point), plus, for a trunk
                  whose process trains its branches (the trainer's branches=), each branch's budget less its point;
    rate          the median, over the stored runs of the same model, batch, tp and policy (in the run's study:
                  study_folders) that trained at least RATE_MIN_ITERS iterations, of their loop seconds
                  less their first iteration's, over their trained iterations (evals and checkpoints included);
    first         the median of those runs' first iteration (the compile and CUDA graphs' capture);
    START_S       the process's start, data checks and model build before its loop (17-20 s a chain at width 768 on
                  1x H200: experiments/large_budgets/w768/calls/README.md), with a margin.
With no stored run of the policy at this model, the rate of each policy stored here times the two policies' ratio
where both ran on another model (the median of those products), else the slowest policy here times
UNSEEN_POLICY_FACTOR; with no stored run of the model, no estimate (None: the runner starts the run as it would
without --hold). A resumed run is estimated from its start, not from its checkpoint: never shorter than it will be.
Runs that shared a GPU trained slower (width 256's 2- and 4-GPU sessions), which makes their estimate longer, not
shorter.
"""
import glob
import json
import os
import statistics

from training.config import TrainConfig, branch_list, parse, wsd_decay_start  # (no torch import)
from training.run_dir import kept_checkpoint_iter

START_S = 30.0
RATE_MIN_ITERS = 2000  # shorter runs' compile is a large share of their loop
UNSEEN_POLICY_FACTOR = 1.3
MATCH_KEYS = ("n_layer", "n_embd", "n_head", "block_size", "batch_size", "gradient_accumulation_steps", "tp",
              "n_tracks", "compile", "dtype")


def run_iterations(cfg):
    """The iterations a run with config cfg (a TrainConfig) trains: from its branch point (a branch) or 0, to
    max_iters, plus each branch its process trains after it."""
    start = kept_checkpoint_iter(cfg.branch_from) or 0
    return cfg.max_iters - start + sum(budget - wsd_decay_start(cfg, budget) for budget, _ in branch_list(cfg))


def study_folders(run, root):
    """The folders whose runs may tell the run's speed: its sweep dir's, and those beside its parent (a study's
    other widths: w256/runs beside w768/cosine), for the policies' ratios."""
    grand = os.path.dirname(os.path.dirname(os.path.join(root, run.sweep_dir)))
    return sorted(d for d in glob.glob(os.path.join(grand, "*", "*")) if os.path.isdir(d))


def stored_rates(folders):
    """{(model key, policy): (rate s/iter, first iteration s)}, the medians over the finished runs under folders."""
    rates, defaults = {}, TrainConfig().to_dict()  # a key a run's config lacks had its default then
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "*", "config.json"))):
            try:
                with open(path) as f:
                    config = json.load(f)
                with open(os.path.join(os.path.dirname(path), "metrics.jsonl")) as f:
                    records = [json.loads(line) for line in f if line.strip()]
            except (OSError, ValueError):
                continue
            summary = next((r for r in reversed(records) if r.get("type") == "summary"), None)
            first = next((r for r in records if r.get("type") == "train" and "time_ms" in r), None)
            if not summary or not first or (summary.get("trained_iters") or 0) < RATE_MIN_ITERS:
                continue
            first_s = first["time_ms"] / 1000
            rate = (summary["seconds"] - first_s) / summary["trained_iters"]
            key = (tuple(config.get(k, defaults.get(k)) for k in MATCH_KEYS), config.get("sync_policy"))
            rates.setdefault(key, []).append((rate, first_s))
    return {key: (statistics.median(r for r, _ in values), statistics.median(f for _, f in values))
            for key, values in rates.items()}


def expected_seconds(run, argv, root, medians=None):
    """Seconds the run (its trainer arguments argv) is expected to take, or None with no stored run of its model.
    medians: stored_rates() of its study's folders (study_folders; read here when not given)."""
    cfg = parse(argv)
    if medians is None:
        medians = stored_rates(study_folders(run, root))
    model = tuple(getattr(cfg, k, None) for k in MATCH_KEYS)
    if (model, cfg.sync_policy) in medians:
        rate, first = medians[model, cfg.sync_policy]
    else:
        here = {p: m for (mod, p), m in medians.items() if mod == model}
        if not here:
            return None
        # this policy's speed against the policies run here, where both ran on another model (the median); else
        # about the largest slowdown seen between two policies of the study (spd and the grouped ones: up to 28%)
        scaled = [here[q][0] * medians[mod, cfg.sync_policy][0] / medians[mod, q][0]
                  for (mod, p) in medians if p == cfg.sync_policy for q in here if (mod, q) in medians]
        rate = statistics.median(scaled) if scaled else max(r for r, _ in here.values()) * UNSEEN_POLICY_FACTOR
        first = max(f for _, f in here.values())
    return START_S + first + run_iterations(cfg) * rate
