#!/usr/bin/env python3
"""The sync-point study, part 2 (issue 15): a resumable grid of training runs, several at once on one GPU.

    python experiments/char_sweep.py --list                          # parts, their runs, relative cost
    python experiments/char_sweep.py w384-n2-s1337 --dry-run         # what would run, and the commands
    python experiments/char_sweep.py w384-n2-s1337 --deadline 540 --pack "$OUT"     # on the GPU machine
    python experiments/char_sweep.py w384-n2 --smoke                 # CPU: tiny model, 4 iterations
    python experiments/char_sweep.py w384-n6,w384-n2-s1339 --jobs 26 --deadline 540 --pack "$OUT"   # 8 GPUs

The character-level grid (config/shakespeare_char_{192,384,768}.py: nanoGPT's shakespeare_char recipe at
384, a 2x narrower and a 2x wider variant, 6 layers): width {384, 192, 768} x n_tracks {2, 6} x policy
{baseline, spd, parallel, ladder, grouped:2, grouped:3, grouped:6} x seed {1337, 1338, 1339} = 126 runs of
5000 iterations, at tp=1 (the function does not depend on tp). Width 192 is there because 768 does not fit
the device time (below): it gives the width trend at 0.27x a w384 run's FLOPs. Run name:
w<width>-n<tracks>-<policy without ':'>-s<seed>, e.g. w384-n6-grouped3-s1338; logs land in
experiments/char-sweep/<name>/.

Parts (PART argument; --list prints them):
    w384-n2, w384-n6, w192-n2, ...        one width x one n_tracks: 7 policies x 3 seeds = 21 runs
    w384-n2-s1337 ... w768-n6-s1339       one seed of those: the 7 policies, 7 runs
    char                                  all 126, in the order w384, w192, w768 (n_tracks 2, then 6)
    bpe1, bpe2, bpe3                      issue item 5: seeds 1338 and 1339 for the BPE sweep's single-seed
                                          policies (experiments/shakespeare-sweep, EXPERIMENT_SUMMARY.md section 1),
                                          6 runs each: bpe1 grouped_4sync, grouped_3sync, grouped_2sync;
                                          bpe2 grouped_6sync, spd_12sync, parallel_12sync; bpe3 selective_9sync,
                                          datadriven_9sync, datadriven_6sync (from scratch). Same schedule as
                                          shakespeare_sweep.sh with ITERS=3000 (tests/test_char_sweep.py checks
                                          each planned config against the stored seed-1337 run's config.json)
    bpe                                   bpe1 + bpe2 + bpe3
    d768, d768-s1337 ... d384-s1339       part 3 (issue 26): GPT-2 124M (config/docs_124m.py) and its 384-wide
                                          variant (config/docs_w384.py) on data/debian_docs, read once: 10
                                          policies (24 syncs per forward down to grouped:12's 1) x 3 seeds, logs in
                                          experiments/docs-sweep/<d768-grouped3-s1338>/; on one H200 the 30 runs of
                                          d768 took 5 commands, 5-6 runs at once (experiments/docs-sweep/gpu-call-*.log)
    PART,PART,...                         several parts at once (e.g. to fill the GPUs of one machine)
--policies and --seeds narrow any part further (e.g. a part that does not fit one command). With several
GPUs, run i of a command goes to GPU i mod their count: --jobs sets how many run at once in all.
If the grid must shrink, keep the seeds and drop widths before policies: w384 first, then w192, w768 last.

Pairing. A seed s gives every policy (and both n_tracks) of a width the same initial weights (the trainer
seeds torch with `seed`, and GPT draws its full weights from that stream independently of the policy and
of n_tracks; tests/test_char_sweep.py checks this) and the same batches in the same order (the data
order is a function of (seed, iteration)). Dropout masks are reseeded from (seed, iteration) too, but
policies draw different mask shapes, so masks are not shared.

Resumable. A run is done when experiments/.../<name>/metrics.jsonl has the eval at max_iters (or the
trainer stopped it as diverged) and its config.json equals the planned config (out_dir, init_from,
always_save_checkpoint and wandb keys aside); done runs are skipped, and a done run with another config
is an error (this keeps every run of a sweep directory on one schedule). A run trains in a scratch
out_dir (--scratch, default out-sweep/, git-ignored) with a checkpoint at every eval; a run whose
scratch holds ckpt.pt resumes from it (the trainer's data order is stateless), so on a machine that
stays up, repeating a command cut by its deadline continues where it stopped. When a run finishes, its config.json, log.txt
and metrics.jsonl are copied to the sweep directory and its checkpoints are deleted: no checkpoint ever
lands under experiments/. The three logs stay in scratch, so a later command on the same machine whose
working tree lacks them (the device tool sends a fresh tree with every command) collects them instead
of training the run again.

GPU time. --list prints each part's model FLOPs (training plus eval forwards, 6N + 12 L T C per token)
as a relative cost: a w768 run costs about 3.8x a w384 run, a w192 run 0.27x, and the 200-batch evals
are about a third of every run's FLOPs. Measured (compile=True; experiments/char-sweep/gpu-call-*.log):
one seed of w384-n2 (7 runs at once, one H200) about 500 s; one seed of w384-n6 (7 at once, one H200)
about 680 s, as its grouped runs take 1.9x the baseline's ms/iter (each track keeps its own residual
stream: in a CPU torch.profiler table of one eager step, grouped:6 and baseline spend about the same
time in matmuls, and grouped:6's extra is residual adds, LayerNorms and copies over six streams); two
seeds of w384-n6 (14 at once, one H100) about 1510 s in three commands; all of w192-n6 (21 at once, one
H100) about 1330 s in three commands (median 103-108 ms/iter for baseline, ladder and parallel, 166-174
for grouped, with 21 runs sharing the GPU); all of w192-n2 (21 at once, one H100) about 980 s in two
commands (91-105 ms/iter, grouped:6 125-127). w768-n2 on one H200: 5 runs at once about 720 s in two
commands (82-85 ms/iter), 2 at once 250-290 s (29-34 ms/iter); so the 42 w768 runs would take about
two hours of one GPU (an estimate from these rates), beyond a 30-minute session (the study ran 9 of
them). The BPE sweep (one H200, eager bf16): 5 runs at once took 224-282 s (12-layer n_embd-128 model,
3000 iterations of 8,192 tokens); 8 at once (one H100) 364-463 s; 4 at once (one H100) 274-280 s.
--deadline stops the runs in time for the device tool's 10-minute command limit; the progress lines
(every --status-every seconds) give each run's ms/iter and an ETA.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
from bench.common import REPO  # noqa: E402  (no torch import)
from training.config import ConfigError, HelpFormatter, TrainConfig, parse  # noqa: E402  (no torch import)

TRAIN_SCRIPT = os.path.join(REPO, "train_reduced_sync.py")

# ---------------------------------------------------------------- the character-level grid
CHAR_CONFIGS = {w: f"config/shakespeare_char_{w}.py" for w in (192, 384, 768)}
# Priority order. 384 is the recipe; 192 gives the width trend at 0.27x its FLOPs, where 768 costs 3.8x,
# so if the grid shrinks, 768 goes first.
CHAR_WIDTHS = (384, 192, 768)
SMOKE_WIDTHS = {192: 12, 384: 24, 768: 48}  # --smoke: a tiny n_embd per width, still 6 heads and 6 tracks deep
CHAR_TRACKS = (2, 6)
CHAR_POLICIES = ("baseline", "spd", "parallel", "ladder", "grouped:2", "grouped:3", "grouped:6")
SEEDS = (1337, 1338, 1339)
CHAR_SWEEP_DIR = "experiments/char-sweep"
# A checkpoint at every eval, so a killed run resumes from its last eval. The checkpoints stay in scratch.
CHAR_COMMON = ("--always_save_checkpoint=True", "--tp=1")

# ---------------------------------------------------------------- the BPE sweep's extra seeds (issue item 5)
BPE_SWEEP_DIR = "experiments/shakespeare-sweep"
# experiments/shakespeare_sweep.sh's `common` with ITERS=3000, as EXPERIMENT_SUMMARY.md section 1 ran it (at tp=1, with
# the configs' one micro-step per iteration of that time: they now accumulate 2 x 4 so that 8 processes can split it)
BPE_COMMON = ("--gradient_accumulation_steps=1", "--tp=1", "--batch_size=32", "--block_size=256", "--max_iters=3000", "--lr_decay_iters=3000", "--warmup_iters=100",
              "--eval_interval=100", "--eval_iters=20", "--log_interval=50", "--always_save_checkpoint=False")
BPE_EXTRA_SEEDS = (1338, 1339)
# part -> [(run name of the seed-1337 run, config name, sensitivity json holding the policy or None)]
BPE_PARTS = {
    "bpe1": [("grouped_4sync", "shakespeare_grouped_4sync", None), ("grouped_3sync", "shakespeare_grouped_3sync", None),
             ("grouped_2sync", "shakespeare_grouped_2sync", None)],
    "bpe2": [("grouped_6sync", "shakespeare_grouped_6sync", None), ("spd_12sync", "shakespeare_spd_12sync", None),
             ("parallel_12sync", "shakespeare_parallel_12sync", None)],
    "bpe3": [("selective_9sync", "shakespeare_selective_9sync", None),
             ("datadriven_9sync", "shakespeare_baseline_24sync", "sensitivity_9.json"),
             ("datadriven_6sync", "shakespeare_baseline_24sync", "sensitivity_6.json")],
}

# ---------------------------------------------------------------- part 3 (issue 26): 124M on data/debian_docs, read once
DOCS_CONFIGS = {768: "config/docs_124m.py", 384: "config/docs_w384.py"}
DOCS_WIDTHS = (768, 384)  # 768 is the question; 384 (the trend with size) goes first if time runs short
# 24 syncs per forward down to 1: name -> run-name tag
DOCS_POLICIES = {"baseline": "baseline", "spd": "spd", "parallel": "parallel", "ladder": "ladder",
                 "selective:m0-3,m5,m7,m9-11": "selective9", "grouped:2": "grouped2", "grouped:3": "grouped3",
                 "grouped:4": "grouped4", "grouped:6": "grouped6", "grouped:12": "grouped12"}
DOCS_SWEEP_DIR = "experiments/docs-sweep"
SMOKE_DOCS = ("--max_iters=4", "--lr_decay_iters=4", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=2",
              "--log_interval=1", "--batch_size=2", "--block_size=16", "--n_embd=48", "--device=cpu",
              "--compile=False")

# ---------------------------------------------------------------- smoke: a tiny model on CPU (tests, a first GPU check)
SMOKE = ("--block_size=16", "--batch_size=4", "--max_iters=4", "--lr_decay_iters=4",
         "--warmup_iters=1", "--eval_interval=2", "--eval_iters=2", "--log_interval=1", "--device=cpu")
SMOKE_BPE = ("--max_iters=4", "--lr_decay_iters=4", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=2",
             "--log_interval=1", "--batch_size=2", "--block_size=16", "--device=cpu")

# config.json keys that may differ between a done run and the plan (they do not change what is computed)
IGNORED_KEYS = {"out_dir", "data_dir", "init_from", "branch_from", "overwrite", "always_save_checkpoint", "keep_best", "save_iters", "wandb_log", "wandb_project", "wandb_run_name"}
PACK_NAME = "sweep-logs.tgz"


class SweepError(Exception):
    """Reported in one line; exit code 1."""


class Run:
    """One training run of the grid: where its logs go, and the trainer's arguments but the out_dir."""

    def __init__(self, name, sweep_dir, args, policy, seed, group, tag=None, needs=None, keep=()):
        """needs: a file that must exist before the run starts (a branch's trunk checkpoint), removed once the
        run is collected; keep: names in its scratch dir that collecting it leaves there (a trunk's branch
        points, until their branches have run)."""
        self.name, self.sweep_dir, self.args = name, sweep_dir, list(args)
        self.policy, self.seed, self.group, self.tag = policy, seed, group, tag
        self.needs, self.keep = needs, set(keep)

    def final_dir(self, root):
        return os.path.join(root, self.sweep_dir, self.name)

    def scratch_dir(self, scratch):
        return os.path.join(scratch, self.sweep_dir.replace(os.sep, "_"), self.name)

    def argv(self, scratch, extra=()):
        # data_dir: the trainers' cwd is WORKDIR (chdir'd), whose data/ holds the datasets
        return [*self.args, *extra, f"--out_dir={self.scratch_dir(scratch)}", "--data_dir=data"]


def policy_tag(policy):
    return policy.replace(":", "")


def char_run(width, tracks, policy, seed, sets=(), smoke=False):
    name = f"w{width}-n{tracks}-{policy_tag(policy)}-s{seed}"
    args = [os.path.join(REPO, CHAR_CONFIGS[width]), *CHAR_COMMON, f"--n_tracks={tracks}",
            f"--sync_policy={policy}", f"--seed={seed}"]
    if smoke:
        args += [*SMOKE, f"--n_embd={SMOKE_WIDTHS[width]}"]
    return Run(name, CHAR_SWEEP_DIR, [*args, *sets], policy, seed, f"w{width}-n{tracks}")


def bpe_runs(part, sets=(), smoke=False):
    runs = []
    for seed in BPE_EXTRA_SEEDS:
        for base, config, sensitivity in BPE_PARTS[part]:
            args = [os.path.join(REPO, "config", f"{config}.py"), *BPE_COMMON, f"--seed={seed}"]
            policy = None
            if sensitivity:  # the data-driven policy that phase 2 of shakespeare_sweep.sh wrote (stored)
                path = os.path.join(REPO, BPE_SWEEP_DIR, sensitivity)
                try:
                    with open(path) as f:
                        policy = json.load(f)["policy"]
                except (OSError, ValueError, KeyError) as e:
                    raise SweepError(f"{path}: cannot read the data-driven policy ({e})") from None
                args.append(f"--sync_policy={policy}")
            if smoke:
                args += SMOKE_BPE
            runs.append(Run(f"{base}_seed{seed}", BPE_SWEEP_DIR, [*args, *sets], policy, seed, part))
    return runs


def docs_run(width, policy, seed, sets=(), smoke=False):
    tag = DOCS_POLICIES[policy]
    args = [os.path.join(REPO, DOCS_CONFIGS[width]), "--tp=1", f"--sync_policy={policy}", f"--seed={seed}"]
    if smoke:
        args += SMOKE_DOCS
    return Run(f"d{width}-{tag}-s{seed}", DOCS_SWEEP_DIR, [*args, *sets], policy, seed, f"d{width}", tag)


def docs_parts():
    """part name -> (width, seeds): d768, d768-s1337, ..., d384, ..."""
    parts = {}
    for width in DOCS_WIDTHS:
        parts[f"d{width}"] = (width, SEEDS)
        for seed in SEEDS:
            parts[f"d{width}-s{seed}"] = (width, (seed,))
    return parts


def char_parts():
    """part name -> (width, tracks, seeds), in priority order."""
    parts = {}
    for width in CHAR_WIDTHS:
        for tracks in CHAR_TRACKS:
            parts[f"w{width}-n{tracks}"] = (width, tracks, SEEDS)
            for seed in SEEDS:
                parts[f"w{width}-n{tracks}-s{seed}"] = (width, tracks, (seed,))
    return parts


def part_names():
    return [*char_parts(), "char", *BPE_PARTS, "bpe", *docs_parts()]


def runs_of(part, sets=(), smoke=False, policies=None, seeds=None):
    """The runs of a part, in launch order (seed-major, so whole seeds finish first). Comma-separated
    parts are run together, in the order given (each run once)."""
    cparts = char_parts()
    if "," in part:
        runs = [r for name in part.split(",") for r in runs_of(name, sets, smoke)]
        runs = list({r.name: r for r in runs}.values())
    elif part in cparts:
        width, tracks, part_seeds = cparts[part]
        runs = [char_run(width, tracks, p, s, sets, smoke) for s in part_seeds for p in CHAR_POLICIES]
    elif part == "char":
        runs = [r for name, (w, t, s) in cparts.items() if len(s) > 1
                for r in runs_of(name, sets, smoke)]
    elif part in docs_parts():
        width, part_seeds = docs_parts()[part]
        runs = [docs_run(width, p, s, sets, smoke) for s in part_seeds for p in DOCS_POLICIES]
    elif part in BPE_PARTS:
        runs = bpe_runs(part, sets, smoke)
    elif part == "bpe":
        runs = [r for name in BPE_PARTS for r in bpe_runs(name, sets, smoke)]
    else:
        raise SweepError(f"unknown part {part!r}; parts: {', '.join(part_names())}")
    if policies is not None:
        known = ({policy_tag(p) for p in CHAR_POLICIES} | {b for p in BPE_PARTS.values() for b, _, _ in p}
                 | set(DOCS_POLICIES.values()))
        unknown = set(policies) - known
        if unknown:
            raise SweepError(f"--policies: unknown {sorted(unknown)}")
        runs = [r for r in runs if run_tag(r) in policies]
    if seeds is not None:
        runs = [r for r in runs if r.seed in seeds]
    if not runs:
        raise SweepError(f"part {part!r} has no run left after --policies/--seeds")
    return runs


def run_tag(run):
    """The name --policies selects a run by: grouped3, selective9, grouped_3sync (the BPE sweep's), ..."""
    if run.sweep_dir == DOCS_SWEEP_DIR:
        return run.tag
    return policy_tag(run.policy) if run.sweep_dir == CHAR_SWEEP_DIR else run.name.split("_seed")[0]


# ---------------------------------------------------------------- the state of a run
def planned_config(run, scratch):
    """The TrainConfig dict the trainer will record for this run (config file + overrides)."""
    try:
        return parse(run.argv(scratch)).to_dict()
    except ConfigError as e:
        raise SweepError(f"{run.name}: {e}") from None


def read_records(path):
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a killed run
                if isinstance(record, dict):
                    records.append(record)
    except OSError:
        pass
    return records


def finished(run_dir, max_iters):
    """'complete' (eval at max_iters logged, or an end record that finished there: 'summary' with finished true,
    or a 'done' of a run logged before issue 42), 'diverged' (the trainer stopped it), or None. A run stopped by a
    signal ends with a 'summary' record too (finished false, iter < max_iters): not complete, it is resumed."""
    records = read_records(os.path.join(run_dir, "metrics.jsonl"))
    if any(r.get("type") == "eval" and r.get("iter") == max_iters for r in records):
        return "complete"
    if any(r.get("type") in ("summary", "done") and r.get("finished", True) is True and r.get("iter") == max_iters
           for r in records):
        return "complete"
    if any(r.get("type") == "error" for r in records):
        return "diverged"
    return None


def config_mismatch(run_dir, planned):
    """Keys whose value in run_dir/config.json differs from the plan (IGNORED_KEYS aside)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return ["config.json (missing or unreadable)"]
    # a key the trainer gained after a run was stored counts as its default (the only behaviour there was)
    defaults = TrainConfig().to_dict()
    return sorted(k for k in planned if k not in IGNORED_KEYS and stored.get(k, defaults.get(k)) != planned[k])


def run_state(run, root, scratch):
    """'done', 'collect' (finished in scratch, logs not copied yet), 'resume' (scratch has ckpt.pt) or
    'start'. SweepError if the sweep directory holds this run with another config."""
    planned = planned_config(run, scratch)
    final, tmp = run.final_dir(root), run.scratch_dir(scratch)
    if run.keep and not all(os.path.exists(os.path.join(tmp, name)) for name in run.keep):
        # a trunk whose branch points are gone (another machine) is trained again for the branches that need them
        if finished(final, planned["max_iters"]) or finished(tmp, planned["max_iters"]):
            return "start"
    if finished(final, planned["max_iters"]):
        diff = config_mismatch(final, planned)
        if diff:
            raise SweepError(f"{final} holds a finished run whose config differs from the plan in {diff}: "
                             f"move it away, or use another --root or --set")
        return "done"
    if finished(tmp, planned["max_iters"]) and not config_mismatch(tmp, planned):
        return "collect"
    if os.path.exists(os.path.join(tmp, "ckpt.pt")) and not config_mismatch(tmp, planned):
        return "resume"
    return "start"


RUN_LOGS = ("config.json", "log.txt", "metrics.jsonl")


def collect(run, root, scratch):
    """Copy the logs of a finished run from scratch into the sweep dir and delete everything else in its
    scratch dir (the checkpoints). The logs stay in scratch: the device tool sends a fresh working tree
    with every command, and a later command on the same machine collects them again, not retrains."""
    tmp, final = run.scratch_dir(scratch), run.final_dir(root)
    os.makedirs(final, exist_ok=True)
    for name in RUN_LOGS:
        src = os.path.join(tmp, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(final, name) + ".tmp")
            os.replace(os.path.join(final, name) + ".tmp", os.path.join(final, name))
    for name in os.listdir(tmp):
        if name not in RUN_LOGS and name not in run.keep:
            path = os.path.join(tmp, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    if run.needs and os.path.exists(run.needs):  # a branch point serves one branch
        os.remove(run.needs)


def progress(run, scratch):
    """(last logged iteration, median ms/iter of the logged train records) of a running run."""
    records = read_records(os.path.join(run.scratch_dir(scratch), "metrics.jsonl"))
    train = [r for r in records if r.get("type") == "train" and isinstance(r.get("time_ms"), (int, float))]
    if not train:
        return None, None
    times = sorted(r["time_ms"] for r in train)
    return train[-1].get("iter"), times[len(times) // 2]


# ---------------------------------------------------------------- relative cost (--list)
def model_flops(cfg, vocab):
    """Training FLOPs of one run plus its eval forwards (nanoGPT's 6N + 12 L T C per token; a forward is
    a third of a training step). A relative cost, not a time."""
    L, C, T = cfg["n_layer"], cfg["n_embd"], cfg["block_size"]
    n_params = 12 * L * C * C + vocab * C
    per_token = 6 * n_params + 12 * L * T * C
    train_tokens = cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
    n_evals = cfg["max_iters"] // cfg["eval_interval"] + 1
    eval_tokens = n_evals * 2 * cfg["eval_iters"] * cfg["batch_size"] * cfg["block_size"]
    return per_token * (train_tokens + eval_tokens / 3), per_token * eval_tokens / 3


def vocab_size(dataset):
    return {"shakespeare_char": 76}.get(dataset, 50304)


def list_parts(root, scratch, sets, smoke):
    ref = None
    print(f"{'part':16} {'runs':>4} {'iters/run':>9}  {'rel. FLOPs':>10}  {'eval share':>10}  done  runs")
    for part in part_names():
        try:
            runs = runs_of(part, sets, smoke)
        except SweepError as e:
            print(f"{part:16} ({e})")
            continue
        cfgs = [planned_config(r, scratch) for r in runs]
        flops = [model_flops(c, vocab_size(c["dataset"])) for c in cfgs]
        total, evals = sum(f for f, _ in flops), sum(e for _, e in flops)
        if ref is None:
            ref = total / len(runs)  # one run of the first part
        done = sum(finished(r.final_dir(root), c["max_iters"]) is not None for r, c in zip(runs, cfgs))
        names = ", ".join(r.name for r in runs[:2]) + (", ..." if len(runs) > 2 else "")
        print(f"{part:16} {len(runs):4d} {cfgs[0]['max_iters']:9d}  {total / ref:10.1f}  {evals / total:10.0%}  "
              f"{done:4d}  {names}")
    print("rel. FLOPs: model FLOPs of the part (training + eval forwards) in units of one w384 run; "
          "measured GPU times are in the module docstring")


# ---------------------------------------------------------------- running
def cuda_count():
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def sweep(runs, args):
    root, scratch = args.root, args.scratch
    t0 = time.time()
    states = {r.name: run_state(r, root, scratch) for r in runs}
    collected = [r for r in runs if states[r.name] == "collect"]
    for r in collected:
        collect(r, root, scratch)
        states[r.name] = "done"
        print(f"   collected {r.name} from {r.scratch_dir(scratch)} (to train it again, delete that dir too)")
    pending = [r for r in runs if states[r.name] != "done"]
    print(f"== {len(runs)} runs: {len(runs) - len(pending)} done ({len(collected)} collected from scratch), "
          f"{len(pending)} to run ({sum(states[r.name] == 'resume' for r in pending)} resume from scratch "
          f"checkpoints); jobs {args.jobs}", flush=True)
    if args.dry_run:
        for r in runs:
            extra = ["--init_from=resume"] if states[r.name] == "resume" else []
            print(f"{states[r.name]:7} {r.name}: python {os.path.relpath(TRAIN_SCRIPT)} "
                  f"{' '.join(os.path.relpath(a) if os.path.isabs(a) else a for a in r.argv(scratch, extra))}")
        return 0
    if not pending:
        return 0

    n_gpus = 0 if args.smoke else cuda_count()
    if n_gpus == 0 and not (args.smoke or args.allow_cpu):
        raise SweepError("no CUDA device: these runs are sized for a GPU (use --smoke for a CPU check, "
                         "or --allow-cpu to train on CPU anyway)")
    threads = max(1, (os.cpu_count() or 1) // max(1, min(args.jobs, len(pending))))
    running, results, launched = {}, {}, 0
    # runs take minutes each: a bar of finished runs (stderr, on a terminal only: a log keeps the event
    # lines, which print above the bar)
    bar = tqdm(total=len(pending), desc="runs finished", unit="run", disable=None)
    say = lambda text: bar.write(text, file=sys.stdout)
    last_status = time.time()
    deadline = t0 + args.deadline if args.deadline else None
    try:
        while pending or running:
            while len(running) < args.jobs and (deadline is None or time.time() < deadline):
                # the first pending run that can start: a branch waits for its trunk's checkpoint
                r = next((r for r in pending if r.needs is None or os.path.exists(r.needs)), None)
                if r is None:
                    break
                pending.remove(r)
                tmp = r.scratch_dir(scratch)
                os.makedirs(os.path.dirname(tmp), exist_ok=True)
                if run_state(r, root, scratch) == "resume":
                    extra = ["--init_from=resume"]
                else:  # a fresh start: no stale checkpoint of an earlier attempt may be resumed later
                    extra = []
                    shutil.rmtree(tmp, ignore_errors=True)
                it0 = progress(r, scratch)[0] or 0
                env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads))
                if n_gpus > 1:
                    env["CUDA_VISIBLE_DEVICES"] = str(launched % n_gpus)
                log = open(tmp + ".out", "a")
                proc = subprocess.Popen([sys.executable, TRAIN_SCRIPT, *r.argv(scratch, extra)],
                                        env=env, stdout=log, stderr=subprocess.STDOUT)
                running[r.name] = (r, proc, log, time.time(), it0)
                launched += 1
                say(f"   {time.strftime('%H:%M:%S')} start {r.name}" + (" (resume)" if extra else ""))
            if not running:
                if deadline is None or time.time() < deadline:
                    for r in pending:  # nothing runs that could write what they wait for
                        results[r.name] = (f"blocked: no {os.path.basename(r.needs)}", 0)
                        say(f"!! {r.name} cannot start: {r.needs} does not exist and no running trunk writes it")
                break
            time.sleep(args.poll)
            for name, (r, proc, log, started, it0) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[name]
                max_iters = planned_config(r, scratch)["max_iters"]
                state = finished(r.scratch_dir(scratch), max_iters)
                if state:
                    collect(r, root, scratch)
                    results[name] = (state + ("" if proc.returncode in (0, 2) else f" (rc {proc.returncode})"),
                                     time.time() - started)
                else:
                    results[name] = (f"failed (rc {proc.returncode})", time.time() - started)
                    say(f"!! {name} failed (rc {proc.returncode}); the end of {r.scratch_dir(scratch)}.out:\n"
                        f"{tail(r.scratch_dir(scratch) + '.out')}")
                say(f"   {time.strftime('%H:%M:%S')} {results[name][0]} {name} ({results[name][1]:.0f} s)")
                bar.update(1)
            now = time.time()
            if running and now - last_status >= args.status_every:
                last_status = now
                for name, (r, proc, log, started, it0) in running.items():
                    it, ms = progress(r, scratch)
                    max_iters = planned_config(r, scratch)["max_iters"]
                    # wall-clock rate since launch (evals included)
                    eta = f", ETA {(now - started) / (it - it0) * (max_iters - it):.0f} s" if it and it > it0 else ""
                    say(f"   .. {name}: " + (f"iter {it}/{max_iters}, median {ms:.1f} ms/iter" if it is not None
                                             else "starting") + eta)
            if deadline is not None and now >= deadline:  # also when runs are left that never started
                say(f"== deadline ({args.deadline} s) reached: stopping {len(running)} runs; the same command "
                    f"resumes them from their last eval on this machine")
                for r, proc, log, started, it0 in running.values():
                    proc.terminate()
                stop = time.time() + 20
                for name, (r, proc, log, started, it0) in running.items():
                    try:
                        proc.wait(timeout=max(0.1, stop - time.time()))
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                    log.close()
                    results[name] = ("stopped at deadline", time.time() - started)
                running = {}
                break
    finally:
        bar.close()
        for r, proc, log, started, it0 in running.values():  # an exception: do not leave our runs behind
            proc.kill()
            proc.wait()
            log.close()

    print(f"== {time.strftime('%H:%M:%S')}, {time.time() - t0:.0f} s:")
    for r in runs:
        state = results.get(r.name, ("done" if states[r.name] == "done" else "not started", 0))
        _, ms = progress_final(r, root)
        print(f"   {r.name:40} {state[0]:22} " + (f"{state[1]:6.0f} s" if state[1] else "        ")
              + (f"  median {ms:.1f} ms/iter (concurrent runs)" if ms else ""))
    left = [r.name for r in runs if finished(r.final_dir(root), planned_config(r, scratch)["max_iters"]) is None]
    if any(s.startswith(("failed", "blocked")) for s, _ in results.values()):
        return 1
    return 3 if left else 0


def progress_final(run, root):
    records = read_records(os.path.join(run.final_dir(root), "metrics.jsonl"))
    times = sorted(r["time_ms"] for r in records
                   if r.get("type") == "train" and isinstance(r.get("time_ms"), (int, float)))
    return None, (times[len(times) // 2] if times else None)


def pack(runs, args):
    """args.pack/sweep-logs.tgz: the logs of the part's finished runs (paths relative to root), and the
    stdout of its unfinished ones under out-sweep-logs/. Unpack in the repository root:
    tar xzf .../sweep-logs.tgz"""
    os.makedirs(args.pack, exist_ok=True)
    path = os.path.join(args.pack, PACK_NAME)
    n = 0
    with tarfile.open(path + ".tmp", "w:gz") as tar:
        for r in runs:
            final = r.final_dir(args.root)
            if os.path.isdir(final):
                for name in RUN_LOGS:
                    if os.path.exists(os.path.join(final, name)):
                        tar.add(os.path.join(final, name), arcname=os.path.join(r.sweep_dir, r.name, name))
                n += 1
            out = r.scratch_dir(args.scratch) + ".out"
            if os.path.exists(out) and not finished(final, planned_config(r, args.scratch)["max_iters"]):
                tar.add(out, arcname=os.path.join("out-sweep-logs", r.name + ".out"))
    os.replace(path + ".tmp", path)
    print(f"packed {n} run dirs into {path} ({os.path.getsize(path):,} bytes); unpack in the repository root "
          f"with: tar xzf {PACK_NAME}")


def run_and_pack(runs, args):
    """sweep(), then the pack of the runs' logs (--pack); exit code 3 when runs are left for another command."""
    code = sweep(runs, args)
    if args.pack and not args.dry_run:
        pack(runs, args)
    if code == 3:
        print("incomplete: run the same command again to go on (finished runs are skipped)")
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter, epilog=__doc__)
    parser.add_argument("part", nargs="?", help="which runs (see --list)")
    parser.add_argument("--list", action="store_true", help="print the parts, their runs and relative cost")
    parser.add_argument("--dry-run", action="store_true", help="print each run's state and command; run nothing")
    parser.add_argument("--jobs", type=int, default=7, help="runs at once (default 7: one seed of a char part)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds after which the runs are stopped (resumable) and the logs packed")
    parser.add_argument("--pack", default=None, help="write DIR/sweep-logs.tgz with the part's logs at the end")
    parser.add_argument("--policies", default=None,
                        help="only these policies, comma-separated: char tags (baseline, grouped3, ...) or "
                             "BPE run names (grouped_4sync, ...)")
    parser.add_argument("--seeds", default=None, help="only these seeds, comma-separated")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra trainer override for every run (e.g. compile=True); the sweep dir must "
                             "hold no finished run with another value")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny model, 4 iterations, on CPU, in out-sweep-smoke/ (a check of the machinery)")
    parser.add_argument("--allow-cpu", action="store_true", help="train the real runs without a GPU")
    parser.add_argument("--workdir", default=REPO,
                        help="the trainers' cwd, holding data/<dataset>/ (default: the repository)")
    parser.add_argument("--scratch", default=None,
                        help="scratch root for out_dirs and checkpoints (default: out-sweep, git-ignored; with "
                             "--smoke: out-sweep-smoke/scratch); relative paths are relative to WORKDIR")
    parser.add_argument("--root", default=None,
                        help="where the sweep dirs (experiments/...) go (default: WORKDIR; with --smoke: "
                             "out-sweep-smoke, so a smoke run never writes under experiments/)")
    parser.add_argument("--status-every", type=float, default=60.0, help="seconds between progress lines")
    parser.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pack:
        args.pack = os.path.abspath(args.pack)
    try:
        os.chdir(args.workdir)  # the trainers read data/<dataset>/ relative to it; so do our paths
    except OSError as e:
        print(f"error: --workdir={args.workdir!r}: {e.strerror or e}", file=sys.stderr)
        return 1
    if args.scratch is None:
        args.scratch = os.path.join("out-sweep-smoke", "scratch") if args.smoke else "out-sweep"
    if args.root is None:
        args.root = "out-sweep-smoke" if args.smoke else "."
    sets = [f"--{s.lstrip('-')}" for s in args.set]
    try:
        if args.jobs < 1:
            raise SweepError("--jobs must be >= 1")
        if args.list:
            list_parts(args.root, args.scratch, sets, args.smoke)
            return 0
        if not args.part:
            raise SweepError(f"give a PART (one of {', '.join(part_names())}) or --list")
        policies = set(args.policies.split(",")) if args.policies else None
        seeds = {int(s) for s in args.seeds.split(",")} if args.seeds else None
        return run_and_pack(runs_of(args.part, sets, args.smoke, policies, seeds), args)
    except (SweepError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
