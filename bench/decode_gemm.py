"""The GEMMs of a decode step, alone: which kernel reads a weight fastest when the input has one row?

    python -m bench.decode_gemm --out_dir bench/results/decode            # one GPU; minutes (autotuning)
    python -m bench.decode_gemm --size tiny --device cpu --compile_backend aot_eager   # CPU smoke

A decode step multiplies each weight W [N, K] by a few rows x [M, K] (M = batch, one token each). The
work is reading W once: N*K*2 bytes in bf16. The stored graph-mode trace of 124M decode at tp=2
(bench/results/decode/README.md) has cuBLAS doing this at about 8% of HBM bandwidth, and the GEMMs
are half the step's kernel time. This benchmark times each GEMM shape of one layer and the head,
as one rank holds them at each TP degree of --tps (default 2), for M in --rows (default 1 and 8):

    cublas      F.linear (+ F.gelu for c_fc), eager: what inductor's default mode calls
    inductor    the same, torch.compile (default mode): cuBLAS, with the GELU in its own kernel
    autotune    torch.compile(mode="max-autotune-no-cudagraphs"): Triton GEMM templates timed
                against cuBLAS, epilogue (bias, GELU) fused
    coordesc    the decode step's compile mode coordinate-descent (model/compile_modes.py): a
                one-row GEMM (M = 1 only) becomes a multiply and a sum, one Triton reduction kernel
                that inductor tunes, with the bias and GELU in its epilogue (gpt-fast's setting)
    reduction   torch.compile of (x[:, None, :] * W).sum(-1) in float32, + bias (+ GELU): one
                Triton reduction kernel over K with N spread over the SMs, epilogue fused

On CUDA every variant is timed inside a CUDA graph of calls, each on its own copy of the weight
(at least --copies, and at least 256 MiB of them, several times the L2 cache), so the bytes come
from HBM as in the model, where the whole model's weights pass between two uses of one. Launch
overhead is not counted. Reported: median µs per call over --repeats graph replays, the read
bandwidth (weight bytes / time) and each variant's time over cublas's. Writes decode_gemm.md/.json.
"""
import os
import statistics
import sys

import torch
import torch.nn.functional as F

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.decode_gemm ...")
from training.cli import guarded, positive_int  # noqa: E402
from bench.common import (GPT2_VOCAB, as_graph, call_times, command_line, md_row, out_dir_problem, save_results,  # noqa: E402
                          source_commit, use_cuda)
from model.compile_modes import compile_step  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser  # noqa: E402

SIZES = {"124m": dict(n_embd=768, vocab=GPT2_VOCAB), "tiny": dict(n_embd=64, vocab=512)}
VARIANTS = ("cublas", "inductor", "autotune", "coordesc", "reduction")
L2_FLUSH_BYTES = 256 * 2 ** 20


def layer_gemms(n_embd, vocab, tp):
    """(name, N, K, bias, gelu) of one layer's GEMMs on one rank, and the vocabulary-parallel head."""
    C = n_embd
    return [("c_attn", 3 * C // tp, C, True, False), ("attn.c_proj", C, C // tp, True, False),
            ("mlp.c_fc", 4 * C // tp, C, True, True), ("mlp.c_proj", C, 4 * C // tp, True, False),
            ("lm_head", vocab // tp, C, False, False)]


def linear_fn(gelu):
    def fn(x, w, b):
        y = F.linear(x, w, b)
        return F.gelu(y) if gelu else y
    return fn


def reduction_fn(gelu):
    def fn(x, w, b):
        y = (x[:, None, :].float() * w.float()).sum(-1)
        if b is not None:
            y = y + b.float()
        y = y.to(x.dtype)
        return F.gelu(y) if gelu else y
    return fn


def make_variant(name, gelu, backend):
    if name == "cublas":
        return linear_fn(gelu)
    if name == "inductor":
        return torch.compile(linear_fn(gelu), backend=backend, fullgraph=True)
    if name == "autotune":
        return torch.compile(linear_fn(gelu), backend=backend, fullgraph=True, mode="max-autotune-no-cudagraphs")
    if name == "coordesc":
        return compile_step(linear_fn(gelu), backend, "coordinate-descent")
    return torch.compile(reduction_fn(gelu), backend=backend, fullgraph=True)


def time_variant(fn, x, weights, biases, repeats, cuda):
    """Median µs per call of fn over the weight copies (one CUDA graph of all copies per replay on CUDA)."""
    def calls():
        for w, b in zip(weights, biases):
            fn(x, w, b)
    calls()  # compile / autotune outside the timing
    replay = as_graph(calls) if cuda else calls
    replay()  # a graph's first replay uploads it: outside the timing
    return statistics.median(call_times(replay, repeats, cuda)) * 1e3 / len(weights)


def max_error(fn, ref, x, w, b):
    with torch.no_grad():
        return (fn(x, w, b).float() - ref(x, w, b).float()).abs().max().item()


def main(argv=None):
    p = OneLineArgumentParser(prog="python -m bench.decode_gemm", formatter_class=HelpFormatter, description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="124m")
    p.add_argument("--tps", default="2", help="comma-separated TP degrees (the per-rank shapes; one GPU runs them)")
    p.add_argument("--rows", default="1,8", help="comma-separated M (sequences decoded at once)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    p.add_argument("--copies", type=positive_int, default=8, help="weight copies per graph, at least (CUDA: and >= 256 MiB)")
    p.add_argument("--repeats", type=positive_int, default=30)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--compile_backend", default="inductor", help="aot_eager: CPU smoke only")
    p.add_argument("--out_dir", default=None)
    args = p.parse_args(argv)
    if args.out_dir and out_dir_problem(args.out_dir):
        p.error(out_dir_problem(args.out_dir))
    variants = args.variants.split(",")
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        p.error(f"--variants {bad} not allowed; allowed: {list(VARIANTS)}")
    if args.copies < 1 or args.repeats < 1:
        p.error(f"--copies and --repeats must be >= 1, got {args.copies} and {args.repeats}")
    try:
        tps, rows_m = [int(t) for t in args.tps.split(",")], [int(m) for m in args.rows.split(",")]
    except ValueError:
        p.error(f"--tps and --rows take comma-separated integers, got {args.tps!r} and {args.rows!r}")
    n_embd = SIZES[args.size]["n_embd"]
    bad_tp = [t for t in tps if t < 1 or n_embd % t]
    if bad_tp or min(rows_m) < 1:
        p.error(f"--tps must divide n_embd={n_embd} (got {args.tps}) and --rows be >= 1 (got {args.rows})")
    cuda = use_cuda(args.device)
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    where = torch.cuda.get_device_name() if cuda else "CPU"
    torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 10_000
    rows = []
    command = command_line(__file__, sys.argv[1:] if argv is None else argv)
    header = (f"# One-row GEMMs of decode ({args.size}; {where}, torch {torch.__version__}, {dtype}, commit "
              f"{source_commit()}; µs per call, median of {args.repeats} replays of a graph of calls on distinct "
              f"weight copies, >= 256 MiB of them on CUDA)\n\ncommand: `{command}`\n")
    table = [md_row(["tp", "GEMM", "N × K", "M", *(f"{v} µs (GB/s, × cublas)" for v in variants)]),
             "|---:|---|---|---:|" + "---:|" * len(variants)]
    print(header)
    torch.manual_seed(0)
    for tp in tps:
        for name, N, K, has_bias, gelu in layer_gemms(**SIZES[args.size], tp=tp):
            copies = max(args.copies, -(-L2_FLUSH_BYTES // (N * K * 2)) if cuda else 0)
            weights = [torch.randn(N, K, device=device, dtype=dtype) * 0.02 for _ in range(copies)]
            biases = [torch.randn(N, device=device, dtype=dtype) * 0.02 if has_bias else None for _ in range(copies)]
            for M in rows_m:
                x = torch.randn(M, K, device=device, dtype=dtype)
                cells, base = [], None
                for variant in variants:
                    torch._dynamo.reset()
                    fn = make_variant(variant, gelu, args.compile_backend)
                    with torch.no_grad():
                        us = time_variant(fn, x, weights, biases, args.repeats, cuda)
                        err = max_error(fn, linear_fn(gelu), x, weights[0], biases[0])
                    base = us if variant == "cublas" else base
                    gbps = N * K * weights[0].element_size() / (us * 1e-6) / 1e9
                    rows.append(dict(tp=tp, gemm=name, N=N, K=K, M=M, variant=variant, us=us, gbps=gbps,
                                     max_abs_err=err))
                    ratio = f", {us / base:.2f}" if base else ""
                    cells.append(f"{us:.2f} ({gbps:.0f}{ratio})")
                line = md_row([str(tp), name + (" + gelu" if gelu else ""), f"{N} × {K}", str(M), *cells])
                table.append(line)
                print(line, flush=True)
    worst = max((r["max_abs_err"] for r in rows), default=0.0)
    text = header + "\n" + "\n".join(table) + f"\n\nLargest |difference| from cublas over all rows: {worst:.2e}.\n"
    if args.out_dir:
        save_results(args.out_dir, "decode_gemm", dict(device=where, torch=torch.__version__, commit=source_commit(),
                                                       rows=rows), text)
    print(f"\nLargest |difference| from cublas over all rows: {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))
