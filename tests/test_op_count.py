"""One track per rank runs the kernels of Megatron's sublayers (issue 49): counted, not timed.

With one track per rank (k = 1) a policy's region should launch what the Megatron sublayers it
replaces launch, plus a constant: the GPU floors of bench/results/issue49/ followed the extra ops
(dcba9e8's spd had 5 more per layer and a decode-floor 1.12x baseline's). Counted here on CPU, as
top-level aten ops that compute (views excluded) in one no-grad forward, by torch.profiler: an
independent counter of what the forward runs. Bound: at most 2 ops more than baseline per region
(sum_t (s_t - xin) and its add to the sum) plus 2 per forward (the one matmul that makes every
region's sync bias, and the stack it reads)."""
import functools

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from model.generate import KVCache
from model.gpt import GPT, GPTConfig

VIEWS = {"aten::view", "aten::reshape", "aten::transpose", "aten::permute", "aten::unbind", "aten::select",
         "aten::slice", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::as_strided", "aten::t",
         "aten::split", "aten::detach", "aten::alias", "aten::_unsafe_view", "aten::empty", "aten::lift_fresh",
         "aten::split_with_sizes", "aten::to", "aten::contiguous", "aten::chunk", "aten::narrow", "aten::empty_like",
         "aten::_to_copy", "aten::flatten", "aten::dropout"}


@functools.lru_cache(maxsize=None)
def compute_ops(policy, decode):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=64, block_size=32, vocab_size=128, n_tracks=1,
                          sync_policy=policy)).eval()
    idx = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        cache = KVCache(4) if decode else None
        if decode:
            model(idx, kv_cache=cache)
            idx = idx[:, -1:]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(idx, kv_cache=cache)
    return sum(1 for e in prof.events()
               if e.cpu_parent is None and e.name.startswith("aten::") and e.name not in VIEWS)


@pytest.mark.parametrize("policy", ["spd", "parallel", "grouped:2", "grouped:4", "selective:a0,m1,m3"])
def test_one_track_region_costs_a_constant_over_megatron(policy):
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=64, block_size=32, vocab_size=128, n_tracks=1,
                          sync_policy=policy))
    regions = sum(1 for steps in model._plan for step in steps if step.sync and not step.megatron)
    assert regions > 0
    for decode in (False, True):
        extra = compute_ops(policy, decode) - compute_ops("baseline", decode)
        assert extra <= 2 * regions + 2, (f"{policy} ({'decode' if decode else 'prefill'}): {extra} ops more "
                                          f"than baseline for {regions} regions")
