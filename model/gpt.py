"""GPT-2 (nanoGPT names, shapes and init) with real Megatron tensor parallelism and sync policies.

Tracks. The architecture has n_tracks shards. Track t owns heads [t*H/n, (t+1)*H/n) (its rows of
c_attn, its input rows of attn.c_proj) and hidden units [t*4C/n, (t+1)*4C/n) of the MLP (its rows
of c_fc, its input rows of mlp.c_proj). A tensor-parallel group of tp ranks (tp | n_tracks) gives
rank r the k = n_tracks/tp tracks [r*k, (r+1)*k). The function computed never depends on tp.

Sync rule (Block.forward). Sync point p (p = 2l after the attention of layer l, p = 2l+1 after its
MLP) either all-reduces or not, as the policy says (model/sync_policy.py). Let x be the shared
(replicated) residual stream at the last sync. Each track keeps its own stream

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
stack, whose backward sums them over the TP group once per backward. Every track's stream
holds the region's biases, so the region's last GEMM adds a bias that leaves each of them once in
the all-reduced sum (TP rank 0's; model/plan.py). Under autocast a
replicated activation is cast to the compute dtype before it enters f, so f's backward all-reduces
a bf16 gradient (the cast happens in the next matmul anyway). A region's entry f(x) takes the fp32
stream itself (its tracks add to it), so its gradient is fp32: at tp > 1 it is sent in bf16 and
cast back, and a region's change is summed in bf16 before g, so a region's all-reduces move the
bytes of a Megatron sublayer's (fp32 had doubled them: issue 49's profile of spd's training).
With async_grad_allreduce (a runtime option of GPT, off by default and not in GPTConfig) every f
that sits directly before a column-parallel GEMM (a Megatron sublayer's f(LN x), a region's entry
f(x) with its first sublayer's LayerNorm, the LM head's) is fused with that GEMM, so that f's backward
all-reduce travels while the GEMM's weight gradient is computed (parallel/async_grad.py): the same function,
collectives and counts.

Regions. Inside a region each track carries its own stream s_t = x + beta + d_t, as Megatron
carries x: a sublayer reads LN(s_t), its GEMM adds its bias, and s_t += o_t is its one residual
add. At the region's sync this rank sends sum_t (s_t - xin) + the summed outputs, or sum_t o_t
itself while the streams hold one output (spd), so one track per rank (k = 1) runs the kernels of
a Megatron sublayer (issue 49: rebuilding s_t = x + beta + d_t from its parts before every
LayerNorm cost 5-22% more than baseline with every collective skipped; bench/results/issue49/).
Diverged tracks carry a leading track dim k (none at k = 1): their LayerNorms, residual adds and
GEMMs (batched) run over all k tracks at once (model/tp_layers.py). While all tracks of a rank
read the same input (right after a sync) each projection is one matmul over the rank's
concatenated shards (plain Megatron TP).

Sequence parallelism (GPT.set_sequence_parallel, off by default; parallel/sequence.py). Between a sync point and
the next region's entry the shared stream is split by tokens over the TP group: rank r keeps its chunk of x, and the
LayerNorm of a Megatron sublayer, the residual add and residual dropout act on it. A sync's g becomes a
reduce-scatter of the partial sum (the ladder's is launched without waiting, as its all-reduce is), and an entry's f
an all-gather: of LN(x) in the compute dtype for a Megatron sublayer, of the fp32 stream x itself for a track-local
region (its tracks add to it, on every token: inside a region nothing is sharded). The same function: every sharded
op acts token by token, dropout keeps its chunk of the whole tensor's mask, the embedding's all-reduce becomes a
reduce-scatter and the head gathers ln_f's output. Replicated parameters read on a chunk get the whole gradient:
the sharded LayerNorms (and ln_f) take slots in the partial-grad list (one f), and the sync's bias and the position
embedding are added before the reduce-scatter on TP rank 0 and as p - p.detach() (exactly 0) elsewhere, so every
rank's gradient is the sum over all tokens that the reduce-scatter's backward gathers (Block.rank0_bias).
With tp_comm_overlap (GPT.set_tp_comm_overlap, parallel/overlap.py) a Megatron sublayer's all-gather is fused with
its column-parallel GEMM and its reduce-scatter with its row-parallel GEMM (the head's all-gather too), in row pieces
that travel while their neighbours' GEMMs compute; the same function.

torch.compile. forward() reads the policy only through self._plan (built once per policy: per sync
point a few booleans and indices) and the collectives are traceable (parallel/comm.py), so the
model compiles with fullgraph=True; counts come from eager passes and from the plan. Parameters
are this rank's shards under nanoGPT's names; state_dict() / load_state_dict() use full tensors
(model/sharding.py). Sampling: model/generate.py.
"""
import copy
import dataclasses
import math
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
from torch.nn import functional as F

from model import generate as sampling
from model import sharding
from model.gpt_config import GPTConfig, parse_tp_comm_overlap  # noqa: F401 -- GPTConfig re-exported: imported from here
from model.plan import build_plan
from model.tp_layers import (ColumnParallelLinear, LayerNorm, RowParallelLinear, VocabParallelEmbedding,
                             vocab_parallel_cross_entropy)
from parallel import async_grad, comm
from parallel import overlap
from parallel import sequence as seq


def autocast_input(h):
    """h in the dtype autocast gives it in the next matmul. A replicated activation is cast before it
    enters f, so f's backward all-reduces a bf16 gradient, not the fp32 one of LayerNorm's output."""
    return h.to(comm.compute_dtype(h))  # without autocast, h itself


class Streams(NamedTuple):
    """The residual streams between two sublayers (module docstring's x, d_t and beta)."""
    x: torch.Tensor                        # the shared stream at the last sync (replicated)
    xin: Optional[torch.Tensor] = None     # f(x): the input of the open region (None: no region open)
    d: Optional[torch.Tensor] = None       # the tracks' outputs while the region has one ([k,B,T,C], [B,T,C] at k=1)
    summed: Optional[torch.Tensor] = None  # outputs already summed over this rank's tracks (not in s)
    pending: Optional[tuple] = None        # ladder: (partial sum being all-reduced, its handle, bias)
    s: Optional[torch.Tensor] = None       # each track's stream s_t = x + beta + d_t (None: xin; k=1: [B,T,C])


class CausalSelfAttention(nn.Module):
    """This rank's heads: c_attn column-parallel (by heads), c_proj row-parallel."""

    def __init__(self, config, k, tp_rank, layer):
        super().__init__()
        C, n = config.n_embd, config.n_tracks
        self.k, self.tp_rank, self.layer, self.n_head = k, tp_rank, layer, config.n_head
        self.head_size, self.block_size = C // config.n_head, config.block_size
        self.c_attn = ColumnParallelLinear(C, 3 * C * k // n, k, config.bias, qkv=True)
        self.c_proj = RowParallelLinear(C * k // n, C, k, config.bias)
        self.dropout = config.dropout

    def forward(self, h, per_track=False, bias=None, kv_cache=None, projected=None, row_input=False):
        """h: shared [B,T,C] -> heads [B, Hl, T, hs]; per track [k,B,T,C] -> the tracks go into the
        batch, [k*B, Hl/k, T, hs], so q, k, v stay views of the projection (no copies).
        projected: c_attn(h) already computed (the caller fused it with f; h is then unused).
        row_input: return c_proj's input instead (the caller fuses c_proj with its collective)."""
        hs = self.head_size
        qkv = self.c_attn(h) if projected is None else projected
        lead = qkv.shape[:-1]
        diverged = qkv.dim() == 4
        T = qkv.shape[-2]
        qkv = qkv.reshape(-1, T, 3, qkv.shape[-1] // (3 * hs), hs)  # [B or k*B, T, 3, heads, hs]
        q, key, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        mask = None
        if kv_cache is not None:
            key, v = kv_cache.update(self.layer, key, v, self.block_size)
            mask = kv_cache.attention_mask()
        y = self.attend(q, key, v, self.dropout if self.training else 0.0, diverged, mask)
        y = y.transpose(1, 2).reshape(*lead, -1)  # [B,T,Hl*hs] tracks concatenated, or [k,B,T,Hl/k*hs]
        return y if row_input else self.c_proj(y, per_track, bias)

    def attend(self, q, k, v, dropout_p, tracks_in_batch, key_mask=None):
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
            keep = torch.rand(B, self.n_head, Tq, Tk, device=q.device) >= dropout_p
            keep = keep[:, self.tp_rank * Hl:(self.tp_rank + 1) * Hl]
            if tracks_in_batch:  # [B, k*h, ...] -> [k*B, h, ...]
                keep = keep.view(B, self.k, -1, Tq, Tk).transpose(0, 1).reshape(-1, Hl // self.k, Tq, Tk)
            att = att * keep / (1.0 - dropout_p)
        return att @ v


class MLP(nn.Module):
    """This rank's hidden units: c_fc column-parallel, GELU, c_proj row-parallel."""

    def __init__(self, config, k):
        super().__init__()
        C, n = config.n_embd, config.n_tracks
        self.c_fc = ColumnParallelLinear(C, 4 * C * k // n, k, config.bias)
        self.c_proj = RowParallelLinear(4 * C * k // n, C, k, config.bias)

    def forward(self, h, per_track=False, bias=None, projected=None, row_input=False):
        """projected: c_fc(h) already computed (the caller fused it with f; h is then unused).
        row_input: return c_proj's input instead (the caller fuses c_proj with its collective)."""
        z = F.gelu(self.c_fc(h) if projected is None else projected)
        return z if row_input else self.c_proj(z, per_track, bias)


class Block(nn.Module):
    """One layer, its two sync points applied as its Steps say (the module docstring's sync rule)."""

    def __init__(self, config, k, tp_group, layer):
        super().__init__()
        self.k, self.tp_group = k, tp_group
        self.tp, self.tp_rank = comm.group_size(tp_group), comm.group_rank(tp_group)
        self.ln_1 = LayerNorm(config.n_embd, config.bias)
        self.attn = CausalSelfAttention(config, k, self.tp_rank, layer)
        self.ln_2 = LayerNorm(config.n_embd, config.bias)
        self.mlp = MLP(config, k)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.async_grad = False  # GPT.set_async_grad_allreduce: f fused with the next column GEMM
        self.comm_overlap = None  # GPT.set_tp_comm_overlap: (mode, chunks) under sequence parallelism, else None

    def forward(self, streams, steps, partial, kv_cache=None, sp=None):
        """sp: None, or under sequence parallelism the full [B,T,C] shape (streams.x is then this rank's token chunk)."""
        def attn(h, per_track, bias=None, projected=None, row_input=False):
            return self.attn(h, per_track, bias, kv_cache, projected, row_input)
        block_input = streams
        streams = self.sublayer(streams, streams, steps[0], self.ln_1, attn, self.attn.c_attn, self.attn.c_proj,
                                partial, sp)
        reads = block_input if steps[1].block_input else streams
        return self.sublayer(streams, reads, steps[1], self.ln_2, self.mlp, self.mlp.c_fc, self.mlp.c_proj, partial,
                             sp)

    def sublayer(self, st, reads, step, ln, run, column, row, partial, sp=None):
        """One sync point: run(h, per_track, bias) on the LayerNorm of the stream(s) that `reads` holds,
        then sync or keep the output in the region, as `step` says. With self.async_grad, the f that
        enters a region is fused with `column` (the sublayer's first, column-parallel GEMM, on the
        shared input) so that its backward all-reduce overlaps that GEMM's weight gradient
        (parallel/async_grad.py); run then gets the GEMM's output as `projected`. With self.comm_overlap (sequence
        parallel), a Megatron sublayer's all-gather is fused with `column` and its reduce-scatter with `row`, its
        row-parallel GEMM (parallel/overlap.py), save the ladder's, which overlaps its own."""
        group, proj_bias = self.tp_group, row.bias
        fuse = self.async_grad and torch.is_grad_enabled()
        if step.megatron and sp is not None and self.comm_overlap is not None:
            return self.overlapped_sublayer(st, step, ln, run, column, row, partial, sp)
        if step.megatron and sp is not None:  # Megatron's sequence-parallel sublayer: AG(LN x) ... RS(partial sum)
            ln_bias = None if step.ln_bias is None else partial[step.ln_bias]
            h = seq.gather_tokens(autocast_input(ln(st.x, partial[step.ln_weight], ln_bias)), group, sp)
            out = run(h, False, self.rank0_bias(proj_bias))
            if step.ladder:  # the reduce-scatter travels while the next sublayer computes from st.x
                chunk, handle = seq.scatter_tokens_async(out, group)
                return Streams(self.add_pending(st, after=handle, sp=sp), pending=(chunk, handle, None))
            return Streams(self.residual(st.x, seq.scatter_tokens(out, group), None, sp))
        if step.megatron:  # shared input: h = f(LN x) ... g(partial sum), Megatron's sublayer
            gemm_bias, bias = self.bias_into_partial(proj_bias)
            if fuse:
                h = autocast_input(ln(st.x))
                projected = async_grad.copy_to_tp_region_linear(h, column.weight, column.bias, group)
                out = run(h, False, gemm_bias, projected)
            else:
                h = comm.copy_to_tp_region(autocast_input(ln(st.x)), group)
                out = run(h, False, gemm_bias)
            if step.ladder:  # the all-reduce travels while the next sublayer computes from st.x
                partial_sum, handle = comm.reduce_from_tp_region_async(out, group)
                return Streams(self.add_pending(st, after=handle), pending=(partial_sum, handle, bias))
            return Streams(self.residual(st.x, comm.reduce_from_tp_region(out, group), bias))

        return self.region_sublayer(st, reads, step, ln, run, column, partial, fuse, sp)

    def overlapped_sublayer(self, st, step, ln, run, column, row, partial, sp):
        """Megatron's sequence-parallel sublayer with tp_comm_overlap: AG(LN x) W_column^T as one overlapped op, and
        RS(z W_row^T) + b as another (parallel/overlap.py); the ladder's reduce-scatter stays the one launched
        without waiting, which its next sublayer already overlaps."""
        group, overlapped = self.tp_group, self.comm_overlap
        ln_bias = None if step.ln_bias is None else partial[step.ln_bias]
        h = autocast_input(ln(st.x, partial[step.ln_weight], ln_bias))
        projected = overlap.gather_linear(h, column.weight, column.bias, group, overlapped).view(*sp[:2], -1)
        if step.ladder:
            chunk, handle = seq.scatter_tokens_async(run(None, False, self.rank0_bias(row.bias), projected), group)
            return Streams(self.add_pending(st, after=handle, sp=sp), pending=(chunk, handle, None))
        y = overlap.linear_scatter(run(None, False, None, projected, row_input=True), row.weight, row.bias, group,
                                   overlapped)
        return Streams(self.residual(st.x, y, None, sp))

    def region_sublayer(self, st, reads, step, ln, run, column, partial, fuse, sp=None):
        """A sublayer inside a track-local region: this rank's k tracks read their own streams s_t
        (module docstring, "Regions"), and only the region's last sublayer all-reduces."""
        group, k = self.tp_group, self.k
        ln_weight, ln_bias = partial[step.ln_weight], None if step.ln_bias is None else partial[step.ln_bias]
        # a synced sublayer's GEMM adds the region's biases, so that the all-reduce holds each once
        slot = step.sync_bias if step.sync_bias is not None else step.proj_bias
        bias = None if slot is None else partial[slot]
        per_track = step.per_track and k > 1  # one track: its output is [B,T,C], no track dim
        if fuse and st.xin is None and reads.s is None:  # the region's entry: LN(f(x)), f fused with the GEMM
            xin, projected = async_grad.copy_to_tp_region_ln_linear(st.x, ln_weight, ln_bias, column.weight,
                                                                    column.bias, group)
            out = run(None, per_track, bias, projected)
        else:
            xin = st.xin
            if xin is None and sp is not None:  # the fp32 stream itself: the region's tracks add to it
                xin = seq.gather_tokens(st.x, group, sp, reduce_dtype=comm.compute_dtype(st.x))
            elif xin is None:
                xin = comm.copy_to_tp_region(st.x, group, reduce_dtype=comm.compute_dtype(st.x))
            out = run(ln(reads.s if reads.s is not None else xin, ln_weight, ln_bias), per_track, bias)
        if step.per_track:  # a later sublayer of the region reads it: into each track's stream
            first = st.s is None
            return Streams(st.x, xin, out if first else None, st.summed, s=(xin if first else st.s) + out)
        summed = out if st.summed is None else st.summed + out
        if not step.sync:  # parallel's attention: only the synced sum reads it
            return Streams(st.x, xin, st.d, summed, s=st.s)
        change = summed
        if st.d is not None:  # the tracks' streams hold one output: sum it over the tracks
            change = change + (st.d if k == 1 else st.d.sum(0).to(change.dtype))  # CUDA autocast sums in fp32
        elif st.s is not None:  # sum_t (s_t - xin); xin's two uses cancel exactly in autograd
            tracks = st.s - xin if k == 1 else torch.sub(st.s.sum(0), xin, alpha=k)
            change = change + tracks.to(change.dtype)
        if sp is not None:
            return Streams(self.residual(st.x, seq.scatter_tokens(change, group), None, sp))
        return Streams(self.residual(st.x, comm.reduce_from_tp_region(change, group)))

    def residual(self, x, y, bias=None, sp=None):
        y = y if bias is None else y + bias
        if sp is not None:  # y: this rank's token chunk; dropout with the whole tensor's mask
            return x + seq.token_dropout(y, self.resid_dropout.p, self.training, sp, self.tp_group)
        return x + self.resid_dropout(y)

    def rank0_bias(self, bias):
        """The bias of a sequence-parallel sync point, for this rank's GEMM before the reduce-scatter: b on TP rank
        0, b - b.detach() (exactly 0) elsewhere, so the sum holds it once and every rank's gradient of b is the sum
        over all tokens (the reduce-scatter's backward gathers the output gradient): no bias add after the sum and
        no gradient all-reduce. The rank enters as a value, not an `if` (every rank traces the same graph)."""
        if bias is None:
            return None
        return bias - bias.detach() * float(self.tp_rank != 0)

    def add_pending(self, st, after=None, sp=None):
        """st.x plus the ladder's all-reduce in flight, once it has arrived. after: the handle of the one launched
        since (compiled, this wait follows its launch: parallel/comm.py, wait_reduce)."""
        if st.pending is None:
            return st.x
        partial_sum, handle, bias = st.pending
        wait = comm.wait_reduce if sp is None else seq.wait_scatter
        return self.residual(st.x, wait(partial_sum, handle, after=after), bias, sp)

    def bias_into_partial(self, bias):
        """(bias for this rank's GEMM, bias to add after the all-reduce) of a Megatron sync point.
        Megatron adds the replicated bias after the all-reduce, one broadcast add per sublayer.
        Where its gradient needs no TP sum (one rank, or no autograd) rank 0 adds it in the GEMM
        instead and the all-reduce sums it once: the same function, one kernel fewer."""
        if bias is None or (self.tp > 1 and torch.is_grad_enabled()):
            return None, bias
        return (bias if self.tp_rank == 0 else None), None


class GPT(nn.Module):
    def __init__(self, config, tp_group=None, async_grad_allreduce=False, sequence_parallel=False,
                 tp_comm_overlap="off"):
        """Full weights are drawn from the current global torch RNG (call torch.manual_seed with the
        same seed on every rank first), as nanoGPT does; this rank keeps its slice.
        async_grad_allreduce, sequence_parallel, tp_comm_overlap: runtime options, not part of the architecture
        (not in config, nor in checkpoints): see set_async_grad_allreduce, set_sequence_parallel and
        set_tp_comm_overlap."""
        super().__init__()
        c = copy.copy(config)  # ours: set_sync_policy replaces it; a copy keeps the parsed policy
        self.tp_group, self.tp, self.tp_rank = tp_group, comm.group_size(tp_group), comm.group_rank(tp_group)
        if c.n_tracks % self.tp != 0:
            divisors = [d for d in range(1, c.n_tracks + 1) if c.n_tracks % d == 0]
            raise ValueError(f"n_tracks={c.n_tracks} is not divisible by tp={self.tp}; "
                             f"tp must be one of {divisors}")
        if c.vocab_size < self.tp:
            raise ValueError(f"vocab_size={c.vocab_size} is smaller than tp={self.tp}: every TP rank needs "
                             f"at least one vocabulary row")
        self.config, self.k = c, c.n_tracks // self.tp  # k: tracks on this rank
        self.transformer = nn.ModuleDict(dict(
            wte=VocabParallelEmbedding(c.vocab_size, c.n_embd, tp_group),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout),
            h=nn.ModuleList([Block(c, self.k, tp_group, layer) for layer in range(c.n_layer)]),
            ln_f=LayerNorm(c.n_embd, c.bias),
        ))
        self.shard_kind = sharding.shard_kinds(self)
        for name, p in self.named_parameters():
            p.tensor_parallel = self.shard_kind[name] is not None
        self.async_grad_allreduce, self.sequence_parallel = False, False
        self.set_tp_comm_overlap(tp_comm_overlap)
        self.set_sequence_parallel(sequence_parallel)
        self.set_async_grad_allreduce(async_grad_allreduce)
        self.load_state_dict(sharding.init_full_weights(self))

    # ---------------------------------------------------------------- the policy as a plan
    def set_sync_policy(self, spec):
        """Switch to another sync policy (same parameters), e.g. to evaluate dropped syncs zero-shot."""
        self.config = dataclasses.replace(self.config, sync_policy=spec)  # parses and checks spec
        self._plan_sublayers()

    def set_async_grad_allreduce(self, on):
        """Megatron's async grad all-reduce: every f that enters a region directly before a column-
        parallel GEMM (each Megatron/ladder sublayer's, each track-local region's entry, and the LM
        head's) is fused with that GEMM, so f's backward all-reduce of the input gradient is launched
        before the GEMM's weight gradient and waited for after it (parallel/async_grad.py). The same function,
        the same collectives and counts. At tp=1 there is nothing to overlap: it stays off; under sequence
        parallelism there is no f to fuse (an all-gather enters a region instead): it stays off too."""
        self.async_grad_requested = bool(on)
        self.async_grad_allreduce = bool(on) and self.tp > 1 and not self.sequence_parallel
        for block in self.transformer.h:
            block.async_grad = self.async_grad_allreduce

    def set_sequence_parallel(self, on):
        """Megatron's sequence parallelism (parallel/sequence.py): between a sync point and the next region's
        entry, the shared stream x, the LayerNorm that reads it and residual dropout act on this rank's chunk of
        the tokens; a sync's all-reduce becomes a reduce-scatter and the entry's f an all-gather. The same function,
        the same sync points. Region entries gather the fp32 stream (a region's tracks add to it), Megatron
        sublayers the LayerNorm's output in the compute dtype. Only without a KV cache (decoding runs as before).
        At tp=1 it changes nothing but the counted kinds."""
        on = bool(on)
        if on and self.config.block_size % self.tp:
            raise ValueError(f"sequence_parallel needs block_size divisible by tp; block_size="
                             f"{self.config.block_size} is not divisible by tp={self.tp}")
        self.sequence_parallel = on
        self._plan_sublayers()
        self.set_async_grad_allreduce(getattr(self, "async_grad_requested", False))
        self.set_tp_comm_overlap(self.tp_comm_overlap_requested)

    def set_tp_comm_overlap(self, spec):
        """Megatron's --tp-comm-overlap, under sequence parallelism (parallel/overlap.py): 'off'; 'chunked' or
        'chunked:K', each Megatron sublayer's all-gather and reduce-scatter (and the head's all-gather) split into K
        row pieces that travel while the neighbouring pieces' GEMMs compute; 'async_tp', the same collectives written
        as the pattern inductor's micro-pipeline TP pass fuses (CUDA, NCCL, symmetric memory on the TP group; the
        trainer sets those up). The same function. Without sequence parallelism there is no all-gather or
        reduce-scatter to overlap: it stays off until sequence parallelism is on. A bad spec raises ValueError."""
        parsed = parse_tp_comm_overlap(spec)
        self.tp_comm_overlap_requested = spec
        self.comm_overlap = parsed if self.sequence_parallel else None
        for block in self.transformer.h:
            block.comm_overlap = self.comm_overlap

    def _plan_sublayers(self):
        """The plan the forward reads instead of the policy (model/plan.py): per layer the Steps of its two sync
        points, the replicated parameters whose gradients one f sums, and the regions' synced-bias coefficients."""
        plan = build_plan(self.config.policy, self.transformer, self.k, self.tp_rank, self.sequence_parallel)
        self.policy, self.syncs_per_forward = self.config.policy, self.config.policy.n_syncs
        self._plan, self._partial_tensors, self._ln_f_slots = plan.layers, plan.partial, plan.ln_f_slots
        old = getattr(self, "sync_bias_coeffs", None)  # Parameters persist across .to(); this buffer follows it
        coeffs = plan.sync_bias_coeffs
        self.register_buffer("sync_bias_coeffs", coeffs if old is None else coeffs.to(old.device, old.dtype),
                             persistent=False)

    def _partial_params(self):
        """Replicated params used inside track-local regions, through one f: their grads get summed.
        Returns a list aligned with the plan's slots."""
        tensors = self._partial_tensors
        if not tensors or not torch.is_grad_enabled() or self.tp == 1:
            return tensors  # one rank: nothing to sum
        # every slot is a [n_embd] vector: one stack, one f (one all-reduce of their gradients in backward)
        stacked = comm.copy_to_tp_region(torch.stack(tensors), self.tp_group, "tp_grad")
        return list(stacked.unbind(0))

    def _sync_biases(self, partial):
        """Every region's synced-GEMM bias (model/plan.py), from the partial params: one matmul."""
        if not self.sync_bias_coeffs.shape[0]:
            return []
        return list((self.sync_bias_coeffs.to(partial[0].dtype) @ torch.stack(partial)).unbind(0))

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
        wte = self.transformer.wte
        sp = (B, T, self.config.n_embd) if self.sequence_parallel and kv_cache is None else None
        if sp is not None and T % self.tp:
            raise ValueError(f"sequence_parallel needs a sequence length divisible by tp={self.tp}; got {T}")
        partial = self._partial_params()
        partial = partial + self._sync_biases(partial)  # the plan's sync_bias slots follow the params'
        if sp is None:
            streams = Streams(self.transformer.drop(wte(idx) + self.transformer.wpe(pos)))
        else:
            streams = Streams(self.embed_token_chunk(idx, pos, sp))
        for block, steps in zip(self.transformer.h, self._plan):
            streams = block(streams, steps, partial, kv_cache, sp)
        assert streams.xin is None, "the last sync point is always synced"
        x = self.transformer.h[-1].add_pending(streams, sp=sp)
        if kv_cache is not None:
            kv_cache.advance(T)
        if sp is not None:  # ln_f on this rank's tokens; the vocabulary-parallel head reads every token
            (w, b), head_input = self._ln_f_slots, (autocast_input if self.tp > 1 else lambda h: h)
            h = head_input(self.transformer.ln_f(x, partial[w], None if b is None else partial[b]))
            if self.comm_overlap is not None and targets is not None and self.tp > 1:  # the head's GEMM overlaps
                logits = overlap.gather_linear(h, wte.weight, None, self.tp_group, self.comm_overlap, ("vocab", "vocab"))
                return None, vocab_parallel_cross_entropy(logits, targets, wte.v0, self.tp_group)
            return self.head(seq.gather_tokens(h, self.tp_group, sp, "vocab", "vocab"), targets, True)
        return self.head(self.transformer.ln_f(x), targets)

    def embed_token_chunk(self, idx, pos, sp):
        """Sequence parallel: this rank's token chunk of drop(wte(idx) + wpe(pos)). The embedding's all-reduce
        becomes a reduce-scatter; TP rank 0 adds the position embedding before it and the others add
        pe - pe.detach() (exactly 0), so every rank's wpe gradient is the whole one (the reduce-scatter's
        backward gathers the output gradient), with no gradient all-reduce. Each token's sum is as without
        sequence parallelism: one rank holds its row, and adding zeros is exact."""
        wte, pe = self.transformer.wte, self.transformer.wpe(pos)
        pe = pe - pe.detach() * float(self.tp_rank != 0)
        x = seq.scatter_tokens(wte.masked_rows(idx) + pe, self.tp_group, "vocab", "vocab")
        return seq.token_dropout(x, self.transformer.drop.p, self.training, sp, self.tp_group)

    def head(self, x, targets, gathered=False):
        """(logits, loss) from the final LayerNorm's output x [B,T,C] (forward's docstring). gathered: x came
        through an all-gather (sequence parallel), whose backward already sums its gradient over the TP group."""
        wte = self.transformer.wte
        if targets is None:
            logits = F.linear(x[:, -1:, :], wte.weight)  # a slice: capturable in CUDA graphs
            return (logits if self.tp == 1 else wte.gather(logits)), None
        if self.tp == 1:
            logits = F.linear(x, wte.weight)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        if gathered:
            logits = F.linear(x, wte.weight)
        elif self.async_grad_allreduce:
            logits = async_grad.copy_to_tp_region_linear(autocast_input(x), wte.weight, None, self.tp_group, "vocab")
        else:
            logits = F.linear(comm.copy_to_tp_region(autocast_input(x), self.tp_group, "vocab"), wte.weight)
        return None, vocab_parallel_cross_entropy(logits, targets, wte.v0, self.tp_group)

    # ---------------------------------------------------------------- full tensors (model/sharding.py)
    def full_shape(self, name, local_shape):
        return sharding.full_shape(self, name, local_shape)

    def local_tensor(self, name, full):
        return sharding.local_tensor(self, name, full)

    def full_tensor(self, name, local):
        return sharding.full_tensor(self, name, local)

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Full, unsharded tensors under nanoGPT's key names (a collective over the TP group)."""
        return sharding.full_state_dict(self, destination, prefix, keep_vars)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Load full nanoGPT-named tensors at any tp."""
        return sharding.load_full_state_dict(self, state_dict, strict)

    # ---------------------------------------------------------------- utilities
    def get_num_params(self, non_embedding=True):
        """Parameters of the full model (shards counted once across the TP group), as nanoGPT."""
        n = sum(math.prod(self.full_shape(name, p.shape)) for name, p in self.named_parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, decode="auto", compile_backend="inductor",
                 compile_mode="default"):
        """nanoGPT's sampling loop (model/generate.py)."""
        return sampling.generate(self, idx, max_new_tokens, temperature, top_k, decode, compile_backend, compile_mode)
