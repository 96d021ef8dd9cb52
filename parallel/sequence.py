"""Sequence parallelism's collectives (Megatron-LM's mappings.py, its sequence-parallel half), counted in comm.stats.

With sequence parallelism the replicated activations outside the tensor-parallel regions (the shared residual
stream, the LayerNorm that reads it, residual dropout) are split over the TP group by tokens: rank r holds the r-th
of tp contiguous chunks of the flattened [B*T, C] tokens, [B*T/tp, C]. Megatron's activations are [T, B, C], so its
chunks are sequence chunks; ours are [B, T, C], and chunking the flattened tokens keeps every chunk contiguous (no
transpose before a collective). Every op on the shard acts token by token, so which tokens a rank holds does not
change what it computes. The model asks T % tp == 0, as Megatron does.

    gather_tokens   forward: all-gather of the chunks -> [B,T,C]   backward: reduce-scatter of the gradient
    scatter_tokens  forward: reduce-scatter (the sum, this rank's chunk)   backward: all-gather of the gradient

gather_tokens is f's place (entering a region: each rank needs every token) and scatter_tokens is g's (leaving it:
the partial sums are summed and each rank keeps its chunk). Counting: scatter_tokens' forward is the sync point's
collective and is counted as g's (`tp_fwd`), so a forward's `tp_fwd` count is still its sync points; its backward
all-gather is `tp_bwd_ag`. gather_tokens' backward reduce-scatter replaces f's all-reduce and is counted as f's
(`tp_bwd`); its forward all-gather is `tp_fwd_ag`. One reduce-scatter + all-gather pair per sync point, each way.
The vocabulary-parallel embedding and head pass their own kinds (`vocab`).

token_dropout: dropout on a token shard with the mask of the whole [B,T,C] tensor (drawn from the RNG every TP rank
shares, as the unsharded model draws it), of which the rank keeps its chunk: the same masks as without sequence
parallelism. Megatron instead forks the RNG per rank, which changes the function.

The raw collectives are parallel/comm.py's (every collective of the project goes through it): traced, custom ops
that return new tensors, as its all-reduce (comm.py's docstring: why not torch's functional collectives). The
ladder's reduce-scatter is launched without waiting (scatter_tokens_async), ordered as comm's async all-reduce.
"""
import torch
from torch.nn import functional as F

from parallel import comm


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, fwd_kind, bwd_kind, reduce_dtype):
        ctx.group, ctx.bwd_kind, ctx.reduce_dtype = group, bwd_kind, reduce_dtype
        comm.stats.add(fwd_kind, x)
        return comm.all_gather_rows(x, group)

    @staticmethod
    def backward(ctx, grad):
        sent = comm._to_reduce_dtype(grad, ctx.reduce_dtype, ctx.group)
        comm.stats.add(ctx.bwd_kind, sent)
        return comm.reduce_scatter_rows(sent, ctx.group).to(grad.dtype), None, None, None, None


class _ScatterTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, fwd_kind, bwd_kind):
        ctx.group, ctx.bwd_kind = group, bwd_kind
        comm.stats.add(fwd_kind, x)
        return comm.reduce_scatter_rows(x, group)

    @staticmethod
    def backward(ctx, grad):
        comm.stats.add(ctx.bwd_kind, grad)
        return comm.all_gather_rows(grad, ctx.group), None, None, None


def gather_tokens(x, group, shape, fwd_kind="tp_fwd_ag", bwd_kind="tp_bwd", reduce_dtype=None):
    """This rank's token chunk [B*T/tp, C] -> every token, viewed as `shape` [B,T,C]. Backward: the reduce-scatter
    of the gradient, sent in reduce_dtype if given (then cast back), as f's all-reduce (comm.copy_to_tp_region)."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _GatherTokens.apply(x, group, fwd_kind, bwd_kind, reduce_dtype).view(shape)
    comm.stats.add(fwd_kind, x)
    return comm.all_gather_rows(x, group).view(shape)


def scatter_tokens(x, group, fwd_kind="tp_fwd", bwd_kind="tp_bwd_ag"):
    """Partial sums [B,T,C] (or [B*T, C]) -> this rank's chunk [B*T/tp, C] of their sum over the group."""
    x = x.reshape(-1, x.shape[-1])
    if torch.is_grad_enabled() and x.requires_grad:
        return _ScatterTokens.apply(x, group, fwd_kind, bwd_kind)
    comm.stats.add(fwd_kind, x)
    return comm.reduce_scatter_rows(x, group)


class _ScatterStartTraced(torch.autograd.Function):
    """Traced launch: the ticket of reduce_scatter_start. x's gradient flows through the wait."""

    @staticmethod
    def forward(ctx, x, group):
        return torch.ops.reduced_sync.reduce_scatter_start(x, comm.group_size(group), group.group_name)

    @staticmethod
    def backward(ctx, grad):
        return None, None


class _ScatterStart(torch.autograd.Function):
    """Eager launch: the chunk's buffer, filled once handle["work"] is waited for."""

    @staticmethod
    def forward(ctx, x, group, bwd_kind, handle):
        ctx.group, ctx.bwd_kind = group, bwd_kind
        out, handle["work"] = comm.reduce_scatter_rows_start(x, group)
        return out

    @staticmethod
    def backward(ctx, grad):
        comm.stats.add(ctx.bwd_kind, grad)
        return comm.all_gather_rows(grad, ctx.group), None, None, None


class _ScatterWait(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out, handle):
        handle["work"].wait()
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ScatterWaitTraced(torch.autograd.Function):
    """Traced wait: the chunk, scheduled after the tensor `after` (None: anywhere after the start)."""

    @staticmethod
    def forward(ctx, x, ticket, group, bwd_kind, after):
        ctx.group, ctx.bwd_kind = group, bwd_kind
        n = comm.group_size(group)
        return torch.ops.reduced_sync.reduce_scatter_wait(ticket, x, n, [] if after is None else [after])

    @staticmethod
    def backward(ctx, grad):
        comm.stats.add(ctx.bwd_kind, grad)
        return comm.all_gather_rows(grad, ctx.group), None, None, None, None


def scatter_tokens_async(x, group, fwd_kind="tp_fwd", bwd_kind="tp_bwd_ag"):
    """scatter_tokens launched without waiting: (value, handle); read the chunk only through wait_scatter(value,
    handle). The ladder's reduce-scatter travels while the next sublayer computes (comm.reduce_from_tp_region_async:
    the same ordering by `after`)."""
    x = x.reshape(-1, x.shape[-1]).contiguous()
    if not comm._runs(group):
        return scatter_tokens(x, group, fwd_kind, bwd_kind), None
    comm.stats.add(fwd_kind, x)
    if torch.compiler.is_compiling():
        return x, {"ticket": _ScatterStartTraced.apply(x, group), "bwd_kind": bwd_kind, "group": group}
    handle = {}
    return _ScatterStart.apply(x, group, bwd_kind, handle), handle


def wait_scatter(value, handle, after=None):
    """The chunk that scatter_tokens_async launched. after: the handle of one launched since; traced, the wait
    takes its ticket, so that one is launched first (comm.wait_reduce)."""
    if handle is None:
        return value
    if "ticket" in handle:
        later = None if after is None else after["ticket"]
        return _ScatterWaitTraced.apply(value, handle["ticket"], handle["group"], handle["bwd_kind"], later)
    return _ScatterWait.apply(value, handle)


def token_dropout(y, p, training, shape, group):
    """Dropout of this rank's chunk y [B*T/tp, C] of a [B,T,C] tensor, with that tensor's mask (module docstring):
    the unsharded F.dropout(x) is x * F.dropout(ones), bit for bit."""
    if not training or p == 0.0:
        return y
    mask = F.dropout(y.new_ones(shape), p, True).view(-1, y.shape[-1])
    return y * mask.chunk(comm.group_size(group))[comm.group_rank(group)]
