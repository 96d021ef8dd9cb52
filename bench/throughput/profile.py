"""bench/train_throughput.py's --profile: a torch.profiler table of PROFILE_ITERS more training steps (the top 40 ops by
device time; CPU time off CUDA) and, on CUDA, the device timeline per step from the same profile's kernels: the span
from the first kernel's start to the last one's end, the time some kernel runs (busy), the idle rest, the all-reduce
(NCCL) kernels' busy time, the other kernels', and the time both run at once."""
import json
import os
import tempfile

import torch

PROFILE_ITERS = 3


def union_ms(intervals):
    """Total length (ms) of the union of [start, end) intervals given in us."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + (b - a), b
        elif b > end:
            total, end = total + (b - end), b
    return total / 1e3


def device_timeline(events, iters):
    """Per iteration, from a chrome trace's device kernels (events with cat 'kernel', ts and dur in us): the span from
    the first kernel's start to the last one's end, the time some kernel runs (busy), the idle rest, and how the
    all-reduce kernels (name holding 'nccl', any stream) sit against the others: their busy time, the compute's, and
    the time both run at once. None without kernels (a CPU run)."""
    kernels = [(e["ts"], e["ts"] + e["dur"], "nccl" in e["name"].lower()) for e in events
               if e.get("cat") == "kernel" and "dur" in e]
    if not kernels:
        return None
    comm = [(a, b) for a, b, is_comm in kernels if is_comm]
    comp = [(a, b) for a, b, is_comm in kernels if not is_comm]
    span = (max(b for _, b, _ in kernels) - min(a for a, _, _ in kernels)) / 1e3
    busy = union_ms([(a, b) for a, b, _ in kernels])
    comm_ms, comp_ms = union_ms(comm), union_ms(comp)
    return {k: v / iters for k, v in dict(span=span, busy=busy, idle=span - busy, allreduce=comm_ms, compute=comp_ms,
                                          both=comm_ms + comp_ms - busy).items()}


def profile_table(step, cuda):
    """key_averages of PROFILE_ITERS iterations, top 40 by device time (CPU time off CUDA), and on CUDA the device
    timeline per iteration (device_timeline, from the same profile's chrome trace)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(PROFILE_ITERS):
            step()
        if cuda:
            torch.cuda.synchronize()
    timeline = None
    if cuda:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                timeline = device_timeline(json.load(f).get("traceEvents", []), PROFILE_ITERS)
    averages = prof.key_averages()
    for key in (("device_time_total", "cuda_time_total") if cuda else ("cpu_time_total",)):
        try:
            return key, averages.table(sort_by=key, row_limit=40), timeline
        except (AttributeError, KeyError, ValueError):
            continue
    return "cpu_time_total", averages.table(sort_by="cpu_time_total", row_limit=40), timeline
