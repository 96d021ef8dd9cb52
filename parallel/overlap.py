"""Overlapped sequence-parallel communication (GPT's tp_comm_overlap; Megatron's --tp-comm-overlap).

Under sequence parallelism (parallel/sequence.py) rank r holds rows X_r [n, C] of the flattened tokens [N, C],
n = N/tp. A Megatron sublayer enters its column-parallel GEMM through an all-gather and leaves its row-parallel
GEMM through a reduce-scatter; here each collective is fused with its GEMM so that they overlap:

    gather_linear(X_r, W, b)   Y = AG(X) W^T + b                   [N, F]   (the column GEMM, F this rank's rows)
    linear_scatter(Z, W, b)    O = rows r of (sum over ranks of Z W^T) + b   [n, C]   (the row GEMM; b replicated)

'chunked' (ours). Every rank splits its rows the same way into c pieces, X_r = [X_r^0; ...; X_r^{c-1}] (m_i rows).
All-gathering piece i gives G^i = [X_0^i; ...; X_{tp-1}^i], and G^i W^T + b are exactly the rows of Y that come
from the i-th piece of each rank: Y is the c products interleaved back, viewed [tp, m_i, F] and concatenated along
the piece dim. All c all-gathers are launched first and GEMM i waits only for gather i, so gather i+1 travels while
GEMM i computes. For the row GEMM, Z^i = [Z_0^i; ...; Z_{tp-1}^i] (the i-th piece of every rank's row block of Z)
and RS(Z^i W^T) is the i-th piece of this rank's rows of the sum: RS i is launched after GEMM i and travels while
GEMM i+1 computes. Backward mirrors both: for gather_linear, dG^i = dY^i W is reduce-scattered (dX's i-th piece)
while dW += dY^i^T G^i computes; for linear_scatter, the pieces of dO are all-gathered (all launched first) and
dZ^i = AG(dO^i) W, dW += AG(dO^i)^T Z^i wait only for their own. The same function: every row of Y and O is the
same dot products, summed over the same ranks; dW and db are summed over pieces, and b is added after the sum rather
than inside rank 0's GEMM, in another order (float rounding). Traced, each wait takes a GEMM's output as `after`
(all-gather i the GEMM of piece i-1, reduce-scatter i that of piece i+1), so inductor runs that GEMM first
(tests/test_tp_comm_overlap.py reads the order in inductor's code). With c = 1 nothing is split, and what remains
is Megatron's own sequence-parallel overlap: the backward launches dX's reduce-scatter, computes dW while it
travels, then waits (LinearWithGradAccumulationAndAsyncCommunication.backward in
https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/tensor_parallel/layers.py); the forward's collectives
are waited for at once, as theirs.

'async_tp' (torch's async TP). One piece, written as the pattern inductor's micro-pipeline TP pass
(torch/_inductor/fx_passes/micro_pipeline_tp.py, torch._inductor.config._micro_pipeline_tp) replaces with its
symmetric-memory kernels: wait_tensor(all_gather_into_tensor(X_r)) read by aten.mm (fused_all_gather_matmul), and
reduce_scatter_tensor whose input is an aten.mm's output and nothing else (fused_matmul_reduce_scatter). So both
GEMMs are bias-free mm's and the biases are added outside them. The backward is written the same way (dX =
RS(dY W), dZ = AG(dO) W), so the pass can fuse it too. The collectives are torch's functional ones
(parallel/comm.py, gather_rows_functional); it needs CUDA, NCCL and symmetric memory on the TP group
(training/config.py refuses it elsewhere). On CPU it runs, unfused, as a test of the function and of the graph.

Both modes add the row GEMM's bias b after the reduce-scatter, on every rank's rows; its gradient is the column sum
of the all-gathered output gradient (every token's, the same on every rank), which the backward gathers anyway: no
gradient all-reduce, as Block.rank0_bias gives without overlap. Counted as parallel/sequence.py counts: one
all-gather or reduce-scatter per call and direction, whatever c is.
"""
import torch
from torch.nn import functional as F

from parallel import comm


def _pieces(rows, chunks):
    """Row counts of the c pieces of `rows` rows (c = min(chunks, rows); tensor_split's sizes)."""
    c = max(1, min(chunks, rows))
    return [rows // c + (i < rows % c) for i in range(c)]


def _interleave(parts, tp):
    """[tp*m_i, F] products of every piece -> [tp*n, F] in rank-major row order."""
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p.view(tp, -1, p.shape[-1]) for p in parts], 1).view(-1, parts[0].shape[-1])


def _by_piece(z, tp, sizes):
    """[tp*n, F] in rank-major order -> per piece i, [tp*m_i, F]: the i-th piece of every rank's rows."""
    if len(sizes) == 1:
        return [z]
    return [p.reshape(-1, z.shape[-1]) for p in z.view(tp, -1, z.shape[-1]).split(sizes, 1)]


class _GatherLinearChunked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, group, chunks, kinds):
        dtype = comm.compute_dtype(x)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        with torch.autocast(x.device.type, enabled=False):
            x, w = x.to(dtype), weight.to(dtype)
            b = None if bias is None else bias.to(dtype)
            sizes = _pieces(x.shape[0], chunks)
            handles = [comm.start_rows(p, group, "gather") for p in x.split(sizes)]
            gathered, parts = [], []
            for h in handles:
                gathered.append(comm.wait_rows(h, parts[-1:]))
                parts.append(F.linear(gathered[-1], w, b))
        comm.stats.add(kinds[0], x)
        ctx.save_for_backward(w, *gathered)
        ctx.group, ctx.kind, ctx.sizes, ctx.tp = group, kinds[1], sizes, comm.group_size(group)
        return _interleave(parts, ctx.tp)

    @staticmethod
    def backward(ctx, grad):
        w, *gathered = ctx.saved_tensors
        need = ctx.needs_input_grad
        handles, dw, db = [], None, None
        for dy, g in zip(_by_piece(grad, ctx.tp, ctx.sizes), gathered):
            dy = dy.to(w.dtype)
            if need[0]:  # dgrad, then its reduce-scatter
                handles.append(comm.start_rows(dy.mm(w), ctx.group, "scatter"))
            if need[1]:  # this piece's wgrad while its reduce-scatter travels
                dw = dy.t().mm(g) if dw is None else dw + dy.t().mm(g)
            if need[2]:
                db = dy.sum(0) if db is None else db + dy.sum(0)
        comm.stats.add(ctx.kind, grad)
        dx = torch.cat([comm.wait_rows(h, (dw, db)) for h in handles]) if need[0] else None
        return (*_cast((dx, dw, db), ctx.dtypes), None, None, None)


class _LinearScatterChunked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, weight, bias, group, chunks, kinds):
        dtype = comm.compute_dtype(z)
        ctx.dtypes = (z.dtype, weight.dtype, None if bias is None else bias.dtype)
        tp = comm.group_size(group)
        with torch.autocast(z.device.type, enabled=False):
            z, w = z.to(dtype), weight.to(dtype)
            sizes = _pieces(z.shape[0] // tp, chunks)
            pieces, handles, outs = _by_piece(z, tp, sizes), [], []
            for p in pieces:
                handles.append(comm.start_rows(p.mm(w.t()), group, "scatter"))  # RS i travels during GEMM i+1
            for i, h in enumerate(handles):
                outs.append(comm.wait_rows(h, [] if i + 1 == len(handles) else [handles[i + 1][2]]))
            out = torch.cat(outs)
            if bias is not None:
                out = out + bias.to(dtype)
        comm.stats.add(kinds[0], z)
        ctx.save_for_backward(w, *pieces)
        ctx.group, ctx.kind, ctx.sizes, ctx.tp = group, kinds[1], sizes, tp
        return out

    @staticmethod
    def backward(ctx, grad):
        w, *pieces = ctx.saved_tensors
        need = ctx.needs_input_grad
        grad = grad.to(w.dtype)
        handles = [comm.start_rows(g, ctx.group, "gather") for g in grad.split(ctx.sizes)]  # all launched first
        comm.stats.add(ctx.kind, grad)
        dz, dw, db = [], None, None
        for h, z in zip(handles, pieces):
            do = comm.wait_rows(h, dz[-1:])
            dz.append(do.mm(w))
            if need[1]:
                dw = do.t().mm(z) if dw is None else dw + do.t().mm(z)
            if need[2]:  # every token's gradient: the bias was added on every rank's rows
                db = do.sum(0) if db is None else db + do.sum(0)
        dz = _interleave(dz, ctx.tp) if need[0] else None
        return (*_cast((dz, dw, db), ctx.dtypes), None, None, None)


class _GatherMM(torch.autograd.Function):
    """async_tp's gather_linear: mm(AG(x), W^T) + b, backward RS(mm(dY, W)), mm(dY^T, AG(x)) and sum(dY)."""

    @staticmethod
    def forward(ctx, x, weight, bias, group, kinds):
        dtype = comm.compute_dtype(x)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        with torch.autocast(x.device.type, enabled=False):
            g, w = comm.gather_rows_functional(x.to(dtype), group), weight.to(dtype)
            y = torch.mm(g, w.t())  # a bare mm: the pass's pattern
            if bias is not None:
                y = y + bias.to(dtype)
        comm.stats.add(kinds[0], x)
        ctx.save_for_backward(g, w)
        ctx.group, ctx.kind = group, kinds[1]
        return y

    @staticmethod
    def backward(ctx, grad):
        g, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        grad = grad.to(w.dtype)
        comm.stats.add(ctx.kind, grad)
        dx = comm.scatter_rows_functional(torch.mm(grad, w), ctx.group) if need[0] else None
        dw = torch.mm(grad.t(), g) if need[1] else None
        db = grad.sum(0) if need[2] else None
        return (*_cast((dx, dw, db), ctx.dtypes), None, None)


class _MMScatter(torch.autograd.Function):
    """async_tp's linear_scatter: RS(mm(Z, W^T)) + b, backward mm(AG(dO), W), mm(AG(dO)^T, Z) and sum(AG(dO))."""

    @staticmethod
    def forward(ctx, z, weight, bias, group, kinds):
        dtype = comm.compute_dtype(z)
        ctx.dtypes = (z.dtype, weight.dtype, None if bias is None else bias.dtype)
        with torch.autocast(z.device.type, enabled=False):
            z, w = z.to(dtype), weight.to(dtype)
            out = comm.scatter_rows_functional(torch.mm(z, w.t()), group)  # the mm's one reader: the pass's pattern
            if bias is not None:
                out = out + bias.to(dtype)
        comm.stats.add(kinds[0], z)
        ctx.save_for_backward(z, w)
        ctx.group, ctx.kind = group, kinds[1]
        return out

    @staticmethod
    def backward(ctx, grad):
        z, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        comm.stats.add(ctx.kind, grad)
        do = comm.gather_rows_functional(grad.to(w.dtype), ctx.group)
        dz = torch.mm(do, w) if need[0] else None
        dw = torch.mm(do.t(), z) if need[1] else None
        db = do.sum(0) if need[2] else None  # every token's gradient: the bias was added on every rank's rows
        return (*_cast((dz, dw, db), ctx.dtypes), None, None)


def _cast(grads, dtypes):
    return tuple(None if g is None else g.to(d) for g, d in zip(grads, dtypes))


def gather_linear(x, weight, bias, group, overlap, kinds=("tp_fwd_ag", "tp_bwd")):
    """AG(x) W^T + b: x [n, C] this rank's token rows (any leading dims, flattened), weight [F, C] -> [tp*n, F].
    overlap: (mode, chunks) of GPT.set_tp_comm_overlap. kinds: the counted (forward, backward) kinds."""
    x = x.reshape(-1, x.shape[-1])
    mode, chunks = overlap
    if mode == "chunked":
        return _GatherLinearChunked.apply(x, weight, bias, group, chunks, kinds)
    return _GatherMM.apply(x, weight, bias, group, kinds)


def linear_scatter(z, weight, bias, group, overlap, kinds=("tp_fwd", "tp_bwd_ag")):
    """This rank's rows of sum_ranks(z W^T), plus b: z [tp*n, F] (any leading dims), weight [C, F] -> [n, C]."""
    z = z.reshape(-1, z.shape[-1])
    mode, chunks = overlap
    if mode == "chunked":
        return _LinearScatterChunked.apply(z, weight, bias, group, chunks, kinds)
    return _MMScatter.apply(z, weight, bias, group, kinds)


def enable_async_tp(group):
    """What 'async_tp' needs before the model is compiled: inductor's micro-pipeline TP pass on, and symmetric memory
    on the TP group (the fused kernels exchange through it). CUDA and NCCL only (training/config.py checks)."""
    import os

    import torch._inductor.config as inductor_config
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group
    # unless the environment says otherwise: NVLink multicast is off on the lent multi-GPU machines
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    inductor_config._micro_pipeline_tp = True
    enable_symm_mem_for_group(group.group_name)
