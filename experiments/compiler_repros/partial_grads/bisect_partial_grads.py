"""Which part of the partial-gradient construction did inductor on CUDA miscompile? (tp = world size)

    python -m experiments.compiler_repros.partial_grads.bisect_partial_grads --out_dir OUT      # on one GPU
    torchrun --standalone --nproc_per_node=2 -m experiments.compiler_repros.partial_grads.bisect_partial_grads \
        --variants coalesced_f --out_dir OUT                                              # tp=2
    python -m experiments.compiler_repros.partial_grads.bisect_partial_grads --device cpu --backend aot_eager \\
        --steps 1 --policies grouped:2                                                     # CPU smoke

Background (experiments/char_sweep/README.md, "A miscompile, found by this sweep"): a region's replicated
parameters (LayerNorm weights and biases, row-parallel biases) used to enter the graph as

    flat = f(cat(params));  views = [v.view_as(p) for v in flat.split(sizes)]

with f = copy_to_tp_region (identity forward; all-reduce backward, the identity at tp=1). Compiled by
inductor on CUDA (torch 2.11), their gradients came out equal to the parameters. At tp=1 the model
now skips the construction; at tp >= 2 it still uses it. This script runs bench/compile_check.py's
comparison (compiled vs eager gradients over SGD steps, fp32) at the launch's TP degree with
GPT._partial_params replaced by each variant below (a variant replaces the skip at tp=1 too), to find
the smallest one that still fails, and to check a replacement at tp=2:

    skip          the parameters themselves (what the model does at tp=1)
    cat_f         the old construction above
    cat_split     cat, split, view_as: no autograd Function
    cat_clone_fn  cat, then an identity Function whose forward returns a copy, not a view
    per_param_f   f on each parameter, no cat
    coalesced_f   one Function over all the parameters: forward returns each as a view, backward
                  concatenates their gradients and all-reduces them once (a candidate replacement:
                  one collective, and no cat in the forward)
    stack_f       f(stack(params)).unbind(0): what the model does now at tp >= 2 (every slot is an
                  [n_embd] vector), the rewrite that https://github.com/pytorch/pytorch/issues/193061
                  reports avoids inductor's fault; here it did not (FAIL as cat_f, 2x H200, torch 2.11)
    cat_f_no_mix  cat_f with torch._inductor.config.triton.mix_order_reduction off, the optimization that
                  issue names as the cause (torch 2.10 and later, CUDA): PASS there, so every compiled
                  run at tp > 1 now sets it (model/compile_modes.py)

The fault needs a LayerNorm-weight gradient reduced over ~16k rows or more: the default char384 shape at
batch 8 x 64 is far below it. The 124M launch's case (the drift of compiled training at tp=2, found with
bench.compile_check --shape 124m --block_size 1024 --batch_size 4 --micro_steps 2):

    torchrun --standalone --nproc_per_node=2 -m experiments.compiler_repros.partial_grads.bisect_partial_grads \
        --shape 124m --n_tracks 4 --block_size 1024 --batch_size 4 --micro_steps 2 --policies grouped:2 \
        --variants cat_f,stack_f,coalesced_f,cat_f_no_mix --out_dir OUT

(its table: bench/results/issue49/final/logs/mix_order/bisect_partial_grads_tp2.md). Exit code 0; the table (rank 0; <out_dir>/bisect_partial_grads_tp<N>.md) says PASS or FAIL per variant
and policy.
"""
import argparse
import contextlib
import os
import sys

if __name__ == "__main__" and not __package__:  # run by its path: the imports below need the repository root
    sys.exit("run it from the repository root as: python -m experiments.compiler_repros.partial_grads.bisect_partial_grads "
             + " ".join(sys.argv[1:]))

import torch
import torch._inductor.config as inductor_config
import torch.distributed as dist

from bench import compile_check
from training.config import OneLineArgumentParser, write_text
from model.compile_modes import EXACT_TRAINING_SETTINGS
from model.gpt import GPT
from parallel import comm
from parallel.mesh import init_mesh
from training.cli import guarded


class _CopyIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


class _CoalescedCopyToTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, *tensors):
        ctx.group, ctx.sizes = group, [t.numel() for t in tensors]
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        flat = comm._all_reduce_value(torch.cat([g.reshape(-1) for g in grads]), ctx.group)
        return (None, *(f.view_as(g) for f, g in zip(flat.split(ctx.sizes), grads)))


def _split_like(flat, tensors):
    return [v.view_as(t) for v, t in zip(flat.split([t.numel() for t in tensors]), tensors)]


def _flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors])


VARIANTS = {
    "skip": lambda tensors, group: tensors,
    "cat_f": lambda tensors, group: _split_like(comm.copy_to_tp_region(_flat(tensors), group, "tp_grad"), tensors),
    "cat_split": lambda tensors, group: _split_like(_flat(tensors), tensors),
    "cat_clone_fn": lambda tensors, group: _split_like(_CopyIdentity.apply(_flat(tensors)), tensors),
    "per_param_f": lambda tensors, group: [comm.copy_to_tp_region(t, group, "tp_grad") for t in tensors],
    "coalesced_f": lambda tensors, group: list(_CoalescedCopyToTPRegion.apply(group, *tensors)),
    "stack_f": lambda tensors, group: list(comm.copy_to_tp_region(torch.stack(tensors), group, "tp_grad").unbind(0)),
}
VARIANTS["cat_f_no_mix"] = VARIANTS["cat_f"]
NO_MIX_ORDER = {"cat_f_no_mix"}  # compiled under the trainer's settings at tp > 1: mix-order reduction off
NO_MIX_ORDER_PATCH = EXACT_TRAINING_SETTINGS


def main(argv=None):
    p = OneLineArgumentParser(prog="python -m experiments.compiler_repros.partial_grads.bisect_partial_grads", description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--policies", default="grouped:2,spd")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--shape", choices=sorted(compile_check.SHAPES), default="char384")
    p.add_argument("--n_tracks", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--micro_steps", type=int, default=1)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out_dir", default=None)
    args = p.parse_args(argv)
    if not 0 < args.tol < float("inf"):  # also nan, under which every check would pass
        p.error(f"--tol={args.tol}: must be a number > 0 (a relative gradient difference)")
    for name in ("steps", "n_tracks", "batch_size", "block_size", "micro_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name}={getattr(args, name)}: must be an integer >= 1")
    bad = [v for v in args.variants.split(",") if v not in VARIANTS]
    if bad:
        p.error(f"--variants {bad} not allowed; allowed: {list(VARIANTS)}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mesh = init_mesh(int(os.environ.get("WORLD_SIZE", "1")), None if args.device == "auto" else args.device)
    check_args = argparse.Namespace(shape=args.shape, micro_steps=args.micro_steps, n_tracks=args.n_tracks,
                                    steps=args.steps, batch_size=args.batch_size, block_size=args.block_size,
                                    lr=0.05, backend=args.backend)
    where = torch.cuda.get_device_name() if mesh.device.startswith("cuda") else "cpu"
    lines = [f"# partial-gradient construction variants, compiled ({args.backend}) vs eager at tp={mesh.tp}: "
             f"{where}, torch {torch.__version__}, {args.steps} SGD steps, fp32; shape {args.shape}, n_tracks "
             f"{args.n_tracks}, batch {args.batch_size} x {args.block_size} x {args.micro_steps} micro-step(s)\n",
             "| variant | policy | max loss gap | max rel. grad diff | worst parameter (step) | verdict |",
             "|---|---|---:|---:|---|---|"]
    original = GPT._partial_params
    try:
        for variant in args.variants.split(","):
            build = VARIANTS[variant]

            def partial_params(self, build=build):
                tensors = self._partial_tensors
                if not tensors or not torch.is_grad_enabled():
                    return tensors
                return build(tensors, self.tp_group)
            GPT._partial_params = partial_params
            for policy in args.policies.split(","):
                torch._dynamo.reset()
                config = (inductor_config.patch(NO_MIX_ORDER_PATCH) if variant in NO_MIX_ORDER
                          else contextlib.nullcontext())
                with config:
                    loss_gap, (rel, name, step) = compile_check.check_policy(policy, check_args, mesh)
                # each rank compared its own shards: the verdict takes the worst rank
                worst = comm.all_reduce_max(torch.tensor([rel], device=mesh.device), mesh.tp_group, "bench_setup")
                rel_all = worst.item()
                verdict = "PASS" if rel_all <= args.tol else "FAIL"
                where = f"{name or '-'} (step {step})" if rel_all == rel else "on another rank"
                lines.append(f"| {variant} | {policy} | {loss_gap:.2e} | {rel_all:.2e} | {where} | {verdict} |")
                if mesh.is_master:
                    print(lines[-1], flush=True)
    finally:
        GPT._partial_params = original
    table = "\n".join(lines) + "\n"
    if mesh.is_master:
        print(table)
        if args.out_dir:
            write_text(os.path.join(args.out_dir, f"bisect_partial_grads_tp{mesh.tp}.md"), table)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))
