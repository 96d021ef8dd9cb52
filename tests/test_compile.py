"""torch.compile(fullgraph=True) of every policy at tp=1 and tp=2 (gloo), with and without dp:
no graph break, no recompile after the first training and eval calls, and the compiled loss and
gradients equal eager. backend="aot_eager" traces forward and backward (Dynamo + AOTAutograd, the
collectives included, as parallel/comm.py traces them) without code generation, so it runs in seconds on CPU."""
import torch
import torch._dynamo

from parallel import comm
from parallel.ddp import BucketedDDP
from parallel.launch import run_on_gloo
from tests.test_model import POLICIES, batch, compile_layers, make


def steps_diff(pairs, idx, targets, backward=lambda model, loss: loss.backward()):
    """Max |second - first| of two (model, raw model) pairs over the loss and every gradient, across two
    training steps and two evals on the same weights; raises if a recompile happens after the first of
    each. backward(model, loss) runs each training step's backward."""
    torch._dynamo.reset()
    worst = 0.0
    for step in range(2):
        torch._dynamo.config.error_on_recompile = step > 0
        try:
            losses, grads = [], []
            for model, raw in pairs:
                raw.zero_grad(set_to_none=True)
                _, loss = model(idx, targets)
                backward(model, loss)
                losses.append(loss.detach())
                grads.append([p.grad for p in raw.parameters()])
                raw.eval()
                with torch.no_grad():
                    losses.append(model(idx, targets)[1])
                raw.train()
            worst = max([worst, (losses[0] - losses[2]).abs().item(), (losses[1] - losses[3]).abs().item()]
                        + [(a - b).abs().max().item() for a, b in zip(*grads)])
        finally:
            torch._dynamo.config.error_on_recompile = False
    return worst


def compiled_vs_eager(policy, tp_group, wrap=lambda m: m):
    """Max |compiled - eager| over the loss and every gradient, across two compiled training steps and
    two compiled evals on the same weights; raises if a recompile happens after the first of each."""
    n_layer = compile_layers(policy)  # 2 for the policies that repeat per layer
    eager = make(policy, n_tracks=4, tp_group=tp_group, n_layer=n_layer)
    compiled = make(policy, n_tracks=4, tp_group=tp_group, n_layer=n_layer)
    ddp_eager, ddp_compiled = wrap(eager), wrap(torch.compile(compiled, fullgraph=True, backend="aot_eager"))

    def backward(model, loss):
        loss.backward()
        if hasattr(model, "finish_gradient_synchronization"):
            model.finish_gradient_synchronization()
    return steps_diff([(ddp_eager, eager), (ddp_compiled, compiled)], *batch(), backward)


def _worker(rank, world_size):
    import torch.distributed as dist
    tp2 = dist.new_group([0, 1])
    worst = {}
    for policy in POLICIES:
        worst[(policy, "tp2")] = compiled_vs_eager(policy, tp2)
    # dp=2 x tp=1: BucketedDDP around the compiled model (its hooks fire after the compiled backward)
    for policy in ("baseline", "grouped:2"):
        worst[(policy, "dp2")] = compiled_vs_eager(policy, None, wrap=lambda m: BucketedDDP(m, process_group=tp2))
    # tp=1 needs no peer: each rank compiles half of the policies, both at once (2 cores), after the
    # collective cases so that neither rank waits in a collective for the other's tp=1 compiles
    for policy in TP1_SHARE[rank]:
        worst[(policy, "tp1")] = compiled_vs_eager(policy, None)
    return worst


# each rank's tp=1 policies: two of the three 4-layer models (compile_layers) and one 2-layer model on one rank, the
# third 4-layer model and three 2-layer ones on the other: about the same compile time on each (POLICIES[rank::2]
# gave rank 0 half as much again as rank 1, which then waited)
TP1_SHARE = (["grouped:2", "grouped:4", "baseline"], ["selective:a0,m1,a2,m3", "spd", "parallel", "ladder"])


def test_every_policy_compiles_fullgraph_without_recompiles_and_equals_eager():
    results = run_on_gloo(_worker, 2)
    keys = [key for result in results for key in result]
    assert len(set(keys)) == 2 * len(POLICIES) + 2  # every policy at tp2 and tp1, two at dp2
    assert sorted(key for key in keys if key[1] == "tp1") == sorted((policy, "tp1") for policy in POLICIES)
    assert sorted(TP1_SHARE[0] + TP1_SHARE[1]) == sorted(POLICIES)
    for result in results:
        for key, diff in result.items():
            assert diff < 1e-12, (key, diff)


def test_compiled_forward_counts_nothing_and_eager_counts_the_plan():
    """Counting is eager-only (no Python side effect in the trace); an eager pass counts what the
    plan declares: syncs_per_forward forward all-reduces."""
    model = make("grouped:2", n_tracks=4)
    idx, targets = batch()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch._dynamo.reset()
    compiled(idx, targets)
    comm.stats.reset()
    compiled(idx, targets)[1].backward()
    assert comm.stats.snapshot() == {}
    model(idx, targets)[1].backward()
    counts = comm.stats.snapshot()
    assert counts["tp_fwd"] == model.syncs_per_forward == 2
    # tp=1: the region's replicated params need no gradient sum, so no tp_grad (tp=2: tests/test_model.py)
    assert counts["tp_bwd"] == 2 and "tp_grad" not in counts
