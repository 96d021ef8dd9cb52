"""Training throughput: the training loop of train_reduced_sync.py, timed per layout and sync policy.

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1      # on the lent H200 machines
    torchrun --standalone --nproc_per_node=2 -m bench.train_throughput          # 2 GPUs: every group
    python -m bench.train_throughput                                          # 1 GPU: plain and tp1 only

One invocation times, on the same GPUs, these variants (groups, selected with --variants):

    plain   a plain single-GPU nanoGPT (bench/throughput/plain.py's PlainGPT: wte/wpe, pre-LN blocks with one
            c_attn [3C, C], F.scaled_dot_product_attention(is_causal=True), c_proj, MLP 4C with GELU,
            ln_f, tied lm_head, cross-entropy; nanoGPT's init), independent of model/gpt.py
    tp1     ours (model/gpt.py) at tp=1, tp_group=None: --tp1_policies (baseline, grouped:4) with
            --tp1_n_tracks tracks (2)
    tp2     ours at tp = the world size over every rank (2; or 4 under --nproc_per_node=4, named tp4): every
            policy of --policies, n_tracks of --tp2_n_tracks (at tp=2, 2: one track per GPU; 4: two per GPU)
    dp2     data parallelism over both ranks, GPT at tp=1, n_tracks=1, baseline: ours (parallel/ddp.py
            BucketedDDP, process group = world) against torch.nn.parallel.DistributedDataParallel
            over the same model class and config, both driven by the same loop

Modes. tp2 rows run each mode of --modes (default compiled). plain, tp1 and dp2 rows always run
eager, and compiled too when --modes names it (so --modes eager gives a compile-free run). Compiled
means torch.compile(model, fullgraph=True) (--no_fullgraph: graph breaks allowed), wrapped in
BucketedDDP afterwards, as train_reduced_sync.py does (the plain model is compiled the same way);
torch DDP is wrapped first and the DDP module compiled (PyTorch's advice; its DDPOptimizer splits
the graph at bucket boundaries, so fullgraph does not apply there). Two more compiled modes test
the issue's overlap ideas: compiled-overlap turns on inductor's compute/communication reordering
(OVERLAP_PASSES: collectives raised to where their input is ready, waits sunk to the first use,
compute reordered into the gap), compiled-graphs is mode="reduce-overhead" (CUDA graphs).

TP communication. tp2 rows run each value of --tp_comm (default off): off, plain TP (each kept sync all-reduces);
sp, Megatron's sequence parallelism (GPT's sequence_parallel: a reduce-scatter and an all-gather per sync point);
or a tp_comm_overlap value, sequence parallelism with that overlap (parallel/overlap.py): chunked or chunked:K (our
pieces), async_tp (torch's async TP: inductor's micro-pipeline TP pass and symmetric memory on the TP group; CUDA
and a compiled mode only, elsewhere its rows hold the error). --tp_comm off,sp,chunked,async_tp thus times plain TP,
TP + SP and TP + SP + overlap side by side, the same function in each row. --baseline_tp_comm gives the baseline's
rows their own values (say sp, the strongest baseline at tp=4, beside policies run with off), to compile fewer rows.

The loop. Every variant calls training.train_step, the trainer's step (bf16 autocast on CUDA, fp32
on CPU; fused AdamW from configure_optimizer; gradient clipping at --grad_clip through parallel/grad.py;
--micro_steps micro-batches of --batch_size x --seq_len per iteration, default 1). Every model but
torch DDP's is wrapped in BucketedDDP as in the trainer: over a group of one rank for plain, tp1
and tp2 (whose data-parallel group has one replica; nothing is reduced), over the world for dp2.
Inputs are random token ids made once per variant on the device (no host data loading). Each
iteration is bracketed by CUDA events (wall clock and torch.cuda.synchronize off CUDA); nothing
else waits for the device inside the timed iterations. --warmup iterations (compilation included)
precede --iters timed ones.

Reported per variant: the median ms per iteration (the slowest rank's median; every rank's is in
the JSON), tokens/s and MFU. plain and tp1 variants run on every rank at once, each rank an
independent copy on its own GPU (no collective inside), so their rows describe ONE GPU: tokens
per iteration micro_steps x batch_size x seq_len, MFU over one GPU's peak. tp2 rows process the
same tokens per iteration on the world's GPUs (2 or 4); dp2 rows twice as many on 2 GPUs. MFU is nanoGPT's estimate:
(6N + 12 L H Q T) flops per token, N the non-embedding parameters (model.get_num_params()), over
the peak bf16 FLOP/s of the GPUs the variant uses (989e12 each for H100/H200; 'n/a' on CPU).
syncs/fwd: the model's declared sync points per forward (model.syncs_per_forward); for tp=1
rows they are identities (one rank), listed so the rows can be matched with their tp=2 twins.

No-sync floors (--floors). After every tp2 row comes its floor, named as the row plus " [floor]" (JSON floor: true):
the same variant built, compiled, warmed up and timed (and profiled) inside parallel.comm.skipped_collectives(), so
every collective of parallel/comm.py is skipped; compiled floors are traced inside it too, so their graphs hold no
collectives (bench/tp_latency.py's floors). Each rank keeps its own values: a floor's numbers are wrong, only its time
counts, the row's computation without communication. The row's ms minus its floor's is what the communication left in
the row costs. A floor row's syncs/fwd is the plan's count, though nothing communicates. plain, tp1 and dp2 rows have
no floor.

Key ratios (throughput ratios, > 1: the first is faster; all but the floor's):
    ours tp1 / plain                 plain ms / ours ms, same mode (mainly compiled)
    tp2 baseline / tp1 baseline      tokens/s, same n_tracks and mode (2.00 would be perfect scaling;
                                     labelled tp4 and 4.00 on 4 processes)
    tp2 policy / tp2 baseline        tokens/s, same n_tracks and mode
    tp2 sp, alone or + overlap / tp2 tokens/s, same n_tracks, policy and mode (--tp_comm)
    tp2 sp + overlap / tp2 sp        tokens/s, same n_tracks, policy and mode
    tp2 policy's fastest row /       tokens/s, same n_tracks and mode, each the fastest of its --tp_comm rows (the
      baseline's fastest row         saving against the strongest baseline measured; when a row is not off)
    ours dp2 / torch DDP dp2         tokens/s, same mode
    tp2 row / its no-sync floor      --floors; an ms ratio, the exception: row ms / floor ms (= floor tokens/s /
                                     row tokens/s, >= 1; 1.00: communication costs nothing), with row ms - floor ms
Floor rows enter no other ratio.

A variant that raises (e.g. a compile failure) becomes a row holding the error, on every rank (the
ranks exchange a failure flag; a failure is assumed to hit all ranks alike, so none is left inside
a collective), and the run goes on. The table's cell is the exception's type and first line; the row's
error_detail (JSON, and the markdown's Errors section) keeps rank 0's whole message, causes and innermost
traceback frames, and every failing rank prints its own to stderr (bench/throughput/errors.py). Results are written after every variant, so a run cut off
keeps its rows: <out_dir>/train_throughput.{md,json}. --profile SUBSTRING also writes, for every
variant whose name holds SUBSTRING, a torch.profiler key_averages table over 3 more iterations
(top 40 by device time) to <out_dir>/train_profile_<variant>.txt; on CUDA its first lines give the device timeline
per iteration: span, busy (some kernel runs), idle, the all-reduce kernels' busy time, the others', and both at once.

Sizes: 124m (GPT-2: 12 layers, 12 heads, 768, vocab 50304, seq 1024), medium (GPT-2 medium's 24 layers,
16 heads, 1024) and tiny (4 layers, 4 heads, 64, vocab 512, seq 64: 4 layers so that grouped:2 and
grouped:4 are valid) for CPU smoke runs. --no_bias: nanoGPT's bias=False (the study's config/docs_124m.py).

CPU smoke run (gloo, tiny model, never into bench/results):

    torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size tiny --device cpu \\
        --warmup 1 --iters 2 --modes eager --policies baseline,grouped:2 --out_dir /tmp/tt     # add --floors for floors
"""
import argparse
import gc
import os
import re
import statistics
import sys
import time
from contextlib import nullcontext
from types import SimpleNamespace

import torch
import torch._inductor.config  # compiled-overlap sets its scheduling passes
import torch.distributed as dist

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.train_throughput ... "
             "(or torchrun ... -m bench.train_throughput ...)")
from training.cli import guarded, non_negative_int, positive_int  # noqa: E402
from bench.common import (GPT2_VOCAB, async_tp_problem, call_times, command_line, device_tag,  # noqa: E402
                          model_options, multicast_off, out_dir_problem, parse_tp_comm, results_dir, save_results,
                          source_commit, split_policies, tp_comm_tag)
from training.config import HelpFormatter, write_text  # noqa: E402
from model.compile_modes import apply_exact_training_settings  # noqa: E402
from model.sync_policy import parse_sync_policy  # noqa: E402
from parallel import comm  # noqa: E402
from parallel.mesh import close_process_groups, end_process  # noqa: E402
from bench.throughput.plain import PlainGPT, TorchDDPAdapter  # noqa: E402
from bench.throughput import errors  # noqa: E402
from bench.throughput.profile import PROFILE_ITERS, profile_table  # noqa: E402
from bench.throughput.report import FLOOR_TAG, key_ratios, markdown, row_cells  # noqa: E402

multicast_off()  # before any NCCL communicator exists

# (n_layer, n_head, n_embd, vocab_size, default seq_len). tiny has 4 layers so that grouped:4 and
# grouped:2 are valid policies of it.
# char192 / char384 / char768: the shapes of config/shakespeare_char_{192,384,768}.py (vocabulary 76,
# block 256), so the study's loss can be set against measured time (issue 15: run with --batch_size 64;
# tests/test_pareto.py checks them against the config files).
SIZES = {"124m": (12, 12, 768, GPT2_VOCAB, 1024), "medium": (24, 16, 1024, GPT2_VOCAB, 1024),
         "large": (36, 20, 1280, GPT2_VOCAB, 1024), "tiny": (4, 4, 64, 512, 64),
         "char192": (6, 6, 192, 76, 256), "char384": (6, 6, 384, 76, 256), "char768": (6, 12, 768, 76, 256)}
POLICIES = ["baseline", "spd", "parallel", "ladder", "grouped:2", "grouped:3", "grouped:4", "grouped:6",
            "selective:m0-3,m5,m7,m9-11"]
GROUPS = ["plain", "tp1", "tp2", "dp2"]
# compiled-overlap: inductor reorders the graph so collectives start early and are waited for late
# (comm/compute overlap, e.g. f's input-gradient all-reduce beside the weight-gradient GEMMs);
# compiled-graphs: torch.compile's reduce-overhead mode (forward and backward replayed as CUDA graphs)
MODES = ["eager", "compiled", "compiled-overlap", "compiled-graphs"]
OVERLAP_PASSES = ["sink_waits", "raise_comms", "reorder_compute_for_overlap"]


class ArgError(Exception):
    """A bad request: one line on stderr, exit code 2, no traceback."""


# ----------------------------------------------------------------------------- arguments
def int_list(name, text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ArgError(f"--{name}={text!r}: expected comma-separated integers")
    if not values or any(v < 1 for v in values):
        raise ArgError(f"--{name}={text!r}: expected positive integers")
    return values


def choice_list(name, text, allowed):
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ArgError(f"--{name}={text!r}: unknown value(s) {bad}; allowed: {', '.join(allowed)}")
    return values


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors raise ArgError (one line) instead of printing usage and exiting."""

    def error(self, message):
        raise ArgError(message)


def build_parser():
    p = OneLineParser(prog="python -m bench.train_throughput", description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--size", default="124m", help=f"model size, one of {list(SIZES)}")
    p.add_argument("--variants", default=",".join(GROUPS), help=f"comma-separated groups of {GROUPS}")
    p.add_argument("--policies", default=",".join(POLICIES), help="tp2 sync policies (',' or ';' separated)")
    p.add_argument("--tp1_policies", default="baseline,grouped:4", help="tp1 sync policies")
    p.add_argument("--tp1_n_tracks", default="2", help="comma-separated n_tracks of the tp1 rows")
    p.add_argument("--tp2_n_tracks", default="2,4", help="comma-separated n_tracks of the tp2 rows (even)")
    p.add_argument("--tp_async_grad", default="off",
                   help="comma-separated of off, on: tp2 rows with the trainer's --tp_async_grad (f's backward "
                        "all-reduce overlapped with the weight-gradient GEMM); 'on' rows end in ' async'")
    p.add_argument("--tp_comm", default="off",
                   help="comma-separated: tp rows with off (plain TP), sp (+ sequence parallelism) or a tp_comm_overlap "
                        "value (sp + that overlap: chunked, chunked:K, async_tp); see TP communication")
    p.add_argument("--baseline_tp_comm", default=None,
                   help="the baseline's tp rows' values of --tp_comm instead of --tp_comm's (e.g. sp, its fastest at "
                        "tp=4, beside policies timed with off): fewer rows to compile on a large model")
    p.add_argument("--modes", default="compiled", help="comma-separated of " + ", ".join(MODES) + " (see Modes)")
    p.add_argument("--inductor_defaults", action="store_true", help="compile at tp=2 with inductor's defaults, not "
                   "the trainer's settings (model/compile_modes.py: mix-order reduction off), to time what they cost")
    p.add_argument("--peak_memory_reorder", default="auto", choices=("auto", "on", "off"),
                   help="inductor's reorder_for_peak_memory for every compiled row: auto (the trainer's: off for "
                        "--tp_async_grad on rows, whose overlap it undid; else on), or on/off for all (to tell the "
                        "async all-reduce's own cost from that setting's)")
    p.add_argument("--no_fullgraph", action="store_true",
                   help="compile without fullgraph=True (graph breaks fall back to eager instead of failing)")
    p.add_argument("--batch_size", type=positive_int, default=12)
    p.add_argument("--seq_len", type=positive_int, default=None, help="default: the size's block (124m 1024, tiny 64, char 256)")
    p.add_argument("--micro_steps", type=positive_int, default=1, help="micro-batches per iteration (gradient accumulation)")
    p.add_argument("--warmup", type=non_negative_int, default=20, help="untimed iterations first (compilation included)")
    p.add_argument("--iters", type=positive_int, default=40, help="timed iterations")
    p.add_argument("--grad_clip", type=float, default=1.0)
    p.add_argument("--no_bias", action="store_true",
                   help="models without biases (nanoGPT's bias=False, as config/docs_124m.py trains)")
    p.add_argument("--bucket_cap_mb", type=float, default=25, help="for BucketedDDP and torch DDP")
    p.add_argument("--device", default="auto", help="auto, cuda or cpu")
    p.add_argument("--floors", action="store_true", help="after every tp row, its no-sync floor twin ('[floor]'): the "
                   "same variant with every collective of parallel/comm.py skipped (see No-sync floors)")
    p.add_argument("--profile", default=None, metavar="VARIANT_SUBSTRING",
                   help="profile 3 iterations of every variant whose name holds this")
    p.add_argument("--out_dir", default=None, help="default: a fresh folder under bench/results/local/")
    return p


def parse_args(argv):
    """argparse, with every error (its own included) raised as an ArgError (one line)."""
    args = build_parser().parse_args(argv)
    if args.size not in SIZES:
        raise ArgError(f"--size={args.size!r}: allowed: {', '.join(SIZES)}")
    n_layer, n_head, _, _, default_seq = SIZES[args.size]
    if args.seq_len is None:
        args.seq_len = default_seq
    if args.device not in ("auto", "cuda", "cpu"):
        raise ArgError(f"--device={args.device!r}: allowed: auto, cuda, cpu")
    for name in ("batch_size", "seq_len", "micro_steps", "iters"):
        if getattr(args, name) < 1:
            raise ArgError(f"--{name}={getattr(args, name)}: must be at least 1")
    if args.warmup < 0:
        raise ArgError(f"--warmup={args.warmup}: must be at least 0")
    args.groups = choice_list("variants", args.variants, GROUPS)
    args.mode_list = choice_list("modes", args.modes, MODES)
    args.async_list = list(dict.fromkeys(choice_list("tp_async_grad", args.tp_async_grad, ("off", "on"))))
    try:
        args.tp_comm_list = parse_tp_comm(args.tp_comm)
        args.baseline_tp_comm_list = (args.tp_comm_list if args.baseline_tp_comm is None
                                      else parse_tp_comm(args.baseline_tp_comm, "--baseline_tp_comm"))
    except ValueError as e:
        raise ArgError(str(e))
    args.policy_list = split_policies(args.policies)
    args.tp1_policy_list = split_policies(args.tp1_policies)
    for flag, policies, group in (("policies", args.policy_list, "tp2"), ("tp1_policies", args.tp1_policy_list, "tp1")):
        if group not in args.groups:  # checked only where used: the defaults are 12-layer policies
            continue
        if not policies:
            raise ArgError(f"--{flag} is empty")
        for spec in policies:
            try:
                parse_sync_policy(spec, n_layer)
            except ValueError as e:
                raise ArgError(f"--{flag}: {e} (size {args.size} has {n_layer} layers)")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world not in (1, 2, 4):
        raise ArgError(f"world size {world}: run with 1, 2 or 4 processes (the tp rows run tp over every rank; dp2 "
                       "needs exactly 2)")
    args.tp1_tracks = int_list("tp1_n_tracks", args.tp1_n_tracks)
    args.tp2_tracks = int_list("tp2_n_tracks", args.tp2_n_tracks)
    for flag, tracks, tp in (("tp1_n_tracks", args.tp1_tracks, 1), ("tp2_n_tracks", args.tp2_tracks, max(2, world))):
        for n in tracks:
            if n_head % n or n % tp:
                raise ArgError(f"--{flag}: n_tracks={n} must divide n_head={n_head}"
                               + (f" and be divisible by tp={tp}" if tp > 1 else ""))
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ArgError("--device=cuda but CUDA is not available; use --device=cpu or auto")
    if not 0 < args.bucket_cap_mb < float("inf"):  # also refuses nan
        raise ArgError(f"--bucket_cap_mb={args.bucket_cap_mb}: must be a number of MB > 0")
    if not 0 <= args.grad_clip < float("inf"):
        raise ArgError(f"--grad_clip={args.grad_clip}: must be a number >= 0 (0: no clipping)")
    if args.out_dir is not None and out_dir_problem(args.out_dir):
        raise ArgError(out_dir_problem(args.out_dir))
    return args


# ----------------------------------------------------------------------------- variants
def variant_plan(args, world):
    """Every variant, in the order all ranks run them: dicts with group, impl, tp, dp, n_tracks,
    policy, mode, name and floor (--floors: a tp row's no-sync twin follows it). Groups needing 2 ranks
    are left out when world == 1, and dp2 unless world == 2."""
    extra = [m for m in args.mode_list if m != "eager"]
    base_modes = ["eager"] + extra  # plain, tp1, dp2: eager always, compiled when asked
    plan = []

    def add(group, impl, tp, dp, n_tracks, policy, mode, name, async_grad="off", tp_comm="off"):
        plan.append(dict(group=group, impl=impl, tp=tp, dp=dp, n_tracks=n_tracks, policy=policy, mode=mode,
                         name=name, gpus=tp * dp, async_grad=async_grad, tp_comm=tp_comm, floor=False))

    for group in args.groups:
        if group == "plain":
            for mode in base_modes:
                add("plain", "plain", 1, 1, "-", "-", mode, f"plain {mode}")
        elif group == "tp1":
            for mode in base_modes:
                for n in args.tp1_tracks:
                    for policy in args.tp1_policy_list:
                        add("tp1", "ours", 1, 1, n, policy, mode, f"ours tp1 n{n} {policy} {mode}")
        elif world < 2:
            continue
        elif group == "tp2":
            for mode in args.mode_list:
                for n in args.tp2_tracks:
                    for policy in args.policy_list:
                        for on in args.async_list:  # tp1 rows have no tp all-reduce: the flag does nothing there
                            for tp_comm in (args.baseline_tp_comm_list if policy == "baseline" else args.tp_comm_list):
                                add("tp2", "ours", world, 1, n, policy, mode,
                                    f"ours tp{world} n{n} {policy} {mode}" + (" async" if on == "on" else "")
                                    + (" " + tp_comm_tag(tp_comm)).rstrip(),
                                    on, tp_comm)
                                if args.floors:
                                    plan.append(dict(plan[-1], name=plan[-1]["name"] + FLOOR_TAG, floor=True))
        elif group == "dp2" and world == 2:
            for mode in base_modes:
                add("dp2", "ours", 1, 2, 1, "baseline", mode, f"ours dp2 {mode}")
                add("dp2", "torch_ddp", 1, 2, 1, "baseline", mode, f"torch_ddp dp2 {mode}")
    return plan


def reorder_for_peak_memory(setting, async_grad, compiled):
    """inductor's reorder_for_peak_memory for a row: --peak_memory_reorder on/off for every row, or auto, as the trainer
    does: off for a compiled async-grad row (with it on, the reordering undid the overlap: tests/test_async_grad.py)."""
    return not (async_grad and compiled) if setting == "auto" else setting == "on"


def build_variant(v, args, env):
    """(model as train_step drives it, raw model, syncs per forward or None, tp_group)."""
    from model.gpt import GPT, GPTConfig  # imported late: a broken model file fails rows, not the run
    from parallel.ddp import BucketedDDP
    from parallel.overlap import enable_async_tp
    n_layer, n_head, n_embd, vocab, _ = SIZES[args.size]
    shape = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab, block_size=args.seq_len,
                 dropout=0.0, bias=not args.no_bias)
    compiled = v["mode"].startswith("compiled")
    torch._inductor.config.reorder_for_compute_comm_overlap = v["mode"] == "compiled-overlap"
    torch._inductor.config.reorder_for_compute_comm_overlap_passes = (
        OVERLAP_PASSES if v["mode"] == "compiled-overlap" else [])
    compile_mode = "reduce-overhead" if v["mode"] == "compiled-graphs" else None
    async_grad = v.get("async_grad") == "on"
    torch._inductor.config.reorder_for_peak_memory = reorder_for_peak_memory(args.peak_memory_reorder, async_grad,
                                                                             compiled)
    # as the trainer compiles at this tp; --inductor_defaults: inductor's own settings (tp=1's), to time what they cost
    apply_exact_training_settings(1 if args.inductor_defaults else v["tp"])
    # async TP's fusing pass: on for its rows only (a global inductor setting, read when a variant compiles)
    torch._inductor.config._micro_pipeline_tp = v.get("tp_comm") == "async_tp"
    torch.manual_seed(0)  # the same full weights on every rank (GPT draws them from the global RNG)
    if v["impl"] == "plain":
        raw = PlainGPT(**shape).to(env.device)
        inner = torch.compile(raw, fullgraph=not args.no_fullgraph, mode=compile_mode) if compiled else raw
        return BucketedDDP(inner, process_group=env.solo_group, bucket_cap_mb=args.bucket_cap_mb), raw, None, None
    tp_group = env.tp_group if v["tp"] > 1 else None
    tp_comm = v.get("tp_comm", "off")
    problem = async_tp_problem(tp_comm, env.cuda, compiled)
    if problem:  # as the trainer refuses it: the row holds this error
        raise ValueError(problem)
    if tp_comm == "async_tp":
        enable_async_tp(tp_group)
    raw = GPT(GPTConfig(**shape, n_tracks=v["n_tracks"], sync_policy=v["policy"]), tp_group=tp_group,
              async_grad_allreduce=async_grad, **model_options(tp_comm)).to(env.device)
    if v["impl"] == "torch_ddp":
        ddp = torch.nn.parallel.DistributedDataParallel(
            raw, device_ids=[env.device_index] if env.cuda else None, bucket_cap_mb=args.bucket_cap_mb)
        return TorchDDPAdapter(ddp, compiled), raw, raw.syncs_per_forward, None
    inner = torch.compile(raw, fullgraph=not args.no_fullgraph, mode=compile_mode) if compiled else raw
    group = dist.group.WORLD if v["dp"] == 2 else env.solo_group
    return (BucketedDDP(inner, process_group=group, bucket_cap_mb=args.bucket_cap_mb), raw,
            raw.syncs_per_forward, tp_group)


def run_variant(v, args, env):
    """Build, warm up and time one variant on this rank: (per-iteration ms, syncs/fwd, n_params,
    profile or None). Raises whatever the variant raises."""
    # a floor is built and compiled inside the context too: its graph is traced without collectives (as
    # bench/tp_latency.py's floors); the with-statement restores them even when the variant raises
    with comm.skipped_collectives() if v["floor"] else nullcontext():
        return time_variant(v, args, env)


def time_variant(v, args, env):
    """run_variant's work, with the collectives as run_variant set them."""
    from training.step import configure_optimizer, train_step
    env.t_build = time.perf_counter()
    model, raw, syncs, tp_group = build_variant(v, args, env)
    opt_cfg = SimpleNamespace(learning_rate=6e-4, weight_decay=0.1, beta1=0.9, beta2=0.95)  # nanoGPT's
    optimizer = configure_optimizer(raw, opt_cfg, env.device)
    scaler = torch.amp.GradScaler("cuda", enabled=False)  # bf16 / fp32: no loss scaling
    autocast_ctx = torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16) if env.cuda else nullcontext()
    vocab = SIZES[args.size][3]
    # one batch per variant, made on the device: the same on the TP ranks of a replica, its own per dp rank
    gen_seed = 1234 + (env.rank if v["dp"] > 1 else 0)
    gen = torch.Generator(device=env.device).manual_seed(gen_seed)
    shape = (args.micro_steps, args.batch_size, args.seq_len)
    x = torch.randint(0, vocab, shape, device=env.device, generator=gen)
    y = torch.randint(0, vocab, shape, device=env.device, generator=gen)
    seeds = list(range(args.micro_steps))
    n_params = raw.get_num_params()

    def step():
        train_step(model, raw, optimizer, scaler, x, y, seeds, args.grad_clip, tp_group, autocast_ctx, env.device)

    try:
        for _ in range(args.warmup):
            step()
        if env.cuda:
            torch.cuda.synchronize()
        env.warmup_s = time.perf_counter() - env.t_build  # build + warmup (compilation included)
        times = call_times(step, args.iters, env.cuda)  # CUDA events around each iteration
        prof = profile_table(step, env.cuda) if args.profile and args.profile in v["name"] else None
    finally:
        if hasattr(model, "remove_hooks"):
            model.remove_hooks()
        del model, raw, optimizer, x, y
    return times, syncs, n_params, prof


def free_memory(env, compiled):
    gc.collect()
    if compiled:
        torch._dynamo.reset()
    if env.cuda:
        torch.cuda.empty_cache()


def flops_per_token(args, n_params):
    n_layer, n_head, n_embd, _, _ = SIZES[args.size]
    return 6 * n_params + 12 * n_layer * n_head * (n_embd // n_head) * args.seq_len


# ----------------------------------------------------------------------------- ratios and output
def save(args, meta, rows):
    ratios = key_ratios(rows)
    save_results(args.out_dir, "train_throughput", dict(meta=meta, rows=rows, ratios=ratios),
                 markdown(meta, rows, ratios))
    return ratios


def print_row(r):
    c = row_cells(r)
    print(f"{c[0]:<44} tp {c[1]} dp {c[2]} gpus {c[3]}  syncs/fwd {c[7]:>3}  "
          + (c[8] if r.get("error") else f"{c[8]:>10} ms  {c[9]:>12} tok/s  MFU {c[10]:>6}  "
                                         f"(build + warmup {r['warmup_s']} s)"), flush=True)


# ----------------------------------------------------------------------------- main
def setup(args):
    """Process group and groups. Returns an env namespace (rank, world, device, cuda, groups)."""
    from parallel.mesh import init_mesh
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    cuda_fits = torch.cuda.is_available() and torch.cuda.device_count() >= local_procs
    if args.device == "cuda" and not cuda_fits:
        raise ArgError(f"--device=cuda but {torch.cuda.device_count()} GPU(s) for {local_procs} local processes")
    cuda = args.device == "cuda" or (args.device == "auto" and cuda_fits)
    # world > 1: tp_group holds every rank, dp_group only this rank (one replica per TP group)
    mesh = init_mesh(world, "cuda" if cuda else "cpu")
    env = SimpleNamespace(rank=mesh.rank, world=world, cuda=cuda, device=mesh.device,
                          device_index=torch.cuda.current_device() if cuda else None,
                          tp_group=mesh.tp_group if world > 1 else None,
                          solo_group=mesh.dp_group if world > 1 else None,
                          world_group=dist.group.WORLD if world > 1 else None)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return env


def exchange(env, ms, failed):
    """Every rank's (median ms, failed flag) through one all_gather over the world."""
    t = torch.tensor([ms, float(failed)], dtype=torch.float64, device=env.device)
    return [tuple(v.tolist()) for v in comm.all_gather(t, env.world_group, kind="bench")]


def run(args, argv):
    import training.step as trs
    env = setup(args)
    args.out_dir = results_dir(args.out_dir, "train_throughput", device_tag(env.cuda))
    n_layer, n_head, n_embd, vocab, _ = SIZES[args.size]
    plan = variant_plan(args, env.world)
    command = command_line(__file__, argv)
    meta = dict(device=torch.cuda.get_device_name() if env.cuda else "CPU", n_gpus=env.world if env.cuda else 0,
                world_size=env.world, torch=torch.__version__, commit=source_commit(), command=command,
                size=args.size, n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab,
                bias=not args.no_bias, batch_size=args.batch_size, seq_len=args.seq_len, micro_steps=args.micro_steps,
                warmup=args.warmup, iters=args.iters, grad_clip=args.grad_clip,
                dtype="bf16 autocast" if env.cuda else "float32", fullgraph=not args.no_fullgraph,
                inductor="inductor's defaults (--inductor_defaults)" if args.inductor_defaults else
                "the trainer's settings (model/compile_modes.py)", peak_memory_reorder=args.peak_memory_reorder)
    if env.world < 2 and any(g in args.groups for g in ("tp2", "dp2")):
        meta["note"] = "one process: the tp2 and dp2 rows need 2 (torchrun --nproc_per_node=2) and were skipped"
    elif env.world > 2 and "dp2" in args.groups:
        meta["note"] = f"{env.world} processes: the dp2 rows need exactly 2 and were skipped"
    rows = []
    if env.rank == 0:
        gpus = f" x {env.world}" if env.cuda else ""
        print(f"{meta['device']}{gpus}, {env.world} process(es), torch {meta['torch']}, commit {meta['commit']}, "
              f"{len(plan)} variants", flush=True)
        if meta.get("note"):
            print(f"note: {meta['note']}", flush=True)
        save(args, meta, rows)
    for v in plan:
        ms, failed, error, syncs, n_params, prof, detail = -1.0, False, None, None, None, None, None
        env.warmup_s = None
        try:
            times, syncs, n_params, prof = run_variant(v, args, env)
            ms = statistics.median(times)
        except Exception as e:  # noqa: BLE001 - recorded in the row, the run goes on
            failed, error, detail = True, errors.one_line(e), errors.describe(e)
            # every failing rank's own record (they may differ); the row keeps rank 0's
            print(f"[rank {env.rank}] {v['name']} failed:\n" + errors.text(detail, "  "), file=sys.stderr, flush=True)
        free_memory(env, v["mode"].startswith("compiled"))
        per_rank = exchange(env, ms, failed)
        if any(f for _, f in per_rank) and error is None:
            error = "failed on rank(s) " + ",".join(str(i) for i, (_, f) in enumerate(per_rank) if f)
        tokens = args.micro_steps * args.batch_size * args.seq_len * v["dp"]
        row = dict(v, syncs_per_forward=syncs, tokens_per_iter=tokens, ms_per_rank=[m for m, _ in per_rank],
                   ms=None, tok_s=None, mfu=None, n_params=n_params, error=error, error_detail=detail,
                   warmup_s=None if env.warmup_s is None else round(env.warmup_s, 1))
        if error is None:
            row["ms"] = max(m for m, _ in per_rank)
            row["tok_s"] = tokens / (row["ms"] / 1e3)
            peak = trs.peak_flops_total(env.device, "bfloat16", v["gpus"]) if env.cuda else None
            row["mfu"] = (flops_per_token(args, n_params) * row["tok_s"] / peak) if peak else None
        rows.append(row)
        if env.rank == 0:
            print_row(row)
            if prof is not None:
                key, table, timeline = prof
                fname = "train_profile_" + re.sub(r"[^A-Za-z0-9._-]+", "_", v["name"]).strip("_") + ".txt"
                tl = ("" if timeline is None else "# device timeline, ms per iteration (all streams): " + ", ".join(
                    f"{k} {val:.3f}" for k, val in timeline.items()) + "\n")
                write_text(os.path.join(args.out_dir, fname),
                           f"# {v['name']}: torch.profiler key_averages over {PROFILE_ITERS} iterations, rank 0, "
                           f"sorted by {key}\n# {command}\n{tl}\n{table}\n")
                print(f"  profile: {os.path.join(args.out_dir, fname)}", flush=True)
            save(args, meta, rows)
    if env.rank == 0:
        ratios = save(args, meta, rows)
        print("\n" + markdown(meta, rows, ratios), flush=True)
        print(f"wrote {args.out_dir}/train_throughput.md and .json", flush=True)
    end_process(0, close_process_groups())  # compiled-graphs rows captured NCCL all-reduces (parallel/mesh.py)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        run(args, argv)
    except ArgError as e:
        if os.environ.get("RANK", "0") == "0":
            print(f"error: {e}", file=sys.stderr, flush=True)
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        sys.exit(2)


if __name__ == "__main__":
    sys.exit(guarded(main))
