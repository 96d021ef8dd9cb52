"""One training step and its bookkeeping, shared by train_reduced_sync.py and the benchmarks:
the learning-rate schedule, the optimizer, the step, evaluation, MFU, the run's log and checkpoint.

No host-device sync inside a training step: train_step returns the loss and the grad norm as device
tensors, and NonFiniteTracker counts non-finite steps on the device; the trainer reads them only at
log intervals and evals.

Checkpoint (checkpoint.py holds the format and its safe loading, weights_only=True):
    model        full unsharded state_dict (nanoGPT names), loadable at any tp
    optimizer    {'state': {param_name: {'step', 'exp_avg', 'exp_avg_sq' (full shapes)}},
                  'param_groups': [{'param_names': [...], hyperparameters...}]}
    model_args   GPTConfig fields;  config: the TrainConfig;  layout: tp/dp/world of the writer
    iter_num     iterations done (the checkpoint sits at an iteration boundary);  best_val_loss
    data         the sampler's description (scheme, seed, sizes) and its position (= iter_num)
    rng          rank 0's torch/cuda/numpy/python RNG states, as tensors (restored on resume; exact
                 resume does not depend on them since dropout is reseeded per micro-batch)
    scaler       GradScaler state (float16 only)
Resuming at another tp/dp loads the full weights and slices the optimizer state with
model.local_tensor.
"""
import json
import math
import os
import time
from contextlib import nullcontext

import torch

from training.checkpoint import rng_states, write_checkpoint
from training.config import wsd_decay_start
from data.loader import DATA_SCHEME, eval_offsets, eval_splits, load_tokens, open_split
from parallel import comm
from parallel.grad import clip_grad_norm_

# Peak dense bf16 FLOP/s per GPU for MFU (nanoGPT's estimate); other devices print 'mfu n/a'.
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def seed_dropout(seed, device):
    """Seed the RNG that dropout draws from, on this device only (every TP rank gets the same seed)."""
    torch.default_generator.manual_seed(seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed(seed)  # current device only


def get_lr(it, cfg):
    """Linear warmup (nanoGPT), then down to min_lr at lr_decay_iters, then min_lr. The way down:
      cosine (nanoGPT)   min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2 with r = (it - warmup) / (decay - warmup)
      wsd                lr until s = wsd_decay_start(cfg) (lr_decay_iters less cooldown_frac of it), then the
                         '1-sqrt' cooldown min_lr + (lr - min_lr) * (1 - sqrt((it - s) / (lr_decay_iters - s)))
                         (warmup-stable-decay: Hägele et al., arXiv 2405.18392, found 1-sqrt beats a linear
                         cooldown). Up to s the rate does not depend on lr_decay_iters, so a constant-rate trunk
                         checkpointed at s is the start of every budget's run (a branch)."""
    if not cfg.decay_lr:
        return cfg.learning_rate
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it >= cfg.lr_decay_iters:
        return cfg.min_lr
    if cfg.lr_schedule == "wsd":
        start = wsd_decay_start(cfg)
        if it < start:
            return cfg.learning_rate
        return cfg.min_lr + (1.0 - math.sqrt((it - start) / (cfg.lr_decay_iters - start))) * (cfg.learning_rate - cfg.min_lr)
    decay_ratio = (it - cfg.warmup_iters) / (cfg.lr_decay_iters - cfg.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return cfg.min_lr + coeff * (cfg.learning_rate - cfg.min_lr)


def configure_optimizer(model, cfg, device):
    """AdamW; matrices (dim >= 2: linear weights, embeddings) decay, biases and LayerNorms don't."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for _, p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for _, p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = device.startswith("cuda")  # fused keeps 'step' on the device: no host work per param
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), fused=fused)


def train_step(model, raw_model, optimizer, scaler, x, y, micro_batch_seeds, grad_clip, tp_group,
               autocast_ctx, device, keep_grads=False, grad_groups=None):
    """One optimizer step over this replica's micro-batches x[m], y[m] (gradient accumulation).

    Data-parallel grads are synced only after the last micro-step's backward. Returns (mean loss
    over the micro-batches, global grad norm, the norms of grad_groups or None) as device tensors:
    nothing here waits for the device (float16's GradScaler excepted: its step checks for infs on
    the host). grad_groups: lists of parameters (layer_groups()) whose norms before clipping to return.

    keep_grads: every .grad stays allocated, zeroed in place between steps, so backward always adds
    into it. Needed with CUDA graphs (compile_mode='reduce-overhead'): a .grad that is None takes
    over the backward graph's output buffer, which the next micro-step's replay overwrites (torch
    refuses: "accessing tensor output of CUDAGraphs that has been overwritten").
    """
    micro_steps = x.shape[0]
    if keep_grads:
        for p in raw_model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    loss_sum = torch.zeros((), device=x.device)
    for m in range(micro_steps):
        seed_dropout(micro_batch_seeds[m], device)
        last = m == micro_steps - 1
        with nullcontext() if last else model.no_sync():
            with autocast_ctx:
                _, loss = model(x[m], y[m])
            loss_sum += loss.detach().float()
            scaler.scale(loss / micro_steps).backward()
    model.finish_gradient_synchronization()
    scaler.unscale_(optimizer)  # no-op unless float16
    norms = clip_grad_norm_(raw_model.parameters(), grad_clip, tp_group, grad_groups)
    grad_norm, group_norms = norms if grad_groups is not None else (norms, None)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=not keep_grads)
    return loss_sum / micro_steps, grad_norm, group_norms


def layer_rank(name):
    """The sort key of a layer group's name: emb first, then the blocks by number, then final, then anything else
    by name (the order in which metrics.jsonl's grad_norm_layers lists them, and their readers draw them)."""
    if name == "emb":
        return (0, 0, "")
    if name.startswith("h") and name[1:].isdigit():
        return (1, int(name[1:]), "")
    return (2, 0, "") if name == "final" else (3, 0, name)


def layer_groups(raw_model):
    """(names, parameter lists): the embeddings ('emb'), each block ('h0', 'h1', ...) and the rest ('final': the
    final LayerNorm; the LM head is the embedding's tied weight), for train_step's grad_groups."""
    groups = {}
    for name, p in raw_model.named_parameters():
        if p.requires_grad:
            parts = name.split(".")
            key = f"h{parts[2]}" if parts[:2] == ["transformer", "h"] else \
                "emb" if parts[1:2] in (["wte"], ["wpe"]) else "final"
            groups.setdefault(key, []).append(p)
    names = sorted(groups, key=layer_rank)
    return names, [groups[k] for k in names]


class NonFiniteTracker:
    """Counts steps whose loss or grad norm is not finite, on the device (read only at log/eval)."""

    def __init__(self, device):
        self.count = torch.zeros((), device=device)
        self.first_iter = torch.full((), -1, dtype=torch.long, device=device)

    def update(self, iter_num, loss, grad_norm=None):
        """grad_norm=None: judge by the loss alone (float16, where GradScaler expects, and skips,
        steps whose scaled grads overflow)."""
        bad = ~torch.isfinite(loss) if grad_norm is None else ~(torch.isfinite(loss) & torch.isfinite(grad_norm))
        self.count += bad
        self.first_iter = torch.where(bad & (self.first_iter < 0), iter_num, self.first_iter)


# ----------------------------------------------------------------------------- evaluation
def measure_syncs_per_forward(raw_model, x):
    """Forward all-reduces actually issued by one eager forward (counted by parallel.comm)."""
    before = comm.stats.counts["tp_fwd"]
    raw_model(x[:1], x[:1])
    return comm.stats.counts["tp_fwd"] - before


@torch.no_grad()
def estimate_loss(model, raw_model, data_dir, cfg, mesh, autocast_ctx):
    """Mean loss over the fixed eval batches of each split; replicas share the batches out.
    Returns ({'train': float, 'val': float, and 'val_<part>' for each of the dataset's val_<part>.bin},
    measured syncs per forward)."""
    model.eval()
    losses, syncs = {}, None
    for split in eval_splits(data_dir):
        data = open_split(data_dir, split)
        total = torch.zeros((), device=mesh.device)
        for k in range(mesh.dp_rank, cfg.eval_iters, mesh.dp):
            offsets = eval_offsets(split, k, len(data), cfg.block_size, cfg.eval_batch_size or cfg.batch_size)
            x, y = load_tokens(data, offsets, cfg.block_size, mesh.device)
            if syncs is None:
                syncs = measure_syncs_per_forward(raw_model, x)
            with autocast_ctx:
                _, loss = model(x, y)
            total += loss.float()
        comm.all_reduce(total, mesh.dp_group, kind="eval_metrics")
        losses[split] = total.item() / cfg.eval_iters
    model.train()
    return losses, syncs


def estimate_mfu(raw_model, cfg, tokens_per_iter, dt, peak_flops):
    """nanoGPT's PaLM-appendix estimate: 6N + 12*L*H*Q*T flops per token, over the whole world."""
    if peak_flops is None:
        return None
    N = raw_model.get_num_params()
    L, H, Q, T = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head, cfg.block_size
    flops_per_iter = (6 * N + 12 * L * H * Q * T) * tokens_per_iter
    return flops_per_iter / dt / peak_flops


def peak_flops_total(device, dtype, world_size):
    if not device.startswith("cuda") or dtype not in ("bfloat16", "float16"):
        return None
    name = torch.cuda.get_device_name(device)
    for key, flops in PEAK_BF16_FLOPS.items():
        if key in name:
            return flops * world_size
    return None


# ----------------------------------------------------------------------------- checkpoints
def full_optimizer_state(optimizer, raw_model):
    """Optimizer state keyed by parameter name, with shard-shaped tensors gathered to full shape
    (a collective over the TP group: every TP rank calls it, in the same parameter order)."""
    name_of = {p: n for n, p in raw_model.named_parameters()}
    state = {}
    for name, p in raw_model.named_parameters():
        if p not in optimizer.state:
            continue
        entry = {}
        for key, value in optimizer.state[p].items():
            if torch.is_tensor(value) and value.shape == p.shape and value.dim() > 0:
                value = raw_model.full_tensor(name, value)
            # one copy: .cpu() copies a device tensor and returns a CPU one as it is (the clone it then needed
            # copied the 1 GB of a 124M model's AdamW moments a second time)
            entry[key] = value.detach().to("cpu", copy=True) if torch.is_tensor(value) else value
        state[name] = entry
    groups = [{**{k: v for k, v in g.items() if k != "params"},
               "param_names": [name_of[p] for p in g["params"]]} for g in optimizer.param_groups]
    return {"state": state, "param_groups": groups}


def load_full_optimizer_state(optimizer, raw_model, saved):
    """Inverse of full_optimizer_state at this rank's tp: slice each tensor with model.local_tensor.
    Hyperparameters (lr, betas, weight decay) stay as configured now."""
    name_of = {p: n for n, p in raw_model.named_parameters()}
    local = optimizer.state_dict()  # the current layout: param_groups with integer ids
    local["state"] = {}
    for group_sd, group in zip(local["param_groups"], optimizer.param_groups):
        for pid, p in zip(group_sd["params"], group["params"]):
            name = name_of[p]
            if name not in saved["state"]:
                continue
            local["state"][pid] = {
                k: raw_model.local_tensor(name, v) if torch.is_tensor(v) and v.dim() > 0 else v
                for k, v in saved["state"][name].items()}
    optimizer.load_state_dict(local)  # casts to each parameter's device and dtype


def save_checkpoint(paths, raw_model, optimizer, scaler, model_args, cfg, mesh, iter_num, best_val_loss, links=()):
    """Write the checkpoint (checkpoint.py's format), atomically, to every path in `paths`, and hard-link
    `links` to the first.
    Only data-parallel replica 0 gathers (its TP ranks all must call this); rank 0 writes, and returns the seconds
    of each part and the file's size ({'gather_s', 'write_s', 'bytes'}; None on the other ranks): a stop's line
    says where its seconds went."""
    if mesh.dp_rank != 0:
        return None
    start = time.perf_counter()
    model_sd = {k: v.detach().cpu() for k, v in raw_model.state_dict().items()}
    optim_sd = full_optimizer_state(optimizer, raw_model)
    if not mesh.is_master:
        return None
    gathered = time.perf_counter()
    checkpoint = {
        "model": model_sd,
        "optimizer": optim_sd,
        "model_args": model_args,
        "config": cfg.to_dict(),
        "layout": {"tp": mesh.tp, "dp": mesh.dp, "world_size": mesh.world_size},
        "iter_num": iter_num,
        "best_val_loss": best_val_loss,
        "data": {"scheme": DATA_SCHEME, "iter_num": iter_num, "seed": cfg.seed,
                 "batch_size": cfg.batch_size, "block_size": cfg.block_size,
                 "gradient_accumulation_steps": cfg.gradient_accumulation_steps},
        "rng": rng_states(mesh.device),
        "scaler": scaler.state_dict(),
    }
    write_checkpoint(paths, checkpoint, links)
    return {"gather_s": gathered - start, "write_s": time.perf_counter() - gathered, "bytes": os.path.getsize(paths[0])}


# ----------------------------------------------------------------------------- logging
class RunLog:
    """log.txt (human, appended) and metrics.jsonl (machine) in out_dir, written by rank 0 only."""

    def __init__(self, out_dir, enabled, fresh):
        """fresh: a new run (init_from='scratch') starts new logs; a resumed run appends."""
        self.enabled = enabled
        self.txt = os.path.join(out_dir, "log.txt")
        self.jsonl = os.path.join(out_dir, "metrics.jsonl")
        if enabled and fresh:
            for path in (self.txt, self.jsonl):
                open(path, "w").close()
        if enabled:  # a run killed mid-line left a partial line: end it, so appended lines stay whole
            for path in (self.txt, self.jsonl):
                if os.path.exists(path) and os.path.getsize(path) > 0:
                    with open(path, "rb+") as f:
                        f.seek(-1, os.SEEK_END)
                        if f.read(1) == b"\n":
                            continue
                        if path == self.jsonl:  # half a record is none: readers skipped it without a word
                            f.truncate(_last_line_end(f))
                        else:
                            f.write(b"\n")

    def write(self, text, record=None):
        if not self.enabled:
            return
        print(text, flush=True)
        _append(self.txt, text + "\n")
        if record is not None:
            _append(self.jsonl, json.dumps(record) + "\n")


def _last_line_end(f, block=1 << 16):
    """The offset just past the last newline of the binary file f (0 where it has none)."""
    end = f.seek(0, os.SEEK_END)
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _append(path, text):
    try:
        with open(path, "a") as f:
            f.write(text)
    except OSError as e:
        if e.filename is None:  # a failed write() or close() names no file; the one-line error should
            raise OSError(e.errno, e.strerror, path) from None
        raise


# ----------------------------------------------------------------------------- the trainer's loop: its small steps
def precision(device, dtype):
    """(autocast context, GradScaler): bf16/fp16 autocast on CUDA (TF32 matmuls), fp32 on CPU; the
    scaler is active for float16 only."""
    cuda = device.startswith("cuda")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast_ctx = (torch.amp.autocast(device_type="cuda", dtype=getattr(torch, dtype))
                    if cuda and dtype != "float32" else nullcontext())
    return autocast_ctx, torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))


def checkpoint_paths(cfg, iter_num, start_iter, keep_iters, is_best, ckpt_path):
    """(paths to write, hard links to make) at an eval, or None when this eval writes no checkpoint."""
    keep = iter_num in keep_iters and not cfg.eval_only  # a trunk's branch point: also ckpt_<iter>.pt
    due = iter_num >= cfg.max_iters or (iter_num // cfg.eval_interval) % cfg.checkpoint_every == 0
    if iter_num <= start_iter or cfg.eval_only or not (keep or due and (is_best or cfg.always_save_checkpoint)):
        return None
    best = [os.path.join(cfg.out_dir, "ckpt_best.pt")] if is_best and cfg.keep_best else []
    return [ckpt_path] + best, [os.path.join(cfg.out_dir, f"ckpt_{iter_num}.pt")] if keep else []


def set_lr(optimizer, iter_num, cfg):
    lr = get_lr(iter_num, cfg)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr
