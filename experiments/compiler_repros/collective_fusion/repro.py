"""Inductor runs a reader of an all-reduce's result before the all-reduce has finished.

    torchrun --standalone --nproc_per_node=2 -m experiments.compiler_repros.collective_fusion.repro          # CPU, gloo
    torchrun --standalone --nproc_per_node=2 -m experiments.compiler_repros.collective_fusion.repro --cuda   # 2 GPUs, NCCL
    torchrun --standalone --nproc_per_node=2 -m experiments.compiler_repros.collective_fusion.repro --one_gpu  # 1 GPU, gloo

step() all-reduces a partial sum o and adds it to x, and, independently, takes LayerNorm(x). Both
read x, so inductor fuses `x + y` with the LayerNorm into one kernel, and places that kernel where
the LayerNorm could run: before the collective's wait (functional collectives), or before the
collective itself (an in-place custom op; the model's ladder at tp=2 on CPU). The sum then misses the
other ranks' parts: compiled minus eager is exactly them. Found by bench/compile_check.py: the
ladder policy at tp=2 (inductor, CPU, torch 2.13) computed another loss (6e-3) and grads (40%).
parallel/comm.py therefore traces every collective as a custom op that returns a new tensor.

Prints, per variant, the largest |compiled - eager| of both outputs on every rank; exit code 1 if any
variant differs by more than float rounding.
"""
import sys

if __name__ == "__main__" and not __package__:  # run by its path: ours() imports parallel/ from the repository root
    sys.exit("run it from the repository root as: torchrun --standalone --nproc_per_node=2 -m "
             "experiments.compiler_repros.collective_fusion.repro " + " ".join(sys.argv[1:]))

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from training.config import OneLineArgumentParser
from training.cli import guarded


def functional(o):  # torch's functional all-reduce: the graph waits where the result is first read
    return funcol.all_reduce(o, "sum", dist.group.WORLD)


def functional_waited(o):  # the same, waited for right away
    return funcol.wait_tensor(funcol.all_reduce(o, "sum", dist.group.WORLD))


def ours(o):  # parallel/comm.py's traced all-reduce: an opaque op returning a new tensor
    from parallel import comm
    return comm._all_reduce_value(o, dist.group.WORLD)


def make_step(all_reduce):
    def step(x, a, w):
        o = a @ w  # this rank's partial sum
        y = all_reduce(o)
        return F.layer_norm(x, (x.shape[-1],)), x + y
    return step


def main():
    p = OneLineArgumentParser(prog="python -m experiments.compiler_repros.collective_fusion.repro", description=__doc__.split("\n\n")[0])
    p.add_argument("--cuda", action="store_true")
    p.add_argument("--one_gpu", action="store_true", help="CUDA tensors of every rank on cuda:0, joined by gloo")
    args = p.parse_args()
    args.cuda |= args.one_gpu
    dist.init_process_group("nccl" if args.cuda and not args.one_gpu else "gloo")
    rank = dist.get_rank()
    device = "cuda:0" if args.one_gpu else f"cuda:{rank}" if args.cuda else "cpu"
    if args.cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    x, w = torch.randn(64, 32, device=device), torch.randn(16, 32, device=device)
    a = torch.randn(64, 16, device=device) * (rank + 1)  # ranks hold different parts
    failed, lines = False, []
    for name, all_reduce in (("functional", functional), ("functional_waited", functional_waited), ("ours", ours)):
        torch._dynamo.reset()
        step = make_step(all_reduce)
        eager = step(x, a.clone(), w)
        compiled = torch.compile(step, fullgraph=True)(x, a.clone(), w)
        errs = [(c - e).abs().max().item() for c, e in zip(compiled, eager)]
        failed |= max(errs) > 1e-4
        lines.append(f"rank {rank} {name:18s} layer_norm {errs[0]:.2e}  x + all_reduce(o) {errs[1]:.2e}"
                     f"  {'WRONG' if max(errs) > 1e-4 else 'ok'}")
    for r in range(dist.get_world_size()):  # one rank at a time, so the lines do not interleave
        if r == rank:
            backend = "gloo, one GPU" if args.one_gpu else "NCCL" if args.cuda else "gloo"
            print(f"torch {torch.__version__}, {backend}\n" * (rank == 0) + "\n".join(lines),
                  flush=True)
        dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(guarded(main))
