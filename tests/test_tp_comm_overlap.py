"""tp_comm_overlap (GPT.set_tp_comm_overlap, parallel/overlap.py): with sequence parallelism, 'chunked' (ours) and
'async_tp' (the form of torch's async TP) compute the function of the model without sequence parallelism, at tp=1,
2 and 3, for every policy sequence parallelism supports, forward and gradients (fp64, dropout on; bf16 autocast at
tp=2), with the counts of sequence parallelism without overlap; the traced 'async_tp' graphs hold the all-gather ->
mm and mm -> reduce-scatter patterns that inductor's micro-pipeline TP pass matches, found by that pass's own
matchers; bad values are one line (model, config, benchmark); a start whose input buffer is reused before its wait
still gathers its piece. Slow: tp=3; 'chunked' compiled with fullgraph=True equals eager, inductor's code overlaps
each piece's collective with a GEMM, and inductor under bf16 autocast computes plain TP's loss and gradients."""
import pytest
import torch

from parallel import comm
from tests.conftest import run_gloo_scenarios, scenario_outcome
from tests.test_model import batch, full_grads, make
from tests.test_sequence_parallel import SP_POLICIES, TP3, loss_and_grads

MODES = ["chunked", "chunked:1", "chunked:3", "async_tp"]  # chunked:1: Megatron's SP overlap (dX's RS during dW)


def overlap_vs_plain(group, n_tracks, overrides, T, modes=MODES, policies=SP_POLICIES, autocast=False):
    """{(mode, policy): max |overlapped SP - plain| over the loss, the no-target logits and every full gradient}."""
    idx, targets = batch(T=T)
    worst = {}
    for policy in policies:
        model = make(policy, n_tracks=n_tracks, tp_group=group, dropout=0.1, **overrides)
        if autocast:
            model = model.float()
        plain = loss_and_grads(model, idx, targets, autocast)
        model.set_sequence_parallel(True)
        for mode in modes:
            model.zero_grad(set_to_none=True)
            model.set_tp_comm_overlap(mode)
            loss, logits, grads = loss_and_grads(model, idx, targets, autocast)
            worst[mode, policy] = max([(loss - plain[0]).abs().item(), (logits - plain[1]).abs().max().item()]
                                      + [(grads[k] - plain[2][k]).abs().max().item() for k in grads])
    return worst


def counts_and_identical(group, mode):
    """(comm.stats of one overlapped step, of the same step without overlap, whether every replicated parameter's
    gradient is bit-identical on the TP ranks)."""
    out = []
    for spec in (mode, "off"):
        model = make("baseline", n_tracks=4, tp_group=group, dropout=0.1)
        model.set_sequence_parallel(True)
        model.set_tp_comm_overlap(spec)
        comm.stats.reset()
        loss_and_grads(model, *batch())
        out.append(comm.stats.snapshot())
    identical = all(torch.equal(*comm.all_gather(p.grad, group, "test"))
                    for p in model.parameters() if not p.tensor_parallel)
    return out[0], out[1], identical


def _tp2(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    out = dict(fp64=overlap_vs_plain(group, 4, {}, 16))
    out["bf16"] = overlap_vs_plain(group, 4, {}, 16, ("chunked", "chunked:1", "async_tp"), ("baseline", "ladder"),
                                   autocast=True)
    out["counts"] = {mode: counts_and_identical(group, mode) for mode in ("chunked", "chunked:1", "async_tp")}
    return out


def _tp3(rank, world_size):
    import torch.distributed as dist
    return overlap_vs_plain(dist.new_group([0, 1, 2]), 6, TP3, 18)


def test_overlap_equals_plain_at_tp1():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls (tests/test_sequence_parallel.py)
    try:
        worst = overlap_vs_plain(None, 4, {}, 16, policies=["baseline", "ladder", "grouped:2"])
    finally:
        torch.set_num_threads(before)
    for key, diff in worst.items():
        assert diff < 1e-12, (key, diff)


def test_overlap_equals_plain_at_tp2():
    for rank_out in scenario_outcome(run_gloo_scenarios({"tp2": _tp2}), "tp2"):
        assert len(rank_out["fp64"]) == len(MODES) * len(SP_POLICIES)
        for key, diff in rank_out["fp64"].items():
            assert diff < 1e-12, (key, diff)
        for key, diff in rank_out["bf16"].items():  # bf16 matmuls; sums in another order
            assert diff < 5e-2, (key, diff)
        for mode, (overlapped, plain, identical) in rank_out["counts"].items():
            assert overlapped == plain, (mode, overlapped, plain)
            assert identical, mode


@pytest.mark.slow
def test_overlap_equals_plain_at_tp3():
    """Slow (about 10 s): 28 models on three ranks."""
    for rank_out in scenario_outcome(run_gloo_scenarios({"tp3": _tp3}, world_size=3), "tp3"):
        assert len(rank_out) == len(MODES) * len(SP_POLICIES)
        for key, diff in rank_out.items():
            assert diff < 1e-12, (key, diff)


def test_a_bad_mode_is_one_line_naming_it():
    model = make("baseline")
    with pytest.raises(ValueError, match=r"^invalid tp_comm_overlap='chunked:0'; allowed: off, chunked, chunked:K, "
                                         r"async_tp \(K an int in \[1, 64\]\)$"):
        model.set_tp_comm_overlap("chunked:0")


def test_overlap_waits_for_sequence_parallelism():
    model = make("baseline")
    model.set_tp_comm_overlap("chunked")
    assert model.comm_overlap is None  # nothing to overlap yet
    model.set_sequence_parallel(True)
    assert model.comm_overlap == ("chunked", 2)
    assert all(block.comm_overlap == ("chunked", 2) for block in model.transformer.h)


def _chunked_compile_worker(rank, world_size):
    """chunked:3, compiled (fullgraph, aot_eager) minus eager, per policy."""
    import torch.distributed as dist
    from tests.test_compile import steps_diff
    from tests.test_model import compile_layers
    group = dist.new_group([0, 1])
    worst = {}
    for policy in ("baseline", "ladder", "grouped:2"):
        models = [make(policy, n_tracks=4, tp_group=group, n_layer=compile_layers(policy)) for _ in range(2)]
        for model in models:
            model.set_sequence_parallel(True)
            model.set_tp_comm_overlap("chunked:3")
        compiled = torch.compile(models[1], fullgraph=True, backend="aot_eager")
        worst[policy] = steps_diff([(models[0], models[0]), (compiled, models[1])], *batch())
    return worst


@pytest.mark.slow
def test_chunked_compiles_fullgraph_at_tp2():
    """Slow (about 20 s on 2 busy cores): three models compiled on two ranks."""
    for worst in scenario_outcome(run_gloo_scenarios({"c": _chunked_compile_worker}), "c"):
        for policy, d in worst.items():
            assert d < 1e-12, (policy, d)


def _async_tp_graph_worker(rank, world_size):
    """async_tp: the traced forward and backward graphs (aten, after inductor's decompositions: what its post-grad
    passes see), searched with the micro-pipeline TP pass's own matchers; and compiled minus eager."""
    import torch.distributed as dist
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.fx_passes import micro_pipeline_tp as tp_pass
    group = dist.new_group([0, 1])
    found = []  # per graph: (all-gathers read by an mm, reduce-scatters of an mm's output alone)

    def record(gm, example_inputs):
        gathers = [g for g in tp_pass.find_all_gather_patterns(gm.graph) if tp_pass._find_consumer_matmuls(g.res_node)]
        scatters = [s for s in tp_pass.find_reduce_scatter_patterns(gm.graph)
                    if tp_pass._find_producer_matmul(s.input_node) is not None and len(s.input_node.users) == 1]
        found.append((len(gathers), len(scatters)))
        return gm

    models = [make("baseline", n_tracks=2, tp_group=group, n_layer=2) for _ in range(2)]
    for model in models:
        model.set_sequence_parallel(True)
        model.set_tp_comm_overlap("async_tp")
    backend = aot_autograd(fw_compiler=record, bw_compiler=record, decompositions=select_decomp_table())
    torch._dynamo.reset()
    compiled = torch.compile(models[1], fullgraph=True, backend=backend)
    idx, targets = batch()
    losses = [m(idx, targets)[1] for m in (models[0], compiled)]
    for loss in losses:
        loss.backward()
    grads = max((a.grad - b.grad).abs().max().item() for a, b in zip(models[0].parameters(), models[1].parameters()))
    return found, max(grads, (losses[0] - losses[1]).abs().item()), models[0].syncs_per_forward


def test_async_tp_graphs_hold_the_patterns_the_pass_fuses():
    """Forward: an all-gather read by an mm at each of the 2 x n_layer sync points' entry and at the head, and an mm
    reduce-scattered (its only reader) at each sync point; backward the conjugates: each entry's dgrad mm
    reduce-scattered, each exit's gathered output gradient read by mm's. Compiled equals eager."""
    for found, diff, syncs in scenario_outcome(run_gloo_scenarios({"g": _async_tp_graph_worker}), "g"):
        assert diff < 1e-12, diff
        assert syncs == 4
        assert found == [(syncs + 1, syncs), (syncs, syncs + 1)], found


@pytest.mark.parametrize("args, message", [
    (["--tp_comm_overlap=chunked:x", "--sequence_parallel=True"],
     "invalid tp_comm_overlap='chunked:x'; allowed: off, chunked, chunked:K, async_tp (K an int in [1, 64])"),
    (["--tp_comm_overlap=chunked"],
     "tp_comm_overlap='chunked' needs sequence_parallel=True: it overlaps sequence parallelism's all-gathers and "
     "reduce-scatters (there are none without it)"),
    (["--tp_comm_overlap=async_tp", "--sequence_parallel=True", "--device=cpu"],
     "tp_comm_overlap='async_tp' needs CUDA (NCCL and symmetric memory), not device 'cpu'; use 'chunked' or 'off' "
     "there"),
    (["--tp_comm_overlap=async_tp", "--sequence_parallel=True", "--compile=False"],
     "tp_comm_overlap='async_tp' needs a run compiled with inductor (its micro-pipeline TP pass fuses the "
     "collectives); got compile=False, compile_backend='inductor'"),
    (["--tp_comm_overlap=async_tp", "--sequence_parallel=True", "--compile=True", "--compile_mode=reduce-overhead"],
     "tp_comm_overlap='async_tp' cannot run under CUDA graphs (cudagraph trees found symmetric-memory tensors it did "
     "not track, on torch 2.11); use compile='auto' (compiled without them for async_tp) or compile_mode='default', "
     "not compile_mode='reduce-overhead'"),
])
def test_config_refuses_an_overlap_that_cannot_run(args, message):
    from training.config import ConfigError, parse
    with pytest.raises(ConfigError) as e:
        parse(args)
    assert str(e.value) == message


def test_trainer_refuses_async_tp_once_the_device_resolves_to_cpu():
    """device='auto' passes parse(); the trainer checks again with the resolved device and compile plan."""
    from training.config import ConfigError, check_tp_comm_overlap, parse
    cfg = parse(["--tp_comm_overlap=async_tp", "--sequence_parallel=True"])
    with pytest.raises(ConfigError, match="^tp_comm_overlap='async_tp' needs CUDA .* not device 'cpu'"):
        check_tp_comm_overlap(cfg, "cpu", False)
    with pytest.raises(ConfigError, match="needs a run compiled with inductor"):
        check_tp_comm_overlap(cfg, "cuda", False)
    check_tp_comm_overlap(cfg, "cuda", True)  # CUDA, compiled: accepted
    with pytest.raises(ConfigError, match="cannot run under CUDA graphs"):
        check_tp_comm_overlap(cfg, "cuda", True, graphs=True)
    assert parse(["--tp_comm_overlap=chunked:4", "--sequence_parallel=True", "--device=cpu"]).tp_comm_overlap == "chunked:4"


def test_train_throughput_refuses_a_bad_tp_comm_in_one_line():
    from bench import train_throughput
    with pytest.raises(train_throughput.ArgError) as e:
        train_throughput.parse_args(["--size", "tiny", "--device", "cpu", "--tp_comm", "sp,chunked:99"])
    assert str(e.value) == ("--tp_comm='sp,chunked:99': 'chunked:99' is not off, sp, chunked, chunked:K (K in 1-64) "
                            "or async_tp")


def _inductor_order_worker(rank, world_size, spec="chunked:3"):
    """One `spec` layer compiled by inductor, a training step: the generated code's collective launches, waits and
    GEMMs in the order they run (forward, then backward), and compiled minus eager loss."""
    import re

    import torch.distributed as dist
    from torch._inductor.utils import run_and_get_code
    group = dist.new_group([0, 1])
    torch._dynamo.reset()
    model = make("baseline", n_tracks=2, tp_group=group, n_layer=1)
    model.set_sequence_parallel(True)
    model.set_tp_comm_overlap(spec)
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    idx, targets = batch()
    eager = model(idx, targets)[1].item()

    def step():
        loss = compiled(idx, targets)[1]
        loss.backward()
        return loss

    loss, codes = run_and_get_code(step)
    pattern = r"\s*buf\d+ = torch\.ops\.reduced_sync\.((?:all_gather|reduce_scatter)_(?:start|wait))|.*extern_kernels\.(add)?mm\("
    calls = [[m.group(1) or "gemm" for m in map(lambda line: re.match(pattern, line), code.splitlines()) if m]
             for code in codes]
    return abs(loss.item() - eager), calls


def _runs_of(calls, op):
    """The runs of op's starts and waits in calls: [(start indices, wait indices)], 3 of each per run."""
    starts = [i for i, c in enumerate(calls) if c == f"{op}_start"]
    waits = [i for i, c in enumerate(calls) if c == f"{op}_wait"]
    return [(starts[k:k + 3], waits[k:k + 3]) for k in range(0, len(starts), 3)]


@pytest.mark.slow
def test_compiled_chunked_overlaps_each_piece_with_a_gemm():
    """Slow (about 15 s): inductor on CPU, two ranks. Every all-gather run launches its 3 pieces before the first
    wait and puts a GEMM between consecutive waits (piece i+1 travels during GEMM i); every reduce-scatter run puts a
    GEMM between consecutive launches (piece i travels during GEMM i+1). Forward: the sublayers' entries (and the
    head's) gather, their exits scatter; backward: the conjugates."""
    for diff, (forward, backward) in scenario_outcome(run_gloo_scenarios({"o": _inductor_order_worker}), "o"):
        assert diff < 1e-12, diff
        for calls, gathers, scatters in ((forward, 3, 2), (backward, 2, 3)):
            assert len(_runs_of(calls, "all_gather")) == gathers and len(_runs_of(calls, "reduce_scatter")) == scatters
            for starts, waits in _runs_of(calls, "all_gather"):
                assert len(starts) == len(waits) == 3 and starts[-1] < waits[0], calls
                assert all("gemm" in calls[a:b] for a, b in zip(waits, waits[1:])), calls
            for starts, waits in _runs_of(calls, "reduce_scatter"):
                assert len(starts) == len(waits) == 3 and starts[-1] < waits[0], calls
                assert all("gemm" in calls[a:b] for a, b in zip(starts, starts[1:])), calls


def _inductor_order_worker_one_piece(rank, world_size):
    return _inductor_order_worker(rank, world_size, "chunked:1")


@pytest.mark.slow
def test_compiled_chunked_1_overlaps_each_input_gradient_with_its_weight_gradient():
    """Slow (about 15 s): chunked:1, Megatron's sequence-parallel overlap. In the backward, the input-gradient
    reduce-scatter of each gathered GEMM (the two sublayers' entries and the head's) is launched before a GEMM (its
    weight gradient) and waited for after it; nothing is split: as many collectives as TP + SP (forward: 3
    all-gathers, 2 reduce-scatters; backward: 2 and 3)."""
    for diff, (forward, backward) in scenario_outcome(run_gloo_scenarios({"o": _inductor_order_worker_one_piece}), "o"):
        assert diff < 1e-12, diff
        starts = [i for i, c in enumerate(backward) if c == "reduce_scatter_start"]
        waits = [i for i, c in enumerate(backward) if c == "reduce_scatter_wait"]
        assert len(starts) == len(waits) == 3, backward
        assert all(a < b and "gemm" in backward[a:b] for a, b in zip(starts, waits)), backward
        assert (forward.count("all_gather_start"), forward.count("reduce_scatter_start"),
                backward.count("all_gather_start")) == (3, 2, 2), (forward, backward)


def _reused_buffer_worker(rank, world_size):
    """The traced ops called as inductor's code called them: piece 0's start reads a buffer that is then reused for
    piece 1 (overwritten, then passed to piece 1's start), and the waits come after both starts. The gathered
    pieces, and the error of a reduce-scatter wait given another buffer than its start's input."""
    import torch.distributed as dist
    ops, name = torch.ops.reduced_sync, dist.group.WORLD.group_name
    pieces = [torch.full((2, 3), 10.0 * rank + i) for i in range(2)]
    buf = pieces[0].clone()
    tickets = [ops.all_gather_start(buf, 2, name)]
    buf.copy_(pieces[1])  # inductor's "buf30 = buf27  # reuse": the next piece written into the start's input
    tickets.append(ops.all_gather_start(buf, 2, name))
    gathered = [ops.all_gather_wait(t, [4, 3], []) for t in tickets]
    z = torch.ones(4, 3)
    ticket = ops.reduce_scatter_start(z, 2, name)
    try:
        ops.reduce_scatter_wait(ticket, z.clone(), 2, [])
        error = None
    except RuntimeError as e:
        error = str(e)
    return [g[:, 0].tolist() for g in gathered], error, len(comm._in_flight)


def test_a_start_whose_input_buffer_is_reused_before_its_wait_gathers_its_own_copy():
    """The table pairs a start with its wait by the ticket, not by the input's address (a second start on a reused
    buffer raised "already in flight"), and each all-gather reads its own copy of the piece; a reduce-scatter's wait
    checks it was given the buffer its start read."""
    for gathered, error, in_flight in scenario_outcome(run_gloo_scenarios({"r": _reused_buffer_worker}), "r"):
        assert gathered == [[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]]
        assert error is not None and "is not the buffer the start read" in error, error
        assert in_flight == 0


def _chunked_inductor_bf16_worker(rank, world_size):
    """Baseline, one layer, tp=2: the loss and full gradients of plain TP (tp_comm off) in eager, and of sequence
    parallelism + chunked compiled by inductor (fullgraph), both under bf16 autocast; what is left in flight."""
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    idx, targets = batch()
    model = make("baseline", n_tracks=2, tp_group=group, n_layer=1).float()
    plain = loss_and_grads(model, idx, targets, autocast=True)
    model.zero_grad(set_to_none=True)
    model.set_sequence_parallel(True)
    model.set_tp_comm_overlap("chunked")
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    torch.manual_seed(123)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(idx, targets)[1]
    loss.backward()
    grads = full_grads(model)
    return ((loss - plain[0]).abs().item(), {k: (grads[k] - plain[2][k]).abs().max().item() for k in grads},
            len(comm._in_flight))


@pytest.mark.slow
def test_chunked_compiled_by_inductor_under_bf16_autocast_equals_plain_tp():
    """Slow (about 10 s): inductor on CPU, two ranks. Under bf16 autocast the output gradient's cast to bf16, split in
    pieces, is a value inductor computed twice (one buffer for the all-gather's start, one for its wait) and the
    start's buffer was reused for the next piece's start while the first was in flight: the table, keyed by the
    input's address, raised "already in flight" (the baseline's chunked rows on 4x H200). Paired by the ticket, and
    each start gathering its own copy, the step runs and computes plain TP's loss and gradients (bf16 tolerance)."""
    for loss_diff, grad_diffs, in_flight in scenario_outcome(run_gloo_scenarios({"b": _chunked_inductor_bf16_worker}),
                                                             "b"):
        assert loss_diff < 5e-2, loss_diff
        for name, diff in grad_diffs.items():
            assert diff < 5e-2, (name, diff)
        assert in_flight == 0


def test_a_second_start_on_a_ticket_address_in_flight_names_the_input_and_the_table():
    """A live ticket has its own address, so a start finding its ticket's address in the table follows a start whose
    wait never ran (e.g. a wait replayed in a CUDA graph, which runs no Python): the message names the input, what is
    in flight and whether a CUDA graph is being captured (bench/results/tp4_comm_h200/README.md)."""
    x, ticket = torch.zeros(3, 2), torch.zeros(1)
    comm._launched("all_gather", x, ticket, None, None)
    try:
        with pytest.raises(RuntimeError, match=r"already in flight at this ticket's address: an earlier start's wait "
                                               r"never ran \(input \(3, 2\) torch.float32 at 0x[0-9a-f]+; in flight: "
                                               r"\{'all_gather': 1\}; capturing a CUDA graph: False\)"):
            comm._launched("all_gather", x, ticket, None, None)
    finally:
        comm._in_flight.clear()
