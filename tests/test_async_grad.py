"""The asynchronous input-gradient all-reduce (GPT(..., async_grad_allreduce=True), parallel/async_grad.py's
copy_to_tp_region_linear / copy_to_tp_region_ln_linear) computes what the synchronous f computes.

On gloo at tp=2 and tp=3, one and several tracks per rank, every policy: the loss and every
gradient equal the synchronous model's (float64, to 1e-12), and an eager pass counts the same
collectives by kind and bytes. Compiled (fullgraph, aot_eager; inductor for two policies): no graph
break, no recompile, equal to the eager synchronous model. At tp=1 the option stays off.
"""
import re
from contextlib import contextmanager

import pytest
import torch
import torch._dynamo

from parallel import comm
from parallel.launch import run_on_gloo
from tests.conftest import run_gloo_scenarios, scenario_outcome
from tests.test_compile import steps_diff
from tests.test_model import POLICIES, batch, compile_layers, make

# n_tracks per tp: one track per rank, and several (n_head=12: every n_tracks used here divides it)
SHAPES = {2: (2, 6), 3: (3, 6)}
WIDE = dict(n_head=12, n_embd=48)


def build(policy, n_tracks, tp_group, on, **overrides):
    model = make(policy, n_tracks=n_tracks, tp_group=tp_group, **{**WIDE, **overrides})
    model.set_async_grad_allreduce(on)
    return model


@contextmanager
def counting_async_all_reduces():
    """Counts torch.distributed.all_reduce(async_op=True) calls inside (eager, and the traced ops' bodies)."""
    import torch.distributed as dist
    real, calls = dist.all_reduce, [0]

    def counted(*args, **kwargs):
        calls[0] += bool(kwargs.get("async_op"))
        return real(*args, **kwargs)

    dist.all_reduce = counted
    try:
        yield calls
    finally:
        dist.all_reduce = real


def step(model, idx, targets):
    """(loss, grads, counts, bytes, async all-reduces in the backward) of one eager forward and backward."""
    model.zero_grad(set_to_none=True)
    comm.stats.reset()
    _, loss = model(idx, targets)
    with counting_async_all_reduces() as calls:
        loss.backward()
    return (loss.detach(), [p.grad for p in model.parameters()], comm.stats.snapshot(), dict(comm.stats.bytes),
            calls[0])


def _eager_worker(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group(list(range(world_size)))
    idx, targets = batch()
    out = {}
    cases = [(p, n, {}) for p in POLICIES for n in SHAPES[world_size]] + [("grouped:2", world_size, dict(bias=False)),
                                                                         ("baseline", world_size, dict(bias=False))]
    for policy, n_tracks, overrides in cases:
        sync = step(build(policy, n_tracks, group, False, **overrides), idx, targets)
        fused_model = build(policy, n_tracks, group, True, **overrides)
        assert fused_model.async_grad_allreduce
        fused = step(fused_model, idx, targets)
        diff = max([(sync[0] - fused[0]).abs().item()] + [(a - b).abs().max().item() for a, b in zip(sync[1], fused[1])])
        out[(policy, n_tracks, tuple(overrides))] = (diff, sync[2] == fused[2] and sync[3] == fused[3], sync[2],
                                                     sync[4], fused[4])
    return out


def _check(results):
    for result in results:
        for key, (diff, same_counts, counts, sync_async, fused_async) in result.items():
            assert diff < 1e-12, (key, diff)
            assert same_counts, key
            # every region entry's f (tp_bwd) and the LM head's (one of the vocab kind) went asynchronous
            assert sync_async == 0 and fused_async == counts["tp_bwd"] + 1, (key, counts, fused_async)


@pytest.mark.slow
def test_async_equals_sync_tp2_every_policy(world2):
    _check(scenario_outcome(world2, "eager"))


def test_async_equals_sync_tp3_every_policy():
    _check(run_on_gloo(_eager_worker, 3))


def test_off_at_tp1_and_not_in_the_architecture():
    model = build("grouped:2", 4, None, True)
    assert not model.async_grad_allreduce and not any(b.async_grad for b in model.transformer.h)
    assert "async" not in str(model.config)
    idx, targets = batch()
    ref = step(build("grouped:2", 4, None, False), idx, targets)
    got = step(model, idx, targets)
    assert torch.equal(ref[0], got[0]) and all(torch.equal(a, b) for a, b in zip(ref[1], got[1]))
    assert ref[2] == got[2]


def _autocast_worker(rank, world_size):
    """CPU bf16 autocast (the GPU's dtype path): fused and synchronous agree to bf16 rounding."""
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    idx, targets = batch()
    out = {}
    for policy in ("baseline", "spd"):
        runs = []
        for on in (False, True):
            model = build(policy, 4, group, on).float()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _, loss = model(idx, targets)
            loss.backward()
            runs.append((loss.detach(), [p.grad for p in model.parameters()]))
        rel = max(((a - b).norm() / b.norm().clamp_min(1e-30)).item() for a, b in zip(runs[0][1], runs[1][1]))
        out[policy] = ((runs[0][0] - runs[1][0]).abs().item(), rel)
    return out


@pytest.mark.slow
def test_async_under_bf16_autocast_tp2(world2):
    for result in scenario_outcome(world2, "autocast"):
        for policy, (loss_diff, grad_rel) in result.items():
            assert loss_diff < 1e-6 and grad_rel < 2e-2, (policy, loss_diff, grad_rel)


def compiled_vs_sync_eager(policy, tp_group, backend, n_tracks=4, async_grad=True, **overrides):
    """Max |compiled (async unless async_grad=False) - eager sync| over losses and grads of two training
    steps and two evals, fullgraph; raises on a recompile after the first of each."""
    eager = build(policy, n_tracks, tp_group, False, **overrides)
    compiled = build(policy, n_tracks, tp_group, async_grad, **overrides)
    run = torch.compile(compiled, fullgraph=True, backend=backend)
    idx, targets = batch()
    n_async = []

    def backward(model, loss):
        with counting_async_all_reduces() as calls:
            loss.backward()
        n_async.append(calls[0])
    worst = steps_diff([(eager, eager), (run, compiled)], idx, targets, backward)
    # the compiled backward launched its all-reduces asynchronously: as many as the eager fused model's
    comm.stats.reset()
    _, loss = compiled(idx, targets)
    loss.backward()
    expected = comm.stats.snapshot()["tp_bwd"] + 1 if async_grad else 0
    assert n_async[0] == n_async[2] == 0 and n_async[1] == n_async[3] == expected, (policy, n_async, expected)
    return worst


def _compile_worker(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    worst = {policy: compiled_vs_sync_eager(policy, group, "aot_eager", n_layer=compile_layers(policy))
             for policy in POLICIES}
    assert not comm._in_flight
    return worst


@pytest.mark.slow
def test_compiled_async_fullgraph_no_recompile_equals_eager(world2):
    for result in scenario_outcome(world2, "compiled"):
        assert len(result) == len(POLICIES)
        for policy, diff in result.items():
            assert diff < 1e-12, (policy, diff)


def _inductor_worker(rank, world_size):
    import torch._inductor.config as inductor_config
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    # With inductor's peak-memory reordering on (torch 2.13, CPU), the weight-gradient GEMM was
    # scheduled before the all-reduce's start, not between start and wait: no overlap. (The pass also
    # placed the region's tp_grad all-reduce differently on the two ranks while their graphs differed;
    # they no longer do: test_inductor_issues_the_same_collectives_on_every_rank.)
    # two layers: layer 0 two Megatron sublayers, layer 1 a region (its entry fused with LN) and the LM head
    # the code inductor generates for that comparison (its forward, backward and eval graphs) is read below:
    # one compile serves both checks
    from torch._inductor.utils import run_and_get_code
    with inductor_config.patch(reorder_for_peak_memory=False):
        worst, codes = run_and_get_code(compiled_vs_sync_eager, "selective:0,m1", group, "inductor", n_layer=2)
    # the generated backward: dgrad GEMM, start, wgrad GEMM, wait, in each of the 4 fused nodes
    assert not comm._in_flight
    calls = [line.strip() for code in codes for line in code.splitlines()
             if re.match(r"\s*(buf\d+ = torch\.ops\.reduced_sync\.all_reduce_(start|wait)|extern_kernels\.(add)?mm\()", line)]
    starts = [i for i, line in enumerate(calls) if "all_reduce_start" in line]
    assert len(starts) == 4, calls
    for i in starts:
        assert "extern_kernels" in calls[i + 1] and "all_reduce_wait" in calls[i + 2], calls[i - 1:i + 3]
    return worst


@pytest.mark.slow
def test_inductor_async_equals_eager(world2):
    """Generated code (CPU inductor, which fused readers of torch's functional collectives too early):
    both fused kinds of entry and the LM head's, equal to the synchronous eager model."""
    for diff in scenario_outcome(world2, "inductor"):
        assert diff < 1e-10, diff


def _order_worker(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    # the synchronous model, peak-memory reordering on (inductor's default): a collective issued at another
    # point on one rank pairs tensors of different sizes, which gloo refuses
    return compiled_vs_sync_eager("selective:0,m1", group, "inductor", n_layer=2, async_grad=False)


@pytest.mark.slow
def test_inductor_issues_the_same_collectives_on_every_rank(world2):
    """Rank 0 alone adds a region's biases through a 0/1 buffer, not an `if`, so both ranks compile the
    same graph; with the `if`, inductor placed the region's tp_grad all-reduce before layer 0's f
    all-reduces on rank 0 and after them on rank 1 (experiments/compiler_repros/collective_order/)."""
    for diff in scenario_outcome(world2, "order"):
        assert diff < 1e-10, diff


# -------------------------------------------------------------------------- one spawn for the world-2 cases
SCENARIOS = {"eager": _eager_worker, "autocast": _autocast_worker, "compiled": _compile_worker,
             "inductor": _inductor_worker, "order": _order_worker}


@pytest.fixture(scope="module")
def world2():
    """The world-2 scenarios in one job (conftest.run_gloo_scenarios), each test reading its own outcome."""
    return run_gloo_scenarios(SCENARIOS)
