"""Every collective of the project goes through this module, and is counted here.

Megatron-style conjugate operators for tensor parallelism (Megatron-LM, `mappings.py`):

    f = copy_to_tp_region:      forward  y = x                 backward  dx = all_reduce(dy)
    g = reduce_from_tp_region:  forward  y = all_reduce(x)     backward  dx = dy

f marks where a replicated tensor enters a tensor-parallel region (each rank then
computes a partial result from it, so its gradient is partial and must be summed);
g marks where the region's partial results are summed back into a replicated tensor.

Counting: `stats` holds one counter per kind of collective. The model's f/g are counted as
`tp_fwd` (g forward) and `tp_bwd` (f backward); data-parallel gradient buckets as
`dp_grad`; the TP sum of partial gradients of replicated parameters as `tp_grad`.
Calls on a group of one rank are still counted (the op is then the identity), so the counts
describe the model and not how many GPUs run it.
"""
from collections import Counter
from contextlib import contextmanager

import torch
import torch.distributed as dist


class CommStats:
    """Counts collectives by kind. `reset()` at the start of a step, `snapshot()` to read."""

    def __init__(self):
        self.counts = Counter()
        self.bytes = Counter()

    def add(self, kind, tensor=None):
        self.counts[kind] += 1
        if tensor is not None:
            self.bytes[kind] += tensor.numel() * tensor.element_size()

    def reset(self):
        self.counts.clear()
        self.bytes.clear()

    def snapshot(self):
        return dict(self.counts)


stats = CommStats()
_skip_collectives = False


@contextmanager
def skipped_collectives():
    """Inside: collectives are counted but not run (each rank keeps its own partial values).
    Only for benchmarks: it gives the no-communication floor of a computation's latency."""
    global _skip_collectives
    _skip_collectives = True
    try:
        yield
    finally:
        _skip_collectives = False


def group_size(group):
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def group_rank(group):
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 0
    return dist.get_rank(group)


def all_reduce(tensor, group, kind, async_op=False):
    """In-place SUM all-reduce (never ReduceOp.AVG: gloo mishandles it). Returns a Work if async."""
    stats.add(kind, tensor)
    if group_size(group) == 1 or _skip_collectives:
        return None
    return dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=async_op)


def broadcast(tensor, src_group_rank, group, kind="broadcast"):
    """Broadcast from the rank whose index *inside* `group` is src_group_rank."""
    stats.add(kind, tensor)
    if group_size(group) == 1:
        return
    dist.broadcast(tensor, src=dist.get_global_rank(group, src_group_rank), group=group)


def all_gather(tensor, group, kind="all_gather"):
    """Returns the list of every rank's `tensor` (same shape on all ranks), in group-rank order."""
    stats.add(kind, tensor)
    if group_size(group) == 1:
        return [tensor]
    out = [torch.empty_like(tensor) for _ in range(group_size(group))]
    dist.all_gather(out, tensor.contiguous(), group=group)
    return out


def barrier(group=None):
    if group_size(group) > 1:
        dist.barrier(group=group)


class _CopyToTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, kind):
        ctx.group, ctx.kind = group, kind
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        # autograd may hand the same grad tensor to other branches: reduce a copy.
        grad = grad.contiguous().clone()
        all_reduce(grad, ctx.group, ctx.kind)
        return grad, None, None


class _ReduceFromTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        # x is a fresh partial sum made by the caller, so it is reduced in place.
        ctx.mark_dirty(x)
        all_reduce(x, group, "tp_fwd")
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ReduceFromTPRegionAsync(torch.autograd.Function):
    """g launched asynchronously: the result may only be read after wait_reduce(handle)."""

    @staticmethod
    def forward(ctx, x, group, handle):
        ctx.mark_dirty(x)
        handle["work"] = all_reduce(x, group, "tp_fwd", async_op=True)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class _WaitReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, handle):
        if handle["work"] is not None:
            handle["work"].wait()
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def reduce_from_tp_region_async(x, group):
    """g, launched without waiting: returns (x, handle); read x only through wait_reduce(x, handle).
    Lets compute that does not need the sum run while it travels (Ladder Residual)."""
    handle = {}
    return _ReduceFromTPRegionAsync.apply(x, group, handle), handle


def wait_reduce(x, handle):
    return _WaitReduce.apply(x, handle)


def copy_to_tp_region(x, group, kind="tp_bwd"):
    """f: identity forward, all-reduce of the gradient backward (counted as `kind`)."""
    if not torch.is_grad_enabled() or not x.requires_grad:
        return x
    return _CopyToTPRegion.apply(x, group, kind)


def reduce_from_tp_region(x, group):
    """g: all-reduce forward, identity backward. `x` must be a fresh contiguous tensor: it is reduced in place."""
    if not torch.is_grad_enabled() or not x.requires_grad:
        all_reduce(x, group, "tp_fwd")
        return x
    return _ReduceFromTPRegion.apply(x, group)
