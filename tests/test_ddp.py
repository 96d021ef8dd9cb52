"""BucketedDDP on CPU/gloo: after every step each rank equals one process trained on the full batch.

Ranks are spawned by conftest.run_gloo_scenarios (world 2, and 4 for the sub-group case).
"""
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from parallel import comm
from parallel.ddp import BucketedDDP
from parallel.mesh import build_groups
from tests.conftest import run_gloo_scenarios, scenario_outcome

V, D, H = 16, 8, 12  # vocab, width, hidden
B, T = 4, 6  # global batch: B sequences of T tokens, split evenly over the DP ranks
TINY = dict(bucket_cap_mb=1e-9, first_bucket_cap_mb=1e-9)  # one parameter per bucket


class Toy(nn.Module):
    """Tied embedding/head, a frozen bias, a fixed parameter, a buffer, optional extra/unused layers."""

    def __init__(self, unused=False):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.fc1 = nn.Linear(D, H)
        self.fc1.bias.requires_grad_(False)
        self.ln = nn.LayerNorm(H)
        self.fc2 = nn.Linear(H, D)
        self.extra = nn.Linear(D, D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.emb.weight
        self.fixed = nn.Parameter(torch.randn(D), requires_grad=False)
        self.register_buffer("scale", torch.rand(1) + 0.5)
        self.unused = nn.Linear(D, 3) if unused else None

    def forward(self, idx, targets, use_extra=True):
        x = self.emb(idx) * self.scale + self.fixed
        x = x + self.fc2(torch.tanh(self.ln(self.fc1(x))))
        if use_extra:
            x = x + self.extra(x)
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def make_model(seed, unused=False):
    torch.manual_seed(seed)
    return Toy(unused).double()


class PlainSGD:
    """p -= lr * grad without torch.optim, whose first step imports torch._dynamo (seconds per process)."""

    def __init__(self, params, lr=0.1):
        self.params, self.lr = list(params), lr

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)


def make_opt(name, params):
    if name == "plain":
        return PlainSGD(params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if name == "sgd_plain":
        return torch.optim.SGD(params, lr=0.1)
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


def batch(step, offset=0):
    g = torch.Generator().manual_seed(1000 * offset + step)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def shard(x, rank, n):
    return x.chunk(n)[rank]


def state(model):
    return list(model.parameters()) + list(model.buffers())


def assert_close_to(model, ref):
    for (n, a), b in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b), f"{n} differs from the single-process reference"
    for a, b in zip(model.buffers(), ref.buffers()):
        assert torch.equal(a, b)


def assert_same_across(model, group):
    vec = torch.cat([t.detach().reshape(-1) for t in state(model)])
    got = comm.all_gather(vec, group, kind="test")
    assert all(torch.equal(got[0], g) for g in got), "ranks diverged"


def trainable_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


# -------------------------------------------------------------------------- training


def train_and_check(rank, group, ddp_kwargs, opt_name, steps=3, micro=1, set_to_none=True,
                    data_offset=0, ref_seed=0):
    """Train BucketedDDP on this rank's shard; after every step compare with the full-batch model."""
    n, r = comm.group_size(group), comm.group_rank(group)
    model = make_model(seed=rank + 100 * data_offset)  # differs per rank: the wrap must broadcast
    ddp = BucketedDDP(model, process_group=group, **ddp_kwargs)
    ref = make_model(seed=ref_seed)
    opt, ref_opt = make_opt(opt_name, ddp.parameters()), make_opt(opt_name, ref.parameters())
    frozen = {id(p) for p in model.parameters() if not p.requires_grad}
    assert frozen and not any(id(p) in frozen for b in ddp.buckets for p in b.params)
    for step in range(steps):
        idx, tgt = batch(step, data_offset)
        ref_opt.zero_grad(set_to_none=True)
        ref(idx, tgt).backward()
        ref_opt.step()

        opt.zero_grad(set_to_none=set_to_none)
        comm.stats.reset()
        mi, mt = shard(idx, r, n).chunk(micro), shard(tgt, r, n).chunk(micro)
        for k in range(micro):
            with ddp.no_sync() if k < micro - 1 else nullcontext():
                (ddp(mi[k], mt[k]) / micro).backward()
            if k < micro - 1:
                assert comm.stats.counts["dp_grad"] == 0, "no_sync() must not communicate"
        # Hook modes launch every bucket during backward (overlap); the others only in finish.
        launched = len(ddp.buckets) if ddp.mode in ("bucketed", "overlap") else 0
        assert comm.stats.counts["dp_grad"] == launched
        ddp.finish_gradient_synchronization()
        # Each trainable parameter reduced exactly once (tied weight once, frozen ones never).
        assert comm.stats.counts["dp_grad"] == len(ddp.buckets)
        assert comm.stats.bytes["dp_grad"] == trainable_bytes(model)
        opt.step()
        assert_close_to(model, ref)
        assert_same_across(model, group)
    return ddp


CONFIGS = [
    dict(mode="bucketed", **TINY),
    dict(mode="bucketed", bucket_cap_mb=5e-4, first_bucket_cap_mb=1e-9),  # a few params each
    dict(mode="bucketed"),  # 25 MiB / 1 MiB defaults: everything in the first bucket
    dict(mode="bucketed", bucket_cap_mb=None),
    dict(mode="bucketed", bucket_cap_mb=float("inf"), first_bucket_cap_mb=1e-9),
    dict(mode="overlap"),
    dict(mode="naive"),
    dict(mode="flat"),
]


def _w_full_batch(rank, world):
    n_trainable = sum(1 for p in make_model(0).parameters() if p.requires_grad)
    for cfg in CONFIGS:
        for opt_name in ("sgd", "adamw"):
            ddp = train_and_check(rank, None, cfg, opt_name, set_to_none=opt_name == "sgd")
            if cfg["mode"] in ("overlap", "naive") or cfg.get("bucket_cap_mb") == 1e-9:
                assert len(ddp.buckets) == n_trainable
            elif cfg["mode"] == "flat" or cfg.get("bucket_cap_mb", 0) in (None, float("inf")):
                assert len(ddp.buckets) == 1
            elif cfg.get("bucket_cap_mb") == 5e-4:
                assert 1 < len(ddp.buckets) < n_trainable


def test_matches_full_batch_every_mode_and_bucket_size(world2):
    scenario_outcome(world2, "full_batch")


def _w_no_sync(rank, world):
    for cfg in [dict(mode="bucketed", **TINY), dict(mode="bucketed"), dict(mode="overlap"),
                dict(mode="naive"), dict(mode="flat")]:
        train_and_check(rank, None, cfg, "adamw", micro=2)


def test_no_sync_accumulation_matches_full_batch(world2):
    scenario_outcome(world2, "no_sync")


def _w_torch_ddp(rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP
    for cfg in [dict(mode="bucketed", **TINY), dict(mode="flat")]:
        mine = BucketedDDP(make_model(rank), **cfg)
        theirs = DDP(make_model(rank))
        opt_a, opt_b = make_opt("adamw", mine.parameters()), make_opt("adamw", theirs.parameters())
        for step in range(3):
            idx, tgt = batch(step)
            idx, tgt = shard(idx, rank, world), shard(tgt, rank, world)
            for m, o in ((mine, opt_a), (theirs, opt_b)):
                o.zero_grad(set_to_none=True)
                m(idx, tgt).backward()
            mine.finish_gradient_synchronization()
            opt_a.step()
            opt_b.step()
            for (name, a), b in zip(mine.module.named_parameters(), theirs.module.parameters()):
                assert torch.allclose(a, b), f"{name} differs from torch DDP at step {step}"


def test_matches_torch_ddp(world2):
    scenario_outcome(world2, "torch_ddp")


def _w_sub_group(rank, world):
    mesh = build_groups(tp=2)  # DP groups {0, 2} and {1, 3}: group ranks are not global ranks
    assert dist.get_process_group_ranks(mesh.dp_group) == [mesh.tp_rank, mesh.tp_rank + 2]
    # Each DP group trains on its own data; its reference starts from its group rank 0 (global tp_rank).
    train_and_check(rank, mesh.dp_group, dict(mode="bucketed", **TINY), "plain",
                    data_offset=mesh.tp_rank + 1, ref_seed=mesh.tp_rank + 100 * (mesh.tp_rank + 1))


def test_sub_group_of_a_dp_x_tp_mesh():
    scenario_outcome(run_gloo_scenarios({"sub_group": _w_sub_group}, world_size=4), "sub_group")


def _w_unused(rank, world):
    for mode in ("bucketed", "naive"):
        ddp = BucketedDDP(make_model(0, unused=True), mode=mode)
        idx, tgt = batch(0)
        ddp(shard(idx, rank, world), shard(tgt, rank, world)).backward()
        with pytest.raises(RuntimeError, match="find_unused_parameters=True") as e:
            ddp.finish_gradient_synchronization()
        assert "unused.weight" in str(e.value) and "unused.bias" in str(e.value)
        assert "fc2.weight" not in str(e.value)

    # find_unused_parameters=True: `unused` is unused everywhere, `extra` only on rank 1.
    model = make_model(rank, unused=True)
    ddp = BucketedDDP(model, find_unused_parameters=True, **TINY)
    ref = make_model(0, unused=True)
    opt, ref_opt = make_opt("sgd_plain", ddp.parameters()), make_opt("sgd_plain", ref.parameters())
    for step in range(3):
        idx, tgt = batch(step)
        ref_opt.zero_grad(set_to_none=True)
        halves = zip(idx.chunk(world), tgt.chunk(world))
        (sum(ref(i, t, use_extra=r == 0) for r, (i, t) in enumerate(halves)) / world).backward()
        ref_opt.step()
        opt.zero_grad(set_to_none=True)
        ddp(shard(idx, rank, world), shard(tgt, rank, world), use_extra=rank == 0).backward()
        ddp.finish_gradient_synchronization()
        assert torch.count_nonzero(model.extra.weight.grad) > 0  # rank 1 got rank 0's half
        assert torch.equal(model.unused.weight.grad, torch.zeros_like(model.unused.weight))
        opt.step()
        assert_close_to(model, ref)
        assert_same_across(model, None)


def test_unused_parameters_raise_or_count_as_zero(world2):
    scenario_outcome(world2, "unused")


class Swapped(nn.Module):
    """Registered a, b but applied b first: backward produces a's grads before b's."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, D)
        self.b = nn.Linear(D, D)

    def forward(self, x):
        return self.a(torch.tanh(self.b(x))).pow(2).mean()


def _w_rebuild(rank, world):
    for mode in ("bucketed", "overlap"):
        torch.manual_seed(0)
        ref = Swapped().double()
        torch.manual_seed(rank)
        model = Swapped().double()
        ddp = BucketedDDP(model, mode=mode, **TINY)
        names = dict(model.named_parameters())
        arrival = []
        for n, p in names.items():
            p.register_post_accumulate_grad_hook(lambda p, n=n: arrival.append(n))
        assert [ddp.names[i] for b in ddp.buckets for i in b.indices] == list(reversed(names))
        opt, ref_opt = make_opt("sgd", ddp.parameters()), make_opt("sgd", ref.parameters())
        for step in range(3):
            x = shard(torch.randn(B, D, generator=torch.Generator().manual_seed(step),
                                  dtype=torch.float64), rank, world)
            ref_opt.zero_grad()
            sum(ref(h) for h in torch.randn(B, D, generator=torch.Generator().manual_seed(step),
                                            dtype=torch.float64).chunk(world)).div(world).backward()
            ref_opt.step()
            arrival.clear()
            opt.zero_grad()
            ddp(x).backward()
            ddp.finish_gradient_synchronization()
            opt.step()
            assert_close_to(model, ref)
            # After the first step the buckets follow the order gradients arrived in.
            assert [ddp.names[i] for b in ddp.buckets for i in b.indices] == arrival
        assert arrival[:2] == ["a.weight", "a.bias"] or arrival[:2] == ["a.bias", "a.weight"]


def test_buckets_rebuilt_in_arrival_order(world2):
    scenario_outcome(world2, "rebuild")


# -------------------------------------------------------------------------- one spawn for all
# Starting processes costs seconds, so one world-2 job runs every scenario and each test reads
# its outcome. After a failure the later scenarios are not run (the ranks may be out of step).

SCENARIOS = {"full_batch": _w_full_batch, "no_sync": _w_no_sync, "torch_ddp": _w_torch_ddp,
             "unused": _w_unused, "rebuild": _w_rebuild, "sub_group": _w_sub_group}


@pytest.fixture(scope="module")
def world2():
    return run_gloo_scenarios({n: fn for n, fn in SCENARIOS.items() if n != "sub_group"})


# -------------------------------------------------------------------------- single process


def test_bad_arguments_raise_value_error():
    m = make_model(0)
    for kwargs, word in [(dict(mode="avg"), "mode='avg'"), (dict(bucket_cap_mb=0), "bucket_cap_mb=0"),
                         (dict(bucket_cap_mb=-1), "bucket_cap_mb=-1"),
                         (dict(bucket_cap_mb="25"), "bucket_cap_mb='25'"),
                         (dict(first_bucket_cap_mb=None), "first_bucket_cap_mb=None")]:
        with pytest.raises(ValueError, match=word):
            BucketedDDP(m, **kwargs)


def test_single_process_is_identity_and_adds_no_parameters():
    model, ref = make_model(0), make_model(0)
    ddp = BucketedDDP(model)
    assert list(ddp.parameters()) == list(model.parameters()) and ddp.module is model
    idx, tgt = batch(0)
    ddp(idx, tgt).backward()
    ddp.finish_gradient_synchronization()
    ref(idx, tgt).backward()
    for a, b in zip(model.parameters(), ref.parameters()):
        assert (a.grad is None) == (b.grad is None)
        assert a.grad is None or torch.equal(a.grad, b.grad)
    ddp(idx, tgt).backward()  # forgetting finish: the second backward is refused
    with pytest.raises(RuntimeError, match="second gradient"):
        ddp(idx, tgt).backward()
