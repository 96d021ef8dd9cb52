"""Model tests: equality with independent references, tp-independence, checkpoints, bad input."""
import math

import pytest
import torch

from model.generate import KVCache
from model.gpt import GPT, GPTConfig
from model.sync_policy import parse_sync_policy
from parallel import comm
from tests.conftest import run_gloo_scenarios, scenario_outcome
from tests.reference import ladder_forward, nanogpt_forward, track_forward

SMALL = dict(n_layer=4, n_head=4, n_embd=32, block_size=16, vocab_size=64, bias=True, dropout=0.0)
POLICIES = ["baseline", "spd", "parallel", "ladder", "grouped:2", "grouped:4", "selective:a0,m1,a2,m3"]
# The policies whose plan repeats layer by layer: the compiled tests (tests/test_compile.py, test_async_grad.py,
# test_decode.py) build them with 2 layers, where a layer already follows a layer (compiling takes time in
# proportion to the layers); grouped:2, grouped:4 and the selective spec need SMALL's 4 layers to be what they are.
PER_LAYER_POLICIES = ("baseline", "spd", "parallel", "ladder")


def compile_layers(policy):
    """n_layer of the compiled tests' model for this policy."""
    return 2 if policy in PER_LAYER_POLICIES else SMALL["n_layer"]


def make(policy="baseline", n_tracks=4, tp_group=None, seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = GPTConfig(**{**SMALL, **overrides}, n_tracks=n_tracks, sync_policy=policy)
    return GPT(cfg, tp_group=tp_group).double()


def batch(seed=1, B=3, T=16, V=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def full_grads(model):
    return {n: model.full_tensor(n, p.grad) for n, p in model.named_parameters()}


def reference_grads(sd, fn):
    sd = {k: v.clone().requires_grad_(True) for k, v in sd.items() if k != "lm_head.weight"}
    logits, loss = fn(sd)
    loss.backward()
    return logits, loss, {k: v.grad for k, v in sd.items()}


def assert_close_dicts(a, b, atol):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=k)


@pytest.mark.parametrize("bias", [True, False])
def test_baseline_equals_nanogpt_reference(bias):
    model = make("baseline", n_tracks=4, bias=bias)
    idx, targets = batch()
    logits, loss = model(idx, targets)
    loss.backward()
    sd = {k: v.double() for k, v in model.state_dict().items()}
    ref_logits, ref_loss, ref_grads = reference_grads(sd, lambda p: nanogpt_forward(p, idx, targets, 4, 4))
    torch.testing.assert_close(logits, ref_logits, atol=1e-12, rtol=0)
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=0)
    assert_close_dicts(full_grads(model), ref_grads, atol=1e-12)


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "ladder"])
def test_every_policy_equals_literal_track_rule(policy):
    """The batched, region-based model computes what the per-track loop of the rule computes."""
    model = make(policy, n_tracks=4)
    idx, targets = batch()
    _, loss = model(idx, targets)
    loss.backward()
    pol = parse_sync_policy(policy, SMALL["n_layer"])
    sd = {k: v.double() for k, v in model.state_dict().items()}
    _, ref_loss, ref_grads = reference_grads(
        sd, lambda p: track_forward(p, idx, targets, 4, 4, 4, pol.sync, pol.parallel))
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=0)
    assert_close_dicts(full_grads(model), ref_grads, atol=1e-12)


def test_policies_really_differ_with_several_tracks():
    idx, targets = batch()
    losses = {p: make(p, n_tracks=4)(idx, targets)[1].item() for p in POLICIES}
    assert len({round(v, 12) for v in losses.values()}) == len(POLICIES), losses


def test_parallel_equals_palm_block_reference():
    model = make("parallel", n_tracks=2)
    idx, targets = batch()
    _, loss = model(idx, targets)
    sd = {k: v.double() for k, v in model.state_dict().items()}
    _, ref = nanogpt_forward(sd, idx, targets, 4, 4, parallel=True)
    torch.testing.assert_close(loss, ref, atol=1e-12, rtol=0)


def test_ladder_equals_ladder_reference_and_differs_from_baseline():
    model = make("ladder", n_tracks=4)
    idx, targets = batch()
    _, loss = model(idx, targets)
    loss.backward()
    sd = {k: v.double() for k, v in model.state_dict().items()}
    _, ref_loss, ref_grads = reference_grads(sd, lambda p: ladder_forward(p, idx, targets, 4, 4))
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=0)
    assert_close_dicts(full_grads(model), ref_grads, atol=1e-12)
    assert abs(loss.item() - make("baseline", n_tracks=4)(idx, targets)[1].item()) > 1e-6
    assert model.syncs_per_forward == 2 * SMALL["n_layer"]


@pytest.mark.parametrize("policy", ["spd", "grouped:2", "grouped:4", "selective:a0,m1,a2,m3"])
def test_one_track_equals_baseline(policy):
    idx, targets = batch()
    base = make("baseline", n_tracks=1)
    other = make(policy, n_tracks=1)
    _, lb = base(idx, targets)
    _, lo = other(idx, targets)
    lb.backward()
    lo.backward()
    torch.testing.assert_close(lo, lb, atol=1e-12, rtol=0)
    assert_close_dicts(full_grads(other), full_grads(base), atol=1e-12)


def test_init_matches_nanogpt_statistics_and_ties_head():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=256, block_size=64, vocab_size=512))
    sd = model.state_dict()
    assert sd["transformer.h.0.attn.c_attn.weight"].shape == (768, 256)
    assert sd["transformer.h.0.mlp.c_proj.weight"].shape == (256, 1024)
    assert sd["lm_head.weight"] is sd["transformer.wte.weight"]
    assert abs(sd["transformer.h.1.mlp.c_fc.weight"].std().item() - 0.02) < 1e-3
    assert abs(sd["transformer.h.1.attn.c_proj.weight"].std().item() - 0.02 / math.sqrt(8)) < 1e-3
    assert torch.all(sd["transformer.h.1.attn.c_attn.bias"] == 0)
    assert torch.all(sd["transformer.h.1.ln_1.weight"] == 1)


def test_param_count_is_identical_across_policies():
    counts = {make(p).get_num_params() for p in POLICIES}
    assert len(counts) == 1


def test_kv_cache_decode_equals_full_forward():
    for policy in ("baseline", "grouped:2", "parallel", "ladder"):
        model = make(policy).eval()
        idx, _ = batch(T=16)
        with torch.no_grad():
            cache = KVCache(SMALL["n_layer"])
            model(idx[:, :9], kv_cache=cache)
            for t in range(9, 16):
                step_logits, _ = model(idx[:, t:t + 1], kv_cache=cache)
                full_logits, _ = model(idx[:, :t + 1])
                torch.testing.assert_close(step_logits, full_logits, atol=1e-12, rtol=0)


def test_generate_with_cache_equals_recompute_past_block_size():
    model = make("spd").eval()
    idx, _ = batch(B=2, T=4)
    torch.manual_seed(7)
    out = model.generate(idx, max_new_tokens=20, top_k=10)  # 24 tokens > block_size 16
    torch.manual_seed(7)
    ref = idx
    with torch.no_grad():
        for _ in range(20):
            logits, _ = model(ref[:, -16:])
            logits = logits[:, -1, :]
            v, _ = torch.topk(logits, 10)
            logits[logits < v[:, [-1]]] = -float("inf")
            ref = torch.cat((ref, torch.multinomial(logits.softmax(-1), 1)), dim=1)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("kwargs,match", [
    (dict(policy="sparse"), "unknown policy name"),
    (dict(policy="grouped:5"), "grouped:G needs G dividing"),
    (dict(policy="grouped:x"), "grouped:G needs G dividing"),
    (dict(policy="selective:a0,m1"), "final sync"),
    (dict(policy="selective:q1,m3"), "token 'q1'"),
    (dict(policy="selective:m2-9,m3"), "outside 0..3"),
    (dict(n_tracks=3), "n_head=4 is not divisible by n_tracks=3"),
])
def test_bad_input_raises_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(**kwargs)


def test_sync_counts_of_named_policies():
    counts = {p: parse_sync_policy(p, 12).n_syncs for p in
              ["baseline", "spd", "parallel", "grouped:2", "grouped:3", "grouped:4", "grouped:6",
               "selective:m0-3,m5,m7,m9-11", "selective:0-11", "ladder"]}
    assert counts == {"baseline": 24, "spd": 12, "parallel": 12, "grouped:2": 6, "grouped:3": 4,
                      "grouped:4": 3, "grouped:6": 2, "selective:m0-3,m5,m7,m9-11": 9, "selective:0-11": 24,
                      "ladder": 24}


# ------------------------------------------------------------------ distributed (gloo, 2 processes)

def train_four_steps(policy, tp_group=None):
    """4 AdamW steps with dropout 0.1 on the fixed batch; returns (losses, model)."""
    model = make(policy, n_tracks=4, tp_group=tp_group, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    idx, targets = batch()
    torch.manual_seed(123)  # dropout draws: shared by the TP ranks
    losses = []
    for _ in range(4):
        opt.zero_grad(set_to_none=True)
        _, loss = model(idx, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def _tp2_worker(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    out = {}
    idx, targets = batch()
    # 1. training steps: replicated params stay bit-identical; results match a tp=1 run
    for policy in ("spd", "grouped:2", "parallel", "ladder"):
        losses, model = train_four_steps(policy, group)
        identical = all(torch.equal(*comm.all_gather(p.detach(), group, "test"))
                        for p in model.parameters() if not p.tensor_parallel)
        out[policy] = dict(losses=losses, identical=identical, sd=model.state_dict())
    # 2. counted collectives of one forward at tp=2
    model = make("grouped:2", n_tracks=4, tp_group=group)
    comm.stats.reset()
    model(idx, targets)[1].backward()
    out["counts"] = comm.stats.snapshot()
    # 3. inference (no autograd: rank 0 adds Megatron points' biases inside its partial sum);
    # the last position's logits are gathered over the vocabulary shards
    with torch.no_grad():
        models = {p: make(p, n_tracks=4, tp_group=group) for p in ("baseline", "ladder", "grouped:2")}
        out["nograd_logits"] = {p: (m(idx)[0], m(idx, targets)[1]) for p, m in models.items()}
    # 4. generation: every TP rank draws the same tokens
    torch.manual_seed(5)
    out["tokens"] = make("spd", n_tracks=4, tp_group=group).eval().generate(idx[:, :4], 8)
    return out




def _activation_dtypes_worker(rank, world_size):
    """Under bf16 autocast, per policy, n_tracks and async_grad: the dtypes that torch.distributed.all_reduce
    itself received (an independent counter, not comm.stats) for activation-sized tensors [B,T,C] in one
    training step; and the loss and full gradients, to compare with a tp=1 model's."""
    import torch.distributed as dist
    group, real = dist.new_group([0, 1]), dist.all_reduce
    idx, targets = batch()
    activation = idx.numel() * SMALL["n_embd"]
    out = {}
    for policy in POLICIES:
        for n_tracks in (2, 4):
            for async_grad in (False, True):
                model = make(policy, n_tracks=n_tracks, tp_group=group).float()
                model.set_async_grad_allreduce(async_grad)
                seen = []

                def spy(tensor, *args, **kwargs):
                    if tensor.numel() == activation:
                        seen.append(str(tensor.dtype).removeprefix("torch."))
                    return real(tensor, *args, **kwargs)

                dist.all_reduce = spy
                try:
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        _, loss = model(idx, targets)
                    loss.backward()
                finally:
                    dist.all_reduce = real
                out[policy, n_tracks, async_grad] = dict(dtypes=seen, loss=loss.item(), grads=full_grads(model))
    return out


@pytest.fixture(scope="module")
def world2():
    """The world-2 workers below in one job (conftest.run_gloo_scenarios: starting the ranks costs seconds)."""
    return run_gloo_scenarios({"tp2": _tp2_worker, "tracks_error": _tracks_error_worker,
                               "uneven_vocab": _uneven_vocab_worker, "dtypes": _activation_dtypes_worker})


def test_region_all_reduces_move_bf16_under_autocast(world2):
    """Every activation all-reduce of a bf16-autocast training step at tp=2 is bf16 but the embedding's (its
    rows are exact: one rank holds each id): a region's entry f(x) takes the fp32 stream, and its gradient
    used to travel in fp32, twice a Megatron sublayer's bytes. The count is the plan's: a forward sync
    and a backward f per Megatron sublayer, a forward sync and one f per region, and the LM head's f.
    The step still equals a tp=1 step under autocast, to bf16 rounding."""
    idx, targets = batch()
    for (policy, n_tracks, async_grad), got in scenario_outcome(world2, "dtypes")[0].items():
        model = make(policy, n_tracks=n_tracks).float()
        syncs, steps = model.syncs_per_forward, [s for layer in model._plan for s in layer]
        entries = sum(s.megatron or (i == 0 or steps[i - 1].sync) for i, s in enumerate(steps))
        case = (policy, n_tracks, async_grad)
        assert got["dtypes"].count("float32") == 1, (case, got["dtypes"])
        assert got["dtypes"].count("bfloat16") == syncs + entries + 1, (case, got["dtypes"])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = model(idx, targets)
        loss.backward()
        assert abs(loss.item() - got["loss"]) < 1e-2, case
        for name, grad in full_grads(model).items():
            rel = ((grad - got["grads"][name]).norm() / grad.norm().clamp_min(1e-30)).item()
            assert rel < 5e-2, (case, name, rel)


def test_tp2_training_matches_tp1_and_replicated_params_stay_identical(world2):
    r0, r1 = scenario_outcome(world2, "tp2")
    idx, targets = batch()
    for policy in ("spd", "grouped:2", "parallel", "ladder"):
        assert r0[policy]["identical"] and r1[policy]["identical"], policy
        assert r0[policy]["losses"] == r1[policy]["losses"]
        losses, model = train_four_steps(policy)
        assert max(abs(a - b) for a, b in zip(losses, r0[policy]["losses"])) < 1e-10, policy
        # checkpoint saved at tp=2 loads at tp=1 and gives the tp=2 weights
        fresh = make(policy, n_tracks=4, seed=99)
        fresh.load_state_dict(r0[policy]["sd"])
        for k, v in fresh.state_dict().items():
            assert torch.equal(v, r0[policy]["sd"][k]), k
        ref_sd = model.state_dict()
        assert max((ref_sd[k] - v).abs().max().item() for k, v in r0[policy]["sd"].items()) < 1e-10
    assert r0["counts"]["tp_fwd"] == 2 and r0["counts"]["tp_bwd"] == 2 and r0["counts"]["tp_grad"] == 1
    assert torch.equal(r0["tokens"], r1["tokens"])
    for policy, (logits, loss) in r0["nograd_logits"].items():  # vs tp=1 with autograd (bias after the sum)
        ref = make(policy, n_tracks=4)
        assert logits.shape == (3, 1, SMALL["vocab_size"])
        assert (logits - ref(idx)[0]).abs().max().item() < 1e-12, policy
        assert abs(loss.item() - ref(idx, targets)[1].item()) < 1e-12, policy
        assert torch.equal(logits, r1["nograd_logits"][policy][0]), policy
    torch.manual_seed(5)
    assert torch.equal(r0["tokens"], make("spd", n_tracks=4).eval().generate(idx[:, :4], 8))


def test_tp_not_dividing_tracks_is_an_error(world2):
    messages = scenario_outcome(world2, "tracks_error")
    assert all("n_tracks=1 is not divisible by tp=2" in m for m in messages), messages


def _tracks_error_worker(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    try:
        make("baseline", n_tracks=1, tp_group=group)
    except ValueError as e:
        return str(e)
    return "no error"


def _uneven_vocab_worker(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    model = make("grouped:2", n_tracks=4, tp_group=group, vocab_size=65)
    idx, targets = batch(V=65)
    targets[0, :5] = -1  # ignored positions
    comm.stats.reset()
    _, loss = model(idx, targets)
    loss.backward()
    counts = comm.stats.snapshot()
    with torch.no_grad():
        last_logits = model(idx)[0]
    return dict(rows=model.transformer.wte.weight.shape[0], loss=loss.item(), grads=full_grads(model),
                logits=last_logits, sd=model.state_dict(), vocab_calls=counts["vocab"])


def test_vocab_parallel_head_with_uneven_shards_equals_tp1(world2):
    """vocab 65 over 2 ranks: shards of 32 and 33 rows; loss (with ignored targets), every gradient,
    the gathered last-position logits and the full checkpoint equal the tp=1 model's."""
    r0, r1 = scenario_outcome(world2, "uneven_vocab")
    assert (r0["rows"], r1["rows"]) == (32, 33)
    ref = make("grouped:2", n_tracks=4, vocab_size=65)
    idx, targets = batch(V=65)
    targets[0, :5] = -1
    _, loss = ref(idx, targets)
    loss.backward()
    assert abs(loss.item() - r0["loss"]) < 1e-12 and r0["loss"] == r1["loss"]
    assert_close_dicts(r0["grads"], full_grads(ref), atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(r0["logits"], ref(idx)[0], atol=1e-12, rtol=0)
    assert torch.equal(r0["logits"], r1["logits"])
    assert torch.equal(r0["sd"]["lm_head.weight"], ref.state_dict()["lm_head.weight"])
    # forward: embedding sum, row max, (sum exp, target logit); backward: the head's input gradient
    assert r0["vocab_calls"] == 4


def test_region_parameters_enter_f_together(monkeypatch):
    """At tp >= 2 a region's replicated parameters reach f as one tensor (their gradients: one all-reduce), and
    each slot the forward reads is its parameter. Checked on the construction itself: f is replaced by the
    identity that it is in the forward, and the tp of a one-process model is set to 2."""
    model = make("grouped:2")
    seen = []

    def identity(x, group, kind):
        seen.append(x)
        return x
    monkeypatch.setattr(comm, "copy_to_tp_region", identity)
    monkeypatch.setattr(model, "tp", 2)
    params = model._partial_params()
    assert len(seen) == 1 and seen[0].shape == (len(model._partial_tensors), model.config.n_embd)
    for got, param in zip(params, model._partial_tensors):
        assert got._base is seen[0] and torch.equal(got, param)
