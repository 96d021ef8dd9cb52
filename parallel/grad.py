"""Gradient-norm clipping for tensor-parallel models, without host-device syncs.

The global gradient norm of the full (unsharded) model is

    ||g||^2 = sum over sharded params (p.tensor_parallel) of ||g_shard||^2, summed over the TP group
            + sum over replicated params of ||g||^2, counted ONCE

Replicated parameters (embeddings, LayerNorms, row-parallel biases) hold the same gradient on
every TP rank, so adding them before the TP all-reduce would count them tp times (the bug of
ROCm/TransformerEngine #715). Across data-parallel replicas gradients are already averaged
and equal, so no DP reduction is needed.

Everything stays on the device: the clip coefficient is a tensor and the grads are scaled with
torch._foreach_mul_, so clipping never waits for the GPU (torch.nn.utils.clip_grad_norm_ with
error_if_nonfinite would).
"""
import torch

from parallel import comm


def grad_norm_squared_parts(parameters):
    """(sum of ||g||^2 over sharded params, same over replicated params), as float32 tensors (or None)."""
    sharded, replicated = [], []
    for p in parameters:
        if p.grad is None:
            continue
        (sharded if getattr(p, "tensor_parallel", False) else replicated).append(p.grad)

    def sum_sq(grads):
        if not grads:
            return None
        norms = torch._foreach_norm(grads)  # one fused kernel per dtype/device group
        return torch.stack([n.float() for n in norms]).square().sum()

    return sum_sq(sharded), sum_sq(replicated)


def clip_grad_norm_(parameters, max_norm, tp_group=None, groups=None):
    """Clip the global grad norm of a TP-sharded model to max_norm in place; return the norm (a tensor).

    Same contract as torch.nn.utils.clip_grad_norm_ (L2 norm, coefficient max_norm / (norm + 1e-6)
    clamped to 1), over the full model. `max_norm=None` or <= 0 only computes the norm.
    Every rank of tp_group must call it (one all-reduce, counted as 'tp_grad_norm').

    groups: lists of parameters (each a part of `parameters`) whose norms, before clipping, to return too, as
    (norm, tensor of the groups' norms): their sharded parts join the same all-reduce.
    """
    parameters = [p for p in parameters if p.grad is not None]
    if not parameters:
        return torch.tensor(0.0) if groups is None else (torch.tensor(0.0), torch.zeros(len(groups)))
    device = parameters[0].grad.device
    zero = torch.zeros((), device=device)
    parts = [grad_norm_squared_parts(parameters)]
    parts += [grad_norm_squared_parts([p for p in group if p.grad is not None]) for group in groups or ()]
    # Every TP rank must join the all-reduce, even one that (oddly) has no sharded grads.
    sharded_sq = torch.stack([zero if s is None else s for s, _ in parts])
    comm.all_reduce(sharded_sq, tp_group, kind="tp_grad_norm")
    squares = sharded_sq + torch.stack([zero if r is None else r for _, r in parts])
    total_norm = squares[0].sqrt()
    if max_norm is not None and max_norm > 0:
        clip_coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_([p.grad for p in parameters], clip_coef.to(device))
    return total_norm if groups is None else (total_norm, squares[1:].sqrt())
