"""Full (unsharded, nanoGPT) tensors <-> this rank's shards, and the state_dict adapter.

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
