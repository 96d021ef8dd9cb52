"""Inductor (CPU, torch 2.13) issues a backward's collectives in a different order on the two TP ranks.

The synchronous model, tp=2, selective:0,m1 at n_layer=2 (layer 0: two Megatron sublayers; layer 1: a
region). The TP sum of the region's partial parameter gradients (the `tp_grad` all-reduce) is ordered
by no data against the f all-reduces of layer 0, and the ranks' graphs differ (TP rank 0 adds the
region's biases into its partial sum). Inductor's peak-memory reordering then places it differently:
rank 0 issues it before layer 0's f all-reduces, rank 1 after them. Real collectives then pair up
tensors of different sizes (gloo aborts: "Received data size doesn't match expected size"; NCCL
could hang or sum unrelated tensors). With torch._inductor.config.reorder_for_peak_memory = False the
order is the same on both ranks. repro_cpu.txt is the output at ed244d9.

Fixed since: rank 0 adds the region's biases through values in a buffer, not an `if` (model/gpt.py:
Block.adds_biases at the fix, GPT.sync_bias_coeffs since issue 49), so both ranks trace the same graph, and the order is the same with the pass on (repro_cpu_fixed.txt;
tests/test_async_grad.py::test_inductor_issues_the_same_collectives_on_every_rank runs real gloo
collectives that way).

    python -m experiments.compiler_repros.collective_order.repro            # peak-memory reordering on (default)
    python -m experiments.compiler_repros.collective_order.repro --no-peak  # off

The collectives are replaced by no-ops (nothing is exchanged), so both ranks run to the end and print
the order of the collectives in their compiled backward.
"""
import re
import sys

if __name__ == "__main__" and not __package__:  # run by its path: worker() imports model/ from the repository root
    sys.exit("run it from the repository root as: python -m experiments.compiler_repros.collective_order.repro "
             + " ".join(sys.argv[1:]))

import torch


def worker(rank, world_size, peak):
    import torch._inductor.config as inductor_config
    import torch.distributed as dist
    from torch._inductor.utils import run_and_get_code
    from model.gpt import GPT, GPTConfig
    inductor_config.fx_graph_cache = False
    inductor_config.reorder_for_peak_memory = peak
    group = dist.new_group([0, 1])
    torch.manual_seed(0)
    config = GPTConfig(n_layer=2, n_head=4, n_embd=48, block_size=16, vocab_size=64, n_tracks=4,
                       sync_policy="selective:0,m1")
    model = GPT(config, tp_group=group).double()
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    g = torch.Generator().manual_seed(1)
    idx, targets = torch.randint(0, 64, (3, 16), generator=g), torch.randint(0, 64, (3, 16), generator=g)
    dist.all_reduce = lambda *args, async_op=False, **kwargs: None  # no exchange: each rank runs alone
    _, codes = run_and_get_code(lambda: compiled(idx, targets)[1].backward())
    lines = codes[-1].splitlines()  # the backward
    # each collective, named by the source nodes of inductor's comment above it
    # (numbered apart by the ranks' graphs: sum_15 on rank 0 is sum_14 on rank 1, so numbers are dropped)
    return [re.sub(r"_\d+", "", re.sub(r".*Source Nodes: (\[.*?\]).*", r"\1", lines[i - 1]))
            for i, line in enumerate(lines)
            if re.match(r"\s*buf\d+ = torch\.ops\.reduced_sync\.", line)]


def main(argv=None):
    from parallel.launch import run_on_gloo
    from training.config import OneLineArgumentParser
    parser = OneLineArgumentParser(prog="python -m experiments.compiler_repros.collective_order.repro",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-peak", action="store_true", help="turn inductor's peak-memory reordering off")
    peak = not parser.parse_args(argv).no_peak
    orders = run_on_gloo(worker, 2, peak)
    print(f"reorder_for_peak_memory={peak}")
    for rank, order in enumerate(orders):
        print(f"rank {rank}:")
        print("\n".join("    " + line for line in order))
    print("same order on both ranks" if orders[0] == orders[1] else "DIFFERENT ORDERS")


if __name__ == "__main__":
    from training.cli import guarded
    sys.exit(guarded(main))
