"""What bench/tp_latency.py times, apart from how it times and tables it: the workloads (make_workload: a callable
running a prefill, a decode step or a training step on a model), the collectives one call issues (count_collectives,
count_torch_collectives), and its reference rows' model: PyTorch's own TP (torch.distributed.tensor.parallel) on a
plain baseline GPT of our shape (torch_tp_model).

PlainGPT has separate q/k/v projections, so ColwiseParallel splits whole heads, and the same
forward(idx, targets, kv_cache) as model.gpt.GPT, so the workloads drive either model.
"""
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from model.compile_modes import apply_exact_training_settings, compile_step
from model.generate import KVCache, StaticKVCache
from model.gpt import GPT, GPTConfig
from parallel import comm


def make_workload(model, name, seq, vocab, device, cuda, for_graph=False, compile_backend=None,
                  compile_mode="default"):
    """A no-argument callable running one instance of the workload on `model`. On CUDA an inference
    workload casts the model to bf16 for good, so build the training workload first. A training
    step to be captured runs autocast without its weight cache, whose casts would outlive capture.
    compile_backend: run torch.compile(model) (fullgraph for ours); our decode then uses a
    StaticKVCache, the fixed-shape step GPT.generate(decode='compiled') runs; compile_mode names
    its torch.compile settings (model/compile_modes.py)."""
    batch = 8 if name.endswith("b8") else 1
    idx = torch.randint(0, vocab, (batch, seq), device=device)
    static = compile_backend is not None and isinstance(model, GPT) and name.startswith("decode")
    cache = StaticKVCache(model.config.n_layer, seq) if static else KVCache(model.config.n_layer)
    if compile_backend is not None:
        apply_exact_training_settings(model.tp if isinstance(model, GPT) else 1)  # as the trainer compiles
        model = compile_step(model, compile_backend, compile_mode, fullgraph=isinstance(model, GPT))
    if name.startswith("train"):
        if next(model.parameters()).dtype != torch.float32:
            raise ValueError(f"train workload needs fp32 weights, the model holds {next(model.parameters()).dtype}")
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not for_graph) if cuda else nullcontext()
        targets = torch.randint(0, vocab, (batch, seq), device=device)

        def fn():
            with autocast:
                _, loss = model(idx, targets)
            loss.backward()
            for p in model.parameters():
                p.grad = None
        return fn
    if cuda:
        model.to(torch.bfloat16)
    if name.startswith("prefill"):
        def fn():
            with torch.no_grad():
                model(idx)
        return fn
    with torch.no_grad():
        (model._orig_mod if compile_backend is not None else model)(idx[:, :seq - 1], kv_cache=cache)  # eager prefill
    token = idx[:, -1:].contiguous()

    def fn():
        with torch.no_grad():
            model(token, kv_cache=cache)
        cache.pos -= 1  # every call decodes the same position (in place for a StaticKVCache's tensor)
    return fn


def count_collectives(fn):
    comm.stats.reset()
    fn()
    c = comm.stats.snapshot()  # the _ag kinds: sequence parallelism's all-gathers (--tp_comm)
    return c.get("tp_fwd", 0) + c.get("tp_fwd_ag", 0), c.get("tp_bwd", 0) + c.get("tp_bwd_ag", 0) + c.get("tp_grad", 0)


# ----------------------------------------------------------------------------- PyTorch TP reference
class PlainBlock(nn.Module):
    def __init__(self, n_embd, n_head, bias=True):
        super().__init__()
        self.head_size = n_embd // n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd, bias=bias), nn.LayerNorm(n_embd, bias=bias)
        self.q, self.k, self.v = (nn.Linear(n_embd, n_embd, bias=bias) for _ in range(3))
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.c_fc, self.mlp_proj = nn.Linear(n_embd, 4 * n_embd, bias=bias), nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x, kv_cache=None, layer=0, max_len=0):
        B, T, _ = x.shape
        h = self.ln_1(x)
        # after ColwiseParallel each rank holds n_head / tp heads: -1 infers the local count
        q, k, v = (lin(h).view(B, T, -1, self.head_size).transpose(1, 2) for lin in (self.q, self.k, self.v))
        if kv_cache is not None:
            k, v = kv_cache.update(layer, k, v, max_len)
        if T != k.shape[2] and T != 1:
            raise ValueError(f"PlainGPT attends a chunk of {T} tokens only from an empty cache, or 1 token")
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1).transpose(1, 2).reshape(B, T, -1)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class PlainGPT(nn.Module):
    """nanoGPT's baseline GPT with separate q/k/v projections, so ColwiseParallel splits whole heads,
    and the same forward(idx, targets, kv_cache) as model.gpt.GPT."""

    def __init__(self, n_layer, n_head, n_embd, vocab, block_size, bias=True):
        super().__init__()
        self.config = GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab,
                                block_size=block_size, bias=bias)
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(PlainBlock(n_embd, n_head, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)

    def forward(self, idx, targets=None, kv_cache=None):
        pos0 = kv_cache.pos if kv_cache is not None else 0
        x = self.wte(idx) + self.wpe(torch.arange(pos0, pos0 + idx.shape[1], device=idx.device))
        for layer, block in enumerate(self.h):
            x = block(x, kv_cache, layer, self.config.block_size)
        if kv_cache is not None:
            kv_cache.pos += idx.shape[1]
        x = self.ln_f(x)
        if targets is None:
            return F.linear(x[:, -1:], self.wte.weight), None
        logits = F.linear(x, self.wte.weight)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class CountedFunctionalCollectives(TorchDispatchMode):
    """Counts the collectives DTensor issues (c10d functional ops), split into forward and backward:
    PyTorch's TP does not go through parallel.comm, so this is its counterpart for torch_tp rows."""

    def __init__(self):
        super().__init__()
        self.fwd = self.bwd = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "_c10d_functional" and not func.__name__.startswith(("wait", "_")):  # not wait/wrap
            if torch._C._current_graph_task_id() == -1:
                self.fwd += 1
            else:
                self.bwd += 1
        return func(*args, **(kwargs or {}))


def count_torch_collectives(fn):
    with CountedFunctionalCollectives() as counter:
        fn()
    return counter.fwd, counter.bwd


def torch_tp_model(shape, vocab, seq, device, tp, bias=True):
    """PlainGPT of `shape` (n_layer, n_head, n_embd), its blocks parallelized over a mesh of every rank when tp > 1.
    Seeded as ours, so every rank holds the same full weights before sharding."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(0)
    model = PlainGPT(**shape, vocab=vocab, block_size=seq, bias=bias).to(device)
    if tp > 1:
        mesh = init_device_mesh(device.split(":")[0], (tp,))
        plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                "c_proj": RowwiseParallel(), "c_fc": ColwiseParallel(), "mlp_proj": RowwiseParallel()}
        for block in model.h:
            parallelize_module(block, mesh, plan)
    return model

