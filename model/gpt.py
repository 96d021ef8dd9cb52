"""GPT-2 (nanoGPT names, shapes and init) with real Megatron tensor parallelism and sync policies.

Tracks. The architecture has n_tracks shards. Track t owns heads [t*H/n, (t+1)*H/n) (its rows of
c_attn, its input rows of attn.c_proj) and hidden units [t*4C/n, (t+1)*4C/n) of the MLP (its rows
of c_fc, its input rows of mlp.c_proj). A tensor-parallel group of tp ranks (tp | n_tracks) gives
rank r the k = n_tracks/tp tracks [r*k, (r+1)*k). The function computed never depends on tp.

Sync rule. Sync point p (p = 2l after the attention of layer l, p = 2l+1 after its MLP) either
all-reduces or not, as the policy says (model/sync_policy.py). Let x be the shared (replicated)
residual stream at the last sync. Each track keeps its own stream

    s_t = x + beta + d_t,    d_t = sum of track t's own partial outputs since the last sync,
                             beta = sum of the row-parallel biases since the last sync.

A sublayer (attention or MLP) of track t reads LN(s_t) and produces its partial output o_t (its
heads through its rows of c_proj, or its MLP slice through its rows of mlp.c_proj); the bias b
of that c_proj is replicated. At an unsynced point: d_t += o_t and beta += b. At a synced point

    x  <-  x + Dropout( sum_t (d_t + o_t) + beta + b ),      d_t <- 0, beta <- 0,

so every track's change reaches the shared stream once, and each bias once. With every point
synced this is nanoGPT's block, x + Dropout(c_proj(...)). The `parallel` policy (PaLM / GPT-J) has
its MLP read the block input instead of the stream after attention:
y = x + Dropout(sum_t (a_t + m_t) + b_attn + b_mlp) with a_t = Attn_t(LN1 x), m_t = MLP_t(LN2 x).
SPD (Sync-Point Drop): track t's MLP reads x + a_t + b_attn, and y = x + sum_t(a_t + m_t) + b_a + b_m.
The `ladder` policy (Ladder Residual) keeps every sync but lets sublayer j read the stream without
sublayer j-1's output, so that output's all-reduce overlaps sublayer j's compute:
x_j = x_{j-1} + Dropout(g(o_j) + b_j) with o_j = sublayer_j(LN(x_{j-2})).
Residual dropout acts on what enters the shared stream (so a track-local partial output is added
to its own stream undropped); attention-probability dropout draws one mask for all n_head heads
from the generator that all TP ranks share, and each rank keeps its heads' slice, so masks are
keyed by track and do not depend on tp.

Collectives (all in parallel/comm.py). A sublayer whose input is the shared stream and whose
point syncs is plain Megatron TP: h = f(LN(x)), x <- x + Dropout(g(sum_t o_t) + b): one forward
all-reduce (g) and one backward all-reduce (f); where b's gradient needs no TP sum (no autograd,
or one rank), rank 0 adds b inside its partial sum instead, which g then counts once. A region of
several sublayers between two syncs enters through one f(x) and leaves through one g. Inside such
a region the replicated parameters it uses (its LayerNorms and row-parallel biases) only see this
rank's tracks, so their gradient is partial: they enter through one f applied to their
concatenation, whose backward sums them over the TP group once per backward. The region's biases are added into the all-reduce by TP
rank 0 only, so the sum holds them once. The embeddings, ln_f and the tied lm_head are
replicated on every TP rank and computed redundantly (fine at GPT-2 scale; a vocab-parallel head
would save memory at larger vocabularies).

Shapes. While all tracks of a rank read the same input (right after a sync) each projection is
one matmul over the rank's concatenated shards (plain Megatron TP). Diverged tracks carry a
leading track dim k and use batched matmuls. Parameters are stored as this rank's shards (same
names as nanoGPT); state_dict() / load_state_dict() use full, unsharded nanoGPT tensors.
"""
import dataclasses
import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from model.sync_policy import parse_sync_policy
from parallel import comm


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    n_tracks: int = 1
    sync_policy: str = "baseline"


# How each sharded parameter is split across tracks, by name suffix.
#   qkv:  c_attn rows are [q | k | v], each split by heads; a rank keeps [q | k | v] of its own
#         heads (nanoGPT's order), so shared-input attention splits q, k, v as views
#   rows: output rows split by track (column-parallel)
#   cols: input columns split by track (row-parallel)
SHARD_KINDS = (("attn.c_attn.weight", "qkv"), ("attn.c_attn.bias", "qkv"),
               ("mlp.c_fc.weight", "rows"), ("mlp.c_fc.bias", "rows"),
               ("attn.c_proj.weight", "cols"), ("mlp.c_proj.weight", "cols"))


def shard_kind(name):
    for suffix, kind in SHARD_KINDS:
        if name.endswith(suffix):
            return kind
    return None


def column_parallel(h, weight, bias, k):
    """Shared h [B,T,C] -> [B,T,k*F] (one matmul); diverged h [k,B,T,C] -> [k,B,T,F] (batched)."""
    if h.dim() == 3 or k == 1:  # F.linear adds the bias in the GEMM; baddbmm would first copy it out
        return F.linear(h, weight, bias)
    k_, B, T, C = h.shape
    w = weight.view(k, -1, C).transpose(1, 2)
    h2 = h.reshape(k, B * T, C)
    z = torch.bmm(h2, w) if bias is None else torch.baddbmm(bias.view(k, 1, -1), h2, w)
    return z.view(k, B, T, -1)


def column_parallel_qkv(h, weight, bias, k):
    """c_attn. Shared h -> [B,T,3*Hl*hs] as [q|k|v]; diverged h -> [k,B,T,3*h*hs], each track's [q|k|v]
    (the rank's [q|k|v]-ordered rows are regrouped by track: a copy of the weight, not the activations)."""
    if h.dim() == 3 or k == 1:
        return column_parallel(h, weight, bias, k)
    C = weight.shape[1]
    weight = weight.view(3, k, -1, C).transpose(0, 1).reshape(-1, C)
    bias = None if bias is None else bias.view(3, k, -1).transpose(0, 1).reshape(-1)
    return column_parallel(h, weight, bias, k)


def row_parallel(z, weight, k, per_track, bias=None):
    """Partial output of a row-parallel weight [C, k*F], plus `bias` if given (only summed outputs).

    z is [B,T,k*F] (tracks concatenated) or [k,B,T,F]. per_track=True returns each track's
    output [k,B,T,C]; otherwise their sum over this rank's tracks [B,T,C] in one matmul.
    """
    C = weight.shape[0]
    if k == 1:  # one track: a plain matmul; only the track dim is added or dropped
        out = F.linear(z, weight, None if per_track else bias)
        if per_track:
            return out if z.dim() == 4 else out.unsqueeze(0)
        return out.squeeze(0) if z.dim() == 4 else out
    if per_track:
        lead = z.shape[1:3] if z.dim() == 4 else z.shape[:2]
        zk = z.reshape(k, -1, z.shape[-1]) if z.dim() == 4 else z.reshape(-1, k, z.shape[-1] // k).transpose(0, 1)
        w = weight.view(C, k, -1).permute(1, 2, 0)  # [k, F, C]
        return torch.bmm(zk, w).view(k, *lead, C)
    if z.dim() == 4:
        z = z.permute(1, 2, 0, 3).reshape(z.shape[1], z.shape[2], -1)
    return F.linear(z, weight, bias)


class KVCache:
    """Keys and values of this rank's heads for every layer: [B, H_local, max_len, hs], or
    [k*B, H_local/k, max_len, hs] for a layer whose attention reads diverged tracks."""

    def __init__(self, n_layer):
        self.k, self.v = [None] * n_layer, [None] * n_layer
        self.pos = 0

    def update(self, layer, k, v, max_len):
        if self.k[layer] is None:
            B, H, _, hs = k.shape
            self.k[layer] = k.new_empty(B, H, max_len, hs)
            self.v[layer] = v.new_empty(B, H, max_len, hs)
        T = k.shape[2]
        self.k[layer][:, :, self.pos:self.pos + T] = k
        self.v[layer][:, :, self.pos:self.pos + T] = v
        return self.k[layer][:, :, :self.pos + T], self.v[layer][:, :, :self.pos + T]


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None


class Linear(nn.Module):
    """Holds this rank's shard of a linear layer's weight [out, in] and bias; the math is in the helpers."""

    def __init__(self, out_features, in_features, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None


class CausalSelfAttention(nn.Module):
    def __init__(self, config, k):
        super().__init__()
        C, n = config.n_embd, config.n_tracks
        self.k, self.n_head_local, self.head_size = k, config.n_head * k // n, C // config.n_head
        self.c_attn = Linear(3 * C * k // n, C, config.bias)
        self.c_proj = Linear(C, C * k // n, config.bias)
        self.dropout = config.dropout


class MLP(nn.Module):
    def __init__(self, config, k):
        super().__init__()
        C, n = config.n_embd, config.n_tracks
        self.c_fc = Linear(4 * C * k // n, C, config.bias)
        self.c_proj = Linear(C, 4 * C * k // n, config.bias)


class Block(nn.Module):
    def __init__(self, config, k):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, config.bias)
        self.attn = CausalSelfAttention(config, k)
        self.ln_2 = LayerNorm(config.n_embd, config.bias)
        self.mlp = MLP(config, k)


class GPT(nn.Module):
    def __init__(self, config, tp_group=None):
        """Full weights are drawn from the current global torch RNG (call torch.manual_seed with the
        same seed on every rank first), as nanoGPT does; this rank keeps its slice."""
        super().__init__()
        c = config
        if c.n_tracks < 1 or c.n_head % c.n_tracks != 0:
            divisors = [d for d in range(1, c.n_head + 1) if c.n_head % d == 0]
            raise ValueError(f"n_head={c.n_head} is not divisible by n_tracks={c.n_tracks}; "
                             f"n_tracks must be one of {divisors}")
        if c.n_embd % c.n_head != 0:
            raise ValueError(f"n_embd={c.n_embd} is not divisible by n_head={c.n_head}")
        self.tp_group, self.tp = tp_group, comm.group_size(tp_group)
        self.tp_rank = comm.group_rank(tp_group)
        if c.n_tracks % self.tp != 0:
            divisors = [d for d in range(1, c.n_tracks + 1) if c.n_tracks % d == 0]
            raise ValueError(f"n_tracks={c.n_tracks} is not divisible by tp={self.tp}; "
                             f"tp must be one of {divisors}")
        self.config = dataclasses.replace(config)  # set_sync_policy updates our copy only
        self.k = c.n_tracks // self.tp  # tracks on this rank

        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout),
            h=nn.ModuleList([Block(c, self.k) for _ in range(c.n_layer)]),
            ln_f=LayerNorm(c.n_embd, c.bias),
        ))
        self.resid_dropout = nn.Dropout(c.dropout)
        self.set_sync_policy(c.sync_policy)
        for name, p in self.named_parameters():
            p.tensor_parallel = shard_kind(name) is not None
        self.load_state_dict(self._init_full_weights())

    # ---------------------------------------------------------------- the policy as a plan
    def set_sync_policy(self, spec):
        """Switch to another sync policy (same parameters), e.g. to evaluate dropped syncs zero-shot."""
        self.policy = parse_sync_policy(spec, self.config.n_layer)
        self.config.sync_policy = spec
        self.syncs_per_forward = self.policy.n_syncs
        self._plan_sublayers()

    def _plan_sublayers(self):
        """For each sublayer j (2l attention, 2l+1 MLP): is it plain Megatron (shared input and its
        own sync), must its output stay per track, and which replicated params see partial grads."""
        sync, parallel = self.policy.sync, self.policy.parallel
        self.megatron, self.per_track_out, partial = [], [], []
        for j in range(len(sync)):
            shared_input = j == 0 or sync[j - 1]
            self.megatron.append(shared_input and sync[j])
            # parallel: the MLP reads the block input, so the attention output only feeds the sum
            self.per_track_out.append(not sync[j] and not (parallel and j % 2 == 0))
            if not self.megatron[-1]:
                layer, sub = divmod(j, 2)
                ln, proj = ("ln_1", "attn") if sub == 0 else ("ln_2", "mlp")
                partial += [f"transformer.h.{layer}.{ln}.weight", f"transformer.h.{layer}.{ln}.bias",
                            f"transformer.h.{layer}.{proj}.c_proj.bias"]
        params = dict(self.named_parameters())
        self._partial_names = [n for n in partial if n in params]
        self._partial_tensors = [params[n] for n in self._partial_names]  # Parameters persist across .to()

    def _partial_params(self):
        """Replicated params used inside track-local regions, through one f: their grads get summed."""
        if not self._partial_names or not torch.is_grad_enabled():
            return {}
        tensors = self._partial_tensors
        flat = comm.copy_to_tp_region(torch.cat([t.reshape(-1) for t in tensors]), self.tp_group, "tp_grad")
        views = flat.split([t.numel() for t in tensors])
        return {n: v.view_as(t) for n, v, t in zip(self._partial_names, views, tensors)}

    # ---------------------------------------------------------------- forward
    def forward(self, idx, targets=None, kv_cache=None):
        B, T = idx.shape
        pos0 = kv_cache.pos if kv_cache is not None else 0
        if pos0 + T > self.config.block_size:
            raise ValueError(f"sequence of length {pos0 + T} exceeds block_size={self.config.block_size}")
        pos = torch.arange(pos0, pos0 + T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        x = self._blocks(x, kv_cache)
        if kv_cache is not None:
            kv_cache.pos += T
        x = self._layer_norm(self.transformer.ln_f, x, {}, "transformer.ln_f")
        if targets is not None:
            logits = F.linear(x, self.transformer.wte.weight)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = F.linear(x[:, -1:, :], self.transformer.wte.weight)  # a slice: capturable in CUDA graphs
            loss = None
        return logits, loss

    def _layer_norm(self, ln, x, partial, name):
        w = partial.get(name + ".weight", ln.weight)
        b = partial.get(name + ".bias", ln.bias)
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def _ladder_blocks(self, x, kv_cache):
        """Ladder Residual: every point syncs (Megatron sublayers), but sublayer j reads the stream
        without sublayer j-1's output, whose all-reduce is still travelling while j computes:
        x_j = x_{j-1} + Dropout(g(o_j) + b_j), o_j = sublayer_j(LN(x_{j-2}))."""
        group = self.tp_group
        pending = None  # (partial sum being all-reduced, its handle, its bias)
        for j in range(2 * self.config.n_layer):
            layer, sub = divmod(j, 2)
            block = self.transformer.h[layer]
            ln, name = (block.ln_1, "ln_1") if sub == 0 else (block.ln_2, "ln_2")
            h = comm.copy_to_tp_region(self._layer_norm(ln, x, {}, f"transformer.h.{layer}.{name}"), group)
            bias = (block.attn if sub == 0 else block.mlp).c_proj.bias
            gemm_bias, bias = self._bias_into_partial(bias)
            if sub == 0:
                out = self._attention(block.attn, h, False, kv_cache, layer, gemm_bias)
            else:
                out = self._mlp(block.mlp, h, False, gemm_bias)
            launched = comm.reduce_from_tp_region_async(out, group) + (bias,)
            if pending is not None:
                x = self._add_reduced(x, *pending)
            pending = launched
        return self._add_reduced(x, *pending)

    def _add_reduced(self, x, partial_sum, handle, bias):
        y = comm.wait_reduce(partial_sum, handle)
        return x + self.resid_dropout(y if bias is None else y + bias)

    def _blocks(self, x, kv_cache):
        """Apply the sync rule of the module docstring over all 2*n_layer sublayers."""
        if self.policy.ladder:
            return self._ladder_blocks(x, kv_cache)
        group = self.tp_group
        partial = self._partial_params()
        region = None  # between two syncs: dict(x=f(x), beta=..., d=[k,B,T,C], d_summed=[B,T,C])
        block_input = None
        for j in range(2 * self.config.n_layer):
            layer, sub = divmod(j, 2)
            block = self.transformer.h[layer]
            prefix = f"transformer.h.{layer}."
            ln, proj_name = (block.ln_1, "attn") if sub == 0 else (block.ln_2, "mlp")
            ln_name = prefix + ("ln_1" if sub == 0 else "ln_2")
            proj_bias = getattr(block, proj_name).c_proj.bias

            def run(h, per_track, gemm_bias=None):
                if sub == 0:
                    return self._attention(block.attn, h, per_track, kv_cache, layer, gemm_bias)
                return self._mlp(block.mlp, h, per_track, gemm_bias)

            if self.megatron[j]:
                h = comm.copy_to_tp_region(self._layer_norm(ln, x, {}, ln_name), group)
                gemm_bias, bias = self._bias_into_partial(proj_bias)
                y = comm.reduce_from_tp_region(run(h, False, gemm_bias), group)
                x = x + self.resid_dropout(y if bias is None else y + bias)
                continue

            if region is None:
                region = dict(x=comm.copy_to_tp_region(x, group), beta=None, d=None, d_summed=None)
            if sub == 0:
                block_input = (region["beta"], region["d"])
            beta, d = block_input if (self.policy.parallel and sub == 1) else (region["beta"], region["d"])
            stream = region["x"]
            if d is not None:
                stream = stream + d if beta is None else stream + beta + d
            out = run(self._layer_norm(ln, stream, partial, ln_name), per_track=self.per_track_out[j])
            bias = partial.get(prefix + proj_name + ".c_proj.bias", proj_bias)
            if bias is not None:
                region["beta"] = bias if region["beta"] is None else region["beta"] + bias
            if self.per_track_out[j]:
                region["d"] = out if region["d"] is None else region["d"] + out
                continue
            if region["d_summed"] is not None:
                out = out + region["d_summed"]
            if not self.policy.sync[j]:
                region["d_summed"] = out
                continue
            if region["d"] is not None:  # one track per rank: the sum over tracks is a view, not a reduce kernel
                out = out + (region["d"][0] if self.k == 1 else region["d"].sum(0))
            if self.tp_rank == 0 and region["beta"] is not None:
                out = out + region["beta"].to(out.dtype)
            x = x + self.resid_dropout(comm.reduce_from_tp_region(out, group))
            region = None
        assert region is None, "the last sync point is always synced"
        return x

    def _bias_into_partial(self, bias):
        """(bias for this rank's GEMM, bias to add after the all-reduce) of a Megatron sync point.
        Megatron adds the replicated bias after the all-reduce, one broadcast add per sublayer.
        Where its gradient needs no TP sum (one rank, or no autograd) rank 0 adds it in the GEMM
        instead and the all-reduce sums it once: the same function, one kernel fewer."""
        if bias is None or (self.tp > 1 and torch.is_grad_enabled()):
            return None, bias
        return (bias if self.tp_rank == 0 else None), None

    def _attention(self, attn, h, per_track, kv_cache, layer, gemm_bias=None):
        """Shared input: heads [B, Hl, T, hs]. Diverged input: the tracks go into the batch,
        [k*B, Hl/k, T, hs], so q, k, v stay views of the projection (no copies)."""
        k, hs = self.k, attn.head_size
        qkv = column_parallel_qkv(h, attn.c_attn.weight, attn.c_attn.bias, k)
        diverged = qkv.dim() == 4
        T = qkv.shape[-2]
        qkv = qkv.reshape(-1, T, 3, qkv.shape[-1] // (3 * hs), hs)  # [B or k*B, T, 3, heads, hs]
        q, kk, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        if kv_cache is not None:
            kk, v = kv_cache.update(layer, kk, v, self.config.block_size)
        y = self._sdpa(q, kk, v, attn.dropout if self.training else 0.0, diverged)
        y = y.transpose(1, 2).reshape(*h.shape[:-1], -1)  # [B,T,Hl*hs] tracks concatenated, or [k,B,T,Hl/k*hs]
        return row_parallel(y, attn.c_proj.weight, k, per_track, gemm_bias)

    def _sdpa(self, q, k, v, dropout_p, tracks_in_batch):
        Tq, Tk = q.shape[2], k.shape[2]
        if dropout_p == 0.0:
            if Tq == Tk:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if Tq == 1:
                return F.scaled_dot_product_attention(q, k, v)
        mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(diagonal=Tk - Tq)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        if dropout_p > 0.0:
            # one mask for all n_head heads from the RNG every TP rank shares; keep this rank's heads
            Hl = q.shape[1] * (self.k if tracks_in_batch else 1)
            B = q.shape[0] // (self.k if tracks_in_batch else 1)
            keep = torch.rand(B, self.config.n_head, Tq, Tk, device=q.device) >= dropout_p
            keep = keep[:, self.tp_rank * Hl:(self.tp_rank + 1) * Hl]
            if tracks_in_batch:  # [B, k*h, ...] -> [k*B, h, ...]
                keep = keep.view(B, self.k, -1, Tq, Tk).transpose(0, 1).reshape(-1, Hl // self.k, Tq, Tk)
            att = att * keep / (1.0 - dropout_p)
        return att @ v

    def _mlp(self, mlp, h, per_track, gemm_bias=None):
        z = F.gelu(column_parallel(h, mlp.c_fc.weight, mlp.c_fc.bias, self.k))
        return row_parallel(z, mlp.c_proj.weight, self.k, per_track, gemm_bias)

    # ---------------------------------------------------------------- full <-> local tensors
    def _track_slice(self):
        return self.tp_rank * self.k, (self.tp_rank + 1) * self.k

    def local_tensor(self, name, full):
        """This rank's slice of a full tensor shaped like parameter `name` (weights, optimizer state)."""
        kind, n, (t0, t1) = shard_kind(name), self.config.n_tracks, self._track_slice()
        if kind is None:
            return full
        if kind == "qkv":
            return full.view(3, n, -1, *full.shape[1:])[:, t0:t1].reshape(-1, *full.shape[1:]).contiguous()
        if kind == "rows":
            return full.view(n, -1, *full.shape[1:])[t0:t1].reshape(-1, *full.shape[1:]).contiguous()
        return full.view(full.shape[0], n, -1)[:, t0:t1].reshape(full.shape[0], -1).contiguous()

    def full_tensor(self, name, local):
        """Inverse of local_tensor: gathers the shards of every TP rank (a collective over the TP group)."""
        kind = shard_kind(name)
        if kind is None:
            return local
        shards = comm.all_gather(local, self.tp_group, "checkpoint")
        tail = local.shape[1:]
        if kind == "qkv":
            return torch.cat([s.view(3, self.k, -1, *tail) for s in shards], dim=1).reshape(-1, *tail)
        if kind == "rows":
            return torch.cat(shards)
        return torch.cat(shards, dim=1)

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Full, unsharded tensors under nanoGPT's key names (a collective over the TP group)."""
        out = OrderedDict() if destination is None else destination
        for name, p in self.named_parameters():
            out[prefix + name] = self.full_tensor(name, p.detach() if not keep_vars else p)
        out[prefix + "lm_head.weight"] = out[prefix + "transformer.wte.weight"]
        return out

    @torch.no_grad()
    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Load full nanoGPT-named tensors at any tp (an optional '_orig_mod.' prefix is accepted)."""
        sd = {k.removeprefix("_orig_mod."): v for k, v in state_dict.items()}
        sd.pop("lm_head.weight", None)  # tied to transformer.wte.weight
        params = dict(self.named_parameters())
        missing, unexpected = sorted(set(params) - set(sd)), sorted(set(sd) - set(params))
        if strict and (missing or unexpected):
            raise KeyError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
        for name, p in params.items():
            if name in sd:
                local = self.local_tensor(name, sd[name].to(p.dtype))
                if local.shape != p.shape:
                    raise ValueError(f"{name}: full shape {tuple(sd[name].shape)} gives a shard of "
                                     f"{tuple(local.shape)}, this model holds {tuple(p.shape)}")
                p.copy_(local)
        return missing, unexpected

    def _init_full_weights(self):
        """nanoGPT's init, drawn for the full model: N(0, 0.02), c_proj scaled by 1/sqrt(2*n_layer)."""
        c = self.config
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
        params = dict(self.named_parameters())
        return {k: v for k, v in sd.items() if k in params}  # drops biases when bias=False

    # ---------------------------------------------------------------- utilities
    def get_num_params(self, non_embedding=True):
        """Parameters of the full model (shards counted once across the TP group), as nanoGPT."""
        n = sum(p.numel() * (self.tp if p.tensor_parallel else 1) for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """nanoGPT's sampling loop with a KV cache. Every TP rank draws the same tokens: logits are
        replicated after the final sync and all ranks share one RNG state."""
        cache, window = None, self.config.block_size
        for _ in range(max_new_tokens):
            if cache is not None and cache.pos < window:
                logits, _ = self(idx[:, -1:], kv_cache=cache)
            else:  # first step, or the context outgrew block_size: recompute on the cropped window
                cache = KVCache(self.config.n_layer)
                logits, _ = self(idx[:, -window:], kv_cache=cache)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
