"""Independent single-device references for the model tests, written for clarity, not speed.

- `nanogpt_forward`: nanoGPT's GPT (pre-LN blocks, optional PaLM parallel block) on a full state dict.
- `ladder_forward`: the same with Ladder Residual's staggered inputs.
- `track_forward`: the sync rule taken literally, one Python loop over tracks and one stream per
  track: at an unsynced point a track adds its partial output and the bias to its own stream; at a
  synced point the shared stream gains the sum of every track's own change since the last sync,
  with each bias once, and every track restarts from the shared stream.
"""
import math

import torch
from torch.nn import functional as F


def _ln(sd, name, x):
    return F.layer_norm(x, (x.shape[-1],), sd[name + ".weight"], sd.get(name + ".bias"), 1e-5)


def _attn_heads(sd, p, h, n_head, heads):
    """Attention over a subset of heads; returns the head outputs concatenated [B,T,len(heads)*hs]."""
    B, T, C = h.shape
    hs = C // n_head
    qkv = F.linear(h, sd[p + "attn.c_attn.weight"], sd.get(p + "attn.c_attn.bias"))
    q, k, v = qkv.split(C, dim=2)
    outs = []
    for head in heads:
        sl = slice(head * hs, (head + 1) * hs)
        att = (q[..., sl] @ k[..., sl].transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).tril().logical_not(), float("-inf"))
        outs.append(att.softmax(-1) @ v[..., sl])
    return torch.cat(outs, dim=-1)


def _mlp_units(sd, p, h, units):
    w, b = sd[p + "mlp.c_fc.weight"][units], sd.get(p + "mlp.c_fc.bias")
    return F.gelu(F.linear(h, w, None if b is None else b[units]))


def _logits_loss(sd, x, targets):
    x = _ln(sd, "transformer.ln_f", x)
    logits = F.linear(x, sd["transformer.wte.weight"])
    return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _embed(sd, idx):
    return sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][: idx.shape[1]]


def nanogpt_forward(sd, idx, targets, n_layer, n_head, parallel=False):
    x = _embed(sd, idx)
    all_heads = range(n_head)
    for l in range(n_layer):
        p = f"transformer.h.{l}."
        a = _attn_heads(sd, p, _ln(sd, p + "ln_1", x), n_head, all_heads)
        a = F.linear(a, sd[p + "attn.c_proj.weight"], sd.get(p + "attn.c_proj.bias"))
        mlp_in = x if parallel else x + a
        units = slice(None)
        m = F.linear(_mlp_units(sd, p, _ln(sd, p + "ln_2", mlp_in), units),
                     sd[p + "mlp.c_proj.weight"], sd.get(p + "mlp.c_proj.bias"))
        x = x + a + m
    return _logits_loss(sd, x, targets)


def ladder_forward(sd, idx, targets, n_layer, n_head):
    """Ladder Residual: each module reads the stream without the previous module's output."""
    x, pending = _embed(sd, idx), 0
    for l in range(n_layer):
        p = f"transformer.h.{l}."
        a = _attn_heads(sd, p, _ln(sd, p + "ln_1", x), n_head, range(n_head))
        a = F.linear(a, sd[p + "attn.c_proj.weight"], sd.get(p + "attn.c_proj.bias"))
        x, pending = x + pending, a
        m = F.linear(_mlp_units(sd, p, _ln(sd, p + "ln_2", x), slice(None)),
                     sd[p + "mlp.c_proj.weight"], sd.get(p + "mlp.c_proj.bias"))
        x, pending = x + pending, m
    return _logits_loss(sd, x + pending, targets)


def track_forward(sd, idx, targets, n_layer, n_head, n_tracks, sync, parallel=False):
    x = _embed(sd, idx)
    C = x.shape[-1]
    heads_per_track, units_per_track = n_head // n_tracks, 4 * C // n_tracks
    hs = C // n_head
    streams = [x.clone() for _ in range(n_tracks)]
    own_change = [torch.zeros_like(x) for _ in range(n_tracks)]
    bias_since_sync = torch.zeros(C, dtype=x.dtype)
    for point in range(2 * n_layer):
        l, sub = divmod(point, 2)
        p = f"transformer.h.{l}."
        if sub == 0:
            block_input = [s.clone() for s in streams]
        outputs = []
        for t in range(n_tracks):
            if sub == 0:
                heads = range(t * heads_per_track, (t + 1) * heads_per_track)
                o = _attn_heads(sd, p, _ln(sd, p + "ln_1", streams[t]), n_head, heads)
                w = sd[p + "attn.c_proj.weight"][:, heads[0] * hs:(heads[-1] + 1) * hs]
            else:
                units = slice(t * units_per_track, (t + 1) * units_per_track)
                reads = block_input[t] if parallel else streams[t]
                o = _mlp_units(sd, p, _ln(sd, p + "ln_2", reads), units)
                w = sd[p + "mlp.c_proj.weight"][:, units]
            outputs.append(o @ w.T)
        bias = sd.get(p + ("attn" if sub == 0 else "mlp") + ".c_proj.bias", torch.zeros(C, dtype=x.dtype))
        bias_since_sync = bias_since_sync + bias
        for t in range(n_tracks):
            own_change[t] = own_change[t] + outputs[t]
        if sync[point]:
            x = x + sum(own_change) + bias_since_sync
            streams = [x.clone() for _ in range(n_tracks)]
            own_change = [torch.zeros_like(x) for _ in range(n_tracks)]
            bias_since_sync = torch.zeros(C, dtype=x.dtype)
        elif not (parallel and sub == 0):
            streams = [streams[t] + outputs[t] + bias for t in range(n_tracks)]
    return _logits_loss(sd, x, targets)
