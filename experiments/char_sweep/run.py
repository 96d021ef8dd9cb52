#!/usr/bin/env python3
"""The sync-point study, part 2: a resumable grid of training runs, several at once on one GPU.

    python -m experiments.char_sweep.run --list                          # parts, their runs, relative cost
    python -m experiments.char_sweep.run w384-n2-s1337 --dry-run         # what would run, and the commands
    python -m experiments.char_sweep.run w384-n2-s1337 --deadline 540 --pack "$OUT"     # on the GPU machine
    python -m experiments.char_sweep.run w384-n2 --smoke                 # CPU: tiny model, 4 iterations
    python -m experiments.char_sweep.run w384-n6,w384-n2-s1339 --jobs 26 --deadline 540 --pack "$OUT"   # 8 GPUs

The character-level grid (config/shakespeare_char_{192,384,768}.py: nanoGPT's shakespeare_char recipe at
384, a 2x narrower and a 2x wider variant, 6 layers): width {384, 192, 768} x n_tracks {2, 6} x policy
{baseline, spd, parallel, ladder, grouped:2, grouped:3, grouped:6} x seed {1337, 1338, 1339} = 126 runs of
5000 iterations, at tp=1 (the function does not depend on tp). Width 192 is there because 768 does not fit
the device time (below): it gives the width trend at 0.27x a w384 run's FLOPs. Run name:
w<width>-n<tracks>-<policy without ':'>-s<seed>, e.g. w384-n6-grouped3-s1338; logs land in
experiments/char_sweep/runs/<name>/.

Parts (PART argument; --list prints them):
    w384-n2, w384-n6, w192-n2, ...        one width x one n_tracks: 7 policies x 3 seeds = 21 runs
    w384-n2-s1337 ... w768-n6-s1339       one seed of those: the 7 policies, 7 runs
    char                                  all 126, in the order w384, w192, w768 (n_tracks 2, then 6)
    bpe1, bpe2, bpe3                      seeds 1338 and 1339 for the BPE sweep's single-seed
                                          policies (experiments/shakespeare_sweep/README.md),
                                          6 runs each: bpe1 grouped_4sync, grouped_3sync, grouped_2sync;
                                          bpe2 grouped_6sync, spd_12sync, parallel_12sync; bpe3 selective_9sync,
                                          datadriven_9sync, datadriven_6sync (from scratch). Same schedule as
                                          shakespeare_sweep/run.sh with ITERS=3000 (tests/test_char_sweep.py checks
                                          each planned config against the stored seed-1337 run's config.json)
    bpe                                   bpe1 + bpe2 + bpe3
    d768, d768-s1337 ... d384-s1339       part 3: GPT-2 124M (config/docs_124m.py) and its 384-wide
                                          variant (config/docs_w384.py) on data/debian_docs, read once: 10
                                          policies (24 syncs per forward down to grouped:12's 1) x 3 seeds, logs in
                                          experiments/docs_study/one_budget/runs/<d768-grouped3-s1338>/; on one H200 the 30
                                          runs of d768 took 5 commands, 5-6 at once (experiments/docs_study/one_budget/gpu-call-*.log)
    PART,PART,...                         several parts at once (e.g. to fill the GPUs of one machine)
--policies and --seeds narrow any part further (e.g. a part that does not fit one command). With several
GPUs, run i of a command goes to GPU i mod their count: --jobs sets how many run at once in all.
If the grid must shrink, keep the seeds and drop widths before policies: w384 first, then w192, w768 last.

Pairing. A seed s gives every policy (and both n_tracks) of a width the same initial weights (the trainer
seeds torch with `seed`, and GPT draws its full weights from that stream independently of the policy and
of n_tracks; tests/test_char_sweep.py checks this) and the same batches in the same order (the data
order is a function of (seed, iteration)). Dropout masks are reseeded from (seed, iteration) too, but
policies draw different mask shapes, so masks are not shared.

Resumable: experiments/runner.py runs the parts (a run is skipped when its logs are in the sweep directory,
resumed from its scratch checkpoint, or collected from scratch; its docstring says how).

GPU time. --list prints each part's model FLOPs (training plus eval forwards, 6N + 12 L T C per token)
as a relative cost: a w768 run costs about 3.8x a w384 run, a w192 run 0.27x, and the 200-batch evals
are about a third of every run's FLOPs. Measured (compile=True; experiments/char_sweep/gpu-call-*.log):
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
import sys

if __name__ == "__main__" and not __package__:  # run by its path: the imports below need the repository root
    sys.exit("run it from the repository root as: python -m experiments.char_sweep.run " + " ".join(sys.argv[1:]))

from training.config import REPO, HelpFormatter, OneLineArgumentParser  # (no torch import)
from experiments.runner import Run, SweepError, check_args, finished, planned_config, run_and_pack
from training.cli import guarded

# ---------------------------------------------------------------- the character-level grid
CHAR_CONFIGS = {w: f"config/shakespeare_char_{w}.py" for w in (192, 384, 768)}
# Priority order. 384 is the recipe; 192 gives the width trend at 0.27x its FLOPs, where 768 costs 3.8x,
# so if the grid shrinks, 768 goes first.
CHAR_WIDTHS = (384, 192, 768)
SMOKE_WIDTHS = {192: 12, 384: 24, 768: 48}  # --smoke: a tiny n_embd per width, still 6 heads and 6 tracks deep
CHAR_TRACKS = (2, 6)
CHAR_POLICIES = ("baseline", "spd", "parallel", "ladder", "grouped:2", "grouped:3", "grouped:6")
SEEDS = (1337, 1338, 1339)
CHAR_SWEEP_DIR = "experiments/char_sweep/runs"
# A checkpoint at every eval, so a killed run resumes from its last eval. The checkpoints stay in scratch.
CHAR_COMMON = ("--always_save_checkpoint=True", "--tp=1")

# ---------------------------------------------------------------- the BPE sweep's extra seeds (issue item 5)
BPE_STUDY_DIR = "experiments/shakespeare_sweep"  # its sensitivity_<n>.json, beside the runs
BPE_SWEEP_DIR = f"{BPE_STUDY_DIR}/runs"
# experiments/shakespeare_sweep/run.sh's `common` with ITERS=3000, as experiments/shakespeare_sweep/README.md
# records it (at tp=1, with the configs' one micro-step per iteration of that time: they now accumulate 2 x 4 so
# that 8 processes can split it)
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
DOCS_SWEEP_DIR = "experiments/docs_study/one_budget/runs"
SMOKE_DOCS = ("--max_iters=4", "--lr_decay_iters=4", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=2",
              "--log_interval=1", "--batch_size=2", "--block_size=16", "--n_embd=48", "--device=cpu",
              "--compile=False")

# ---------------------------------------------------------------- smoke: a tiny model on CPU (tests, a first GPU check)
SMOKE = ("--block_size=16", "--batch_size=4", "--max_iters=4", "--lr_decay_iters=4",
         "--warmup_iters=1", "--eval_interval=2", "--eval_iters=2", "--log_interval=1", "--device=cpu")
SMOKE_BPE = ("--max_iters=4", "--lr_decay_iters=4", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=2",
             "--log_interval=1", "--batch_size=2", "--block_size=16", "--device=cpu")

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
            if sensitivity:  # the data-driven policy that phase 2 of shakespeare_sweep/run.sh wrote (stored)
                path = os.path.join(REPO, BPE_STUDY_DIR, sensitivity)
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


def main(argv=None):
    parser = OneLineArgumentParser(prog="python -m experiments.char_sweep.run", description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
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
        check_args(args)
        if args.list:
            list_parts(args.root, args.scratch, sets, args.smoke)
            return 0
        if not args.part:
            raise SweepError(f"give a PART (one of {', '.join(part_names())}) or --list")
        policies = set(args.policies.split(",")) if args.policies else None
        try:
            seeds = {int(s) for s in args.seeds.split(",")} if args.seeds else None
        except ValueError:
            raise SweepError(f"--seeds={args.seeds!r}: give comma-separated integers, e.g. 1337,1338") from None
        return run_and_pack(runs_of(args.part, sets, args.smoke, policies, seeds), args)
    except (SweepError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(guarded(main))
