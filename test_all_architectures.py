"""Check every named sync policy on CPU with real gloo tensor parallelism, and print a table.

For each policy, the same 4-track model (same seed, same batch) runs at tp=1, tp=2 and tp=4 in 4
spawned processes; the loss and the full gradient of every parameter must agree across tp, the
collectives the model issues are counted at tp=2, and the replicated parameters must receive
bit-identical gradients on every TP rank. Exits non-zero if any row fails.

    python test_all_architectures.py [--dtype float32|float64]
"""
import sys

import torch
import torch.distributed as dist

from model.gpt import GPT, GPTConfig
from model.sync_policy import parse_sync_policy
from parallel import comm
from parallel.launch import run_on_gloo
from training.config import HelpFormatter, OneLineArgumentParser
from training.cli import guarded

POLICIES = ["baseline", "spd", "parallel", "ladder", "grouped:2", "grouped:3", "grouped:4", "grouped:6",
            "selective:m0-3,m5,m7,m9-11"]
MODEL = dict(n_layer=12, n_head=4, n_embd=64, block_size=32, vocab_size=128, n_tracks=4, bias=True, dropout=0.0)


def loss_and_grads(policy, tp_group, dtype, seed=1337):
    """Loss, full grads (name -> tensor), collectives of one forward+backward, and whether the
    replicated grads are identical on every rank of tp_group."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**MODEL, sync_policy=policy), tp_group=tp_group).to(dtype)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, MODEL["vocab_size"], (4, MODEL["block_size"]), generator=g)
    targets = torch.randint(0, MODEL["vocab_size"], (4, MODEL["block_size"]), generator=g)
    comm.stats.reset()
    _, loss = model(idx, targets)
    fwd = dict(comm.stats.counts)
    loss.backward()
    counts = dict(comm.stats.counts)
    replicated_identical = True
    for name, p in model.named_parameters():
        if not p.tensor_parallel:
            copies = comm.all_gather(p.grad, tp_group, "test")
            replicated_identical &= all(torch.equal(c, copies[0]) for c in copies)
    grads = {name: model.full_tensor(name, p.grad) for name, p in model.named_parameters()}
    return dict(loss=loss.item(), grads=grads, fwd=fwd.get("tp_fwd", 0),
                bwd=counts.get("tp_bwd", 0) + counts.get("tp_grad", 0),
                params=model.get_num_params(non_embedding=False), replicated_identical=replicated_identical)


def worker(rank, world_size, dtype_name):
    dtype = getattr(torch, dtype_name)
    groups = {tp: [dist.new_group(list(range(s, s + tp))) for s in range(0, world_size, tp)]
              for tp in (1, 2, 4)}
    rows = []
    for policy in POLICIES:
        result = {}
        for tp in (1, 2, 4):
            r = loss_and_grads(policy, groups[tp][rank // tp], dtype)
            if rank == 0:
                result[tp] = r
        if rank == 0:
            rows.append((policy, result))
    return rows if rank == 0 else None


def main():
    parser = OneLineArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                        help="the dtype of the comparison (default %(default)s; tolerance 2e-5, float64 1e-12)")
    args = parser.parse_args()
    tol = {"float32": 2e-5, "float64": 1e-12}[args.dtype]
    rows = run_on_gloo(worker, 4, args.dtype)[0]
    print(f"model: {MODEL}, dtype {args.dtype}, tolerance {tol:g}")
    header = (f"{'policy':<28}{'syncs':>6}{'fwd@tp2':>8}{'bwd@tp2':>8}{'params':>9}{'loss':>9}"
              f"{'max|dloss|':>12}{'max|dgrad|':>12}  result")
    print(header)
    print("-" * len(header))
    failures = 0
    for policy, result in rows:
        declared = parse_sync_policy(policy, MODEL["n_layer"]).n_syncs
        dloss = max(abs(result[tp]["loss"] - result[1]["loss"]) for tp in (2, 4))
        dgrad = max((result[tp]["grads"][n] - g).abs().max().item()
                    for tp in (2, 4) for n, g in result[1]["grads"].items())
        r2 = result[2]
        ok = (dloss <= tol and dgrad <= tol and r2["fwd"] == declared
              and len({result[tp]["params"] for tp in (1, 2, 4)}) == 1
              and all(result[tp]["replicated_identical"] for tp in (1, 2, 4)))
        failures += not ok
        print(f"{policy:<28}{declared:>6}{r2['fwd']:>8}{r2['bwd']:>8}{r2['params']:>9}{result[1]['loss']:>9.4f}"
              f"{dloss:>12.2e}{dgrad:>12.2e}  {'PASS' if ok else 'FAIL'}")
    print("bwd counts the f all-reduces plus the one sum of partial replicated-parameter grads.")
    print(f"{len(rows) - failures}/{len(rows)} policies passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    sys.exit(guarded(main))
