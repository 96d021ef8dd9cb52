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
    # each gradient's squared norm once, the sharded parameters first (one fused norm kernel per dtype/device group,
    # one stack); the model's squares are two slices' sums, a group's (on the steps that ask) a sum of its entries
    ordered = sorted(parameters, key=lambda p: not getattr(p, "tensor_parallel", False))
    n_sharded = sum(getattr(p, "tensor_parallel", False) for p in ordered)
    squares = torch.stack([n.float() for n in torch._foreach_norm([p.grad for p in ordered])]).square()
    position = {id(p): i for i, p in enumerate(ordered)} if groups else {}  # only the steps that log the groups

    def group_sum(group, sharded):
        entries = (position[id(p)] for p in group if id(p) in position)
        picked = [squares[i] for i in entries if (i < n_sharded) == sharded]
        return torch.stack(picked).sum() if picked else zero
    # Every TP rank must join the all-reduce, even one that (oddly) has no sharded grads.
    sharded_sq = torch.stack([squares[:n_sharded].sum()] + [group_sum(g, True) for g in groups or ()])
    comm.all_reduce(sharded_sq, tp_group, kind="tp_grad_norm")
    norms = (sharded_sq + torch.stack([squares[n_sharded:].sum()] + [group_sum(g, False) for g in groups or ()])).sqrt()
    total_norm = norms[0]
    if max_norm is not None and max_norm > 0:
        clip_coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_([p.grad for p in parameters], clip_coef.to(device))
    return total_norm if groups is None else (total_norm, norms[1:])
