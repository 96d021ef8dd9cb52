"""Latency of every sync policy under real tensor parallelism, with the no-sync floor and PyTorch's TP.

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1      # on the lent H200 machines
    torchrun --standalone --nproc_per_node=2 -m bench.tp_latency        # tp = world size (1, 2, 4)
    python -m bench.tp_latency --merge                                  # one table + PNG over all tp

For each model size (GPT-2 124M, medium and large: 36 x 20 heads x 1280; --n_tracks, default 4) and each policy, in one run:
    prefill_b1 / prefill_b8   forward over a 1 x 1024 / 8 x 1024 prompt (no grad)
    decode_b1 / decode_b8     one token with a KV cache holding 1023 tokens (no grad)
    train_b8                  forward + backward over 8 x 1024 tokens
each in eager mode and, on CUDA, replayed as a CUDA graph (torch.cuda.graph; NCCL all-reduces,
the training step's backward included, are captured into the graph). --modes compiled and
compiled+graph run torch.compile(model) (fullgraph for ours; our decode then uses a StaticKVCache,
the fixed-shape step of GPT.generate(decode='compiled')), alone and captured as a CUDA graph, once per
--compile_mode entry (model/compile_modes.py; a non-default one is tagged in the mode, e.g.
"compiled+graph/coordinate-descent", so the settings are compared side by side). Each
(model, floor, workload, compile mode) compiles once: restrict --policies and --workloads to keep the run short. Times are CUDA-event medians
over --repeats calls after --warmup calls (wall clock on CPU). All variants of a model size (every
policy, its floor, torch_tp; eager and graph) are built at once and timed in --rounds interleaved
rounds, so a ratio between two rows compares calls made side by side. Precision on CUDA: training runs
bf16 autocast over fp32 weights (as train_reduced_sync.py); inference runs the model cast to bf16,
as it would be deployed (autocast would re-cast every weight on every call).

References in the same run:
    floor        the same computation with every collective skipped (parallel.comm.skipped_collectives):
                 the limit that dropping syncs approaches. Its outputs are wrong; only its time counts.
    torch_tp     PyTorch's own TP (torch.distributed.tensor.parallel: ColwiseParallel q/k/v and c_fc,
                 RowwiseParallel c_proj) on a plain baseline GPT of the same shape, every workload
                 (its KV cache holds the local heads, as ours does).
TP communication (--tp_comm, default off; bench/common.py, as bench/train_throughput.py takes it): each value times
every policy and its floor again, side by side with the others, in rows tagged by it ("eager sp", "graph sp+chunked"):
off is plain TP; sp Megatron's sequence parallelism (a reduce-scatter and an all-gather per sync point); chunked[:K]
and async_tp, sp with that tp_comm_overlap (parallel/overlap.py). Sequence parallelism splits the prompt's tokens over
the TP group (--seq_len divisible by tp); a decode step has one token, so its sp rows read "n/a: one token". async_tp
runs on CUDA in the compiled modes only; its other rows hold the one-line reason. torch_tp runs plain TP only. The
tables then add, per policy, its ms over baseline at the same value and over baseline off.
Collectives per row are counted by parallel.comm (forward all-reduces, backward all-reduces; under sp, the
reduce-scatters and all-gathers); for
torch_tp, by a dispatch mode over DTensor's c10d functional ops. Each run also records the host
time to launch one small kernel (eager rows are launch-bound) and the source commit.
Results: bench/results/tp_latency_tp<N>.{md,json}; --merge writes tp_latency.{md,png}.
The workloads and the torch_tp model live in bench/latency/workloads.py; this file times them and writes the tables.
"""
import functools
import glob
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.tp_latency ... "
             "(or torchrun ... -m bench.tp_latency ...)")
from training.cli import check_policies, guarded, non_negative_int, positive_int  # noqa: E402
from bench.common import (GPT2_VOCAB, as_graph, async_tp_problem, call_times, command_line, device_tag,  # noqa: E402
                          md_row, model_options, parse_tp_comm, pyplot, results_dir, save_results, source_commit,
                          split_policies, tp_comm_tag, use_cuda)
from training.config import HelpFormatter, OneLineArgumentParser, save_figure, write_text  # noqa: E402
from model.compile_modes import COMPILE_MODES  # noqa: E402
from model.gpt import GPT, GPTConfig  # noqa: E402
from parallel import comm  # noqa: E402
from parallel.mesh import init_mesh  # noqa: E402
from parallel.overlap import enable_async_tp  # noqa: E402
from bench.latency import workloads as parts  # noqa: E402
# re-exported: bench/profile_policy.py and the tests import them from here
from bench.latency.workloads import count_collectives, count_torch_collectives, make_workload  # noqa: E402,F401

SIZES = {"124m": dict(n_layer=12, n_head=12, n_embd=768), "medium": dict(n_layer=24, n_head=16, n_embd=1024),
         "large": dict(n_layer=36, n_head=20, n_embd=1280),
         "tiny": dict(n_layer=2, n_head=4, n_embd=64)}
# every one valid at every size's n_layer (a selective spec names layers, so it belongs to one size: pass it
# with --sizes 124m, as bench/gpu_suite.sh does)
POLICIES = ["baseline", "ladder", "spd", "parallel", "grouped:2", "grouped:3", "grouped:4", "grouped:6"]
WORKLOADS = ["prefill_b1", "prefill_b8", "decode_b1", "decode_b8", "train_b8"]
MODES = ["eager", "graph", "compiled", "compiled+graph"]


# ----------------------------------------------------------------------------- timing
def time_interleaved(fns, warmup, repeats, rounds, cuda):
    """Median ms per key of fns (key -> callable) over `repeats` calls each, taken in `rounds` rounds
    that visit every key in turn. Eager calls are launch-bound, so their time follows the host's
    speed, which drifts over seconds; interleaving makes the drift hit every variant alike, so the
    ratios between variants (policy / floor, policy / baseline) hold even when it does."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    per_round = -(-repeats // rounds)
    samples = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            samples[key] += call_times(fn, per_round, cuda)
    return {key: statistics.median(v) for key, v in samples.items()}


def ctx_call(ctx, fn):
    with ctx():
        fn()


def host_launch_us(device, cuda, launches=2000):
    """Host microseconds to launch one tiny kernel (median of 5 loops): the unit cost of eager
    mode. A launch-bound eager row costs about (kernels per call) x this, whatever the GPU does."""
    x = torch.zeros(1, device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    samples = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(launches):
            x.add_(1)
        samples.append((time.perf_counter() - t0) / launches * 1e6)
    sync()
    return statistics.median(samples)


# ----------------------------------------------------------------------------- workloads (bench/latency/workloads.py)
def torch_tp_model(size, vocab, seq, device, tp, bias=True):  # by size name, as profile_policy and the tests ask
    return parts.torch_tp_model(SIZES[size], vocab, seq, device, tp, bias)


# ----------------------------------------------------------------------------- main
def run(args):
    cuda = use_cuda(args.device)
    mesh = init_mesh(int(os.environ.get("WORLD_SIZE", "1")), "cuda" if cuda else "cpu")  # tp = world size
    world, group, rank, device = mesh.world_size, mesh.tp_group, mesh.rank, mesh.device
    seq, vocab = args.seq_len, GPT2_VOCAB
    if args.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    graphs = cuda and not args.no_graphs
    modes = [m for m in args.modes.split(",") if "graph" not in m or graphs]
    compile_modes = args.compile_mode.split(",")
    compile_tags = ["" if m == "default" else "/" + m for m in compile_modes]
    if any(m.startswith("compiled") for m in modes):  # every (model, floor, workload) is its own graph
        torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 10_000
    rows = []

    def record(**row):
        rows.append(row)
        if rank == 0:
            ms = row["ms"] if isinstance(row["ms"], str) else f"{row['ms']:.3f} ms"
            print(f"{row['size']:>7} {row['variant']:<36} {row['workload']:<11} {row['mode']:<6} {ms:>12}  "
                  f"collectives fwd {row['fwd']} bwd {row['bwd']}", flush=True)

    name = torch.cuda.get_device_name() if cuda else "CPU"
    launch_us = host_launch_us(device, cuda)
    if world > 1:  # the slowest rank's; through parallel.comm, as every collective of the project
        mine = torch.tensor([launch_us], dtype=torch.float64, device=device)
        launch_us = max(t.item() for t in comm.all_gather(mine, group, "bench_setup"))
    meta = dict(device=name, tp=world, torch=torch.__version__, seq_len=seq, repeats=args.repeats, rounds=args.rounds,
                commit=source_commit(), host_launch_us=round(launch_us, 2), compile_mode=args.compile_mode,
                cudnn_sdpa=not args.no_cudnn_sdpa, bias=not args.no_bias,
                command=command_line(__file__, sys.argv[1:]))
    if rank == 0:
        print(f"{name}, tp={world}, commit {meta['commit']}: host time to launch one small kernel "
              f"{launch_us:.2f} us (slowest rank)", flush=True)

    def save():  # after every workload, so a run cut short still leaves its rows
        if rank == 0:
            save_results(args.out_dir, f"tp_latency_tp{world}", dict(meta=meta, rows=rows),
                         markdown([dict(meta=meta, rows=rows)]))

    n_tracks_list = [int(n) for n in args.n_tracks.split(",")]
    for n in n_tracks_list:
        if n % world != 0 and rank == 0:
            print(f"skipping n_tracks={n}: not divisible by tp={world}")
    for size in args.sizes.split(","):
        # every variant of a size lives at once, so each workload times them all side by side
        models = {}
        for n, policy, tp_comm in ((n, pol, c) for c in args.tp_comm_list for n in n_tracks_list if n % world == 0
                                   for pol in split_policies(args.policies)):
            torch.manual_seed(0)
            if tp_comm != "off" and seq % world:  # sequence parallelism splits the tokens evenly over the ranks
                models[(n, policy, tp_comm)] = f"n/a: seq_len {seq} not divisible by tp={world}"
                continue
            if tp_comm == "async_tp" and cuda and group is None:  # symmetric memory lives on a TP group
                models[(n, policy, tp_comm)] = "n/a: async_tp needs tp > 1"
                continue
            try:
                if tp_comm == "async_tp" and cuda:
                    enable_async_tp(group)
                models[(n, policy, tp_comm)] = GPT(
                    GPTConfig(**SIZES[size], block_size=seq, vocab_size=vocab, n_tracks=n, bias=not args.no_bias,
                              dropout=0.0, sync_policy=policy), tp_group=group, **model_options(tp_comm)).to(device)
            except Exception as e:  # e.g. symmetric memory refused: these rows say why, the others run
                if tp_comm == "off":
                    raise
                models[(n, policy, tp_comm)] = f"{type(e).__name__}: {str(e)[:100]}"
        if not args.no_torch_tp:
            models[("-", "torch_tp", "off")] = torch_tp_model(size, vocab, seq, device, world, bias=not args.no_bias)
        for workload in sorted(args.workloads.split(","), key=lambda w: not w.startswith("train")):  # fp32 first
            fns, failed, row_meta = {}, {}, {}  # keyed by (n_tracks, policy, tp_comm, floor, mode)
            # training graphs hold a whole step's activations: one shared pool keeps them to one step's
            pool = torch.cuda.graph_pool_handle() if graphs and workload.startswith("train") else None
            for (n, policy, tp_comm), model in models.items():
                # sequence parallelism splits tokens: a decode step's one token has none to split (the model would
                # run plain TP under a KV cache, a duplicate of the off row)
                absent = model if isinstance(model, str) else "n/a: one token" if (
                    tp_comm != "off" and workload.startswith("decode")) else async_tp_problem(tp_comm, cuda, True)
                uncompiled = async_tp_problem(tp_comm, cuda, False)  # async_tp on CUDA: its eager and graph rows
                for floor in ((False, True) if policy != "torch_tp" else (False,)):
                    ctx = comm.skipped_collectives if floor else nullcontext
                    keys = [(n, policy, tp_comm, floor, mode + tag) for mode in modes
                            for tag in (compile_tags if mode.startswith("compiled") else [""])]
                    for key in keys:
                        row_meta[key] = dict(syncs="-", fwd="-", bwd="-")
                        if absent or (uncompiled and not key[-1].startswith("compiled")):
                            failed[key] = absent or uncompiled
                    if absent:
                        continue
                    syncs = 2 * SIZES[size]["n_layer"] if policy == "torch_tp" else model.syncs_per_forward
                    with ctx():  # a graph captures (or skips) the collectives once, at capture
                        fn = make_workload(model, workload, seq, vocab, device, cuda)
                        fwd, bwd = (count_torch_collectives if policy == "torch_tp" else count_collectives)(fn)
                        if "eager" in modes and not uncompiled:
                            fns[(n, policy, tp_comm, floor, "eager")] = functools.partial(ctx_call, ctx, fn)
                        for compile_mode, tag in zip(compile_modes, compile_tags):
                            if "compiled" not in modes and "compiled+graph" not in modes:
                                break
                            try:  # inductor reads its micro-pipeline TP switch as it compiles: on for async_tp only
                                import torch._inductor.config as inductor_config
                                with inductor_config.patch(_micro_pipeline_tp=tp_comm == "async_tp"):
                                    cfn = make_workload(model, workload, seq, vocab, device, cuda,
                                                        for_graph=True, compile_backend=args.compile_backend,
                                                        compile_mode=compile_mode)
                                    cfn()  # compile now, inside ctx: the floor's graph skips its collectives
                                if "compiled" in modes:
                                    fns[(n, policy, tp_comm, floor, "compiled" + tag)] = functools.partial(
                                        ctx_call, ctx, cfn)
                                if "compiled+graph" in modes:
                                    fns[(n, policy, tp_comm, floor, "compiled+graph" + tag)] = as_graph(cfn, pool)
                            except Exception as e:  # report, keep measuring the rest
                                for mode in ("compiled", "compiled+graph"):
                                    failed[(n, policy, tp_comm, floor, mode + tag)] = (
                                        f"compile failed: {type(e).__name__}: {str(e)[:60]}")
                        if "graph" in modes and not uncompiled:
                            key = (n, policy, tp_comm, floor, "graph")
                            if workload.startswith("train"):
                                fn = make_workload(model, workload, seq, vocab, device, cuda, for_graph=True)
                            try:
                                fns[key] = as_graph(fn, pool)
                            except Exception as e:  # report, keep measuring the rest
                                failed[key] = f"capture failed: {type(e).__name__}: {str(e)[:60]}"
                    for key in keys:
                        row_meta[key] = dict(syncs=syncs, fwd=fwd, bwd=bwd)
            ms = {**time_interleaved(fns, args.warmup, args.repeats, args.rounds, cuda), **failed}
            for (n, policy, tp_comm, floor, mode), meta_ in row_meta.items():
                variant = (("torch_tp (baseline)" if policy == "torch_tp" else policy) + " " + tp_comm_tag(tp_comm)
                           ).rstrip() + (" [floor]" if floor else "")
                record(size=size, n_tracks=n, variant=variant, policy=policy, floor=floor, workload=workload,
                       mode=mode, tp_comm=tp_comm, ms=ms[(n, policy, tp_comm, floor, mode)], **meta_)
            del fns
            save()
        del models
        if cuda:
            torch.cuda.empty_cache()
    if rank == 0:
        print(f"wrote {args.out_dir}/tp_latency_tp{world}.md and .json")
    if world > 1:
        dist.destroy_process_group()


def all_rows(runs):
    """Every row of every run, tagged with its run's tp (rows of older runs lack n_tracks: it was 4, and tp_comm: off).
    A row of another --tp_comm than off carries it in its mode too ('graph sp'; the bare mode in base_mode), so every
    table and ratio keeps the communication modes apart, each policy against its floor and baseline at the same one."""
    return [dict(r, tp=run_["meta"]["tp"], n_tracks=r.get("n_tracks", 4), tp_comm=r.get("tp_comm", "off"),
                 base_mode=r["mode"], mode=f"{r['mode']} {tp_comm_tag(r.get('tp_comm', 'off'))}".rstrip())
            for run_ in runs for r in run_["rows"]]


def ratio(a, b):
    """a / b to 2 decimals, or '-' where either is missing or a failed measurement (a string)."""
    return f"{a / b:.2f}" if isinstance(a, float) and isinstance(b, float) else "-"


def markdown_runs(runs):
    out = []
    for run_ in runs:
        m = run_["meta"]
        launch = f", host launch {m['host_launch_us']} us/kernel" if "host_launch_us" in m else ""
        out.append(f"- tp={m['tp']}: {m['device']}, torch {m['torch']}, commit {m.get('commit', 'not recorded')}, "
                   f"median of {m['repeats']} calls{launch}, command `{m['command']}`"
                   + (f". Note: {m['note']}" if m.get("note") else ""))
    return "\n".join(out) + "\n"


def comm_ratios(runs):
    """Markdown, where the rows hold more than one --tp_comm value (else ''): per (size, workload, mode, tp, n_tracks,
    policy), each value's ms, its ratio to baseline at the same value and to baseline off."""
    rows = [r for r in all_rows(runs) if not r["floor"] and r["policy"] != "torch_tp"]
    comms = list(dict.fromkeys(r["tp_comm"] for r in rows))
    if len(comms) < 2:
        return ""
    ms = {(r["size"], r["workload"], r["base_mode"], r["tp"], r["n_tracks"], r["policy"], r["tp_comm"]): r["ms"]
          for r in rows}
    head = ["size", "workload", "mode", "tp", "n_tracks", "policy"]
    for c in comms:
        head += [f"{c} ms", f"÷ baseline {c}"] + ([] if c == "off" else ["÷ baseline off"])
    out = ["\n## TP communication (--tp_comm)\n", "Each policy's ms per mode, over baseline at the same mode and over "
           "baseline off (baseline's own row: baseline sp ÷ baseline off); < 1: faster. A decode step has one token, "
           "so no sequence-parallel time (n/a).\n", md_row(head),
           "|---|---|---|---:|---:|---|" + "".join("---:|---:|" if c == "off" else "---:|---:|---:|" for c in comms)]
    keys = sorted(dict.fromkeys(k[:-1] for k in ms), key=lambda k: (k[0], WORKLOADS.index(k[1]), k[2], k[3], str(k[4])))
    for key in keys:
        size, workload, mode, tp, n, _ = key
        cells = []
        for c in comms:
            mine, base = ms.get((*key, c)), ms.get((size, workload, mode, tp, n, "baseline", c))
            shown = f"{mine:.3f}" if isinstance(mine, float) else "n/a" if str(mine).startswith("n/a") else (
                "error" if mine else "-")
            cells += [shown, ratio(mine, base)]
            if c != "off":
                cells.append(ratio(mine, ms.get((size, workload, mode, tp, n, "baseline", "off"))))
        out.append(md_row([*map(str, key), *cells]))
    return "\n".join(out) + "\n"


def markdown(runs, with_runs=True):
    """One table per (size, workload, mode): a row per (n_tracks, policy); per tp the ms, ms / floor
    and ms / baseline (same n_tracks; for torch_tp, its ms / our baseline's). With several --tp_comm
    values, a table per value (mode 'eager sp', ...) and comm_ratios first."""
    out = ([markdown_runs(runs)] if with_runs else []) + [t for t in [comm_ratios(runs)] if t]
    rows = all_rows(runs)
    tps = sorted({r["tp"] for r in rows})
    keys = sorted({(r["size"], r["workload"], r["mode"]) for r in rows},
                  key=lambda k: (k[0], WORKLOADS.index(k[1]), k[2]))
    for size, workload, mode in keys:
        sel = [r for r in rows if (r["size"], r["workload"], r["mode"]) == (size, workload, mode)]
        ms_of = {(r["n_tracks"], r["policy"], r["floor"], r["tp"]): r["ms"] for r in sel}
        out.append(f"\n### {size} {workload} {mode}\n")
        out.append(md_row(["n_tracks", "policy", "syncs/fwd", "collectives fwd/bwd",
                           *(f"tp={t} ms | ÷ floor | ÷ baseline" for t in tps)]))
        out.append("|---:|---|---:|---|" + "---:|---:|---:|" * len(tps))
        for n, policy in dict.fromkeys((r["n_tracks"], r["policy"]) for r in sel if not r["floor"]):
            cells = []
            for t in tps:
                ms = ms_of.get((n, policy, False, t))
                floor = ms_of.get((n, policy, True, t))
                if policy == "torch_tp":
                    bases = {n_: v for (n_, p, f, t_), v in ms_of.items() if p == "baseline" and not f and t_ == t}
                    base = bases.get(t, next(iter(bases.values()), None))  # prefer n_tracks = tp
                else:
                    base = ms_of.get((n, "baseline", False, t))
                cells += [f"{ms:.3f}" if isinstance(ms, float) else str(ms or "-"), ratio(ms, floor), ratio(ms, base)]
            mine = [r for r in sel if (r["n_tracks"], r["policy"]) == (n, policy) and not r["floor"]]
            counts = {r["tp"]: f"{r['fwd']}/{r['bwd']}" for r in mine}  # ours: the same at every tp
            counted = (next(iter(counts.values())) if len(set(counts.values())) == 1
                       else ", ".join(f"tp={t}: {c}" for t, c in sorted(counts.items())))
            out.append(md_row([str(n), policy, str(mine[0]["syncs"]), counted, *cells]))
    return "\n".join(out) + "\n"


def summary(runs):
    """The ratios the benchmark is for, read from the same rows as the full tables (each ratio's two
    numbers come from one run): grouped:3 vs baseline in decode, each policy over its no-sync
    floor, and PyTorch's TP over our baseline."""
    rows = all_rows(runs)
    ms = {(r["size"], r["n_tracks"], r["policy"], r["floor"], r["workload"], r["mode"], r["tp"]): r["ms"]
          for r in rows if isinstance(r["ms"], float)}
    tps = sorted({r["tp"] for r in rows})
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    tracks = sorted({r["n_tracks"] for r in rows if r["policy"] != "torch_tp"}, reverse=True)
    out = ["\n## Key ratios\n", "**grouped:3 ÷ baseline, decode with CUDA graphs** (ms; < 1: grouped:3 is faster)\n",
           "| size | n_tracks | tp | batch 1 baseline | grouped:3 | ratio | batch 8 baseline | grouped:3 | ratio |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        for n in tracks:
            for t in tps:
                cells = []
                for w in ("decode_b1", "decode_b8"):
                    base, g3 = (ms.get((size, n, p, False, w, "graph", t)) for p in ("baseline", "grouped:3"))
                    cells += [f"{base:.3f}" if base else "-", f"{g3:.3f}" if g3 else "-", ratio(g3, base)]
                if any(c != "-" for c in cells):
                    out.append(md_row([size, str(n), str(t), *cells]))
    out += ["\n**Each policy ÷ its no-sync floor, decode batch 1 with CUDA graphs** (1.00: communication "
            "costs nothing)\n", md_row(["size", "n_tracks", "policy", *(f"tp={t}" for t in tps)]),
            "|---|---:|---|" + "---:|" * len(tps)]
    for size in sizes:
        for n in tracks:
            for policy in dict.fromkeys(r["policy"] for r in rows if r["size"] == size and r["n_tracks"] == n
                                        and r["policy"] != "torch_tp"):
                cells = [ratio(ms.get((size, n, policy, False, "decode_b1", "graph", t)),
                               ms.get((size, n, policy, True, "decode_b1", "graph", t))) for t in tps]
                out.append(md_row([size, str(n), policy, *cells]))
    out += ["\n**PyTorch TP ÷ our baseline** (same shape and workload; our baseline with n_tracks = tp where "
            "measured, else n_tracks 4; > 1: ours is faster)\n",
            md_row(["size", "workload", "mode", *(f"tp={t}" for t in tps)]), "|---|---|---|" + "---:|" * len(tps)]
    for size in sizes:
        for w in WORKLOADS:
            for mode in ("eager", "graph"):
                cells = []
                for t in tps:
                    base = ms.get((size, t, "baseline", False, w, mode, t)) or ms.get((size, 4, "baseline", False, w,
                                                                                       mode, t))
                    cells.append(ratio(ms.get((size, "-", "torch_tp", False, w, mode, t)), base))
                if any(c != "-" for c in cells):
                    out.append(md_row([size, w, mode, *cells]))
    return "\n".join(out) + "\n"


def merge(out_dir):
    runs = []
    for path in sorted(glob.glob(os.path.join(out_dir, "tp_latency_tp*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        raise SystemExit(f"error: no tp_latency_tp*.json in {out_dir}: run the benchmark first")
    write_text(os.path.join(out_dir, "tp_latency.md"), (
                "# Sync-policy latency under tensor parallelism\n\nMade by `bash bench/gpu_suite.sh tp1|tp2|tp4 OUT`, "
                "then `python -m bench.tp_latency --merge`. Inference runs bf16 weights, training bf16 autocast; "
                "ms are CUDA-event medians. ÷ floor: the same policy with every collective skipped. "
                "n_tracks = tp means one track per GPU.\n\n" + markdown_runs(runs) + summary(runs)
                + "\n## All rows\n" + markdown(runs, with_runs=False)))
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, workload in zip(axes, ("decode_b1", "prefill_b8")):
        for run_ in runs:
            rows = [r for r in run_["rows"] if r["workload"] == workload and not r["floor"]
                    and r.get("tp_comm", "off") == "off"
                    and r["size"] == "124m" and isinstance(r["ms"], float) and r["policy"] != "torch_tp"]
            mode = "graph" if any(r["mode"] == "graph" for r in rows) else "eager"
            for n in dict.fromkeys(r.get("n_tracks", 4) for r in rows):
                pts = [r for r in rows if r["mode"] == mode and r.get("n_tracks", 4) == n]
                ax.plot([r["syncs"] for r in pts], [r["ms"] for r in pts], "o", alpha=0.8,
                        label=f"tp={run_['meta']['tp']}, n_tracks={n} ({mode}, {run_['meta'].get('commit', 'older run')})")
                for r in pts:
                    ax.annotate(r["policy"].split(":m")[0], (r["syncs"], r["ms"]), fontsize=7,
                                textcoords="offset points", xytext=(3, 3))
        ax.set_xlabel("syncs per forward")
        ax.set_ylabel("ms")
        ax.set_title(f"GPT-2 124M {workload}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(runs[0]["meta"]["device"])
    fig.tight_layout()
    save_figure(fig, os.path.join(out_dir, "tp_latency.png"))
    print(f"wrote {out_dir}/tp_latency.md and .png")


def savings(*sides):
    """Markdown: per (size, workload, mode, n_tracks, policy), each side's ms, its floor over baseline's
    floor and its saving 1 - policy / baseline (both from the same run). sides: (label, runs) pairs, runs
    a list of tp_latency_tp*.json contents: ("before", ...), ("after", ...) for two commits on one machine,
    or one side alone."""
    def table(runs):
        out = {}
        for r in all_rows(runs):
            if isinstance(r["ms"], float) and r["policy"] != "torch_tp":
                out[(r["size"], r["workload"], r["mode"], r["tp"], r["n_tracks"], r["policy"], r["floor"])] = r["ms"]
        return out

    def cells(ms, key):
        size, workload, mode, tp, n, policy = key
        mine, floor = ms.get((*key, False)), ms.get((*key, True))
        base, base_floor = (ms.get((size, workload, mode, tp, n, "baseline", f)) for f in (False, True))
        if mine is None:
            return ["-", "-", "-"]
        floor_ratio = f"{floor / base_floor:.3f}" if floor is not None and base_floor else "-"
        saving = f"{100 * (1 - mine / base):.1f}%" if base else "-"
        return [f"{mine:.3f}", floor_ratio, saving]

    tables = [table(runs) for _, runs in sides]
    keys = sorted({k[:-1] for t in tables for k in t},
                  key=lambda k: (list(SIZES).index(k[0]), k[4], WORKLOADS.index(k[1]), k[2], k[3], k[5]))
    head = ["size", "workload", "mode", "tp", "n_tracks", "policy"]
    for label, _ in sides:
        head += [f"{label} ms".strip(), "floor ÷ baseline floor", "saving"]
    out = [md_row(head), "|---|---|---|---:|---:|---|" + "---:|---:|---:|" * len(sides)]
    for key in keys:
        out.append(md_row([*map(str, key), *(c for t in tables for c in cells(t, key))]))
    return "\n".join(out) + "\n"


def load_runs(paths, flag):
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: {flag} {path}: {e}")
    return runs


def main():
    parser = OneLineArgumentParser(prog="python -m bench.tp_latency", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--sizes", default="124m,medium", help=f"comma-separated, of {list(SIZES)}")
    parser.add_argument("--policies", default=";".join(POLICIES), help="';'-separated sync policies (or ',')")
    parser.add_argument("--n_tracks", default="4", help="comma-separated; values not divisible by tp are skipped")
    parser.add_argument("--seq_len", type=positive_int, default=1024)
    parser.add_argument("--warmup", type=non_negative_int, default=5)
    parser.add_argument("--repeats", type=positive_int, default=30, help="timed calls per variant")
    parser.add_argument("--rounds", type=positive_int, default=10, help="the repeats are split into this many "
                        "rounds over all variants of a workload")
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--no_graphs", action="store_true")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {WORKLOADS}")
    parser.add_argument("--modes", default="eager,graph",
                        help="comma-separated, of eager, graph, compiled, compiled+graph (graphs: CUDA only)")
    parser.add_argument("--compile_backend", default="inductor", help="for the compiled modes (aot_eager: CPU checks)")
    parser.add_argument("--compile_mode", default="default",
                        help=f"comma-separated torch.compile settings of the compiled modes, of {list(COMPILE_MODES)}")
    parser.add_argument("--no_torch_tp", action="store_true")
    parser.add_argument("--tp_comm", default="off", help="comma-separated TP communication modes, each timed side by "
                        "side: off (plain TP), sp (+ sequence parallelism), chunked, chunked:K, async_tp (sp + that "
                        "overlap); see TP communication")
    parser.add_argument("--no_bias", action="store_true", help="models without biases (nanoGPT's bias=False), "
                        "for the GEMMs without their bias epilogue")
    parser.add_argument("--no_cudnn_sdpa", action="store_true",
                        help="keep SDPA off cuDNN's attention kernels (which the graph profiles show it picks on H200)")
    parser.add_argument("--out_dir", default=None, help="default: a fresh folder under bench/results/local/ "
                        "(with --merge: bench/results)")
    parser.add_argument("--merge", action="store_true", help="merge tp_latency_tp*.json in out_dir")
    parser.add_argument("--before", nargs="+", metavar="JSON", help="with --after: print each policy's floor "
                        "and saving against baseline, before and after (tp_latency_tp*.json files of two versions)")
    parser.add_argument("--after", nargs="+", metavar="JSON")
    parser.add_argument("--floors", nargs="+", metavar="JSON", help="print each policy's floor and saving against "
                        "baseline of one set of tp_latency_tp*.json files")
    args = parser.parse_args()
    if (args.before is None) != (args.after is None):
        parser.error("--before and --after go together, each with one or more tp_latency_tp*.json files")
    if args.floors and args.before:
        parser.error("--floors takes one set of files; --before/--after compare two: give one or the other")
    if args.before:
        print(savings(("before", load_runs(args.before, "--before")), ("after", load_runs(args.after, "--after"))), end="")
        return
    if args.floors:
        print(savings(("", load_runs(args.floors, "--floors"))), end="")
        return
    unknown = [s for s in args.sizes.split(",") if s not in SIZES]
    if unknown:
        parser.error(f"unknown size(s) {unknown}; allowed: {list(SIZES)}")
    check_policies(parser, split_policies(args.policies), {SIZES[s]["n_layer"] for s in args.sizes.split(",")})
    n_tracks = args.n_tracks.split(",")
    if not all(n.isdigit() and int(n) >= 1 for n in n_tracks):
        parser.error(f"--n_tracks {args.n_tracks!r}: comma-separated integers >= 1 (each dividing n_head)")
    for name, given, allowed in (("workload", args.workloads, WORKLOADS), ("mode", args.modes, MODES),
                                 ("compile mode", args.compile_mode, list(COMPILE_MODES))):
        bad = [v for v in given.split(",") if v not in allowed]
        if bad:
            parser.error(f"unknown {name}(s) {bad}; allowed: {allowed}")
    try:
        args.tp_comm_list = parse_tp_comm(args.tp_comm)
    except ValueError as e:
        parser.error(str(e))
    if args.merge:
        merge(args.out_dir or "bench/results")
    else:
        args.out_dir = results_dir(args.out_dir, "tp_latency", device_tag(use_cuda(args.device)))
        run(args)


if __name__ == "__main__":
    sys.exit(guarded(main))
