"""Asynchronous input-gradient all-reduce (Megatron's async grad all-reduce, off by default; GPT's
async_grad_allreduce option), over parallel/comm.py's launch and wait of an all-reduce, where it is counted.

Where f is directly followed by a column-parallel GEMM z = x W^T + b, copy_to_tp_region_linear(x, W, b, group) is f and that GEMM in one autograd node, whose backward

    dx = dz W              (dgrad GEMM)
    start all_reduce(dx)   (async)
    dW = dz^T x, db = sum dz   (wgrad GEMM, overlaps the all-reduce)
    wait; return dx, dW, db

so the all-reduce travels while the weight gradient is computed, and is waited for where the
summed gradient is consumed: it is this node's output, read by the next backward node. A region's
entry xin = f(x) feeding LN then the column GEMM is the same node with the LayerNorm inside
(copy_to_tp_region_ln_linear): the summed gradient is the region's dx, complete only after the
first sublayer's LayerNorm backward, so that sublayer's wgrad is deferred past it. Traced, the launch
and the wait are two opaque custom ops (all_reduce_start, all_reduce_wait): the wait's output is a
new tensor and every reader of the sum reads it, so no reader can be scheduled before the wait
(comm.py's docstring: the fusion fault cannot recur); the start reduces a copy of its input, as the synchronous op.
The wait also takes the weight gradients as inputs, so inductor cannot run it before them; nothing
forces the start before the wgrad GEMM, and inductor's peak-memory reordering (torch 2.13, CPU) did
hoist the wgrad GEMM above the dgrad on one rank, which loses the overlap (with it off, every fused
node came out dgrad, start, wgrad, wait: tests/test_async_grad.py checks that order).
Counted as the plain f: one `kind` per backward, with the same bytes.
"""
import torch
from torch.nn import functional as F

from parallel import comm


class _CopyToTPRegionLinear(torch.autograd.Function):
    """f then the column-parallel GEMM, the all-reduce of dx overlapping dW (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias, group, kind):
        dtype = comm.compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            x, w = x.to(dtype), weight.to(dtype)
            z = F.linear(x, w, None if bias is None else bias.to(dtype))
        ctx.save_for_backward(x, w)
        ctx.group, ctx.kind, ctx.weight_dtype = group, kind, weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return z

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = grad.matmul(w)  # dgrad GEMM first
        comm.stats.add(ctx.kind, gx)
        handle = comm._start_all_reduce(gx, ctx.group)
        g2 = grad.reshape(-1, grad.shape[-1])
        gw = g2.t().mm(x.reshape(-1, x.shape[-1])).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        gb = g2.sum(0).to(ctx.bias_dtype) if ctx.needs_input_grad[2] else None
        return comm._wait_all_reduce(handle, ctx.group, (gw, gb)), gw, gb, None, None


class _CopyToTPRegionLNLinear(torch.autograd.Function):
    """A region's entry: (xin, z) = (f(x), LN(f(x)) W^T + b). The all-reduce of dx (the region's whole
    input gradient: dxin from the region's later sublayers plus this LayerNorm's) overlaps dW."""

    @staticmethod
    def forward(ctx, x, ln_weight, ln_bias, weight, bias, group, kind):
        dtype = comm.compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            h, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), ln_weight, ln_bias, 1e-5)
            h, w = h.to(dtype), weight.to(dtype)
            z = F.linear(h, w, None if bias is None else bias.to(dtype))
        ctx.save_for_backward(x, ln_weight, ln_bias, mean, rstd, h, w)
        ctx.group, ctx.kind, ctx.weight_dtype = group, kind, weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return x.view_as(x), z

    @staticmethod
    def backward(ctx, grad_xin, grad):
        x, ln_weight, ln_bias, mean, rstd, h, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        gh = grad.matmul(w).to(x.dtype)  # dgrad GEMM, then the LayerNorm backward
        gx, gln_w, gln_b = torch.ops.aten.native_layer_norm_backward(
            gh, x, (x.shape[-1],), mean, rstd, ln_weight, ln_bias, [True, need[1], need[2]])
        if grad_xin is not None:
            gx = grad_xin + gx
        sent = comm._to_reduce_dtype(gx, h.dtype, ctx.group)  # as the plain region entry's f
        comm.stats.add(ctx.kind, sent)
        handle = comm._start_all_reduce(sent, ctx.group)
        g2 = grad.reshape(-1, grad.shape[-1])
        gw = g2.t().mm(h.reshape(-1, h.shape[-1])).to(ctx.weight_dtype) if need[3] else None
        gb = g2.sum(0).to(ctx.bias_dtype) if need[4] else None
        return comm._wait_all_reduce(handle, ctx.group, (gw, gb)).to(gx.dtype), gln_w, gln_b, gw, gb, None, None


def copy_to_tp_region_linear(x, weight, bias, group, kind="tp_bwd"):
    """F.linear(f(x), weight, bias) (autocast as F.linear's), with f's backward all-reduce launched
    before the weight-gradient GEMM and waited for after it. x [..., C], weight [F, C]."""
    if not torch.is_grad_enabled() or not x.requires_grad:
        return F.linear(x, weight, bias)
    return _CopyToTPRegionLinear.apply(x, weight, bias, group, kind)


def copy_to_tp_region_ln_linear(x, ln_weight, ln_bias, weight, bias, group, kind="tp_bwd"):
    """(xin, z) = (f(x), F.linear(layer_norm(xin, ln_weight, ln_bias), weight, bias)): a region's
    entry and its first column-parallel GEMM, f's all-reduce overlapping that GEMM's weight gradient."""
    if not torch.is_grad_enabled() or not x.requires_grad:
        xin = comm.copy_to_tp_region(x, group, kind)
        return xin, F.linear(F.layer_norm(xin, (xin.shape[-1],), ln_weight, ln_bias, 1e-5), weight, bias)
    return _CopyToTPRegionLNLinear.apply(x, ln_weight, ln_bias, weight, bias, group, kind)
