"""Sequence parallelism (GPT's sequence_parallel, parallel/sequence.py): the model with it computes the function
of the model without it, at tp=1, 2 and 3, for every policy, forward and gradients (fp64, dropout on), and under
bf16 autocast; its collectives, counted by a spy on torch.distributed itself (not comm.stats), are one
reduce-scatter and one all-gather per sync point each way; it compiles with fullgraph=True."""
import pytest
import torch
import torch._dynamo

from parallel import comm
from parallel.launch import run_on_gloo
from tests.conftest import run_gloo_scenarios, scenario_outcome
from tests.test_compile import steps_diff
from tests.test_model import batch, full_grads, make

SP_POLICIES = ["baseline", "spd", "parallel", "ladder", "grouped:2", "grouped:4", "selective:a0,m1,a2,m3"]
# tp=3: 3 | n_tracks | n_head, block_size divisible by 3
TP3 = dict(n_head=6, n_embd=48, block_size=18)


def loss_and_grads(model, idx, targets, autocast=False):
    torch.manual_seed(123)  # dropout draws: shared by the TP ranks
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        _, loss = model(idx, targets)
    loss.backward()
    with torch.no_grad():
        logits = model(idx)[0]  # no targets: the last position's full logits
    return loss.detach(), logits, full_grads(model)


def sp_vs_plain(group, n_tracks, overrides, T, autocast=False):
    """Per policy: max |SP - plain| over the loss, the no-target logits and every full gradient (same tp)."""
    idx, targets = batch(T=T)
    worst = {}
    for policy in SP_POLICIES:
        results = []
        for sp in (False, True):
            model = make(policy, n_tracks=n_tracks, tp_group=group, dropout=0.1, **overrides)
            if autocast:
                model = model.float()
            model.set_sequence_parallel(sp)
            results.append(loss_and_grads(model, idx, targets, autocast))
        (la, lo_a, ga), (lb, lo_b, gb) = results
        worst[policy] = max([(la - lb).abs().item(), (lo_a - lo_b).abs().max().item()]
                            + [(ga[k] - gb[k]).abs().max().item() for k in ga])
    return worst


def spied_collectives(group, policy):
    """The activation-sized collectives torch.distributed itself received in one SP training step under bf16
    autocast (a spy: name and dtype), and comm.stats' counts of the same step."""
    import torch.distributed as dist
    idx, targets = batch()
    full = idx.numel() * 32  # [B*T, C]: a reduce-scatter's input, an all-gather's output
    model = make(policy, n_tracks=4, tp_group=group).float()
    model.set_sequence_parallel(True)
    seen, real = [], {name: getattr(dist, name) for name in ("reduce_scatter_tensor", "all_gather_into_tensor",
                                                              "all_reduce")}

    def spy(name):
        def call(out, tensor=None, *args, **kwargs):
            big = tensor if name == "reduce_scatter_tensor" else out
            if big.numel() == full:
                seen.append((name, str(big.dtype).removeprefix("torch.")))
            return real[name](out, tensor, *args, **kwargs) if tensor is not None else real[name](out, *args, **kwargs)
        return call
    for name in real:
        setattr(dist, name, spy(name))
    try:
        comm.stats.reset()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = model(idx, targets)
        loss.backward()
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)
    steps = [s for layer in model._plan for s in layer]
    region_entries = sum(not s.megatron and (i == 0 or steps[i - 1].sync) for i, s in enumerate(steps))
    return dict(seen=seen, counts=comm.stats.snapshot(), syncs=model.syncs_per_forward, region_entries=region_entries)


def replicated_grads_identical(group, policy):
    """Whether every replicated parameter's gradient is bit-identical on the TP ranks after an SP step (so the
    optimizer keeps them identical): the LayerNorms of token chunks, rank0_bias and the position embedding."""
    model = make(policy, n_tracks=4, tp_group=group, dropout=0.1)
    model.set_sequence_parallel(True)
    loss_and_grads(model, *batch())
    return all(torch.equal(*comm.all_gather(p.grad, group, "test")) for p in model.parameters() if not p.tensor_parallel)


def _tp2(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    out = dict(fp64=sp_vs_plain(group, 4, {}, 16), bf16=sp_vs_plain(group, 4, {}, 16, autocast=True))
    out["spied"] = {p: spied_collectives(group, p) for p in ("baseline", "grouped:2", "parallel")}
    out["identical"] = {p: replicated_grads_identical(group, p) for p in SP_POLICIES}
    try:
        model = make("baseline", tp_group=group)
        model.set_sequence_parallel(True)
        model(*batch(T=15))
        out["odd"] = "no error"
    except ValueError as e:
        out["odd"] = str(e)
    return out


def _tp3(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1, 2])
    return sp_vs_plain(group, 6, TP3, 18)


def test_sequence_parallel_equals_plain_at_tp1():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: two threads on a busy 2-core machine took 20 s, one takes 1
    try:
        worst = sp_vs_plain(None, 4, {}, 16)
    finally:
        torch.set_num_threads(before)
    for policy, diff in worst.items():
        assert diff < 1e-12, (policy, diff)


@pytest.fixture(scope="module")
def tp2():
    return scenario_outcome(run_gloo_scenarios({"tp2": _tp2}), "tp2")


def test_sequence_parallel_equals_plain_at_tp2(tp2):
    for rank_out in tp2:
        for policy, diff in rank_out["fp64"].items():
            assert diff < 1e-12, (policy, diff)
        for policy, diff in rank_out["bf16"].items():  # bf16 matmuls; sums in another order
            assert diff < 5e-2, (policy, diff)
        assert all(rank_out["identical"].values()), rank_out["identical"]


def test_sequence_parallel_collectives_are_one_pair_per_sync_point(tp2):
    """Forward: a reduce-scatter per sync point and an all-gather per region entry (as many), plus the embedding's
    reduce-scatter and the head's all-gather; backward the same with the roles swapped. No activation all-reduce.
    Under bf16 autocast all are bf16 but the embedding's two (its rows are fp32, exact: one rank holds each id)
    and each track-local region's entry, which gathers the fp32 stream (its tracks add to it); its backward
    reduce-scatter is bf16, as the plain region entry's f."""
    for rank_out in tp2:
        for policy, got in rank_out["spied"].items():
            syncs, counts = got["syncs"], got["counts"]
            dtypes = [dtype for _, dtype in got["seen"]]
            assert dtypes.count("float32") == 2 + got["region_entries"], (policy, got["seen"])
            assert dtypes.count("bfloat16") == len(dtypes) - dtypes.count("float32"), (policy, got["seen"])
            got["seen"] = [name for name, _ in got["seen"]]
            assert got["seen"].count("all_reduce") == 0, policy
            assert got["seen"].count("reduce_scatter_tensor") == 2 * syncs + 2, (policy, got["seen"])
            assert got["seen"].count("all_gather_into_tensor") == 2 * syncs + 2, (policy, got["seen"])
            assert counts["tp_fwd"] == counts["tp_fwd_ag"] == counts["tp_bwd"] == counts["tp_bwd_ag"] == syncs
            # vocab: embedding RS (+ its backward AG), row max, (sum exp, target logit), head AG (+ its backward RS)
            assert counts["vocab"] == 6, (policy, counts)


def test_sequence_parallel_refuses_a_length_not_divisible_by_tp(tp2):
    assert tp2[0]["odd"] == "sequence_parallel needs a sequence length divisible by tp=2; got 15"
    with pytest.raises(ValueError, match="block_size=16 is not divisible by tp=3"):
        _block_size_check(3)


def _block_size_check(tp):
    model = make("baseline")
    model.tp = tp  # the check reads only tp and block_size
    model.set_sequence_parallel(True)


def test_sequence_parallel_equals_plain_at_tp3():
    for rank_out in scenario_outcome(run_gloo_scenarios({"tp3": _tp3}, world_size=3), "tp3"):
        for policy, diff in rank_out.items():
            assert diff < 1e-12, (policy, diff)


def _compile_worker(rank, world_size):
    import torch.distributed as dist
    from tests.test_model import compile_layers
    group = dist.new_group([0, 1])
    worst = {}
    for policy in ("baseline", "spd", "parallel", "ladder", "grouped:4"):
        models = [make(policy, n_tracks=4, tp_group=group, n_layer=compile_layers(policy)) for _ in range(2)]
        for model in models:
            model.set_sequence_parallel(True)
        compiled = torch.compile(models[1], fullgraph=True, backend="aot_eager")
        worst[policy] = steps_diff([(models[0], models[0]), (compiled, models[1])], *batch())
    return worst


@pytest.mark.slow
@pytest.mark.gate
def test_sequence_parallel_compiles_fullgraph_at_tp2():
    """Slow (about 30 s on 2 busy cores): five models compiled on two ranks."""
    for rank_out in scenario_outcome(run_gloo_scenarios({"compile": _compile_worker}), "compile"):
        for policy, diff in rank_out.items():
            assert diff < 1e-12, (policy, diff)


def _ladder_code_worker(rank, world_size):
    import re

    import torch.distributed as dist
    from torch._inductor.utils import run_and_get_code
    group = dist.new_group([0, 1])
    torch._dynamo.reset()
    model = make("ladder", n_tracks=2, tp_group=group, n_layer=3).eval()
    model.set_sequence_parallel(True)
    idx, _ = batch()
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    with torch.no_grad():
        eager_logits, _ = model(idx)
        (logits, _), codes = run_and_get_code(compiled, idx)
    assert not comm._in_flight
    pattern = r"\s*(buf\d+ = torch\.ops\.reduced_sync\.reduce_scatter_(start|wait)|extern_kernels\.(add)?mm\()"
    calls = [line.strip() for code in codes for line in code.splitlines() if re.match(pattern, line)]
    return (logits - eager_logits).abs().max().item(), calls, model.syncs_per_forward


@pytest.mark.slow
def test_compiled_sequence_parallel_ladder_waits_after_the_next_sublayers_gemms():
    """tests/test_ladder_compiled_overlap.py's check with sequence parallelism: each sublayer's reduce-scatter is
    started before, and waited for after, the next sublayer's GEMMs (inductor, 2 ranks); logits equal eager's."""
    for diff, calls, syncs in run_on_gloo(_ladder_code_worker, 2):
        assert diff < 1e-10, diff
        starts = [i for i, c in enumerate(calls) if "reduce_scatter_start" in c]
        waits = [i for i, c in enumerate(calls) if "reduce_scatter_wait" in c]
        assert len(starts) == len(waits) == syncs == 6, calls
        for s, w in zip(starts[:-1], waits[:-1]):
            assert s < w and sum("extern_kernels" in c for c in calls[s:w]) >= 2, (s, w, calls)
