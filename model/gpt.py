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
concatenation, whose backward sums them over the TP group once per backward. The region's biases
are added into the all-reduce by TP rank 0 only, so the sum holds them once. Under autocast a
replicated activation is cast to the compute dtype before it enters f, so f's backward all-reduces
a bf16 gradient (the cast happens in the next matmul anyway).

Vocabulary parallelism (Megatron's VocabParallelEmbedding and vocab-parallel cross-entropy). The
tied embedding / LM head wte [V, C] is split by rows: TP rank r holds ids [r*V/tp, (r+1)*V/tp)
(integer division; shards differ by at most one row). The embedding is g(rows of the ids this rank
holds, zeros elsewhere). The head reads f(LN_f(x)) and each rank computes its logits slice; the
loss is log(sum_r sum_v exp(l_v - m)) + m - l_target with m the all-reduced max, so no rank holds
the whole [B, T, V] logits. These collectives are counted as `vocab`, apart from the sync points.
At tp=1 they are plain F.embedding and F.cross_entropy. wpe and ln_f stay replicated.

torch.compile. forward() reads the policy only through self._plan (built once per policy: per sync
point a few booleans and indices) and the collectives are traceable (parallel/comm.py), so the
model compiles with fullgraph=True; counts come from eager passes and from the plan.

Shapes. While all tracks of a rank read the same input (right after a sync) each projection is
one matmul over the rank's concatenated shards (plain Megatron TP). Diverged tracks carry a
leading track dim k and use batched matmuls. Parameters are stored as this rank's shards (same
names as nanoGPT); state_dict() / load_state_dict() use full, unsharded nanoGPT tensors.
"""
import dataclasses
import math
from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from model.compile_modes import check_compile_mode, compile_step
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

    def __post_init__(self):
        """Check types and ranges: a bad value raises ValueError with one line naming it."""
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "n_tracks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):  # bool is an int: True is not 1 here
                raise ValueError(f"GPTConfig {name}={value!r} ({type(value).__name__}): must be an int >= 1")
            if value < 1:
                raise ValueError(f"GPTConfig {name}={value!r}: must be an int >= 1")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"GPTConfig n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.n_head % self.n_tracks != 0:
            divisors = [d for d in range(1, self.n_head + 1) if self.n_head % d == 0]
            raise ValueError(f"GPTConfig n_head={self.n_head} is not divisible by n_tracks={self.n_tracks}; "
                             f"n_tracks must be one of {divisors}")
        dropout = self.dropout
        if (not isinstance(dropout, (int, float)) or isinstance(dropout, bool)
                or not 0.0 <= dropout < 1.0):  # also rejects nan
            raise ValueError(f"GPTConfig dropout={dropout!r}: must be a number in [0, 1)")
        if not isinstance(self.bias, bool):
            raise ValueError(f"GPTConfig bias={self.bias!r} ({type(self.bias).__name__}): must be True or False")
        parse_sync_policy(self.sync_policy, self.n_layer)  # ValueError naming the spec and what is allowed


# How each sharded parameter is split across tracks, by name suffix.
#   qkv:  c_attn rows are [q | k | v], each split by heads; a rank keeps [q | k | v] of its own
#         heads (nanoGPT's order), so shared-input attention splits q, k, v as views
#   rows: output rows split by track (column-parallel)
#   cols: input columns split by track (row-parallel)
SHARD_KINDS = (("attn.c_attn.weight", "qkv"), ("attn.c_attn.bias", "qkv"),
               ("mlp.c_fc.weight", "rows"), ("mlp.c_fc.bias", "rows"),
               ("attn.c_proj.weight", "cols"), ("mlp.c_proj.weight", "cols"))


def shard_kind(name):
    if name == "transformer.wte.weight":
        return "vocab"  # rows split by vocabulary id over the TP ranks (not by track)
    for suffix, kind in SHARD_KINDS:
        if name.endswith(suffix):
            return kind
    return None


# The plan of one sync point; ln_weight/ln_bias/proj_bias index the partial-grad parameter list.
Sublayer = namedtuple("Sublayer", "megatron per_track_out sync ln_weight ln_bias proj_bias")


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


def layer_norm(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def autocast_input(h):
    """h in the dtype autocast gives it in the next matmul. A replicated activation is cast before it
    enters f, so f's backward all-reduces a bf16 gradient, not the fp32 one of LayerNorm's output."""
    if torch.is_autocast_enabled(h.device.type):
        return h.to(torch.get_autocast_dtype(h.device.type))
    return h


class KVCache:
    """Keys and values of this rank's heads for every layer: [B, H_local, max_len, hs], or
    [k*B, H_local/k, max_len, hs] for a layer whose attention reads diverged tracks. The position is
    a Python int and attention reads the filled prefix: shapes change every step (eager decode)."""

    def __init__(self, n_layer):
        self.k, self.v = [None] * n_layer, [None] * n_layer
        self.pos = 0

    def positions(self, T, block_size, device):
        if self.pos + T > block_size:
            raise ValueError(f"sequence of length {self.pos + T} exceeds block_size={block_size}")
        return torch.arange(self.pos, self.pos + T, dtype=torch.long, device=device)

    def update(self, layer, k, v, max_len):
        if self.k[layer] is None:
            B, H, _, hs = k.shape
            self.k[layer] = k.new_empty(B, H, max_len, hs)
            self.v[layer] = v.new_empty(B, H, max_len, hs)
        T = k.shape[2]
        self.k[layer][:, :, self.pos:self.pos + T] = k
        self.v[layer][:, :, self.pos:self.pos + T] = v
        return self.k[layer][:, :, :self.pos + T], self.v[layer][:, :, :self.pos + T]

    def attention_mask(self):
        return None  # the keys returned are exactly the filled prefix

    def advance(self, T):
        self.pos += T


class StaticKVCache:
    """A KV cache whose decode step has fixed shapes, so it compiles once (fullgraph) for every
    position and can be replayed as a CUDA graph: buffers of max_len positions, the position a
    device tensor, and one token's attention reads the whole buffer under the mask
    (index <= pos). Prefill (T > 1) always starts at position 0 (after reset()) and runs eagerly.
    Once allocated, the buffers and `pos` are only ever written in place: a captured graph keeps
    reading the same memory across reset() and refill."""

    def __init__(self, n_layer, max_len):
        self.k, self.v = [None] * n_layer, [None] * n_layer
        self.max_len = max_len
        self.pos = None  # [1] long tensor on the device, allocated by the first prefill
        self.filled = False  # False: the next forward is a prefill from position 0

    def reset(self):
        """Refill from position 0 (the buffers are kept: a captured CUDA graph keeps reading them)."""
        self.filled = False

    def positions(self, T, block_size, device):
        if T == 1 and self.filled:
            return self.pos
        if self.filled or T > self.max_len:
            raise ValueError(f"StaticKVCache: a prefill of {T} tokens needs an empty cache of at least "
                             f"{T} positions (reset() it; it holds {self.max_len})")
        return torch.arange(T, dtype=torch.long, device=device)

    def update(self, layer, k, v, max_len):
        T = k.shape[2]
        if not self.filled:  # prefill: the keys of the prompt are all it attends to
            if self.k[layer] is None or self.k[layer].shape[:2] != k.shape[:2]:
                B, H, _, hs = k.shape
                self.k[layer] = k.new_zeros(B, H, self.max_len, hs)
                self.v[layer] = v.new_zeros(B, H, self.max_len, hs)
            self.k[layer][:, :, :T] = k
            self.v[layer][:, :, :T] = v
            return k, v
        self.k[layer].index_copy_(2, self.pos, k)
        self.v[layer].index_copy_(2, self.pos, v)
        return self.k[layer], self.v[layer]

    def attention_mask(self):
        if not self.filled:
            return None  # prefill: causal over the prompt
        return (torch.arange(self.max_len, device=self.pos.device) <= self.pos).view(1, -1)  # [Tq=1, Tk]

    def advance(self, T):
        if self.filled:
            self.pos.add_(T)
        elif self.pos is None:
            self.pos = torch.full((1,), T, dtype=torch.long, device=self.k[0].device)
        else:
            self.pos.fill_(T)
        self.filled = True


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
        if c.vocab_size < self.tp:
            raise ValueError(f"vocab_size={c.vocab_size} is smaller than tp={self.tp}: every TP rank needs "
                             f"at least one vocabulary row")
        self.config = dataclasses.replace(config)  # set_sync_policy updates our copy only
        self.k = c.n_tracks // self.tp  # tracks on this rank
        v0, v1 = self._vocab_range()

        self.transformer = nn.ModuleDict(dict(
            # this rank's vocabulary rows; _weight: no init draw, whose size would depend on tp
            wte=nn.Embedding(v1 - v0, c.n_embd, _weight=torch.empty(v1 - v0, c.n_embd)),
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
        """One Sublayer per sync point j (2l attention, 2l+1 MLP): is it plain Megatron (shared input
        and its own sync), must its output stay per track, and, for a track-local sublayer, where its
        LayerNorm weight/bias and c_proj bias sit in the list of partial-grad parameters. The forward
        reads only this plan (constants under torch.compile), never names."""
        sync, parallel = self.policy.sync, self.policy.parallel
        self._plan, partial = [], []

        def slot(p):
            if p is None:
                return None
            partial.append(p)
            return len(partial) - 1

        for j in range(len(sync)):
            layer, sub = divmod(j, 2)
            block = self.transformer.h[layer]
            ln, proj = (block.ln_1, block.attn) if sub == 0 else (block.ln_2, block.mlp)
            megatron = (j == 0 or sync[j - 1]) and sync[j]
            # parallel: the MLP reads the block input, so the attention output only feeds the sum
            per_track_out = not sync[j] and not (parallel and sub == 0)
            slots = (None, None, None) if megatron else (slot(ln.weight), slot(ln.bias), slot(proj.c_proj.bias))
            self._plan.append(Sublayer(megatron, per_track_out, sync[j], *slots))
        self._partial_tensors = partial  # Parameters persist across .to()

    def _partial_params(self):
        """Replicated params used inside track-local regions, through one f: their grads get summed.
        Returns a list aligned with the plan's slots."""
        tensors = self._partial_tensors
        if not tensors or not torch.is_grad_enabled() or comm.group_size(self.tp_group) == 1:
            # One rank: nothing to sum. Also sidesteps a miscompile: compiled by inductor on CUDA
            # (torch 2.11, tp=1), the grads of these params had the params' own norm, 67.9 = the
            # norm of grouped:2's 12 LayerNorm weights (ones) in a 6 x 384 model: apparently the
            # params themselves (EXPERIMENT_SUMMARY.md section 1c).
            return tensors
        flat = comm.copy_to_tp_region(torch.cat([t.reshape(-1) for t in tensors]), self.tp_group, "tp_grad")
        return [v.view_as(t) for v, t in zip(flat.split([t.numel() for t in tensors]), tensors)]

    # ---------------------------------------------------------------- forward
    def forward(self, idx, targets=None, kv_cache=None):
        """(logits, loss). With targets: the loss, and the logits [B,T,V] at tp=1 only (at tp>1 each
        rank holds a vocabulary slice of them and no rank the whole: logits is None). Without
        targets: full logits of the last position [B,1,V] on every rank, and loss None."""
        B, T = idx.shape
        if kv_cache is not None:
            pos = kv_cache.positions(T, self.config.block_size, idx.device)
        elif T > self.config.block_size:
            raise ValueError(f"sequence of length {T} exceeds block_size={self.config.block_size}")
        else:
            pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self._embed(idx) + self.transformer.wpe(pos))
        x = self._blocks(x, kv_cache)
        if kv_cache is not None:
            kv_cache.advance(T)
        ln_f = self.transformer.ln_f
        x = layer_norm(x, ln_f.weight, ln_f.bias)
        wte = self.transformer.wte.weight
        if targets is None:
            logits = F.linear(x[:, -1:, :], wte)  # a slice: capturable in CUDA graphs
            return (logits if self.tp == 1 else self._gather_vocab(logits)), None
        if self.tp == 1:
            logits = F.linear(x, wte)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        logits = F.linear(comm.copy_to_tp_region(autocast_input(x), self.tp_group, "vocab"), wte)
        return None, vocab_parallel_cross_entropy(logits, targets, self._vocab_range()[0], self.tp_group)

    # ---------------------------------------------------------------- vocabulary parallelism
    def _vocab_range(self, rank=None):
        """Rows [v0, v1) of the (tied) embedding that TP rank `rank` holds; shards differ by at most one row."""
        r, V = self.tp_rank if rank is None else rank, self.config.vocab_size
        return r * V // self.tp, (r + 1) * V // self.tp

    def _embed(self, idx):
        """Token embedding. Vocabulary-parallel: each rank looks up the ids it holds (zeros for the
        rest) and one all-reduce sums the rows; its backward is the identity (g)."""
        wte = self.transformer.wte.weight
        if self.tp == 1:
            return F.embedding(idx, wte)
        v0, v1 = self._vocab_range()
        outside = (idx < v0) | (idx >= v1)
        rows = F.embedding((idx - v0).masked_fill(outside, 0), wte).masked_fill(outside.unsqueeze(-1), 0.0)
        return comm.reduce_from_tp_region(rows, self.tp_group, "vocab")

    def _gather_vocab(self, local, kind="vocab"):
        """Full [..., V] from every rank's slice [..., V_r] of the vocabulary (shards may differ by one)."""
        widest = -(-self.config.vocab_size // self.tp)
        padded = F.pad(local, (0, widest - local.shape[-1]))
        shards = comm.all_gather(padded, self.tp_group, kind)
        return torch.cat([s[..., :b - a] for s, (a, b) in zip(shards, map(self._vocab_range, range(self.tp)))], -1)

    # ---------------------------------------------------------------- the blocks
    def _ladder_blocks(self, x, kv_cache):
        """Ladder Residual: every point syncs (Megatron sublayers), but sublayer j reads the stream
        without sublayer j-1's output, whose all-reduce is still travelling while j computes:
        x_j = x_{j-1} + Dropout(g(o_j) + b_j), o_j = sublayer_j(LN(x_{j-2}))."""
        group = self.tp_group
        pending = None  # (partial sum being all-reduced, its handle, its bias)
        for j in range(2 * self.config.n_layer):
            layer, sub = divmod(j, 2)
            block = self.transformer.h[layer]
            ln, proj = (block.ln_1, block.attn) if sub == 0 else (block.ln_2, block.mlp)
            h = comm.copy_to_tp_region(autocast_input(layer_norm(x, ln.weight, ln.bias)), group)
            gemm_bias, bias = self._bias_into_partial(proj.c_proj.bias)
            out = self._sublayer(block, sub, h, False, kv_cache, layer, gemm_bias)
            launched = comm.reduce_from_tp_region_async(out, group) + (bias,)
            if pending is not None:
                x = self._add_reduced(x, *pending)
            pending = launched
        return self._add_reduced(x, *pending)

    def _add_reduced(self, x, partial_sum, handle, bias):
        y = comm.wait_reduce(partial_sum, handle)
        return x + self.resid_dropout(y if bias is None else y + bias)

    def _sublayer(self, block, sub, h, per_track, kv_cache, layer, gemm_bias=None):
        if sub == 0:
            return self._attention(block.attn, h, per_track, kv_cache, layer, gemm_bias)
        return self._mlp(block.mlp, h, per_track, gemm_bias)

    def _blocks(self, x, kv_cache):
        """Apply the sync rule of the module docstring over all 2*n_layer sublayers."""
        if self.policy.ladder:
            return self._ladder_blocks(x, kv_cache)
        group, parallel = self.tp_group, self.policy.parallel
        partial = self._partial_params()
        # a region runs between two syncs: its input f(x), the biases beta and per-track changes d
        # [k,B,T,C] so far, and d_summed [B,T,C], changes already summed over this rank's tracks
        region_x = beta = d = d_summed = block_beta = block_d = None
        for j, step in enumerate(self._plan):
            layer, sub = divmod(j, 2)
            block = self.transformer.h[layer]
            ln, proj = (block.ln_1, block.attn) if sub == 0 else (block.ln_2, block.mlp)

            if step.megatron:
                h = comm.copy_to_tp_region(autocast_input(layer_norm(x, ln.weight, ln.bias)), group)
                gemm_bias, bias = self._bias_into_partial(proj.c_proj.bias)
                y = comm.reduce_from_tp_region(self._sublayer(block, sub, h, False, kv_cache, layer, gemm_bias), group)
                x = x + self.resid_dropout(y if bias is None else y + bias)
                continue

            if region_x is None:
                region_x = comm.copy_to_tp_region(x, group)
            if sub == 0:
                block_beta, block_d = beta, d
            in_beta, in_d = (block_beta, block_d) if (parallel and sub == 1) else (beta, d)
            stream = region_x
            if in_d is not None:
                stream = stream + in_d if in_beta is None else stream + in_beta + in_d
            ln_w, ln_b = partial[step.ln_weight], None if step.ln_bias is None else partial[step.ln_bias]
            h = layer_norm(stream, ln_w, ln_b)
            out = self._sublayer(block, sub, h, step.per_track_out, kv_cache, layer)
            if step.proj_bias is not None:
                bias = partial[step.proj_bias]
                beta = bias if beta is None else beta + bias
            if step.per_track_out:
                d = out if d is None else d + out
                continue
            if d_summed is not None:
                out = out + d_summed
            if not step.sync:
                d_summed = out
                continue
            if d is not None:  # one track per rank: the sum over tracks is a view, not a reduce kernel
                out = out + (d[0] if self.k == 1 else d.sum(0))
            if self.tp_rank == 0 and beta is not None:
                out = out + beta.to(out.dtype)
            x = x + self.resid_dropout(comm.reduce_from_tp_region(out, group))
            region_x = beta = d = d_summed = None
        assert region_x is None, "the last sync point is always synced"
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
        mask = None
        if kv_cache is not None:
            kk, v = kv_cache.update(layer, kk, v, self.config.block_size)
            mask = kv_cache.attention_mask()
        y = self._sdpa(q, kk, v, attn.dropout if self.training else 0.0, diverged, mask)
        y = y.transpose(1, 2).reshape(*h.shape[:-1], -1)  # [B,T,Hl*hs] tracks concatenated, or [k,B,T,Hl/k*hs]
        return row_parallel(y, attn.c_proj.weight, k, per_track, gemm_bias)

    def _sdpa(self, q, k, v, dropout_p, tracks_in_batch, key_mask=None):
        """key_mask [1, Tk] (bool): the keys one query token may read (a static KV cache's filled part)."""
        Tq, Tk = q.shape[2], k.shape[2]
        if key_mask is not None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
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

    def full_shape(self, name, local_shape):
        """Shape of the full (unsharded) tensor whose shard on this rank has `local_shape`."""
        kind = shard_kind(name)
        if kind == "vocab":
            return (self.config.vocab_size, *local_shape[1:])
        if kind == "cols":
            return (local_shape[0], local_shape[1] * self.tp)
        if kind in ("qkv", "rows"):
            return (local_shape[0] * self.tp, *local_shape[1:])
        return tuple(local_shape)

    def local_tensor(self, name, full):
        """This rank's slice of a full tensor shaped like parameter `name` (weights, optimizer state)."""
        kind, n, (t0, t1) = shard_kind(name), self.config.n_tracks, self._track_slice()
        if kind is None:
            return full
        if kind == "vocab":
            v0, v1 = self._vocab_range()
            return full[v0:v1].contiguous()
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
        if kind == "vocab":
            return self._gather_vocab(local.transpose(0, -1), "checkpoint").transpose(0, -1).contiguous()
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
                want = self.full_shape(name, p.shape)
                if tuple(sd[name].shape) != want:
                    raise ValueError(f"{name}: the state_dict holds shape {tuple(sd[name].shape)}, "
                                     f"this model needs the full shape {want}")
                p.copy_(self.local_tensor(name, sd[name].to(p.dtype)))
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
        n = sum(math.prod(self.full_shape(name, p.shape)) for name, p in self.named_parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, decode="auto", compile_backend="inductor",
                 compile_mode="default"):
        """nanoGPT's sampling loop with a KV cache. Every TP rank draws the same tokens: logits are
        replicated after the final sync and all ranks share one RNG state.

        decode="eager": a KVCache whose attention reads the filled prefix (shapes change per token).
        decode="compiled": a StaticKVCache and one torch.compile(fullgraph=True) decode step for
        every position (the prompt's prefill stays eager). The same tokens up to float rounding.
        decode="graph" (CUDA only): the compiled step captured once as a CUDA graph, its TP
        all-reduces included, and replayed for every token: one launch per token.
        decode="auto": "graph" on CUDA, "eager" elsewhere.
        compile_mode: how torch.compile builds the decode step, a key of COMPILE_MODES
        (model/compile_modes.py)."""
        check_compile_mode(compile_mode)  # also when decode="eager" compiles nothing
        if decode == "auto":
            decode = "graph" if idx.is_cuda else "eager"
        if decode not in DECODE_MODES:
            raise ValueError(f"decode={decode!r}; allowed: {', '.join(map(repr, ('auto', *DECODE_MODES)))}")
        if decode == "graph" and not idx.is_cuda:
            raise ValueError(f"decode='graph' captures a CUDA graph; idx is on {idx.device} "
                             f"(use decode='compiled' or 'eager' there, or 'auto')")
        window = self.config.block_size
        if decode == "eager":
            cache, step = KVCache(self.config.n_layer), self.forward
        else:
            cache = StaticKVCache(self.config.n_layer, window)
            step = compile_step(self.forward, compile_backend, compile_mode)
        replay = None  # decode="graph": the captured step, made at the first decode position
        filled = None  # positions in the cache (host-side count: reading cache.pos would sync)
        for _ in range(max_new_tokens):
            if filled is not None and filled < window:
                if decode == "graph":
                    replay = replay or capture_decode_step(step, cache, idx_next)
                    logits = replay(idx_next)
                else:
                    logits, _ = step(idx_next, kv_cache=cache)  # not a view of idx, whose strides grow
                filled += 1
            else:  # first step, or the context outgrew block_size: recompute on the cropped window
                if decode == "eager":
                    cache = KVCache(self.config.n_layer)
                else:
                    cache.reset()  # refilled in place: a captured graph stays valid
                logits, _ = self(idx[:, -window:], kv_cache=cache)
                filled = min(idx.shape[1], window)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                # masked_fill and a slice: logits[mask] = -inf (a nonzero) and v[:, [-1]] (an index
                # tensor copied from the host) would each wait for the device every token
                logits = logits.masked_fill(logits < v[:, -1:], -float("Inf"))
            idx_next = sample_one(F.softmax(logits, dim=-1))
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def sample_one(probs):
    """torch.multinomial(probs, num_samples=1), without its waits for the device: the same tokens
    from the same RNG state, and the same RNG state after.

    PyTorch draws one category as the winner of an exponential race, argmax_v p_v / q_v with
    q ~ Exp(1) (Distributions.cpp), but first checks on the host that probs is a distribution:
    three .item() calls, so every sampled token waited for the whole step to finish and the host
    could never queue the next one. A softmax output needs no such check (logits holding NaN, from a
    diverged model, give arbitrary tokens here where torch.multinomial would raise)."""
    q = torch.empty_like(probs).exponential_(1)
    return torch.argmax(probs / q, dim=-1, keepdim=True)


DECODE_MODES = ("eager", "compiled", "graph")


def capture_decode_step(step, cache, token, warmup=2):
    """Capture one decode step, step(token, kv_cache=cache) on a filled StaticKVCache, as a CUDA
    graph; returns replay(token) -> logits (a buffer the next replay overwrites).

    The warm-up calls (which compile the step) decode `token` at the cache's current position and
    then rewind it: the real step writes the same keys and values there again. The capture itself
    runs nothing. On a TP group every rank captures, so every rank must call this at the same step."""
    static_token = token.clone()
    pos0 = cache.pos.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step(static_token, kv_cache=cache)
            cache.pos.copy_(pos0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_logits, _ = step(static_token, kv_cache=cache)

    def replay(token):
        static_token.copy_(token)
        graph.replay()
        return static_logits
    return replay
