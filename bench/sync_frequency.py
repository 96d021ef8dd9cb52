"""Host-device synchronization study: how much throughput do per-step host syncs cost?

Why. A GPU (or MPS) runs asynchronously: the Python thread only *enqueues* kernels and returns
at once, so while the device computes op i the host is already launching op i+1, i+2, ... A host
sync (torch.cuda.synchronize(), .item(), .cpu(), printing a tensor, a data-dependent Python `if`)
makes the host wait until the queue is empty. Syncing after every op serializes the two: the
device idles while the host runs the next op's Python and launch code, and the host idles while
the device computes. For small ops (launch-bound) that idle gap is most of the time, so
syncing less often (every N ops) raises throughput; for large ops (compute-bound) the gap is
negligible and the sync frequency does not matter.

What is measured (all under torch.no_grad, one fixed input per model, warm-up first):

1. Sync every N ops, N in {1, 2, 4, ..., 256}. A loop runs the model's forward ("op") `ops`
   times (rounded up to a multiple of N) and calls the device sync after every N-th op; we time
   the whole loop, syncs included, with time.perf_counter (the loop ends on a sync, so all its
   work is done when the clock stops). Reported: ops/s (median over --repeats runs; the N values
   are interleaved within each repeat) and speedup vs N=1. Models (width W = --width, 512):
     matmul     x @ W_mat, x [rows, W], W_mat [W, W]            (rows = --rows, 512)
     mlp1       Linear(W, W) + GELU on x [rows, W]
     mlp3       Linear(W, 2W) GELU Linear(2W, 2W) GELU Linear(2W, W) on x [rows, W]
                (W = 512: the 512->1024->1024->512 MLP)
     gpt_block  the project's GPT (model/gpt.py) with n_layer=1, n_head=8, n_embd=W,
                block_size=--seq_len (128), vocab_size=W (small, so the block dominates the
                embedding and the last-position head), forward on idx [--gpt_batch, --seq_len]
2. .item() cost: x.sum().item() timed right after launching K (--pending) small matmuls and
   K' (--pending_big) big ones: it waits for whatever is still queued, which for the big ones is
   about K' x their device time (printed beside it) and for the small ones little, since the
   device runs a 512^2 matmul faster than the host launches the next. Also .item() after a
   synchronize (nothing pending) and the cost of a sync on an idle device.
3. Small vs big matmul (--small_size, --big_size; 512 and 8192 on GPU), per-op time when only the
   end of the loop syncs ("async") vs a forced sync after each op.

Sync by device: CUDA torch.cuda.synchronize(), Apple MPS torch.mps.synchronize(), CPU no sync at
all: CPU ops run synchronously (each op returns when it is done), so the CPU tables are a
control that shows the pure Python/launch loop; speedups there should be ~1.0.

dtype: --dtype auto is fp16 on CUDA (as the published RTX 5070 figure), fp32 on MPS and CPU.

Published reference figures (NOT ours; printed beside our tables for comparison):
  Apple M4 Max: 3-layer MLP 512->1024->1024->512 4,346 ops/s at N=1 -> 10,461 at N=256 (2.41x);
                1-layer 512 model ~5.1x; pure 512^2 matmul 5.0x.
  RTX 5070: sync overhead ~10-15 us; 512^2 fp16 matmul 18 us async vs 28 us with a forced sync;
            8192^2 matmul unaffected (25.0 vs 25.2 ms).

Output: a table per model on stdout, and <out_dir>/sync_frequency_<device>.{md,json} with the
device name, torch version and the exact command line.

    python -m bench.sync_frequency --device cuda                 # GPU run, into bench/results/
    python -m bench.sync_frequency --device cpu --quick --out_dir /tmp/syncfreq   # CPU control
"""
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.sync_frequency ...")
from training.cli import guarded, non_negative_int, positive_int  # noqa: E402
from bench.common import command_line, results_dir, save_results  # noqa: E402
from model.gpt import GPT, GPTConfig  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser  # noqa: E402

SYNC_EVERY = [2 ** i for i in range(9)]  # 1, 2, 4, ..., 256
MODELS = ["matmul", "mlp1", "mlp3", "gpt_block"]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# Published figures (not measured here). Speedups are at N=256 vs N=1.
PUBLISHED_M4_MAX = {  # Apple M4 Max
    "matmul": {"speedup_256": 5.0},
    "mlp1": {"speedup_256": 5.1},
    "mlp3": {"ops_per_s_1": 4346, "ops_per_s_256": 10461, "speedup_256": 2.41},
}
PUBLISHED_RTX_5070 = {  # per-op time, microseconds
    "sync_overhead_us": "10-15",
    "small": {"size": 512, "dtype": "fp16", "async_us": 18.0, "sync_each_us": 28.0},
    "big": {"size": 8192, "async_us": 25.0e3, "sync_each_us": 25.2e3},
}


# ----------------------------------------------------------------------------- device helpers
def pick_device(name):
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available in this torch build/machine")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise SystemExit("--device mps: Apple MPS is not available here")
    return name


def sync_function(device):
    """Block the host until the device queue is empty. CPU: nothing to wait for (no-op)."""
    if device == "cuda":
        return torch.cuda.synchronize
    if device == "mps":
        return torch.mps.synchronize
    return lambda: None


def device_name(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    cpu = platform.processor() or platform.machine()
    if device == "mps":
        return f"Apple MPS ({cpu})"
    return f"CPU {cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


# ----------------------------------------------------------------------------- the ops
def build_ops(args, device, dtype):
    """{model name: (description, op)}; each op runs one forward on a fixed input."""
    W, rows = args.width, args.rows
    torch.manual_seed(0)
    x = torch.randn(rows, W, device=device, dtype=dtype)
    w_mat = torch.randn(W, W, device=device, dtype=dtype) / W ** 0.5
    mlp1 = nn.Sequential(nn.Linear(W, W), nn.GELU()).to(device, dtype)
    mlp3 = nn.Sequential(nn.Linear(W, 2 * W), nn.GELU(), nn.Linear(2 * W, 2 * W), nn.GELU(),
                         nn.Linear(2 * W, W)).to(device, dtype)
    gpt = GPT(GPTConfig(n_layer=1, n_head=8, n_embd=W, block_size=args.seq_len, vocab_size=W,
                        dropout=0.0)).to(device, dtype).eval()
    idx = torch.randint(0, W, (args.gpt_batch, args.seq_len), device=device)
    return {
        "matmul": (f"x @ W, x [{rows}, {W}], W [{W}, {W}]", lambda: x @ w_mat),
        "mlp1": (f"Linear({W},{W}) + GELU on x [{rows}, {W}]", lambda: mlp1(x)),
        "mlp3": (f"Linear {W}->{2 * W}->{2 * W}->{W}, GELU between, on x [{rows}, {W}]", lambda: mlp3(x)),
        "gpt_block": (f"project GPT n_layer=1 n_head=8 n_embd={W} vocab={W}, idx [{args.gpt_batch}, "
                      f"{args.seq_len}]", lambda: gpt(idx)[0]),
    }


def time_loop(op, n_ops, sync_every, sync):
    """Wall time of n_ops ops with a sync after every sync_every-th (n_ops is a multiple of it)."""
    sync()
    t0 = time.perf_counter()
    for i in range(1, n_ops + 1):
        op()
        if i % sync_every == 0:
            sync()
    return time.perf_counter() - t0


def measure_sync_every(op, args, sync):
    """{N: median ops/s}. Each repeat runs every N once (interleaved, so drift hits all alike)."""
    for _ in range(args.warmup):
        op()
    sync()
    rates = {n: [] for n in SYNC_EVERY}
    for _ in range(args.repeats):
        for n in SYNC_EVERY:
            n_ops = -(-args.ops // n) * n  # round up to a multiple of N
            rates[n].append(n_ops / time_loop(op, n_ops, n, sync))
    return {n: statistics.median(r) for n, r in rates.items()}


def measure_item(args, device, dtype, sync):
    """.item() right after launching K matmuls, for the small size (a GPU finishes each faster than
    the host launches the next, so little is left queued) and the big size (the queue holds about
    K x the big matmul's time, and .item() waits for all of it); .item() with nothing pending; an
    idle sync."""
    out = {"pending": {}}
    idle, idle_sync = [], []
    for label, S, K in (("small", args.small_size, args.pending), ("big", args.big_size, args.pending_big)):
        a = torch.randn(S, S, device=device, dtype=dtype)
        b = torch.randn(S, S, device=device, dtype=dtype) / S ** 0.5
        waits = []
        for trial in range(min(args.warmup, 3) + args.item_trials):
            sync()
            for _ in range(K):
                y = a @ b
            t0 = time.perf_counter()
            y.sum().item()  # waits for whatever of the K matmuls is still queued
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            y.sum().item()  # nothing pending
            t3 = time.perf_counter()
            sync()  # idle device
            t4 = time.perf_counter()
            if trial >= min(args.warmup, 3):
                waits.append(t1 - t0)
                idle.append(t3 - t2)
                idle_sync.append(t4 - t3)
        out["pending"][label] = {"size": S, "matmuls": K, "item_us": statistics.median(waits) * 1e6}
    out["item_nothing_pending_us"] = statistics.median(idle) * 1e6
    out["sync_idle_us"] = statistics.median(idle_sync) * 1e6
    return out


def measure_matmul_sizes(args, device, dtype, sync):
    """Per-op time of an SxS matmul: async (sync at the end) vs a forced sync after each op."""
    out = {}
    for label, S in (("small", args.small_size), ("big", args.big_size)):
        a = torch.randn(S, S, device=device, dtype=dtype)
        b = torch.randn(S, S, device=device, dtype=dtype) / S ** 0.5
        op = lambda: a @ b  # noqa: E731
        for _ in range(max(2, args.warmup // 10)):
            op()
        sync()
        one = time_loop(op, 1, 1, sync)
        n_ops = max(3, min(args.ops, int(args.seconds_per_timing / max(one, 1e-9))))
        times = {"async": [], "sync_each": []}
        for _ in range(args.repeats):
            times["async"].append(time_loop(op, n_ops, n_ops, sync) / n_ops)
            times["sync_each"].append(time_loop(op, n_ops, 1, sync) / n_ops)
        out[label] = {"size": S, "ops_per_timing": n_ops,
                      "async_us": statistics.median(times["async"]) * 1e6,
                      "sync_each_us": statistics.median(times["sync_each"]) * 1e6}
    return out


# ----------------------------------------------------------------------------- report
def fmt_us(us):
    return f"{us / 1e3:.2f} ms" if us >= 1e4 else f"{us:.1f} us"


def render(res):
    """The whole report as markdown (also what we print)."""
    L = [f"# Host-device sync frequency: {res['device']}", "",
         f"- device: {res['device_name']}", f"- torch {res['torch']}, dtype {res['dtype']}",
         f"- command: `{res['command']}`",
         f"- ops per timing: >= {res['args']['ops']} (rounded up to a multiple of N), "
         f"median of {res['args']['repeats']} repeats, {res['args']['warmup']} warm-up ops", ""]
    if res["device"] == "cpu":
        L += ["**CPU control:** CPU ops are synchronous, so the sync is a no-op here; the tables show "
              "the plain Python/launch loop and speedups should be ~1.0.", ""]
    L += ["Published figures below are **published reference figures, not ours** (Apple M4 Max; "
          "RTX 5070).", ""]
    for name in MODELS:
        m = res["sync_every"][name]
        pub = PUBLISHED_M4_MAX.get(name, {})
        L += [f"## {name}: {m['description']}", "",
              "| sync every N | ops/s | speedup vs N=1 | published M4 Max (not ours) |",
              "|---:|---:|---:|---|"]
        base = m["ops_per_s"]["1"]
        for n in SYNC_EVERY:
            rate = m["ops_per_s"][str(n)]
            note = ""
            if n == 1 and "ops_per_s_1" in pub:
                note = f"{pub['ops_per_s_1']:,} ops/s"
            if n == 256 and "speedup_256" in pub:
                note = (f"{pub['ops_per_s_256']:,} ops/s, " if "ops_per_s_256" in pub else "") + \
                       f"{pub['speedup_256']}x"
            L.append(f"| {n} | {rate:,.0f} | {rate / base:.2f}x | {note} |")
        L.append("")
    it = res["item"]
    L += ["## .item() cost", "",
          "| case | median time of the .item() | K x the async per-op time of that matmul (section below) |",
          "|---|---:|---:|"]
    for label in ("small", "big"):
        pend, per_op = it["pending"][label], res["matmul_sizes"][label]["async_us"]
        L.append(f"| x.sum().item() right after launching {pend['matmuls']} {pend['size']}^2 matmuls | "
                 f"{fmt_us(pend['item_us'])} | {fmt_us(pend['matmuls'] * per_op)} |")
    L += [f"| x.sum().item() after a synchronize (nothing pending) | {fmt_us(it['item_nothing_pending_us'])} | |",
          f"| sync on an idle device | {fmt_us(it['sync_idle_us'])} | |", "",
          f"Published (RTX 5070, not ours): sync overhead ~{PUBLISHED_RTX_5070['sync_overhead_us']} us.", "",
          "## Small vs big matmul: per-op time, async vs forced sync after each", "",
          "| matmul | ops/timing | async | sync after each | overhead | published RTX 5070 (not ours) |",
          "|---|---:|---:|---:|---:|---|"]
    for label in ("small", "big"):
        r, p = res["matmul_sizes"][label], PUBLISHED_RTX_5070[label]
        pub = f"{p['size']}^2: {fmt_us(p['async_us'])} vs {fmt_us(p['sync_each_us'])}"
        L.append(f"| {r['size']}^2 {res['dtype']} | {r['ops_per_timing']} | {fmt_us(r['async_us'])} | "
                 f"{fmt_us(r['sync_each_us'])} | {fmt_us(r['sync_each_us'] - r['async_us'])} | {pub} |")
    L += ["", f"Total runtime: {res['runtime_s']:.1f} s", ""]
    return "\n".join(L)


# ----------------------------------------------------------------------------- main
def parse_args(argv):
    p = OneLineArgumentParser(prog="python -m bench.sync_frequency", description=__doc__.split("\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "mps", "cpu"])
    p.add_argument("--dtype", default="auto", choices=["auto"] + list(DTYPES),
                   help="auto: fp16 on cuda, fp32 on mps/cpu")
    p.add_argument("--quick", action="store_true",
                   help="fewer repeats/ops; on CPU also rows 128, gpt_batch 1, big matmul 1024")
    p.add_argument("--repeats", type=positive_int, default=None, help="default 5 (quick: 3)")
    p.add_argument("--ops", type=positive_int, default=None,
                   help="ops per timing, rounded up to a multiple of N (default 1024; quick: 16)")
    p.add_argument("--warmup", type=non_negative_int, default=20, help="untimed ops before timing each model")
    p.add_argument("--width", type=positive_int, default=512, help="model width W")
    p.add_argument("--rows", type=positive_int, default=None, help="rows of x for matmul/MLPs (default 512)")
    p.add_argument("--gpt_batch", type=positive_int, default=None, help="GPT idx batch (default 4: 512 tokens)")
    p.add_argument("--seq_len", type=positive_int, default=128, help="GPT idx length (= block_size)")
    p.add_argument("--small_size", type=positive_int, default=512)
    p.add_argument("--big_size", type=positive_int, default=None, help="default 8192 (cpu: 2048, cpu quick: 1024)")
    p.add_argument("--pending", type=positive_int, default=64, help="small matmuls launched before the timed .item()")
    p.add_argument("--pending_big", type=positive_int, default=None, help="big matmuls launched before the timed "
                   ".item() (default 4; cpu: 1)")
    p.add_argument("--item_trials", type=positive_int, default=20)
    p.add_argument("--seconds_per_timing", type=float, default=0.5,
                   help="target length of one small/big matmul timing (sets its op count)")
    p.add_argument("--out_dir", default=None, help="default: a fresh folder under bench/results/local/")
    args = p.parse_args(argv)
    args.device = pick_device(args.device)
    cpu_quick = args.quick and args.device == "cpu"
    defaults = dict(repeats=3 if args.quick else 5, ops=16 if args.quick else 1024,
                    rows=128 if cpu_quick else 512, gpt_batch=1 if cpu_quick else 4,
                    big_size=1024 if cpu_quick else 2048 if args.device == "cpu" else 8192,
                    pending_big=1 if args.device == "cpu" else 4)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.quick:
        args.seconds_per_timing = min(args.seconds_per_timing, 0.1)
    for k in ("repeats", "ops", "width", "rows", "gpt_batch", "seq_len", "small_size", "big_size",
              "pending", "pending_big", "item_trials"):
        if getattr(args, k) < 1:
            p.error(f"--{k} must be >= 1, got {getattr(args, k)}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.width % 8 != 0:
        p.error(f"--width must be a multiple of 8 (GPT n_head=8), got {args.width}")
    if not 0 < args.seconds_per_timing < 3600:  # also refuses nan and inf
        p.error(f"--seconds_per_timing must be a number of seconds in (0, 3600), got {args.seconds_per_timing}")
    args.out_dir = results_dir(args.out_dir, "sync_frequency",
                               torch.cuda.get_device_name() if args.device == "cuda" else args.device)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    device = args.device
    dtype_name = args.dtype if args.dtype != "auto" else ("fp16" if device == "cuda" else "fp32")
    dtype, sync = DTYPES[dtype_name], sync_function(device)
    t_start = time.perf_counter()
    res = {"device": device, "device_name": device_name(device), "torch": torch.__version__,
           "dtype": dtype_name, "sync": {"cuda": "torch.cuda.synchronize()", "mps": "torch.mps.synchronize()",
                                         "cpu": "no-op (CPU ops are synchronous)"}[device],
           "command": command_line(__file__, argv),
           "args": vars(args), "published_not_ours": {"apple_m4_max": PUBLISHED_M4_MAX,
                                                      "rtx_5070": PUBLISHED_RTX_5070},
           "sync_every": {}}
    with torch.no_grad():
        for name, (description, op) in build_ops(args, device, dtype).items():
            rates = measure_sync_every(op, args, sync)
            res["sync_every"][name] = {"description": description,
                                       "ops_per_s": {str(n): r for n, r in rates.items()},
                                       "speedup_vs_1": {str(n): r / rates[1] for n, r in rates.items()}}
            print(f"{name}: " + "  ".join(f"N={n} {r:,.0f}/s" for n, r in rates.items()), flush=True)
        res["item"] = measure_item(args, device, dtype, sync)
        res["matmul_sizes"] = measure_matmul_sizes(args, device, dtype, sync)
    res["runtime_s"] = time.perf_counter() - t_start
    report = render(res)
    print("\n" + report)
    save_results(args.out_dir, f"sync_frequency_{device}", res, report, indent=2)
    print(f"wrote {Path(args.out_dir)}/sync_frequency_{device}.md and .json")
    return res


if __name__ == "__main__":
    sys.exit(guarded(main))
