"""Full (unsharded, nanoGPT) tensors <-> this rank's shards, the state_dict adapter, and nanoGPT's
initialization drawn for the full model (so the weights do not depend on tp).

Each tensor-parallel parameter says how it is split (its `shard`, set by the layer that owns it,
model/tp_layers.py); n = n_tracks, and TP rank r holds tracks [r*k, (r+1)*k), k = n / tp:

    rows   output rows split by track: full [n*F, ...] -> rows of tracks r*k .. r*k+k-1
    qkv    c_attn: full rows [q | k | v], each split by track; a rank keeps [q | k | v] of its tracks
    cols   input columns split by track: full [C, n*F] -> its tracks' columns
    vocab  rows split by vocabulary id over the TP ranks, not by track: [r*V/tp, (r+1)*V/tp)
    None   replicated: every rank holds the full tensor

Checkpoints and state_dict() hold full tensors under nanoGPT's names, so they load at any tp;
gathering the shards is a collective over the TP group (counted as `checkpoint`).
"""
import math
from collections import OrderedDict

import torch

from parallel import comm


def shard_kinds(model):
    """{parameter name: its shard kind, or None if replicated}."""
    return {name: getattr(p, "shard", None) for name, p in model.named_parameters()}


def full_shape(model, name, local_shape):
    """Shape of the full tensor whose shard on this rank has `local_shape`."""
    kind = model.shard_kind[name]
    if kind == "vocab":
        return (model.config.vocab_size, *local_shape[1:])
    if kind == "cols":
        return (local_shape[0], local_shape[1] * model.tp)
    if kind in ("qkv", "rows"):
        return (local_shape[0] * model.tp, *local_shape[1:])
    return tuple(local_shape)


def local_tensor(model, name, full):
    """This rank's slice of a full tensor shaped like parameter `name` (weights, optimizer state)."""
    kind, n = model.shard_kind[name], model.config.n_tracks
    t0, t1 = model.tp_rank * model.k, (model.tp_rank + 1) * model.k
    if kind is None:
        return full
    if kind == "vocab":
        wte = model.transformer.wte
        return full[wte.v0:wte.v1].contiguous()
    if kind == "qkv":
        return full.view(3, n, -1, *full.shape[1:])[:, t0:t1].reshape(-1, *full.shape[1:]).contiguous()
    if kind == "rows":
        return full.view(n, -1, *full.shape[1:])[t0:t1].reshape(-1, *full.shape[1:]).contiguous()
    return full.view(full.shape[0], n, -1)[:, t0:t1].reshape(full.shape[0], -1).contiguous()


def full_tensor(model, name, local):
    """Inverse of local_tensor: gathers the shards of every TP rank (a collective over the TP group)."""
    kind = model.shard_kind[name]
    if kind is None:
        return local
    if kind == "vocab":
        return model.transformer.wte.gather(local.transpose(0, -1), "checkpoint").transpose(0, -1).contiguous()
    shards = comm.all_gather(local, model.tp_group, "checkpoint")
    tail = local.shape[1:]
    if kind == "qkv":
        return torch.cat([s.view(3, model.k, -1, *tail) for s in shards], dim=1).reshape(-1, *tail)
    if kind == "rows":
        return torch.cat(shards)
    return torch.cat(shards, dim=1)


def full_state_dict(model, destination=None, prefix="", keep_vars=False):
    """Full, unsharded tensors under nanoGPT's key names, lm_head.weight tied to wte."""
    out = OrderedDict() if destination is None else destination
    for name, p in model.named_parameters():
        out[prefix + name] = full_tensor(model, name, p if keep_vars else p.detach())
    out[prefix + "lm_head.weight"] = out[prefix + "transformer.wte.weight"]
    return out


@torch.no_grad()
def load_full_state_dict(model, state_dict, strict=True):
    """Load full nanoGPT-named tensors at any tp (an optional '_orig_mod.' prefix is accepted)."""
    sd = {k.removeprefix("_orig_mod."): v for k, v in state_dict.items()}
    sd.pop("lm_head.weight", None)  # tied to transformer.wte.weight
    params = dict(model.named_parameters())
    missing, unexpected = sorted(set(params) - set(sd)), sorted(set(sd) - set(params))
    if strict and (missing or unexpected):
        raise KeyError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
    for name, p in params.items():
        if name in sd:
            want = full_shape(model, name, p.shape)
            if tuple(sd[name].shape) != want:
                raise ValueError(f"{name}: the state_dict holds shape {tuple(sd[name].shape)}, "
                                 f"this model needs the full shape {want}")
            p.copy_(local_tensor(model, name, sd[name].to(p.dtype)))
    return missing, unexpected


def init_full_weights(model):
    """nanoGPT's init, drawn for the full model: N(0, 0.02), c_proj scaled by 1/sqrt(2*n_layer)."""
    c = model.config
    C, std, proj_std = c.n_embd, 0.02, 0.02 / math.sqrt(2 * c.n_layer)
    normal = lambda *shape, s=std: torch.empty(*shape).normal_(0.0, s)
    sd = {"transformer.wte.weight": normal(c.vocab_size, C), "transformer.wpe.weight": normal(c.block_size, C)}
    shapes = {"attn.c_attn": (3 * C, C), "attn.c_proj": (C, C), "mlp.c_fc": (4 * C, C), "mlp.c_proj": (C, 4 * C)}
    for layer in range(c.n_layer):
        for ln in ("ln_1", "ln_2"):
            sd[f"transformer.h.{layer}.{ln}.weight"] = torch.ones(C)
            sd[f"transformer.h.{layer}.{ln}.bias"] = torch.zeros(C)
        for mod, shape in shapes.items():
            sd[f"transformer.h.{layer}.{mod}.weight"] = normal(*shape, s=proj_std if mod.endswith("c_proj") else std)
            sd[f"transformer.h.{layer}.{mod}.bias"] = torch.zeros(shape[0])
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = torch.ones(C), torch.zeros(C)
    params = dict(model.named_parameters())
    return {k: v for k, v in sd.items() if k in params}  # drops biases when bias=False
