"""`calibrate`: per-sublayer times on one GPU at each tp's shard width, and how far two calibrations differ."""
import json
import os
import statistics
import sys
import time

from bench.steptime.compute import DECODE_CACHE
from bench.steptime.shapes import WORKLOADS, device_name, shape_of
from training.config import write_text


def kernel_ms(fn, dev, repeats):
    """The CUDA kernels' time of one call of fn, ms: the profiler's kernel durations, mean of `repeats`."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(2):
        fn()
    torch.cuda.synchronize(dev)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize(dev)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:
        raise RuntimeError("the profiler recorded no CUDA kernels: cannot time kernels on this setup")
    return sum(e.time_range.elapsed_us() for e in kernels) / 1e3 / repeats


def timed(fn, dev, repeats):
    """One call of fn, ms, median of `repeats`: CUDA events around it on a GPU (launch gaps included), else the
    wall clock."""
    import torch
    for _ in range(2):
        fn()
    ts = []
    for _ in range(repeats):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter(); fn(); ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts)


def calibration_markdown(out, cols, on_gpu):
    """The calibration's table (calibrate's json `out`), columns `cols`, as markdown."""
    rows, name, repeats = out["rows"], out["device"], out["repeats"]
    cell = lambda r, k: (f"{r['sublayers_ms'][k]:.3f}" + (f" ({r['eager_ms'][k]:.3f})" if on_gpu else "")
                         if k in r["sublayers_ms"] else "—")
    return (
        f"# Per-sublayer times on one {name} (measured per sublayer)\n\nCommand: `{out['command']}`, torch "
        f"{out['torch']}. ms per step (all layers), at the shard width of each tp"
        + (f": kernel time (profiler, mean of {repeats}), and in brackets eager (CUDA events around each call, "
           f"median of {repeats}, launch gaps included)." if on_gpu else f": wall clock, median of {repeats}.")
        + "\n\n| size | tp | workload | " + " | ".join(cols) + " |\n|---|---:|---|" + "---:|" * len(cols) + "\n"
        + "\n".join(f"| {r['size']} | {r['tp']} | {r['workload']} | " + " | ".join(cell(r, k) for k in cols) + " |"
                    for r in rows) + "\n")


def calibrate(device, sizes, tps, workloads, repeats, out_dir):
    """Time each sublayer at the shard width each tp implies, on this one device. On a GPU two times:
    its kernels' time (the profiler's kernel durations, mean of `repeats`: what the model uses, since the
    stored rows it predicts ran as CUDA graphs, with no launch gaps) and eager (CUDA events around the
    call, median of `repeats`: launch gaps included, which at small shards are most of it). On CPU the
    wall clock. Training workloads: forward + backward (and the AdamW step of the rank's parameters);
    decode: one token against a KV cache of ctx - 1 tokens."""
    import torch
    import torch.nn.functional as F
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    name = device_name(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else "cpu"
    rows = []
    for size in sizes:
        size, (L, H, C, V) = shape_of(size)
        for tp in tps:
            for w in workloads:
                b, T, ctx, train, opt = WORKLOADS[w]
                Hl, hs = max(1, H // tp), C // H
                Ct, Ft, Vt = Hl * hs, 4 * C // tp, V // tp
                mk = lambda *s: torch.randn(*s, device=dev, dtype=dtype, requires_grad=train)
                x = mk(b, T, C)
                ln_w, ln_b = mk(C), mk(C)
                w_qkv, w_o, w_fc, w_pr, w_head = mk(3 * Ct, C), mk(C, Ct), mk(Ft, C), mk(C, Ft), mk(Vt, C)
                # GPT-2's linears have biases (the head has none): in training their gradients are reductions
                b_qkv, b_o, b_fc, b_pr = mk(3 * Ct), mk(C), mk(Ft), mk(C)
                # decode writes its T new positions into a preallocated cache and attends over all ctx of
                # them, as model/generate.py's KVCache does (a torch.cat of the cache would copy all of it)
                kv = torch.randn(2, b, Hl, ctx, hs, device=dev, dtype=dtype) if T < ctx else None
                targets = torch.randint(0, Vt, (b * T,), device=dev)

                def attention():
                    q, k, v = F.linear(x, w_qkv, b_qkv).view(b, T, 3, Hl, hs).transpose(1, 3).unbind(2)
                    if kv is not None:
                        kv[0][:, :, ctx - T:], kv[1][:, :, ctx - T:] = k, v
                        k, v = kv[0], kv[1]
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=kv is None)
                    return F.linear(y.transpose(1, 2).reshape(b, T, Ct), w_o, b_o)

                ops = {"layernorm": lambda: F.layer_norm(x, (C,), ln_w, ln_b),
                       "attention": attention,
                       "mlp": lambda: F.linear(F.gelu(F.linear(x, w_fc, b_fc)), w_pr, b_pr),
                       "head+ce": (lambda: F.cross_entropy(F.linear(x, w_head).view(-1, Vt).float(), targets))
                       if train else (lambda: F.linear(x[:, -1:], w_head))}
                per = {"layernorm": 2 * L, "attention": L, "mlp": L, "head+ce": 1}
                meas, eager = {}, {}
                # a timed backward starts from out.float().sum(): its kernels are no part of the layer, so
                # their time (that of x.float().sum().backward(), the same [b, T, C] shape) is taken off
                # the kernel times of the sublayers whose output has that shape
                start = 0.0
                if train and dev.type == "cuda":
                    with torch.enable_grad():
                        start = kernel_ms(lambda: x.float().sum().backward(), dev, repeats)
                for op, fn in ops.items():
                    run = (lambda fn=fn: fn().float().sum().backward()) if train else fn
                    with torch.set_grad_enabled(train):
                        eager[op] = timed(run, dev, repeats) * per[op]
                        if dev.type == "cuda":
                            meas[op] = max(0.0, kernel_ms(run, dev, repeats) - (start if op != "head+ce" else 0.0)) * per[op]
                        else:
                            meas[op] = eager[op]
                if opt:
                    params = [torch.zeros(n, device=dev, requires_grad=True)
                              for n in (L * (3 * Ct * C + C * Ct + 2 * Ft * C), Vt * C)]
                    for p in params:
                        p.grad = torch.zeros_like(p)
                    adam = torch.optim.AdamW(params, fused=dev.type == "cuda")
                    eager["optimizer"] = timed(adam.step, dev, repeats)
                    meas["optimizer"] = kernel_ms(adam.step, dev, repeats) if dev.type == "cuda" else eager["optimizer"]
                rows.append(dict(size=size, workload=w, tp=tp, device=name, sublayers_ms=meas, eager_ms=eager,
                                 how="measured per sublayer" + (" (kernel time)" if dev.type == "cuda" else "")))
                print(f"{name} {size} tp={tp} {w}: " + ", ".join(f"{k} {v:.3f} ms (eager {eager[k]:.3f})"
                                                                 for k, v in meas.items()))
    out = dict(device=name, torch=torch.__version__, repeats=repeats, rows=rows, decode_cache=DECODE_CACHE, biases=True,
               command="python -m bench.step_model " + " ".join(sys.argv[1:]))
    path = os.path.join(out_dir, f"step_model_calibration_{name.lower()}.json")
    write_text(path, json.dumps(out, indent=1))
    write_text(path[:-5] + ".md", calibration_markdown(out, list(per) + ["optimizer"], dev.type == "cuda"))
    return path


def calibration_repeatability(path_a, path_b):
    """Two calibrations of the same rows (two runs of `calibrate`): |b / a - 1| per (row, sublayer), for the
    kernel times and the eager times: lines of median, 90th percentile and worst."""
    def load(path):
        with open(path) as f:
            return {(r["size"], r["tp"], r["workload"]): r for r in json.load(f)["rows"]}
    a, b = load(path_a), load(path_b)
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"{path_a} and {path_b} share no (size, tp, workload) row")
    lines = [f"{len(common)} rows in both"]
    for label, key in (("kernel time", "sublayers_ms"), ("eager", "eager_ms")):
        diffs = sorted(abs(100.0 * (b[k][key][s] / a[k][key][s] - 1.0)) for k in common
                       for s in a[k].get(key, {}) if s in b[k].get(key, {}) and a[k][key][s] > 0)
        if diffs:
            lines.append(f"{label}: |second / first - 1| median {statistics.median(diffs):.1f}%, 90th percentile "
                         f"{diffs[int(0.9 * (len(diffs) - 1))]:.1f}%, worst {diffs[-1]:.1f}% over {len(diffs)} sublayer times")
    return lines
