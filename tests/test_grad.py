"""parallel/grad.py clip_grad_norm_ equals torch.nn.utils.clip_grad_norm_ on the unsharded model.

At tp=1 directly; at tp=2 (two gloo processes) the sharded model's norm and its clipped grads,
gathered to full shapes, must equal what torch computes on the tp=1 model: this fails if
replicated parameters were counted once per TP rank. The same for the per-layer norms it returns
with groups= (training.step.layer_groups), against torch's norm of each layer's unsharded grads.
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from model.gpt import GPT, GPTConfig
from parallel.grad import clip_grad_norm_
from parallel.mesh import build_groups
from training.step import layer_groups

CONFIG = dict(block_size=16, vocab_size=48, n_layer=2, n_head=4, n_embd=32, dropout=0.0, bias=True,
              n_tracks=2, sync_policy="selective:m0,1")  # unsynced points: partial-grad replicated params too
MAX_NORM = 0.05  # well below the tiny model's grad norm, so clipping really scales


def model_with_grads(tp_group=None):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CONFIG), tp_group=tp_group)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, CONFIG["vocab_size"], (3, CONFIG["block_size"]), generator=g)
    targets = torch.randint(0, CONFIG["vocab_size"], (3, CONFIG["block_size"]), generator=g)
    _, loss = model(idx, targets)
    loss.backward()
    return model


def reference():
    """(norm, {name: clipped grad in full nanoGPT layout}) from torch on the tp=1 model.
    (full_tensor: the same code reads the tp=2 grads.)"""
    model = model_with_grads()
    _, groups = layer_groups(model)
    layer_norms = torch.stack([torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in g])) for g in groups])
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    return norm, {n: model.full_tensor(n, p.grad) for n, p in model.named_parameters()}, layer_norms


def test_tp1_equals_torch():
    ref_norm, ref_grads, _ = reference()
    model = model_with_grads()
    norm = clip_grad_norm_(model.parameters(), MAX_NORM)
    assert ref_norm > MAX_NORM * 2
    torch.testing.assert_close(norm, ref_norm)
    for name, p in model.named_parameters():
        torch.testing.assert_close(model.full_tensor(name, p.grad), ref_grads[name], msg=name)


def test_norm_only_when_max_norm_is_zero():
    model = model_with_grads()
    before = {n: p.grad.clone() for n, p in model.named_parameters()}
    norm = clip_grad_norm_(model.parameters(), 0.0)
    assert torch.isfinite(norm) and norm > 0
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, before[name]), name


def test_tp1_layer_norms_are_each_layers_norm_before_clipping():
    ref_norm, ref_grads, ref_layers = reference()
    model = model_with_grads()
    names, groups = layer_groups(model)
    assert names == ["emb", "h0", "h1", "final"] and sum(len(g) for g in groups) == len(list(model.parameters()))
    norm, layer_norms = clip_grad_norm_(model.parameters(), MAX_NORM, groups=groups)
    torch.testing.assert_close(norm, ref_norm)
    torch.testing.assert_close(layer_norms, ref_layers)
    torch.testing.assert_close(layer_norms.square().sum().sqrt(), norm)  # the layers partition the parameters
    for name, p in model.named_parameters():  # and clipping is as without groups
        torch.testing.assert_close(model.full_tensor(name, p.grad), ref_grads[name], msg=name)


def _tp2_worker(rank, init_file, result_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        mesh = build_groups(tp=2)
        model = model_with_grads(mesh.tp_group)
        norm, layer_norms = clip_grad_norm_(model.parameters(), MAX_NORM, mesh.tp_group,
                                            groups=layer_groups(model)[1])
        grads = {n: model.full_tensor(n, p.grad) for n, p in model.named_parameters()}
        if rank == 0:
            torch.save({"norm": norm, "grads": grads, "layer_norms": layer_norms}, result_file)
    finally:
        dist.destroy_process_group()


def test_tp2_equals_torch_on_unsharded_model(tmp_path):
    result_file = str(tmp_path / "result.pt")
    mp.spawn(_tp2_worker, args=(str(tmp_path / "init"), result_file), nprocs=2, join=True)
    got = torch.load(result_file, weights_only=True)
    ref_norm, ref_grads, ref_layers = reference()
    torch.testing.assert_close(got["norm"], ref_norm)
    torch.testing.assert_close(got["layer_norms"], ref_layers)  # sharded parts summed over tp, replicated once
    assert set(got["grads"]) == set(ref_grads)
    for name, grad in got["grads"].items():
        torch.testing.assert_close(grad, ref_grads[name], msg=name)
