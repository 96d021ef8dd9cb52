"""A training step (between log intervals) never waits for the device.

CUDA: the steps run under torch.cuda.set_sync_debug_mode("error"), which raises on any
synchronizing call (skipped without CUDA). CPU: the Tensor methods that force a sync on a GPU
(.item(), .tolist(), .cpu(), .numpy(), bool/float/int conversion) are wrapped to count calls made
from project code (train_reduced_sync.py, training/step.py, data/, model/, parallel/); a step must make
none. PyTorch's own internals are not counted (e.g. CPU AdamW reads its CPU-resident step counter with .item()).
"""
import os
import sys
from contextlib import contextmanager, nullcontext

import pytest
import torch

import training.step as trs
from training.config import parse
from data.loader import dropout_seed, get_train_batch
from model.gpt import GPT, GPTConfig
from parallel.ddp import BucketedDDP
from parallel.mesh import init_mesh
from tests.conftest import REPO, TINY

SYNCING_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")
PROJECT_FILES = (os.path.join(REPO, "train_reduced_sync.py"), os.path.join(REPO, "training", "step.py"),
                 os.path.join(REPO, "data") + os.sep, os.path.join(REPO, "model") + os.sep,
                 os.path.join(REPO, "parallel") + os.sep)


@contextmanager
def count_project_syncs():
    """Yields a list that collects 'file:line method' for every syncing call made from project code."""
    calls = []
    originals = {name: getattr(torch.Tensor, name) for name in SYNCING_METHODS}

    def wrap(name, original):
        def wrapper(self, *args, **kwargs):
            caller = sys._getframe(1)
            if caller.f_code.co_filename.startswith(PROJECT_FILES):
                calls.append(f"{caller.f_code.co_filename}:{caller.f_lineno} {name}")
            return original(self, *args, **kwargs)
        return wrapper

    for name, original in originals.items():
        setattr(torch.Tensor, name, wrap(name, original))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def make_training(workdir, device, dtype):
    cfg = parse([*TINY, "--dropout=0.1", f"--device={device.split(':')[0]}", f"--dtype={dtype}"])
    torch.manual_seed(cfg.seed)
    raw = GPT(GPTConfig(block_size=cfg.block_size, vocab_size=32, n_layer=cfg.n_layer, n_head=cfg.n_head,
                        n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias, n_tracks=cfg.n_tracks,
                        sync_policy="grouped:2")).to(device)
    model = BucketedDDP(raw, process_group=None)
    optimizer = trs.configure_optimizer(raw, cfg, device)
    autocast = (torch.amp.autocast(device_type="cuda", dtype=getattr(torch, dtype))
                if dtype != "float32" else nullcontext())
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    tracker = trs.NonFiniteTracker(device)
    data_dir = os.path.join(workdir, "data", "syn")

    def step(it):
        """Everything the training loop does for a step that is not a log step."""
        for group in optimizer.param_groups:
            group["lr"] = trs.get_lr(it, cfg)
        x, y, micro_batches = get_train_batch(data_dir, cfg, it, 0, cfg.gradient_accumulation_steps, device)
        seeds = [dropout_seed(cfg.seed, it, g) for g in micro_batches]
        loss, norm, _ = trs.train_step(model, raw, optimizer, scaler, x, y, seeds, cfg.grad_clip, None,
                                    autocast, device)
        tracker.update(it, loss, norm)
        return loss

    return step, (model, raw, data_dir, cfg, autocast)


def test_cpu_step_makes_no_syncing_calls(workdir):
    step, _ = make_training(workdir, "cpu", "float32")
    step(0)  # the first step may sync once (BucketedDDP rebuilds its buckets from the observed order)
    with count_project_syncs() as calls:
        losses = [step(it) for it in range(1, 4)]
    assert calls == []
    assert all(torch.isfinite(loss) for loss in losses)


def test_detector_catches_a_sync(workdir):
    """The counter is not vacuous: evaluation reads its losses on the host, and is caught."""
    step, (model, raw, data_dir, cfg, autocast) = make_training(workdir, "cpu", "float32")
    mesh = init_mesh(1, "cpu")
    with count_project_syncs() as calls:
        trs.estimate_loss(model, raw, data_dir, cfg, mesh, autocast)
    assert any(os.path.join("training", "step.py") in c and "item" in c for c in calls), calls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_step_never_synchronizes(workdir):
    step, _ = make_training(workdir, "cuda:0", "bfloat16")
    step(0)
    step(1)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [step(it) for it in range(2, 6)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(torch.stack(losses)).all()
