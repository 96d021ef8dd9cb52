"""Every collective of the project goes through this module, and is counted here.

Megatron-style conjugate operators for tensor parallelism (Megatron-LM, `mappings.py`):

    f = copy_to_tp_region:      forward  y = x                 backward  dx = all_reduce(dy)
    g = reduce_from_tp_region:  forward  y = all_reduce(x)     backward  dx = dy

f marks where a replicated tensor enters a tensor-parallel region (each rank then
computes a partial result from it, so its gradient is partial and must be summed);
g marks where the region's partial results are summed back into a replicated tensor.

Counting: `stats` holds one counter per kind of collective. The model's f/g are counted as
`tp_fwd` (g forward) and `tp_bwd` (f backward); the TP sum of partial gradients of replicated
parameters as `tp_grad`; the vocabulary-parallel embedding, head and cross-entropy as `vocab`;
data-parallel gradient buckets as `dp_grad`. Sequence parallelism's reduce-scatters and all-gathers
(parallel/sequence.py) are counted here too, as `tp_fwd` / `tp_bwd` where they take g's / f's place and
`tp_fwd_ag` / `tp_bwd_ag` for the all-gathers that come with them. Calls on a group of one rank are still counted (the
op is then the identity), so the counts describe the model and not how many GPUs run it.

torch.compile. Inside a traced function (torch.compiler.is_compiling()) a collective is one of the
custom ops below, which inductor runs as an opaque kernel in data order, and nothing is counted: a
Python counter mutated there is a side effect that breaks the graph. Counts are therefore a
measurement of an uncompiled (eager) pass; the model declares its own counts from its plan.
Not torch's functional collectives: inductor (torch 2.13, CPU) fuses a reader of their result
with an earlier, independent kernel and runs it before the collective has finished, so it reads the
unreduced partial sum (the ladder at tp=2 computed another loss: experiments/compiler_repros/README.md,
"Compiled at tp=2, the ladder computed another function"; experiments/compiler_repros/collective_fusion/repro.py
shows it in a few lines). The traced all-reduce therefore reduces a copy of its input and returns it.

Asynchronous input-gradient all-reduce (GPT's async_grad_allreduce): parallel/async_grad.py, over this module's
_start_all_reduce / _wait_all_reduce and their traced ops below.
"""
from collections import Counter
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as _funcol
from torch.distributed.distributed_c10d import _resolve_process_group


class CommStats:
    """Counts collectives by kind (eager calls only). `reset()` at the start of a step, `snapshot()` to read."""

    def __init__(self):
        self.counts = Counter()
        self.bytes = Counter()

    def add(self, kind, tensor=None):
        if torch.compiler.is_compiling():
            return
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
    """Inside: every collective of this module is counted but not run (each rank keeps its own
    values; an all-gather returns copies of the local tensor). Only for benchmarks: it gives the
    no-communication floor of a computation's latency."""
    global _skip_collectives
    _skip_collectives = True
    try:
        yield
    finally:
        _skip_collectives = False


def group_size(group):
    """Ranks in `group`; None means a single process (the model's tp_group=None)."""
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def group_rank(group):
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 0
    return dist.get_rank(group)


def _runs(group):
    """Whether a collective over `group` really communicates (more than one rank, not skipped)."""
    return group_size(group) > 1 and not _skip_collectives


_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


@torch.library.custom_op("reduced_sync::all_reduce", mutates_args=())
def _traced_all_reduce(x: torch.Tensor, op: str, group_name: str) -> torch.Tensor:
    out = x.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(out, op=_REDUCE_OPS[op], group=_resolve_process_group(group_name))
    return out


@_traced_all_reduce.register_fake
def _(x, op, group_name):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("reduced_sync::all_gather", mutates_args=())
def _traced_all_gather(x: torch.Tensor, n: int, group_name: str) -> torch.Tensor:
    out = x.new_empty((n * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x, group=_resolve_process_group(group_name))
    return out


@_traced_all_gather.register_fake
def _(x, n, group_name):
    return x.new_empty((n * x.shape[0], *x.shape[1:]))


# Traced async collectives: a start (all_reduce_start, reduce_scatter_start, all_gather_start) launches the
# collective and returns a ticket, one element on x's device (no kernel); its wait takes the ticket and returns the
# result (a tensor no input aliases), scheduled after the tensors of `after` (inductor orders kernels by data only).
# The table pairs them by the ticket's address, the start's own output, which inductor passes to the wait as it is.
# Not by the input's: a pure value that inductor may compute twice (a buffer for the start, another for the wait)
# and whose start buffer it may reuse for the next start while the first is in flight (under bf16 autocast, the
# output gradient's cast split in pieces by 'chunked': two starts at one address). So a start's collective reads a
# buffer it owns or one its wait reads: all_reduce_start reduces a copy of x, all_gather_start copies x into its own
# rows of the output and gathers in place, reduce_scatter_wait takes x (a GEMM's output) and checks it is the start's.
_in_flight = {}  # (collective, the ticket's address) -> (Work, output, the input's address the wait checks, or None)


def _ticket(x):
    """A start's ticket: one element, so that every live ticket has its own address."""
    return x.new_empty(1)


def _launched(collective, x, ticket, work, out, check_input=False):
    """Keep a traced start's (work, out) until the wait that takes its ticket; check_input: the wait checks it takes
    the buffer the start read."""
    key = (collective, ticket.data_ptr())
    if key in _in_flight:  # e.g. a wait replayed in a CUDA graph, which runs no Python; its ticket since freed
        raise RuntimeError(f"reduced_sync::{collective}_start: a {collective} is already in flight at this ticket's "
                           f"address: an earlier start's wait never ran (input {tuple(x.shape)} {x.dtype} at "
                           f"{x.data_ptr():#x}; in flight: {dict(Counter(c for c, _ in _in_flight))}; capturing a CUDA "
                           f"graph: {x.is_cuda and torch.cuda.is_current_stream_capturing()})")
    _in_flight[key] = (work, out, x.data_ptr() if check_input else None)


def _landed(collective, ticket, x=None):
    """The output of the traced start whose ticket this is, once its work is done (x: the input, where checked)."""
    try:
        work, out, address = _in_flight.pop((collective, ticket.data_ptr()))
    except KeyError:
        raise RuntimeError(f"reduced_sync::{collective}_wait: no {collective} in flight for this ticket "
                           "(the compiled graph passed another tensor than the start's ticket)") from None
    work.wait()
    if address is not None and x.data_ptr() != address:
        raise RuntimeError(f"reduced_sync::{collective}_wait: the input {tuple(x.shape)} {x.dtype} at "
                           f"{x.data_ptr():#x} is not the buffer the start read ({address:#x}): the compiled graph "
                           "computed it twice, and the start's may have been overwritten while the collective read it")
    return out


@torch.library.custom_op("reduced_sync::all_reduce_start", mutates_args=())
def _traced_all_reduce_start(x: torch.Tensor, group_name: str) -> torch.Tensor:
    out, ticket = x.clone(memory_format=torch.contiguous_format), _ticket(x)
    _launched("all_reduce", x, ticket, dist.all_reduce(out, op=dist.ReduceOp.SUM,
                                                       group=_resolve_process_group(group_name), async_op=True), out)
    return ticket


@_traced_all_reduce_start.register_fake
def _(x, group_name):
    return _ticket(x)


@torch.library.custom_op("reduced_sync::all_reduce_wait", mutates_args=())
def _traced_all_reduce_wait(ticket: torch.Tensor, x: torch.Tensor, after: list[torch.Tensor]) -> torch.Tensor:
    return _landed("all_reduce", ticket)


@_traced_all_reduce_wait.register_fake
def _(ticket, x, after):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _start_all_reduce(x, group):
    """Launch the SUM all-reduce of x (a fresh tensor nothing else reads); returns the handle for
    _wait_all_reduce, which returns the sum. Not running (one rank, skipped): the handle is x."""
    if not _runs(group):
        return (None, x)
    if torch.compiler.is_compiling():
        return (torch.ops.reduced_sync.all_reduce_start(x, group.group_name), x)
    return (dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group, async_op=True), x)


def _wait_all_reduce(handle, group, after=()):
    """The sum launched by _start_all_reduce; traced, the wait comes after the tensors of `after`."""
    pending, x = handle
    if pending is None:
        return x
    if torch.compiler.is_compiling():
        return torch.ops.reduced_sync.all_reduce_wait(pending, x, [t for t in after if t is not None])
    pending.wait()
    return x


def _all_reduce_value(x, group, op="sum"):
    """The reduced tensor ('sum' or 'max'): a new one when traced, else x reduced in place (the
    caller passes a tensor nothing else reads). The op is a string because Dynamo cannot hash
    ReduceOp values (torch 2.11)."""
    if not _runs(group):
        return x
    if torch.compiler.is_compiling():
        return torch.ops.reduced_sync.all_reduce(x, op, group.group_name)
    dist.all_reduce(x, op=_REDUCE_OPS[op], group=group)
    return x


def all_reduce(tensor, group, kind, async_op=False):
    """In-place SUM all-reduce (never ReduceOp.AVG: gloo mishandles it). Returns a Work if async.
    Eager only (in place): inside a traced model use the f/g operators below."""
    stats.add(kind, tensor)
    if not _runs(group):
        return None
    return dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=async_op)


def all_reduce_max(x, group, kind):
    """Element-wise max over the group, of a tensor outside autograd (e.g. softmax row maxima)."""
    stats.add(kind, x)
    return _all_reduce_value(x, group, "max")


def broadcast(tensor, src_group_rank, group, kind="broadcast"):
    """Broadcast from the rank whose index *inside* `group` is src_group_rank."""
    stats.add(kind, tensor)
    if not _runs(group):
        return
    dist.broadcast(tensor, src=dist.get_global_rank(group, src_group_rank), group=group)


def all_gather(tensor, group, kind="all_gather"):
    """Returns the list of every rank's `tensor` (same shape on all ranks), in group-rank order."""
    stats.add(kind, tensor)
    n = group_size(group)
    if n == 1:
        return [tensor]
    if _skip_collectives:
        return [tensor.clone() for _ in range(n)]
    if torch.compiler.is_compiling():
        return list(torch.ops.reduced_sync.all_gather(tensor.contiguous(), n, group.group_name).chunk(n))
    out = [torch.empty_like(tensor) for _ in range(n)]
    dist.all_gather(out, tensor.contiguous(), group=group)
    return out


def barrier(group=None):
    """Wait for every rank of `group`; None means the whole world (as torch.distributed's default)."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if group is None:
        group = dist.group.WORLD
    if dist.get_world_size(group) > 1:
        bound = getattr(group, "bound_device_id", None)  # init_mesh binds NCCL groups to this rank's GPU
        if bound is None and dist.get_backend(group) == "nccl":
            # else torch guesses the GPU from the global rank, with a warning that it can hang
            dist.barrier(group=group, device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier(group=group)


class _CopyToTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, kind, reduce_dtype):
        ctx.group, ctx.kind, ctx.reduce_dtype = group, kind, reduce_dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        sent = _to_reduce_dtype(grad, ctx.reduce_dtype, ctx.group)
        stats.add(ctx.kind, sent)
        # autograd may hand the same grad tensor to other branches: reduce a copy (traced, the
        # reduction returns a new tensor anyway)
        if sent is grad and not torch.compiler.is_compiling():
            sent = grad.clone()
        return _all_reduce_value(sent, ctx.group).to(grad.dtype), None, None, None


def _to_reduce_dtype(grad, reduce_dtype, group):
    """The gradient f sends: cast to reduce_dtype where the group has several ranks (one rank sums
    nothing, and keeps its gradient's precision). A region's entry f(x) takes the fp32 residual
    stream, so its gradient is fp32; under autocast it travels in bf16, as a Megatron sublayer's
    f(LN(x)) does, and comes back fp32 (half the bytes; issue 49's profile of spd's training)."""
    if reduce_dtype is None or group_size(group) == 1:
        return grad
    return grad.to(reduce_dtype)


class _ReduceFromTPRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, kind):
        stats.add(kind, x)
        if not torch.compiler.is_compiling():
            ctx.mark_dirty(x)  # eager: x is a fresh partial sum made by the caller, reduced in place
        return _all_reduce_value(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class _ReduceFromTPRegionAsync(torch.autograd.Function):
    """g launched asynchronously (eager): the result may only be read after wait_reduce(handle)."""

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


class _StartReduceTraced(torch.autograd.Function):
    """Traced g's launch: the ticket of all_reduce_start. x's gradient flows through the wait (g's is the identity)."""

    @staticmethod
    def forward(ctx, x, group):
        return _start_all_reduce(x, group)[0]

    @staticmethod
    def backward(ctx, grad):
        return None, None


class _WaitReduceTraced(torch.autograd.Function):
    """Traced g's wait: the sum, a new tensor, scheduled after the tensor `after` (None: anywhere after the start)."""

    @staticmethod
    def forward(ctx, x, ticket, after):
        return _wait_all_reduce((ticket, x), None, () if after is None else (after,))

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def reduce_from_tp_region_async(x, group):
    """g, launched without waiting: returns (x, handle); read x only through wait_reduce(x, handle).
    Lets compute that does not need the sum run while it travels (Ladder Residual). Traced, it is the
    two custom ops all_reduce_start and all_reduce_wait (module docstring). Inductor orders kernels by
    data only, so the ladder pins the order with wait_reduce's `after`: the previous sublayer's wait
    takes this launch's ticket, so the launch comes first and the next sublayer, which reads the
    previous sum, computes while it travels. Before, a traced g was one blocking op, and the compiled
    ladder overlapped nothing (bench/results/ladder_compiled_train/)."""
    if torch.compiler.is_compiling():
        if not _runs(group):
            return x, None
        return x, {"ticket": _StartReduceTraced.apply(x, group)}
    handle = {}
    return _ReduceFromTPRegionAsync.apply(x, group, handle), handle


def wait_reduce(x, handle, after=None):
    """The sum that reduce_from_tp_region_async launched. after: the handle of an all-reduce launched since; traced,
    the wait takes its ticket, so that one is launched first and the compute that follows overlaps both (eager runs
    in program order and waits where it is called)."""
    if handle is None:
        return x
    if "ticket" in handle:
        return _WaitReduceTraced.apply(x, handle["ticket"], None if after is None else after["ticket"])
    return _WaitReduce.apply(x, handle)


def compute_dtype(x):
    """The dtype autocast gives x in the next matmul (x's own without autocast)."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def copy_to_tp_region(x, group, kind="tp_bwd", reduce_dtype=None):
    """f: identity forward, all-reduce of the gradient backward (counted as `kind`), in reduce_dtype
    if given (then cast back to the gradient's dtype)."""
    if not torch.is_grad_enabled() or not x.requires_grad:
        return x
    return _CopyToTPRegion.apply(x, group, kind, reduce_dtype)


def reduce_from_tp_region(x, group, kind="tp_fwd"):
    """g: all-reduce forward, identity backward. Eager, `x` must be a fresh contiguous tensor: it is
    reduced in place. Use the returned tensor."""
    if not torch.is_grad_enabled() or not x.requires_grad:
        stats.add(kind, x)
        return _all_reduce_value(x, group)
    return _ReduceFromTPRegion.apply(x, group, kind)


# ---------------------------------------------------------------- token chunks (sequence parallelism)
# The raw collectives of parallel/sequence.py, which holds their autograd and counts them: rows [N, C] of the
# flattened tokens, all-gathered or reduce-scattered along dim 0. Traced, custom ops that return new tensors, as the
# all-reduce above. The ladder's reduce-scatter is launched without waiting: reduce_scatter_start(x) returns a
# ticket, reduce_scatter_wait(ticket, x, after) waits and returns the chunk (paired by the ticket, as
# all_reduce_start; the wait takes x, so the buffer the collective reads is alive until then).


@torch.library.custom_op("reduced_sync::reduce_scatter", mutates_args=())
def _traced_reduce_scatter(x: torch.Tensor, n: int, group_name: str) -> torch.Tensor:
    out = x.new_empty((x.shape[0] // n, *x.shape[1:]))
    dist.reduce_scatter_tensor(out, x.contiguous(), group=_resolve_process_group(group_name))
    return out


@_traced_reduce_scatter.register_fake
def _(x, n, group_name):
    return x.new_empty((x.shape[0] // n, *x.shape[1:]))


@torch.library.custom_op("reduced_sync::reduce_scatter_start", mutates_args=())
def _traced_reduce_scatter_start(x: torch.Tensor, n: int, group_name: str) -> torch.Tensor:
    out, work = _start_reduce_scatter(x, n, _resolve_process_group(group_name))
    ticket = _ticket(x)
    _launched("reduce_scatter", x, ticket, work, out, check_input=True)
    return ticket


@_traced_reduce_scatter_start.register_fake
def _(x, n, group_name):
    return _ticket(x)


@torch.library.custom_op("reduced_sync::reduce_scatter_wait", mutates_args=())
def _traced_reduce_scatter_wait(ticket: torch.Tensor, x: torch.Tensor, n: int,
                                after: list[torch.Tensor]) -> torch.Tensor:
    return _landed("reduce_scatter", ticket, x)


@_traced_reduce_scatter_wait.register_fake
def _(ticket, x, n, after):
    return x.new_empty((x.shape[0] // n, *x.shape[1:]))


def _start_reduce_scatter(x, n, group):
    out = x.new_empty((x.shape[0] // n, *x.shape[1:]))
    return out, dist.reduce_scatter_tensor(out, x.contiguous(), group=group, async_op=True)


def all_gather_rows(x, group):
    """[N, C] chunks -> [tp*N, C] in rank order (skipped: tp copies of this rank's chunk). Not counted: the caller
    counts (parallel/sequence.py)."""
    n = group_size(group)
    if n == 1:
        return x
    if not _runs(group):
        return x.repeat(n, 1)
    if torch.compiler.is_compiling():
        return torch.ops.reduced_sync.all_gather(x.contiguous(), n, group.group_name)
    out = x.new_empty((n * x.shape[0], x.shape[1]))
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def reduce_scatter_rows(x, group):
    """[tp*N, C] -> this rank's chunk [N, C] of the sum over the group (skipped: the chunk of this rank's x). Not
    counted: the caller counts."""
    n = group_size(group)
    if n == 1:
        return x
    if not _runs(group):
        return x.chunk(n)[group_rank(group)].clone()
    if torch.compiler.is_compiling():
        return torch.ops.reduced_sync.reduce_scatter(x.contiguous(), n, group.group_name)
    out = x.new_empty((x.shape[0] // n, x.shape[1]))
    dist.reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


def reduce_scatter_rows_start(x, group):
    """Eager: (the chunk's buffer, the Work that fills it) of reduce_scatter_rows launched without waiting (a group
    that communicates). Traced: see reduce_scatter_start above."""
    return _start_reduce_scatter(x, group_size(group), group)


# ---------------------------------------------------------------- overlapped token chunks (parallel/overlap.py)
# tp_comm_overlap='chunked' launches several all-gathers / reduce-scatters of row pieces and waits for each where
# its GEMM needs it: start_rows / wait_rows. Traced, the reduce-scatter is the start/wait pair above and the
# all-gather the pair below (paired by the ticket, as the others; the start gathers its own copy of the piece).
# tp_comm_overlap='async_tp' uses torch's functional collectives instead, the form inductor's micro-pipeline TP
# pass matches (gather_rows_functional, scatter_rows_functional); not the form the rest of the module traces
# (the module docstring's fusion fault, seen on CPU only), so only that opt-in, CUDA-only mode uses them.


@torch.library.custom_op("reduced_sync::all_gather_start", mutates_args=())
def _traced_all_gather_start(x: torch.Tensor, n: int, group_name: str) -> torch.Tensor:
    group = _resolve_process_group(group_name)
    out, ticket = x.new_empty((n * x.shape[0], *x.shape[1:])), _ticket(x)
    mine = out[dist.get_rank(group) * x.shape[0]:][:x.shape[0]]
    mine.copy_(x)  # the collective reads its own copy of x (above): gathered in place, as NCCL allows
    _launched("all_gather", x, ticket, dist.all_gather_into_tensor(out, mine, group=group, async_op=True), out)
    return ticket


@_traced_all_gather_start.register_fake
def _(x, n, group_name):
    return _ticket(x)


@torch.library.custom_op("reduced_sync::all_gather_wait", mutates_args=())
def _traced_all_gather_wait(ticket: torch.Tensor, shape: list[int], after: list[torch.Tensor]) -> torch.Tensor:
    return _landed("all_gather", ticket)


@_traced_all_gather_wait.register_fake
def _(ticket, shape, after):
    return ticket.new_empty(shape)


def start_rows(x, group, op):
    """Launch all_gather_rows (op 'gather') or reduce_scatter_rows (op 'scatter') of x [M, C] without waiting; the
    handle is for wait_rows. Where nothing travels (one rank, skipped) the handle holds the result. Not counted."""
    n = group_size(group)
    if not _runs(group):
        return op, None, (all_gather_rows if op == "gather" else reduce_scatter_rows)(x, group), n
    x = x.contiguous()
    if torch.compiler.is_compiling():
        start = torch.ops.reduced_sync.all_gather_start if op == "gather" else torch.ops.reduced_sync.reduce_scatter_start
        return op, start(x, n, group.group_name), x, n
    if op == "gather":
        out = x.new_empty((n * x.shape[0], *x.shape[1:]))
        return op, dist.all_gather_into_tensor(out, x, group=group, async_op=True), out, n
    out, work = _start_reduce_scatter(x, n, group)
    return op, work, out, n


def wait_rows(handle, after=()):
    """The result of start_rows' collective; traced, the wait is scheduled after the tensors of `after`."""
    op, pending, x, n = handle
    if pending is None:
        return x
    if torch.compiler.is_compiling():
        after = [t for t in after if t is not None]
        if op == "gather":  # the start gathers its own copy of x: the wait takes the shape, not x
            return torch.ops.reduced_sync.all_gather_wait(pending, [n * x.shape[0], *x.shape[1:]], after)
        return torch.ops.reduced_sync.reduce_scatter_wait(pending, x, n, after)
    pending.wait()
    return x


def functional_collective(name, module=None):
    """torch's functional all_gather or reduce_scatter of one tensor: `<name>_single` where torch has it (2.13
    deprecates the older name), else `<name>_tensor`, the same op under its older name. (With torch 2.11 on 4x
    H200, async_tp's compile failed with dynamo's AttributeError where the traced code called `all_gather_single`;
    with this choice it compiled there: bench/results/tp4_comm_h200/README.md, invocations 4-5.)"""
    new = getattr(module or _funcol, f"{name}_single", None)
    return new if new is not None else getattr(module or _funcol, f"{name}_tensor")


_functional_all_gather = functional_collective("all_gather")  # resolved once, outside any traced code
_functional_reduce_scatter = functional_collective("reduce_scatter")


def gather_rows_functional(x, group):
    """all_gather_rows as torch's functional collective: all_gather_into_tensor, then wait_tensor where it is read."""
    if not _runs(group):
        return all_gather_rows(x, group)
    return _functional_all_gather(x.contiguous(), 0, group)


def scatter_rows_functional(x, group):
    """reduce_scatter_rows as torch's functional collective (sum, along rows)."""
    if not _runs(group):
        return reduce_scatter_rows(x, group)
    return _functional_reduce_scatter(x.contiguous(), "sum", 0, group)
