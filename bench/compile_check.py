"""Compiled against eager on the real device: the loss and every gradient, per sync policy, over a few
training steps, at the TP degree of the launch.

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1      # on the lent H200 machines
    python -m bench.compile_check                                     # 1 GPU: tp=1
    torchrun --standalone --nproc_per_node=2 -m bench.compile_check   # 2 GPUs: tp=2
    python -m bench.compile_check --device cpu --steps 1 --policies baseline,grouped:2   # CPU smoke
    torchrun --standalone --nproc_per_node=2 -m bench.compile_check --one_gpu           # tp=2 on one GPU (gloo)

Why: the CPU tests compare compiled and eager with the aot_eager backend, and inductor on the CPU
agrees too, yet inductor on CUDA (torch 2.11) once returned the gradients of a region's replicated
parameters equal to the parameters themselves (experiments/char_sweep/README.md, "A miscompile, found by this
sweep"), and inductor on the CPU ran the ladder's residual add before its all-reduce at tp=2
(experiments/compiler_repros/README.md, "Compiled at tp=2, the ladder computed another function"). This runs the
real backend on the real device. Two copies of one GPT (same init; dropout 0, since compiled
dropout draws other masks; fp32 with TF32 off) take --steps plain SGD steps on the same random
batches, the eager copy with its own gradients, the compiled copy with its own. At every step the
losses and each parameter's gradient are compared: max |g_compiled - g_eager| / max |g_eager|
per parameter, on every rank; the table shows the worst rank's. A row fails above --tol; the exit code is 1
if any row fails. Rank 0 prints the table and writes <out_dir>/compile_check_tp<N>.md. --shape 124m
--block_size 1024 --micro_steps 2 checks the shape and accumulation a 124M launch trains with. inductor
runs with the settings the trainer sets at this tp (model/compile_modes.py: mix-order reduction off at
tp > 1); --inductor_defaults checks without them.
"""
import os
import sys

import torch
import torch.distributed as dist

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.compile_check ... "
             "(or torchrun ... -m bench.compile_check ...)")
from training.cli import check_policies, guarded, positive_int  # noqa: E402
from bench.common import out_dir_problem, split_policies  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser, write_text  # noqa: E402
from model.compile_modes import apply_exact_training_settings  # noqa: E402
from model.gpt import GPT, GPTConfig  # noqa: E402
from parallel import comm  # noqa: E402
from parallel.mesh import build_groups, init_mesh  # noqa: E402

# char384: the char-384 study shape; 124m: the study's GPT-2 124M (config/docs_124m.py, no biases), for checks at
# the shape a launch trains (with --block_size 1024)
SHAPES = {"char384": dict(n_layer=6, n_head=6, n_embd=384, vocab_size=76, bias=False, dropout=0.0),
          "124m": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50304, bias=False, dropout=0.0)}
POLICIES = "baseline,spd,parallel,ladder,grouped:2,grouped:3,grouped:6"


def loss_and_grads(run, model, idx, targets):
    """run: model itself or its compiled wrapper (whose parameter names carry a prefix). idx, targets:
    [micro_steps, B, T]; the gradients accumulate over the micro-batches into .grad, as the trainer's do."""
    for p in model.parameters():
        p.grad = None
    total = 0.0
    for m in range(idx.shape[0]):
        _, loss = run(idx[m], targets[m])
        (loss / idx.shape[0]).backward()
        total += loss.detach() / idx.shape[0]
    return total, {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def check_policy(policy, args, mesh):
    dims = SHAPES[args.shape]
    config = GPTConfig(**dims, block_size=args.block_size, n_tracks=args.n_tracks, sync_policy=policy)

    def build():  # one seed, one init (GPT draws its full weights from the seeded stream)
        torch.manual_seed(0)
        return GPT(config, tp_group=mesh.tp_group).to(mesh.device)
    eager, twin = build(), build()
    compiled = torch.compile(twin, fullgraph=True, backend=args.backend)
    worst = (0.0, "", 0)
    loss_gap = 0.0
    for step in range(args.steps):
        gen = torch.Generator().manual_seed(1000 + step)  # the same batch on every rank
        shape = (args.micro_steps, args.batch_size, args.block_size)
        idx = torch.randint(0, dims["vocab_size"], shape, generator=gen).to(mesh.device)
        targets = torch.randint(0, dims["vocab_size"], shape, generator=gen).to(mesh.device)
        loss_e, grads_e = loss_and_grads(eager, eager, idx, targets)
        loss_c, grads_c = loss_and_grads(compiled, twin, idx, targets)
        loss_gap = max(loss_gap, abs(loss_c.item() - loss_e.item()))
        for name, g in grads_e.items():
            rel = ((grads_c[name] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
            if rel > worst[0]:
                worst = (rel, name, step)
        with torch.no_grad():
            for model, grads in ((eager, grads_e), (twin, grads_c)):
                for name, p in model.named_parameters():
                    p.sub_(args.lr * grads[name])
    return loss_gap, worst


def worst_over_ranks(result, mesh, policy):
    """(loss gap, (rel, name, step)) with the largest relative gradient difference over the ranks: a gradient that
    differs on one rank only (a replicated parameter's, say) must not hide behind rank 0's. Another rank's worst
    parameter is printed by that rank, and named by its rank here."""
    loss_gap, (rel, name, step) = result
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return result
    mine = torch.tensor([rel, loss_gap, step], dtype=torch.float64, device=mesh.device)
    every = [t.tolist() for t in comm.all_gather(mine, dist.group.WORLD, kind="bench_setup")]
    worst_rank = max(range(len(every)), key=lambda r: every[r][0])
    if worst_rank == mesh.rank and worst_rank != 0:
        print(f"rank {worst_rank}: {policy}: worst parameter {name} (step {step}), rel. diff {rel:.2e}", flush=True)
    if worst_rank == mesh.rank:
        return max(e[1] for e in every), (rel, name, step)
    return max(e[1] for e in every), (every[worst_rank][0], f"rank {worst_rank}'s (printed by it)", int(every[worst_rank][2]))


def main(argv=None):
    p = OneLineArgumentParser(prog="python -m bench.compile_check", formatter_class=HelpFormatter, description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", default=POLICIES, help="comma-separated sync policies")
    p.add_argument("--shape", choices=sorted(SHAPES), default="char384", help="the model's shape (comment at SHAPES)")
    p.add_argument("--micro_steps", type=positive_int, default=1, help="micro-batches accumulated into .grad per step")
    p.add_argument("--no_cudnn_sdpa", action="store_true", help="keep attention off cuDNN's SDPA kernels (CUDA)")
    p.add_argument("--inductor_defaults", action="store_true", help="compile with inductor's defaults, not the "
                   "settings the trainer sets for tp > 1 (model/compile_modes.py): what the trainer compiled before")
    p.add_argument("--n_tracks", type=positive_int, default=2)
    p.add_argument("--steps", type=positive_int, default=3)
    p.add_argument("--batch_size", type=positive_int, default=8)
    p.add_argument("--block_size", type=positive_int, default=64)
    p.add_argument("--lr", type=float, default=0.05, help="SGD step between the checks")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--tol", type=float, default=1e-3, help="max allowed relative gradient difference")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--one_gpu", action="store_true", help="every rank on cuda:0, joined by gloo (which reduces "
                   "CUDA tensors through the host): inductor's CUDA code at tp>1 on a one-GPU machine")
    p.add_argument("--out_dir", default=None)
    args = p.parse_args(argv)
    dims = SHAPES[args.shape]
    check_policies(p, split_policies(args.policies), [dims["n_layer"]])
    if not 0 < args.tol < float("inf"):  # also refuses nan, under which every check would pass
        p.error(f"--tol={args.tol}: must be a number > 0 (a relative gradient difference)")
    if not 0 < args.lr < float("inf"):
        p.error(f"--lr={args.lr}: must be a number > 0")
    if args.out_dir and out_dir_problem(args.out_dir):
        p.error(out_dir_problem(args.out_dir))
    if dims["n_head"] % args.n_tracks:
        p.error(f"--n_tracks={args.n_tracks} must divide the model's n_head={dims['n_head']}: one of "
                f"{[d for d in range(1, dims['n_head'] + 1) if dims['n_head'] % d == 0]}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if args.one_gpu:
        dist.init_process_group("gloo")
        torch.cuda.set_device(0)
        mesh = build_groups(dist.get_world_size())
        mesh.device = "cuda:0"
    else:
        mesh = init_mesh(int(os.environ.get("WORLD_SIZE", "1")), None if args.device == "auto" else args.device)
    where = torch.cuda.get_device_name() if mesh.device.startswith("cuda") else "cpu"
    settings = {} if args.inductor_defaults else apply_exact_training_settings(mesh.tp)
    as_run = ", ".join(f"{k}={v}" for k, v in settings.items()) or "inductor's defaults"
    lines = [f"# compiled ({args.backend}) vs eager gradients: tp={mesh.tp}, n_tracks {args.n_tracks}, "
             f"{dims['n_layer']} x {dims['n_embd']} (vocab {dims['vocab_size']}), batch {args.batch_size} x "
             f"{args.block_size} x {args.micro_steps} micro-step(s), {args.steps} SGD steps, fp32"
             f"{', cuDNN SDPA off' if args.no_cudnn_sdpa else ''}; {as_run}; {where}, torch {torch.__version__}; the worst "
             f"over the {mesh.world_size} rank(s)\n",
             "| policy | max loss gap | max rel. grad diff | worst parameter (step) | verdict |", "|---|---:|---:|---|---|"]
    failed = False
    for policy in split_policies(args.policies):
        loss_gap, (rel, name, step) = worst_over_ranks(check_policy(policy, args, mesh), mesh, policy)
        ok = rel <= args.tol
        failed |= not ok
        where = f"{name} (step {step})" if name else "-"
        lines.append(f"| {policy} | {loss_gap:.2e} | {rel:.2e} | {where} | {'PASS' if ok else 'FAIL'} |")
        if mesh.is_master:
            print(lines[-1], flush=True)
    if mesh.is_master:
        table = "\n".join(lines) + "\n"
        print(table)
        if args.out_dir:
            write_text(os.path.join(args.out_dir, f"compile_check_tp{mesh.tp}.md"), table)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(guarded(main))
