"""Sampling from a GPT: KV caches, nanoGPT's generation loop, and its compiled / CUDA-graph decode.

decode="eager": a KVCache whose attention reads the filled prefix (shapes change per token).
decode="compiled": a StaticKVCache (fixed shapes: buffers of block_size positions, the position a
device tensor, one token's attention masked to index <= pos) and one torch.compile(fullgraph=True)
decode step for every position; the prompt's prefill stays eager.
decode="graph" (CUDA only): that compiled step captured once as a CUDA graph, its TP all-reduces
included, and replayed for every token: one launch per token.
Every TP rank draws the same tokens: logits are replicated after the final sync and all ranks
share one RNG state.
"""
import torch
from torch.nn import functional as F

from model.compile_modes import check_compile_mode, compile_step

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


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, decode="auto", compile_backend="inductor",
             compile_mode="default"):
    """nanoGPT's sampling loop with a KV cache: max_new_tokens tokens appended to idx [B, T].
    decode: "eager", "compiled" or "graph" (module docstring; compiled gives the same tokens up to
    float rounding), or "auto": "graph" on CUDA, "eager" elsewhere.
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
    window = model.config.block_size
    if decode == "eager":
        cache, step = KVCache(model.config.n_layer), model.forward
    else:
        cache = StaticKVCache(model.config.n_layer, window)
        step = compile_step(model.forward, compile_backend, compile_mode)
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
                cache = KVCache(model.config.n_layer)
            else:
                cache.reset()  # refilled in place: a captured graph stays valid
            logits, _ = model(idx[:, -window:], kv_cache=cache)
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

