"""Megatron's tensor-parallel layers, over tracks (Megatron-LM's layers.py, written for tracks).

A rank holds k = n_tracks / tp tracks. Its input to a column-parallel layer is either shared (all
its tracks read the same [B,T,C], as right after a sync) or per track ([k,B,T,C], once the
tracks' streams have diverged):

    ColumnParallelLinear   weight [k*F, C] (this rank's rows; track t's F rows together)
        shared h [B,T,C]   -> h W^T + b            [B,T,k*F]   one GEMM, tracks concatenated
        h [k,B,T,C]        -> h_t W_t^T + b_t      [k,B,T,F]   one batched GEMM over the tracks
    RowParallelLinear      weight [C, k*F] (this rank's input columns), bias [C] replicated
        z [B,T,k*F] or [k,B,T,F]
        per_track=False    -> sum_t z_t W_t^T      [B,T,C]     one GEMM: the partial sum that g
                                                               all-reduces (plus b, if asked)
        per_track=True     -> z_t W_t^T (+ b)      [k,B,T,C]   each track's own output

The layers do no communication of their own: the caller wraps a region's input in f and its
partial sum in g (parallel/comm.py), since where a region starts and ends is the sync policy's.
The bias of a row-parallel layer is replicated, so the caller decides where it is added (once).

VocabParallelEmbedding and vocab_parallel_cross_entropy split the tied embedding / LM head by
vocabulary rows (Megatron's VocabParallelEmbedding and vocab-parallel cross-entropy): TP rank r
holds ids [r*V/tp, (r+1)*V/tp) (integer division; shards differ by at most one row). The embedding
is g(rows of the ids this rank holds, zeros elsewhere); the loss is
log(sum_r sum_v exp(l_v - m)) + m - l_target with m the all-reduced row max, so no rank holds the
whole [B,T,V] logits. Their collectives are counted as `vocab`. At tp=1 they are F.embedding and
F.cross_entropy.
"""
import torch
import torch.nn as nn
from torch.nn import functional as F

from parallel import comm


def layer_norm(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT). Replicated: every TP rank holds all of it.
    Inside a track-local region the caller passes the f-wrapped views of weight and bias, whose
    gradients are then summed over the TP group (model/gpt.py)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x, weight=None, bias=None):
        if weight is None:
            weight, bias = self.weight, self.bias
        return layer_norm(x, weight, bias)


class ColumnParallelLinear(nn.Module):
    """This rank's k tracks of a linear layer whose output features are split by track.

    qkv=True: attention's c_attn, whose full rows are [q | k | v], each split by heads. The rank
    keeps [q | k | v] of its own heads (nanoGPT's order), so a shared input's q, k and v are views
    of one GEMM's output; for per-track inputs the rows are regrouped by track (a copy of the
    weight, not of the activations)."""

    def __init__(self, in_features, out_features, k, bias, qkv=False):
        super().__init__()
        self.k, self.qkv = k, qkv
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        for p in self.parameters():
            p.shard = "qkv" if qkv else "rows"

    def forward(self, h):
        k, weight, bias = self.k, self.weight, self.bias
        if h.dim() == 3 or k == 1:  # F.linear adds the bias inside the GEMM
            return F.linear(h, weight, bias)
        C = weight.shape[1]
        if self.qkv:
            weight = weight.view(3, k, -1, C).transpose(0, 1).reshape(-1, C)
            bias = None if bias is None else bias.view(3, k, -1).transpose(0, 1).reshape(-1)
        z = torch.bmm(h.reshape(k, -1, C), weight.view(k, -1, C).transpose(1, 2))
        # The bias after the GEMM, where the add fuses into the next kernel, rather than baddbmm's
        # bias operand expanded to the whole [k, B*T, F] output. No speed-up was measured: on one H100
        # grouped:6 took 44.6 ms/iter with baddbmm and 44.7 with the add, in two separate calls
        # (bench/results/tracks_variants/).
        z = z.view(*h.shape[:-1], -1)
        return z if bias is None else z + bias.view(k, 1, 1, -1)


class RowParallelLinear(nn.Module):
    """This rank's k tracks of a linear layer whose input features are split by track. Its bias
    is replicated (the caller decides where it is added); forward(bias=...) adds a given bias inside
    the GEMM: to every track's output (per_track) or to the partial sum."""

    def __init__(self, in_features, out_features, k, bias):
        super().__init__()
        self.k = k
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.weight.shard = "cols"

    def forward(self, z, per_track=False, bias=None):
        k, weight = self.k, self.weight
        C = weight.shape[0]
        if k == 1:  # one track: a plain matmul; only the track dim is added or dropped
            out = F.linear(z, weight, bias)
            if per_track:
                return out if z.dim() == 4 else out.unsqueeze(0)
            return out.squeeze(0) if z.dim() == 4 else out
        if per_track:  # a given bias is added to every track's output, inside the GEMM (baddbmm)
            lead = z.shape[1:3] if z.dim() == 4 else z.shape[:2]
            zk = z.reshape(k, -1, z.shape[-1]) if z.dim() == 4 else z.reshape(-1, k, z.shape[-1] // k).transpose(0, 1)
            wk = weight.view(C, k, -1).permute(1, 2, 0)
            out = torch.bmm(zk, wk) if bias is None else torch.baddbmm(bias, zk, wk)
            return out.view(k, *lead, C)
        if z.dim() == 4:  # tracks back to concatenated features: sum_t z_t W_t^T is one GEMM
            z = z.permute(1, 2, 0, 3).reshape(z.shape[1], z.shape[2], -1)
        return F.linear(z, weight, bias)


class VocabParallelEmbedding(nn.Module):
    """This rank's rows [v0, v1) of the (tied) token embedding; each rank looks up the ids it holds
    (zeros for the rest) and one all-reduce (g, identity backward) sums the rows."""

    def __init__(self, vocab_size, n_embd, tp_group):
        super().__init__()
        self.vocab_size, self.tp_group = vocab_size, tp_group
        self.tp, self.tp_rank = comm.group_size(tp_group), comm.group_rank(tp_group)
        self.v0, self.v1 = self.vocab_range(self.tp_rank)
        # torch.empty, not a draw: the full weights are drawn once, whatever tp is (model/gpt.py)
        self.weight = nn.Parameter(torch.empty(self.v1 - self.v0, n_embd))
        self.weight.shard = "vocab"

    def vocab_range(self, rank):
        """Rows [v0, v1) that TP rank `rank` holds; shards differ by at most one row."""
        V = self.vocab_size
        return rank * V // self.tp, (rank + 1) * V // self.tp

    def forward(self, idx):
        if self.tp == 1:
            return F.embedding(idx, self.weight)
        return comm.reduce_from_tp_region(self.masked_rows(idx), self.tp_group, "vocab")

    def masked_rows(self, idx):
        """This rank's rows of the ids it holds, zeros for the rest: one rank's term of the embedding's sum."""
        if self.tp == 1:
            return F.embedding(idx, self.weight)
        outside = (idx < self.v0) | (idx >= self.v1)
        rows = F.embedding((idx - self.v0).masked_fill(outside, 0), self.weight)
        return rows.masked_fill(outside.unsqueeze(-1), 0.0)

    def gather(self, local, kind="vocab"):
        """Full [..., V] from every rank's slice [..., V_r] of the vocabulary (shards may differ by one)."""
        widest = -(-self.vocab_size // self.tp)
        shards = comm.all_gather(F.pad(local, (0, widest - local.shape[-1])), self.tp_group, kind)
        return torch.cat([s[..., :b - a] for s, (a, b) in zip(shards, map(self.vocab_range, range(self.tp)))], -1)


def vocab_parallel_cross_entropy(logits, targets, vocab_start, group):
    """Mean cross-entropy over targets != -1 from this rank's logits slice [B,T,V_r] (ids
    [vocab_start, vocab_start + V_r)); no rank holds the whole [B,T,V] (Megatron's vocab-parallel CE):

        m = max over ranks of the row max (detached: log-sum-exp does not depend on it)
        loss = log(sum_r sum_v exp(l_v - m)) - (l_target - m)

    The row's sum of exp and its target logit (which only the owning rank contributes) are summed in
    one all-reduce through g, whose identity backward gives each rank softmax - one-hot on its slice."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)).reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    row_max = comm.all_reduce_max(logits.detach().amax(-1), group, "vocab")
    shifted = logits - row_max.unsqueeze(1)
    local = targets - vocab_start
    inside = (local >= 0) & (local < logits.shape[-1])
    target_logit = shifted.gather(1, local.clamp(0, logits.shape[-1] - 1).unsqueeze(1)).squeeze(1)
    sums = torch.stack([shifted.exp().sum(-1), target_logit.masked_fill(~inside, 0.0)])
    sum_exp, target_logit = comm.reduce_from_tp_region(sums, group, "vocab").unbind(0)
    valid = targets != -1
    return ((sum_exp.log() - target_logit) * valid).sum() / valid.sum()
