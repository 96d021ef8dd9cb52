"""Data-parallel gradient sync: naive vs flat vs per-parameter overlap vs bucketed vs torch DDP.

One invocation times, for each model size, every variant on the same model and data:

    naive          one all-reduce per parameter, after backward
    flat           one all-reduce of all gradients flattened, after backward
    overlap        one async all-reduce per parameter, launched from its grad hook
    bucketed_<MB>  parallel/ddp.py BucketedDDP with bucket_cap_mb=<MB> (1, 10, 25, 100, 1000)
    torch_ddp      torch.nn.parallel.DistributedDataParallel, 25 MB buckets (its default)

A step is zero_grad + forward + backward + gradient sync + AdamW step (bf16 autocast on CUDA,
fp32 parameters and gradients). Reported per variant: the median step time over --steps steps
after --warmup steps (CUDA events), the number of buckets, the median time spent in
finish_gradient_synchronization() after backward returns (communication not hidden behind
backward, plus the copy back into .grad; torch DDP waits inside backward, so n/a), and the step
time relative to torch DDP. Results: <out_dir>/ddp_buckets.{md,json,png}.

GPU run (2 GPUs of one host). NVLink multicast must stay off on the shared machines; export
these before starting (the script also sets them if unset):

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    torchrun --standalone --nproc_per_node=2 -m bench.ddp_buckets

CPU smoke check (gloo, tiny model; never into bench/results):

    torchrun --standalone --nproc_per_node=2 -m bench.ddp_buckets --device cpu --sizes tiny \\
        --steps 3 --warmup 1 --out_dir /tmp/ddpbench

--model gpt uses model/gpt.py (the project's GPT, tp=1); --model toy a self-contained
nanoGPT-shaped model below; auto (default) takes gpt if it imports.
"""
import gc
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.ddp_buckets ... "
             "(or torchrun ... -m bench.ddp_buckets ...)")
from training.cli import guarded, non_negative_int, positive_int  # noqa: E402
from bench.common import (GPT2_VOCAB, REPO, command_line, device_tag, multicast_off, pyplot, results_dir,
                          save_results)  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser, save_figure  # noqa: E402
from parallel.ddp import BucketedDDP  # noqa: E402
from parallel.mesh import init_mesh  # noqa: E402

multicast_off()  # before any NCCL communicator exists

# (n_layer, n_head, n_embd, vocab_size, default batch_size, default seq_len)
SIZES = {
    "tiny": (2, 2, 32, 128, 4, 64),
    "124m": (12, 12, 768, GPT2_VOCAB, 16, 1024),
    "xl": (48, 25, 1600, GPT2_VOCAB, 8, 1024),
}
VARIANTS = ["naive", "flat", "overlap", "bucketed_1", "bucketed_10", "bucketed_25", "bucketed_100",
            "bucketed_1000", "torch_ddp"]


class Block(nn.Module):
    def __init__(self, n_head, n_embd):
        super().__init__()
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.c_attn, self.attn_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.c_fc, self.mlp_proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class ToyGPT(nn.Module):
    """GPT-2 shapes (tied wte/lm_head, learned positions), nanoGPT's registration order."""

    def __init__(self, n_layer, n_head, n_embd, vocab_size, block_size):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_head, n_embd) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def build_model(kind, size, seq_len):
    n_layer, n_head, n_embd, vocab, _, _ = SIZES[size]
    if kind == "gpt":
        from model.gpt import GPT, GPTConfig
        return GPT(GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=seq_len,
                             vocab_size=vocab, dropout=0.0))
    return ToyGPT(n_layer, n_head, n_embd, vocab, seq_len)


def resolve_model_kind(kind):
    if kind != "auto":
        return kind
    try:
        import model.gpt  # noqa: F401
        return "gpt"
    except Exception:  # the project model is optional here
        return "toy"


def wrap(model, variant, mesh):
    if variant == "torch_ddp":
        ids = [torch.device(mesh.device).index] if mesh.device.startswith("cuda") else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, process_group=mesh.dp_group,
                                                   bucket_cap_mb=25)
    if variant.startswith("bucketed_"):
        return BucketedDDP(model, mesh.dp_group, bucket_cap_mb=float(variant.split("_")[1]))
    return BucketedDDP(model, mesh.dp_group, mode=variant)


def n_buckets(wrapped):
    if isinstance(wrapped, BucketedDDP):
        return len(wrapped.buckets)
    # torch DDP logs its rebuilt buckets from iteration 10 on (before that: n/a).
    sizes = wrapped._get_ddp_logging_data().get("rebuilt_bucket_sizes")
    return len(str(sizes).split(",")) if sizes else None


class Clock:
    """CUDA events on GPU (read after one synchronize), wall clock on CPU."""

    def __init__(self, cuda):
        self.cuda = cuda

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def ms(self, a, b):
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


def run_variant(model, opt, variant, mesh, x, y, args, cuda, profile_dir=None, size=""):
    wrapped = wrap(model, variant, mesh)
    ours = isinstance(wrapped, BucketedDDP)
    clock = Clock(cuda)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda)

    def step():
        t0 = clock.mark()
        opt.zero_grad(set_to_none=True)
        with autocast:
            _, loss = wrapped(x, y)
        loss.backward()
        t1 = clock.mark()
        if ours:
            with torch.profiler.record_function("finish_gradient_synchronization"):
                wrapped.finish_gradient_synchronization()
        t2 = clock.mark()
        opt.step()
        return t0, t1, t2, clock.mark()

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    marks = [step() for _ in range(args.steps)]
    if cuda:
        torch.cuda.synchronize()
    step_ms = [clock.ms(t0, t3) for t0, _, _, t3 in marks]
    wait_ms = [clock.ms(t1, t2) for _, t1, t2, _ in marks]
    fb_ms = [clock.ms(t0, t1) for t0, t1, _, _ in marks]
    if profile_dir:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            for _ in range(3):
                step()
            if cuda:
                torch.cuda.synchronize()
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(Path(profile_dir, f"ddp_{size}_{variant}_rank{mesh.rank}.json")))
    result = dict(variant=variant, buckets=n_buckets(wrapped),
                  step_ms=statistics.median(step_ms), fwd_bwd_ms=statistics.median(fb_ms),
                  wait_ms=statistics.median(wait_ms) if ours else None,
                  peak_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
                  step_ms_all=step_ms)
    if ours:
        wrapped.remove_hooks()
    del wrapped
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result


def parse_args(argv=None):
    p = OneLineArgumentParser(prog="python -m bench.ddp_buckets", formatter_class=HelpFormatter, description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="124m,xl", help=f"comma list of {list(SIZES)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {VARIANTS}")
    p.add_argument("--steps", type=positive_int, default=20)
    p.add_argument("--warmup", type=non_negative_int, default=5)
    p.add_argument("--batch_size", type=positive_int, default=None, help="per rank; default per size")
    p.add_argument("--seq_len", type=positive_int, default=None, help="default 1024 (64 for tiny)")
    p.add_argument("--model", default="auto", choices=["auto", "gpt", "toy"])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--out_dir", default=None, help="default: a fresh folder under bench/results/local/")
    p.add_argument("--profile", default=None, metavar="DIR", help="write chrome traces here")
    p.add_argument("--profile_variant", default="bucketed_25")
    args = p.parse_args(argv)
    args.sizes = [s for s in args.sizes.split(",") if s]
    args.variants = [v for v in args.variants.split(",") if v]
    for name, got, allowed in (("--sizes", args.sizes, SIZES), ("--variants", args.variants, VARIANTS)):
        bad = [v for v in got if v not in allowed]
        if bad or not got:
            p.error(f"{name} {bad or got} not allowed; use a comma list of {list(allowed)}")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device not in ("cuda", "cpu"):
        p.error(f"--device={args.device!r} not allowed; use cuda or cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device=cuda but no CUDA device is visible; use --device cpu for a smoke run")
    if args.out_dir is not None and args.device == "cpu" and \
            Path(args.out_dir).resolve() == (Path(REPO) / "bench" / "results").resolve():
        p.error(f"--out_dir={args.out_dir} not allowed on CPU: bench/results is for GPU results")
    args.out_dir = results_dir(args.out_dir, "ddp_buckets", device_tag(args.device == "cuda"))
    return args


def write_report(results, meta, out_dir):
    out_dir = Path(out_dir)
    lines = ["# Data-parallel gradient sync: bucket sizes vs torch DDP", "",
             f"- device: {meta['device']} x {meta['world_size']} (backend {meta['backend']})",
             f"- torch {meta['torch']}, model `{meta['model']}`, "
             f"{'bf16 autocast, ' if meta['device'] != 'cpu' else ''}fp32 params and grads, AdamW",
             f"- median of {meta['steps']} steps after {meta['warmup']} warm-up steps",
             f"- command: `{meta['command']}`", "",
             "wait = time in finish_gradient_synchronization() after backward returns (CUDA events; "
             "wall clock on CPU): "
             "the communication backward did not hide, plus the copy back into .grad. torch DDP "
             "waits inside backward, so n/a.", ""]
    for size, rs in results.items():
        r0 = rs[0]
        lines += [f"## {size}: {r0['params'] / 1e6:.2f} M parameters, batch {r0['batch_size']} x "
                  f"{r0['seq_len']} tokens per rank", "",
                  "| variant | buckets | step ms | fwd+bwd ms | wait ms | vs torch DDP | peak GiB |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        ref = next((r["step_ms"] for r in rs if r["variant"] == "torch_ddp"), None)
        for r in rs:
            fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731
            lines.append(f"| {r['variant']} | {fmt(r['buckets'], 'd')} | {r['step_ms']:.1f} | "
                         f"{r['fwd_bwd_ms']:.1f} | {fmt(r['wait_ms'], '.1f')} | "
                         f"{fmt(ref and r['step_ms'] / ref, '.3f')} | {fmt(r['peak_gib'], '.1f')} |")
        lines.append("")
    save_results(out_dir, "ddp_buckets", dict(meta=meta, results=results), "\n".join(lines))

    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (size, rs) in zip(axes[0], results.items()):
        names = [r["variant"] for r in rs]
        ax.bar(names, [r["step_ms"] for r in rs], color="tab:blue", label="step")
        ax.bar(names, [r["wait_ms"] or 0 for r in rs], color="tab:red", label="wait after backward")
        ref = next((r["step_ms"] for r in rs if r["variant"] == "torch_ddp"), None)
        if ref:
            ax.axhline(ref, color="k", ls="--", lw=1, label="torch DDP")
        ax.set_title(f"{size} ({meta['world_size']} x {meta['device']})")
        ax.set_ylabel("ms per step (median)")
        ax.tick_params(axis="x", rotation=45)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, str(out_dir / "ddp_buckets.png"))


def main():
    args = parse_args()
    mesh = init_mesh(tp=1, device=args.device)
    if mesh.world_size < 2 and mesh.is_master:
        print("warning: world size 1, nothing is communicated; launch with torchrun --nproc_per_node=2")
    cuda = mesh.device.startswith("cuda")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    kind = resolve_model_kind(args.model)
    results = {}
    for size in args.sizes:
        bs = args.batch_size or SIZES[size][4]
        T = args.seq_len or SIZES[size][5]
        torch.manual_seed(0)
        model = build_model(kind, size, T).to(mesh.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=cuda)
        g = torch.Generator().manual_seed(1 + mesh.dp_rank)
        x, y = (torch.randint(0, SIZES[size][3], (bs, T), generator=g).to(mesh.device) for _ in range(2))
        n_params = sum(p.numel() for p in model.parameters())
        results[size] = []
        for variant in args.variants:  # torch_ddp last: it leaves its hooks on the model
            prof = args.profile if variant == args.profile_variant else None
            r = run_variant(model, opt, variant, mesh, x, y, args, cuda, prof, size)
            r.update(params=n_params, batch_size=bs, seq_len=T)
            results[size].append(r)
            if mesh.is_master:
                wait = "n/a" if r["wait_ms"] is None else f"{r['wait_ms']:.1f}"
                print(f"{size:>5} {variant:>14}: buckets {r['buckets']}, step {r['step_ms']:.1f} ms, "
                      f"wait {wait} ms", flush=True)
        del model, opt
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    if mesh.is_master:
        meta = dict(device=torch.cuda.get_device_name() if cuda else "cpu", world_size=mesh.world_size,
                    backend=dist.get_backend() if dist.is_initialized() else "none",
                    torch=torch.__version__, model=kind, steps=args.steps, warmup=args.warmup,
                    command="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "
                            + command_line(__file__, sys.argv[1:]))
        write_report(results, meta, args.out_dir)
        print(f"wrote {Path(args.out_dir) / 'ddp_buckets.md'} (.json, .png)")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(guarded(main))
