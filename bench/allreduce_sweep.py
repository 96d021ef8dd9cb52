"""All-reduce time against message size, at the launch's world size: the law behind the step-time model's
communication term (bench/step_model.py prices each sync point as alpha + bytes / bw).

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1      # on the lent multi-GPU machines
    torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --out_dir bench/results/allreduce
    torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --device cpu --sizes 4k,64k   # gloo smoke

Why: the stored tp=2 rows put a jump in the cost per all-reduce between 1.57 MB (124M's prefill_b1 messages,
16 us over the floor per all-reduce on 2x H200) and 2.1 MB (medium's, 29 us), which one alpha + bytes / bw line cannot follow
(bench/results/step_model_validation.md); NCCL picks its protocol by message size. Held-out model rows cannot
place such a change point, a sweep that measures only the collective can.

Per size (bytes of one bf16 tensor; default: 1 KiB to 64 MiB at every power of 2 and its 1.5x, plus 1 to 4 MiB
every 256 KiB): --calls in-place SUM all-reduces back to back through parallel/comm.py, on CUDA captured as one
CUDA graph (as the model's graphs run them) and replayed; the time per all-reduce is one replay's CUDA-event time
divided by --calls, median over --repeats replays (CPU: wall clock). Sizes run in --rounds interleaved rounds,
so a slow spell of the machine does not land on one size. Reported per size: the median us, algbw = bytes / t
and busbw = algbw x 2 (n - 1) / n (nccl-tests' convention, comparable with its published tables). Rank 0
prints the table and writes <out_dir>/allreduce_sweep_n<N>.{json,md} with the device, torch and NCCL versions
and every NCCL_* variable of the environment (set NCCL_PROTO=LL, LL128 or Simple to time one protocol).

--between N times what an all-reduce adds to a step instead. Before each all-reduce it runs work: with --producer
gemm (the default) each call's own message is written by a GEMM of inner size N and read by a residual add after
its all-reduce, as a row-parallel GEMM writes the tensor its g sums and the next sublayer reads it; with --producer
matmul an N x N matmul that reads nothing of the message, then an elementwise write of one message. Each size is
timed twice, interleaved, with its all-reduces and without them (the floor), and the table reports the difference
per all-reduce, with every rank's medians: the quantity a step's time over its no-sync floor divides into, which
back-to-back calls overstate (by about 5 us on 2x H100: bench/results/allreduce/instep_h100/README.md). Written to
allreduce_instep_<producer>_n<N>.{json,md}; bench/step_model.py prices tp=2 by allreduce_instep_gemm_n2.json.
"""
import math
import os
import statistics
import sys

import torch
import torch.distributed as dist

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: torchrun ... -m bench.allreduce_sweep ...")
from training.cli import guarded, non_negative_int, positive_int  # noqa: E402
from bench.common import (as_graph, call_times, command_line, md_row, multicast_off, out_dir_problem,  # noqa: E402
                          save_results, source_commit)
from training.config import HelpFormatter, OneLineArgumentParser  # noqa: E402
from parallel import comm  # noqa: E402
from parallel.mesh import close_process_groups, end_process, init_mesh  # noqa: E402

multicast_off()  # before any NCCL communicator exists
UNITS = {"": 1, "k": 2**10, "m": 2**20}
MAX_BYTES = 2**34  # 16 GiB: beyond any TP message and most GPUs' memory


def default_sizes():
    """1 KiB to 64 MiB at 2^i and 1.5 x 2^i, and every 256 KiB from 1 to 4 MiB, in bytes, sorted."""
    sizes = {2**i for i in range(10, 27)} | {3 * 2**(i - 1) for i in range(10, 26)}
    sizes |= {2**20 + 2**18 * j for j in range(13)}
    return sorted(sizes)


def parse_sizes(text):
    """'4k,1.5m,100' -> bytes; each an even number of bytes (bf16 elements) from 2 to MAX_BYTES."""
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        unit = item[-1] if item and item[-1] in "km" else ""
        try:
            n = float(item[:len(item) - len(unit)]) * UNITS[unit]
        except ValueError:
            n = math.nan
        if not (2 <= n <= MAX_BYTES and n == int(n) and int(n) % 2 == 0):
            raise ValueError(f"--sizes: {item!r} is not a size this sweep takes; allowed: an even number of bytes "
                             f"from 2 to {MAX_BYTES // 2**20} MiB (bf16 elements), written as bytes or with k or m "
                             f"(KiB, MiB), e.g. 4k,1.5m")
        out.append(int(n))
    return sorted(set(out))


def bus_factor(n):
    """busbw / algbw of an all-reduce over n ranks (nccl-tests' convention)."""
    return 2 * (n - 1) / n


def timer(nbytes, calls, group, device, cuda, between=0, reduce=True, producer="gemm"):
    """A no-argument callable running `calls` all-reduces of one nbytes bf16 tensor (a graph replay on CUDA).
    between > 0 puts work before each: producer 'gemm', a [m, between] x [between, w] GEMM writing the call's own
    message (m x w = its elements, w <= 1024) and, after the all-reduce, a residual add reading it, as a step's
    sublayers do; 'matmul', a between x between matmul and an elementwise write of the one message.
    reduce=False leaves the all-reduces out (the floor)."""
    n = nbytes // 2
    if between and producer == "gemm":
        w = math.gcd(n, 1024)
        acts = torch.randn(n // w, between, device=device).to(torch.bfloat16)
        weight = torch.randn(between, w, device=device).to(torch.bfloat16) / between ** 0.5
        messages = [torch.empty(n // w, w, dtype=torch.bfloat16, device=device) for _ in range(calls)]
        resid = torch.zeros(n // w, w, dtype=torch.bfloat16, device=device)

        def burst():
            for msg in messages:
                torch.mm(acts, weight, out=msg)
                if reduce:
                    comm.all_reduce(msg, group, "bench")
                resid.add_(msg)
        return as_graph(burst) if cuda else burst
    x = torch.zeros(n, dtype=torch.bfloat16, device=device)
    a = torch.randn(between, between, device=device).to(torch.bfloat16) / max(between, 1) ** 0.5
    c = torch.empty_like(a)

    def burst():
        for _ in range(calls):
            if between:
                torch.mm(a, a, out=c)
                x.mul_(0.5)  # the message's producer; halving keeps the repeated sums finite
            if reduce:
                comm.all_reduce(x, group, "bench")
    return as_graph(burst) if cuda else burst


def sweep(sizes, args, mesh, cuda):
    """{size: [us per all-reduce of each replay]} over args.rounds interleaved rounds; with args.between > 0,
    (with, floor): the same for the graph with its all-reduces and for the one without, timed side by side."""
    kinds = (True, False) if args.between else (True,)
    runs = {(n, r): timer(n, args.calls, mesh.tp_group, mesh.device, cuda, args.between, r, args.producer)
            for n in sizes for r in kinds}
    times = {key: [] for key in runs}
    for _ in range(args.rounds):
        for key in runs:
            comm.barrier()
            times[key] += [ms * 1e3 / args.calls for ms in call_times(runs[key], args.repeats, cuda)]
    if not args.between:
        return {n: times[(n, True)] for n in sizes}
    return {n: (times[(n, True)], times[(n, False)]) for n in sizes}


def rank_medians(times, group, device):
    """{size: (with, floor) medians of every rank, rank order}: a floor that differs between ranks is time the
    faster rank waits at each all-reduce, which the sweep's difference counts as the all-reduce's."""
    sizes = sorted(times)
    mine = torch.tensor([[statistics.median(times[n][0]), statistics.median(times[n][1])] for n in sizes],
                        dtype=torch.float64, device=device)
    every = comm.all_gather(mine, group)
    return {n: [tuple(r[i].tolist()) for r in every] for i, n in enumerate(sizes)}


def table(times, world, ranks=None):
    """Per size: median us per all-reduce (with a floor: the median with all-reduces less the median without),
    algbw and busbw from it."""
    rows = []
    for n, us in sorted(times.items()):
        extra = {}
        if isinstance(us, tuple):
            with_, floor = us
            extra = {"us_with": statistics.median(with_), "us_floor": statistics.median(floor)}
            t = extra["us_with"] - extra["us_floor"]
            us = [w - extra["us_floor"] for w in with_]
        else:
            t = statistics.median(us)
        algbw = n / (t * 1e-6) / 1e9 if t > 0 else math.inf
        rows.append({"bytes": n, "us": t, "us_min": min(us), "algbw_GBps": algbw,
                     "busbw_GBps": algbw * bus_factor(world), "samples": len(us), **extra})
        if ranks:
            rows[-1].update(us_with_ranks=[w for w, _ in ranks[n]], us_floor_ranks=[f for _, f in ranks[n]])
    return rows


def markdown(rows, meta):
    lines = [f"# all-reduce (SUM, bf16) against message size: {meta['ranks']} ranks, {meta['device']}, torch "
             f"{meta['torch']}, NCCL {meta['nccl']}; {meta['how']}; commit {meta['commit']}",
             f"# {meta['command']}", f"# environment: {meta['nccl_env'] or 'no NCCL_* variables'}", "",
             md_row(["bytes", "KiB", "median us", "min us", "algbw GB/s", "busbw GB/s"]
                    + (["with us", "floor us"] if meta.get("between") else [])),
             md_row(["---:"] * (8 if meta.get("between") else 6))]
    for r in rows:
        lines.append(md_row([str(r["bytes"]), f"{r['bytes'] / 1024:g}", f"{r['us']:.2f}", f"{r['us_min']:.2f}",
                             f"{r['algbw_GBps']:.1f}", f"{r['busbw_GBps']:.1f}"]
                            + ([f"{r['us_with']:.2f}", f"{r['us_floor']:.2f}"] if meta.get("between") else [])))
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = OneLineArgumentParser(prog="python -m bench.allreduce_sweep", formatter_class=HelpFormatter,
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=None, help="comma-separated message sizes: bytes, or with k/m (KiB/MiB) "
                   "(default: 1 KiB to 64 MiB, and 1-4 MiB every 256 KiB)")
    p.add_argument("--calls", type=positive_int, default=20, help="all-reduces per replay (per timing)")
    p.add_argument("--repeats", type=positive_int, default=10, help="timed replays per size and round")
    p.add_argument("--rounds", type=positive_int, default=3, help="interleaved passes over the sizes")
    p.add_argument("--between", type=non_negative_int, default=0, help="N > 0: work before each all-reduce (see "
                   "--producer), and the table gives the time the all-reduces add over the same graph without them "
                   "(what a step pays); 0: all-reduces back to back")
    p.add_argument("--producer", choices=("gemm", "matmul"), default="gemm", help="with --between: 'gemm', each "
                   "call's own message written by a GEMM of inner size N and read by a residual add after its "
                   "all-reduce; 'matmul', an N x N matmul and an elementwise write of one message")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out_dir", default=None)
    args = p.parse_args(argv)
    if args.out_dir and out_dir_problem(args.out_dir):
        p.error(out_dir_problem(args.out_dir))
    try:
        sizes = parse_sizes(args.sizes) if args.sizes else default_sizes()
    except ValueError as e:
        p.error(str(e))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2:
        p.error(f"world size {world}: an all-reduce needs 2 or more ranks; launch with torchrun --nproc_per_node=N")
    mesh = init_mesh(world, None if args.device == "auto" else args.device)
    cuda = mesh.device.startswith("cuda")
    times = sweep(sizes, args, mesh, cuda)
    rows = table(times, world, rank_medians(times, mesh.tp_group, mesh.device) if args.between else None)
    if mesh.is_master:
        meta = {"ranks": world, "device": torch.cuda.get_device_name() if cuda else "cpu (gloo)",
                "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else "-",
                "how": (f"{args.calls} calls per CUDA-graph replay" if cuda else f"{args.calls} calls per timing")
                + f", median of {args.repeats} x {args.rounds}"
                + ((f"; each after a {args.between}x{args.between} bf16 matmul and a write of the message"
                    if args.producer == "matmul" else f"; each call's own message written by a GEMM of inner size "
                    f"{args.between} and read by a residual add after it") + ", less the same graph without the "
                   "all-reduces" if args.between else "; back to back"),
                "producer": args.producer if args.between else None,
                "between": args.between,
                "commit": source_commit(), "command": command_line(__file__, sys.argv[1:] if argv is None else argv),
                "nccl_env": " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_"))}
        md = markdown(rows, meta)
        print(md)
        if args.out_dir:
            name = f"allreduce_instep_{args.producer}" if args.between else "allreduce_sweep"
            save_results(args.out_dir, f"{name}_n{world}", {**meta, "rows": rows}, md)
    return end_process(0, close_process_groups())  # the captured graphs hold NCCL communicators (parallel/mesh.py)


if __name__ == "__main__":
    sys.exit(guarded(main))
