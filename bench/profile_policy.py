"""Where the time of one workload goes, per sync policy: a torch.profiler kernel breakdown.

    python -m bench.profile_policy --policies "baseline;grouped:4" --workload prefill_b8 --mode graph
    torchrun --standalone --nproc_per_node=2 -m bench.profile_policy --torch_tp   # adds PyTorch's TP

For each policy (and optionally PyTorch's DTensor TP on the same shape) the workload of
bench/tp_latency.py is warmed up, then --calls calls are profiled. Reported per call:
    wall ms       host time per call (the loop ends on a device sync)
    kernels       device kernels launched per call
    busy ms       sum of kernel durations per call (the device's work; wall - busy is idle gaps).
                  An NCCL kernel runs until its peer arrives, so its time includes waiting for the
                  other rank: "without nccl" is the compute alone.
and the busy time split by kernel category (gemm, attention, nccl, norm, elementwise, copy,
reduce, other), then the top kernels. If busy << wall the workload is launch-bound (host
overhead: Python, dispatch, autograd); if busy ~ wall it is device-bound, and the categories say
which kernels grew. With NCCL, each rank's all-reduce kernels are also timed by their position in
the call: a long first one and short others mean the ranks start their calls apart. Written to <out_dir>/profile_<workload>_<mode>_tp<N>.txt (rank 0).
"""
import functools
import os
import statistics
import sys
import time
from collections import defaultdict
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.profile_policy ... "
             "(or torchrun ... -m bench.profile_policy ...)")
from training.cli import check_policies, guarded, positive_int  # noqa: E402
from bench.common import GPT2_VOCAB, as_graph, command_line, device_tag, results_dir, split_policies  # noqa: E402
from bench.tp_latency import SIZES, ctx_call, make_workload, torch_tp_model  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser, write_text  # noqa: E402
from model.compile_modes import COMPILE_MODES  # noqa: E402
from model.gpt import GPT, GPTConfig  # noqa: E402
from parallel import comm  # noqa: E402
from parallel.mesh import init_mesh  # noqa: E402

CATEGORIES = [("nccl", ("nccl",)), ("attention", ("flash", "fmha", "attention", "sdpa")),
              ("gemm", ("gemm", "cublas", "cutlass", "sm90_xmma", "nvjet", "matmul", "splitk")),
              ("norm", ("layer_norm", "layernorm")), ("copy", ("copy", "cat", "memcpy", "memset")),
              ("reduce", ("reduce",)), ("elementwise", ("elementwise", "vectorized", "unrolled"))]


def category(kernel_name):
    name = kernel_name.lower()
    for cat, keys in CATEGORIES:
        if any(k in name for k in keys):
            return cat
    return "other"


def profile_calls(fn, calls, cuda):
    """Kernel events of `calls` calls of fn, and host wall ms per call."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        wall = (time.perf_counter() - t0) * 1e3 / calls
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    # host ops the Python code called directly (their children's time included): where the host time goes
    host = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU and e.cpu_parent is None]
    if not cuda:  # CPU: count the aten ops instead of kernels
        kernels = [e for e in host if e.name.startswith("aten::")]
    return kernels, wall, host


def host_report(host, calls, top):
    """Top-level host ops by their total CPU time per call (an op's time includes its children)."""
    by_name = defaultdict(lambda: [0.0, 0])
    for e in host:
        by_name[e.name][0] += e.cpu_time_total / 1e3 / calls
        by_name[e.name][1] += 1
    total = sum(ms for ms, _ in by_name.values())
    lines = [f"host: top-level ops take {total:.3f} ms/call; top {top} (ms/call, calls/call, µs each):"]
    for name, (ms, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {ms:8.3f} {n / calls:6.0f} {1e3 * ms / (n / calls):8.1f}  {name[:100]}")
    return "\n".join(lines) + "\n"


def report(label, kernels, wall, calls, cuda, top):
    dur = (lambda e: e.device_time) if cuda else (lambda e: e.cpu_time)
    busy = sum(dur(e) for e in kernels) / 1e3 / calls
    by_cat, by_name = defaultdict(float), defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_cat[category(e.name)] += dur(e) / 1e3 / calls
        by_name[e.name][0] += dur(e) / 1e3 / calls
        by_name[e.name][1] += 1
    lines = [f"## {label}", f"wall {wall:.3f} ms/call | kernels {len(kernels) / calls:.0f}/call | "
             f"busy {busy:.3f} ms/call ({100 * busy / wall:.0f}% of wall), without nccl "
             f"{busy - by_cat.get('nccl', 0.0):.3f}",
             "by category (ms/call): " + ", ".join(f"{c} {v:.3f}" for c, v in
                                                    sorted(by_cat.items(), key=lambda kv: -kv[1])),
             f"top {top} kernels (ms/call, launches/call):"]
    for name, (ms, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {ms:8.3f} {n / calls:6.0f}  {name[:110]}")
    return "\n".join(lines) + "\n"


def nccl_by_position(kernels, calls):
    """Median µs of the i-th NCCL kernel of a call, per i (None unless every call launched as many).

    An all-reduce's kernel runs until every rank has arrived: a rank that starts its call later than
    the other makes the other's first all-reduce of the call wait for it. If call starts are offset,
    position 1 is long and the rest are short."""
    nccl = sorted((e for e in kernels if category(e.name) == "nccl"), key=lambda e: e.time_range.start)
    if not nccl or len(nccl) % calls:
        return None
    per_call = len(nccl) // calls
    return [statistics.median(nccl[c * per_call + i].device_time for c in range(calls)) for i in range(per_call)]


def nccl_position_report(per_rank):
    """per_rank: each rank's nccl_by_position list (all the same length)."""
    lines = ["nccl kernel by position in the call (µs, median over calls; a late peer shows as a long first one):"]
    for r, positions in enumerate(per_rank):
        rest = positions[1:]
        tail = (f"; the other {len(rest)}: median {statistics.median(rest):.1f}, max {max(rest):.1f}"
                if rest else "")
        lines.append(f"  rank {r}: first {positions[0]:.1f}{tail}")
    return "\n".join(lines) + "\n"


def main():
    p = OneLineArgumentParser(prog="python -m bench.profile_policy", description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--size", default="124m", choices=list(SIZES))
    p.add_argument("--n_tracks", type=positive_int, default=4)
    p.add_argument("--policies", default="baseline;spd;grouped:4;parallel;ladder", help="';'-separated (or ',')")
    p.add_argument("--workload", default="prefill_b8", choices=["prefill_b1", "prefill_b8", "decode_b1",
                                                                "decode_b8", "train_b8"])
    p.add_argument("--mode", default="graph", choices=["eager", "graph", "compiled", "compiled+graph"],
                   help="compiled: torch.compile(model) first (fullgraph for ours; decode through a StaticKVCache)")
    p.add_argument("--compile_backend", default="inductor", help="for the compiled modes (aot_eager: CPU checks)")
    p.add_argument("--compile_mode", default="default", choices=list(COMPILE_MODES),
                   help="torch.compile settings of the compiled modes (model/compile_modes.py)")
    p.add_argument("--torch_tp", action="store_true", help="also profile PyTorch's TP")
    p.add_argument("--no_bias", action="store_true", help="models without biases (as tp_latency.py --no_bias)")
    p.add_argument("--floor", action="store_true", help="skip every collective (parallel.comm.skipped_collectives): "
                   "the compute alone, the rows tp_latency marks [floor]")
    p.add_argument("--calls", type=positive_int, default=10)
    p.add_argument("--top", type=positive_int, default=12)
    p.add_argument("--seq_len", type=positive_int, default=1024)
    p.add_argument("--out_dir", default=None, help="default: a fresh folder under bench/results/local/")
    args = p.parse_args()
    check_policies(p, split_policies(args.policies), [SIZES[args.size]["n_layer"]])

    cuda = torch.cuda.is_available()
    args.out_dir = results_dir(args.out_dir, "profile_policy", device_tag(cuda))
    mesh = init_mesh(int(os.environ.get("WORLD_SIZE", "1")), "cuda" if cuda else "cpu")  # tp = world size
    world, group, rank, device = mesh.world_size, mesh.tp_group, mesh.rank, mesh.device
    graph = cuda and args.mode.endswith("graph") and not args.workload.startswith("train")
    backend = args.compile_backend if args.mode.startswith("compiled") else None
    mode_tag = {(False, False): "eager", (False, True): "graph", (True, False): "compiled",
                (True, True): "compiled_graph"}[(backend is not None, graph)]  # no '+' in file names
    if backend is not None and args.compile_mode != "default":
        mode_tag += "_" + args.compile_mode.replace("-", "_")
    vocab = GPT2_VOCAB
    header = (f"# profile: {args.size} n_tracks={args.n_tracks} {args.workload} "
              f"{mode_tag} tp={world}{' floor (no collectives)' if args.floor else ''}{' no bias' if args.no_bias else ''}, {args.calls} calls, "
              f"{torch.cuda.get_device_name() if cuda else 'CPU'}, torch {torch.__version__}\n"
              f"command: {command_line(__file__, sys.argv[1:])}\n")
    sections = [header]
    floor = comm.skipped_collectives if args.floor else nullcontext
    variants = split_policies(args.policies)
    if args.torch_tp:
        variants.append("torch_tp")
    for policy in variants:
        torch.manual_seed(0)
        if policy == "torch_tp":
            model = torch_tp_model(args.size, vocab, args.seq_len, device, world, bias=not args.no_bias)
        else:
            model = GPT(GPTConfig(**SIZES[args.size], block_size=args.seq_len, vocab_size=vocab,
                                  n_tracks=args.n_tracks, sync_policy=policy, bias=not args.no_bias),
                        tp_group=group).to(device)
        with floor():  # a graph captures (or skips) the collectives once, at capture
            fn = make_workload(model, args.workload, args.seq_len, vocab, device, cuda, for_graph=graph,
                               compile_backend=backend, compile_mode=args.compile_mode)
            if graph:
                fn = as_graph(fn)
            else:
                fn = functools.partial(ctx_call, floor, fn)
        for _ in range(3):
            fn()
        if policy == variants[0]:  # the first profiler session of a process is slow to start (CUPTI)
            profile_calls(fn, 1, cuda)
        if cuda:
            torch.cuda.synchronize()
        if world > 1:  # start together: else a rank's NCCL kernels time the other's late start
            comm.barrier()
        kernels, wall, host = profile_calls(fn, args.calls, cuda)
        sections.append(report(policy, kernels, wall, args.calls, cuda, args.top))
        positions = nccl_by_position(kernels, args.calls) if cuda else None
        if world > 1:  # every rank joins the gather; a rank without a regular pattern sends NaNs
            count = torch.tensor([len(positions) if positions else 0], device=device)
            counts = [int(c.item()) for c in comm.all_gather(count, group, "bench_setup")]
            if len(set(counts)) == 1 and counts[0] > 0:
                mine = torch.tensor(positions, dtype=torch.float64, device=device)
                sections[-1] += nccl_position_report([t.tolist() for t in comm.all_gather(mine, group, "bench_setup")])
        elif positions:
            sections[-1] += nccl_position_report([positions])
        if not graph:  # a graph replay is one host call: nothing to break down
            sections[-1] += host_report(host, args.calls, args.top)
        if rank == 0:
            print(sections[-1], flush=True)
        del model, fn
    if rank == 0:
        path = os.path.join(args.out_dir, f"profile_{args.size}_n{args.n_tracks}_{args.workload}_"
                                          f"{mode_tag}_tp{world}{'_floor' if args.floor else ''}.txt")
        write_text(path, "\n".join(sections))
        print(f"wrote {path}")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(guarded(main))
