"""Sync-point sensitivity of a trained model, and a data-driven `selective:` policy (SPD-style).

Given a checkpoint trained with every sync (baseline), drop sync points zero-shot, without any
training, and measure the validation loss on the fixed eval batches of the training script:

  1. one point at a time, from the last block toward the first (attention point a<l>, then the
     MLP point m<l-1>, ...): sensitivity(p) = val_loss(all points but p) - val_loss(baseline).
     The final sync before ln_f cannot be dropped.
  2. cumulatively, dropping points in order of increasing sensitivity, to show how the loss
     grows as syncs go.

The selective policy for --syncs N keeps the N-1 most sensitive points plus the final one.

This is not the SPD paper's ranking (arXiv 2502.20727, Kim et al., ICML 2025). SPD drops only attention
syncs, cumulatively: it drops block after block from the last toward the first and takes each block's
sensitivity as the change in perplexity that dropping it adds to the blocks already dropped. Here, step 1
drops one point alone (every other point synced), attention and MLP points alike, so a point's
sensitivity does not depend on which others were dropped before it; the a<l> rows are the nearest thing
to SPD's per-block numbers, measured one at a time rather than cumulatively.

    python spd_sensitivity.py out-shakespeare-baseline-24sync/ckpt.pt --syncs 9 [--out result.json]
"""
import argparse
import json
import os
import sys

import torch
from tqdm import tqdm

from training.checkpoint import CheckpointError, load_weights, read_checkpoint
from training.cli import guarded
from atomic_files import replace_problem
from training.config import HelpFormatter, OneLineArgumentParser, ascii_int, atomic_write
from model.gpt import GPT, GPTConfig
from data.loader import DataError, check_data, eval_offsets, load_tokens, open_split


def point_name(p):
    return ("a" if p % 2 == 0 else "m") + str(p // 2)


def selective_spec(points):
    return "selective:" + ",".join(point_name(p) for p in sorted(points))


@torch.no_grad()
def val_loss(model, data_dir, eval_iters, batch_size, device, autocast):
    data = open_split(data_dir, "val")
    block_size = model.config.block_size
    total = 0.0
    for k in range(eval_iters):
        x, y = load_tokens(data, eval_offsets("val", k, len(data), block_size, batch_size), block_size, device)
        with autocast:
            total += model(x, y)[1].float()
    return (total / eval_iters).item()


def fail(message):
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def check_request(args):
    """Everything about the request that can be wrong, checked before the (long) measurement.
    Returns (checkpoint, its run config, model_args, data_dir, eval_iters, batch_size)."""
    for name in ("syncs", "eval_iters", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            fail(f"--{name}={value} must be >= 1")
    try:
        device = torch.device(args.device)
    except (RuntimeError, ValueError):
        fail(f"--device={args.device!r} is not a device; use cpu, cuda or cuda:N")
    if device.type not in ("cpu", "cuda") or (device.type == "cuda" and not torch.cuda.is_available()):
        fail(f"--device={args.device!r} is not available here; use cpu" + (", cuda or cuda:N" if torch.cuda.is_available() else ""))
    if args.out is not None:
        parent = os.path.dirname(os.path.abspath(args.out))
        if not args.out or os.path.isdir(args.out) or not os.path.isdir(parent):
            fail(f"--out={args.out!r}: must be a file path in an existing directory")
        if replace_problem(args.out):  # a device or a FIFO: refused now, not after the measurement
            fail(f"--out: {replace_problem(args.out)}")
    try:
        ckpt = read_checkpoint(args.ckpt, ("model", "model_args", "config", "iter_num"))  # weights_only=True
    except CheckpointError as e:
        fail(str(e))
    cfg, model_args = ckpt["config"], dict(ckpt["model_args"])
    for key, kind in (("dataset", str), ("eval_iters", int), ("batch_size", int)):
        if not isinstance(cfg.get(key), kind):
            fail(f"{args.ckpt}: its config has no valid {key!r} (got {cfg.get(key)!r})")
    n_points = 2 * model_args["n_layer"]
    if not 1 <= args.syncs <= n_points:
        fail(f"--syncs={args.syncs} must be between 1 and {n_points} (the model's sync points)")
    try:
        root = cfg.get("data_dir") if isinstance(cfg.get("data_dir"), str) else ""  # '' = the repository's data/
        data_dir, _ = check_data(cfg["dataset"], model_args["block_size"], root)
    except DataError as e:
        fail(f"{args.ckpt} was trained on dataset {cfg['dataset']!r}: {e}")
    return ckpt, cfg, model_args, data_dir, args.eval_iters or cfg["eval_iters"], args.batch_size or cfg["batch_size"]


def main(argv=None):
    parser = OneLineArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("ckpt", help="checkpoint of a baseline run (out_dir/ckpt.pt or ckpt_best.pt)")
    parser.add_argument("--syncs", type=ascii_int, default=9, help="sync points of the printed selective policy (default %(default)s)")
    parser.add_argument("--eval_iters", type=ascii_int, default=None, help="val batches (default: the run's)")
    parser.add_argument("--batch_size", type=ascii_int, default=None, help="default: the run's")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="default %(default)s (CUDA when available, else CPU)")
    parser.add_argument("--out", default=None, help="write the table and policy as JSON here (default: print only)")
    args = parser.parse_args(argv)

    ckpt, cfg, model_args, data_dir, eval_iters, batch_size = check_request(args)
    n_points = 2 * model_args["n_layer"]
    if model_args["sync_policy"] != "baseline":
        print(f"note: the checkpoint was trained with sync_policy={model_args['sync_policy']!r}, "
              f"not baseline; sensitivities are relative to all points synced")
    model_args.update(sync_policy="baseline", dropout=0.0)
    model = GPT(GPTConfig(**model_args))
    try:
        load_weights(model, ckpt, args.ckpt)
    except CheckpointError as e:
        fail(str(e))
    model.to(args.device).eval()
    autocast = (torch.amp.autocast("cuda", dtype=torch.bfloat16) if args.device.startswith("cuda")
                else torch.autocast("cpu", enabled=False))
    measure = lambda: val_loss(model, data_dir, eval_iters, batch_size, args.device, autocast)

    # 2 * (n_points - 1) + 1 evaluations of eval_iters batches: minutes on a CPU; the bars go to stderr
    print(f"measuring {2 * (n_points - 1) + 1} val losses of {eval_iters} batches of {batch_size}", flush=True)
    base = measure()
    print(f"{args.ckpt}: iter {ckpt['iter_num']}, baseline val loss {base:.4f} ({n_points} syncs)")
    droppable = list(range(n_points - 2, -1, -1))  # last block toward the first; the final sync stays
    sensitivity = {}
    with tqdm(droppable, desc="each point dropped alone", unit="eval") as bar:  # closed (its line ended) on Ctrl-C
        for p in bar:
            model.set_sync_policy(selective_spec(set(range(n_points)) - {p}))
            sensitivity[p] = measure() - base
    print(f"\n{'point':>6} {'dropped alone: val loss':>24} {'increase':>9}  rank")
    ranked = sorted(droppable, key=lambda p: -sensitivity[p])
    for p in droppable:
        print(f"{point_name(p):>6} {base + sensitivity[p]:>24.4f} {sensitivity[p]:>+9.4f}  {ranked.index(p) + 1}")

    print(f"\n{'syncs':>6} {'cumulative drop (least sensitive first)':>40} {'val loss':>9}")
    kept, cumulative = set(range(n_points)), []
    with tqdm(list(reversed(ranked)), desc="cumulative drop", unit="eval") as bar:
        for p in bar:
            kept.discard(p)
            model.set_sync_policy(selective_spec(kept))
            cumulative.append({"syncs": len(kept), "dropped": point_name(p), "val_loss": measure()})
            bar.write(f"{len(kept):>6} {'- ' + point_name(p):>40} {cumulative[-1]['val_loss']:>9.4f}",
                      file=sys.stdout)

    policy = selective_spec(set(ranked[:args.syncs - 1]) | {n_points - 1})
    print(f"\nmost sensitive first: {', '.join(point_name(p) for p in ranked)}")
    print(f"policy with {args.syncs} syncs (most sensitive kept): {policy}")
    if args.out:
        result = {"ckpt": args.ckpt, "baseline_val_loss": base,
                  "sensitivity": {point_name(p): sensitivity[p] for p in droppable},
                  "ranking": [point_name(p) for p in ranked], "cumulative": cumulative,
                  "syncs": args.syncs, "policy": policy}
        atomic_write(args.out, lambda f: f.write(json.dumps(result, indent=1).encode()))
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))  # Ctrl-C, SIGTERM and a closed stdout end in one line (issue 53)
