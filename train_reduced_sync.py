"""Train a GPT with reduced-synchronization tensor parallelism (dp x tp), in nanoGPT's spirit.

    python train_reduced_sync.py config/shakespeare_grouped_6sync.py              # one process
    torchrun --standalone --nproc_per_node=8 train_reduced_sync.py config/train_grouped_6sync.py --tp=2
    python train_reduced_sync.py config/shakespeare_grouped_6sync.py --init_from=resume   # continue

world = dp * tp processes. The tp ranks of one data-parallel replica hold shards of one model
and read the same batch; replicas average gradients with parallel/ddp.py's BucketedDDP.
Progress goes to out_dir/log.txt (human) and out_dir/metrics.jsonl (compare_runs.py).

Data order (deterministic, resumable, independent of the dp x tp layout).
    Iteration `it` trains on gradient_accumulation_steps * batch_size sequences. Their start
    offsets come from one numpy PCG64 stream seeded with (seed, it) (SeedSequence hashing), drawn
    as a [gradient_accumulation_steps, batch_size] array: row g is global micro-batch g.
    Replica r runs micro-batches g = r*M .. r*M + M-1 (M = gradient_accumulation_steps / dp).
    So the sampler has no state: the data position is the iteration number, a resumed run sees
    exactly the batches it would have seen, and changing tp or dp keeps the same samples in
    every iteration (changing seed, batch_size, block_size or gradient_accumulation_steps
    changes the stream). Dropout is reseeded before each micro-batch from (seed, it, g), so its
    masks do not depend on the layout either. Eval batches are a fixed set per split, seeded
    independently of `seed`, so every run and every eval measures the same tokens.

out_dir holds one run, locked while it trains (run_dir.py); SIGINT/SIGTERM stop every rank after the same
step with a checkpoint and exit 130/143 (stop.py).

Checkpoint (out_dir/ckpt.pt, written at eval time and on a stop signal by rank 0, atomically; ckpt_best.pt =
best val).
The format (tensors, plain containers and primitives only) and its safe loading (weights_only=True)
live in checkpoint.py:
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
model.local_tensor. On CPU a resumed run at the same layout prints exactly the losses of an
uninterrupted one; across a change of tp they agree to float32 rounding (tests/test_train.py allows
rel 1e-4; the sums of the sharded matmuls are taken in another order).
If ckpt.pt is unusable (truncated, corrupt), resume falls back to a valid ckpt_best.pt, says so,
and keeps the bad file as ckpt.pt.invalid.

No host-device sync inside a training step: losses and grad norms stay on the device and are
read only every log_interval (and at evals), which is also where non-finite values are caught.
"""
import functools
import importlib.util
import json
import math
import os
import signal
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist

from checkpoint import (MODEL_KEYS, CheckpointError, load_weights, read_checkpoint, read_for_resume,
                        read_plain_pickle, restore_rng_states, rng_states, set_aside,
                        write_checkpoint)
from configurator import ConfigError, format_config, help_text, parse, resolve_layout, save_config
from memory_check import check_memory
from model.gpt import GPT, GPTConfig
from parallel import comm
from parallel.ddp import BucketedDDP
from parallel.grad import clip_grad_norm_
from parallel.mesh import RendezvousError, env_int, init_mesh, record_error_for_torchrun
from run_dir import OutDirError, check_out_dir, claim, refuse_existing_run
from stop import Control, install_signal_handlers, report_fatal

# Tags that keep the seed streams of different uses apart.
TRAIN_DATA, EVAL_DATA, DROPOUT = 0, 1, 2
EVAL_SPLIT_IDS = {"train": 0, "val": 1}
DATA_SCHEME = "stateless-v1: offsets[it] = PCG64(seed, it) [grad_accum, batch]; replica r takes rows r*M..r*M+M-1"

# Peak dense bf16 FLOP/s per GPU for MFU (nanoGPT's estimate); other devices print 'mfu n/a'.
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


class RunError(Exception):
    """A problem to report to the user in one line and exit on (no traceback)."""


# ----------------------------------------------------------------------------- data
REPO = os.path.dirname(os.path.abspath(__file__))


def data_dir_for(dataset, root=""):
    """<root>/<dataset>; root '' is the repository's data/, so the cwd does not matter (a root given by
    the user, --data_dir, is a path as typed: relative to the cwd)."""
    return os.path.join(root or os.path.join(REPO, "data"), dataset)


def prepare_command(dataset):
    """The command that prepares a dataset, as the user can type it from the cwd."""
    script = os.path.join(REPO, "data", dataset, "prepare.py")
    rel = os.path.relpath(script)
    return f"`python {rel if not rel.startswith('..') else script}`"


def check_data(dataset, block_size, root=""):
    """Return (data_dir, vocab_size) or raise RunError naming the prepare script."""
    data_dir = data_dir_for(dataset, root)
    prepare = prepare_command(dataset)
    vocab_size = 50304  # GPT-2 BPE's 50257 padded up to a multiple of 64 (nanoGPT)
    meta_path = os.path.join(data_dir, "meta.pkl")
    if os.path.exists(meta_path):  # char-level datasets store their vocabulary size
        try:
            meta = read_plain_pickle(meta_path)  # plain data only: unpickling it runs no code
        except ValueError as e:
            raise RunError(f"{e}; rerun {prepare}") from None
        vocab_size = meta.get("vocab_size") if isinstance(meta, dict) else None
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            raise RunError(f"{meta_path} has no valid 'vocab_size' (got {vocab_size!r}); rerun {prepare}")
    for split in ("train", "val"):
        path = os.path.join(data_dir, f"{split}.bin")
        if not os.path.exists(path):
            raise RunError(f"{path} not found: prepare the dataset first with {prepare}")
        if not os.path.isfile(path):
            raise RunError(f"{path} is not a file; rerun {prepare}")
        size = os.path.getsize(path)
        if size % 2:
            raise RunError(f"{path} has an odd size ({size} bytes), so it is not uint16 tokens: the file is "
                           f"corrupt or truncated; rerun {prepare}")
        n_tokens = size // 2  # uint16 tokens
        if n_tokens <= block_size + 1:
            raise RunError(f"{path} holds {n_tokens} tokens, too few for block_size={block_size}")
        check_token_ids(path, vocab_size, prepare)
    return data_dir, vocab_size


def check_token_ids(path, vocab_size, prepare, chunk=1 << 20, whole_up_to=1 << 27):
    """RunError if a token id of the file is >= vocab_size (a corrupt file, or another tokenizer's).
    Files of up to whole_up_to tokens are read whole; larger ones at 64 evenly spaced chunks."""
    try:
        data = np.memmap(path, dtype=np.uint16, mode="r")
    except (OSError, ValueError) as e:
        raise RunError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    n = len(data)
    starts = range(0, n, chunk) if n <= whole_up_to else np.linspace(0, n - chunk, 64).astype(np.int64)
    for start in starts:
        top = int(data[start:start + chunk].max())
        if top >= vocab_size:
            raise RunError(f"{path} holds token id {top} (near offset {int(start)}), outside the vocabulary of "
                           f"{vocab_size} ids: the file is corrupt or from another tokenizer; rerun {prepare}")


def open_split(data_dir, split):
    # A fresh memmap per batch, as nanoGPT does: a long-lived one grows in memory.
    return np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")


def seeded_rng(*parts):
    """An independent numpy stream for a tuple of non-negative ints (SeedSequence hashes them)."""
    return np.random.default_rng([int(p) for p in parts])


def train_offsets(seed, iter_num, n_tokens, cfg):
    """Start offsets of every sequence of iteration iter_num: [gradient_accumulation_steps, batch_size].
    data_order='one_pass': sequence i of the run is window perm[i] of the split's block_size windows, where
    perm is a permutation drawn from the seed alone, so no window is read twice and the order stays a pure
    function of (seed, iteration), as resuming needs."""
    shape = (cfg.gradient_accumulation_steps, cfg.batch_size)
    if cfg.data_order == "one_pass":
        per_iter = shape[0] * shape[1]
        windows = one_pass_order(seed, n_tokens, cfg.block_size)
        if (iter_num + 1) * per_iter > len(windows):
            raise RunError(f"data_order='one_pass': iteration {iter_num} needs more than the split's "
                           f"{len(windows)} windows of block_size={cfg.block_size}")
        return windows[iter_num * per_iter:(iter_num + 1) * per_iter].reshape(shape) * cfg.block_size
    high = n_tokens - cfg.block_size
    return seeded_rng(TRAIN_DATA, seed, iter_num).integers(0, high, size=shape)


@functools.lru_cache(maxsize=2)
def one_pass_order(seed, n_tokens, block_size):
    """A seeded permutation of the (n_tokens - 1) // block_size disjoint windows (each needs block_size + 1
    tokens: inputs and the next-token targets)."""
    return seeded_rng(TRAIN_DATA, seed).permutation((n_tokens - 1) // block_size)


def check_one_pass(cfg, data_dir):
    """RunError unless a one_pass run's max_iters fit in the train split without reading a window twice."""
    if cfg.data_order != "one_pass":
        return
    windows = (os.path.getsize(os.path.join(data_dir, "train.bin")) // 2 - 1) // cfg.block_size
    need = cfg.max_iters * cfg.gradient_accumulation_steps * cfg.batch_size
    if need > windows:
        raise RunError(f"data_order='one_pass' with max_iters={cfg.max_iters}: the run reads {need:,} sequences "
                       f"but {os.path.join(data_dir, 'train.bin')} holds {windows:,} windows of block_size={cfg.block_size}; "
                       f"lower max_iters to {windows // (cfg.gradient_accumulation_steps * cfg.batch_size):,} or "
                       f"use data_order='random'")


def eval_offsets(split, k, n_tokens, block_size, batch_size):
    """Offsets of eval batch k of a split: the same for every run, seed and eval."""
    return seeded_rng(EVAL_DATA, EVAL_SPLIT_IDS[split], k).integers(0, n_tokens - block_size, size=batch_size)


def load_tokens(data, offsets, block_size, device):
    """x, y int64 tensors of shape offsets.shape + (block_size,), on device (pinned, async copy)."""
    window = offsets[..., None] + np.arange(block_size + 1)
    seqs = torch.from_numpy(data[window].astype(np.int64))
    x, y = seqs[..., :-1], seqs[..., 1:]
    if device.startswith("cuda"):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.contiguous(), y.contiguous()


def get_train_batch(data_dir, cfg, iter_num, dp_rank, micro_steps, device):
    """This replica's micro-batches of iteration iter_num: x, y [micro_steps, batch_size, block_size],
    and their global micro-batch indices (which seed dropout)."""
    data = open_split(data_dir, "train")
    offsets = train_offsets(cfg.seed, iter_num, len(data), cfg)
    first = dp_rank * micro_steps
    x, y = load_tokens(data, offsets[first:first + micro_steps], cfg.block_size, device)
    return x, y, list(range(first, first + micro_steps))


def dropout_seed(seed, iter_num, global_micro_batch):
    return int(np.random.SeedSequence([DROPOUT, seed, iter_num, global_micro_batch]).generate_state(1)[0])


def seed_dropout(seed, device):
    """Seed the RNG that dropout draws from, on this device only (every TP rank gets the same seed)."""
    torch.default_generator.manual_seed(seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed(seed)  # current device only


# ----------------------------------------------------------------------------- optimization
def get_lr(it, cfg):
    """nanoGPT: linear warmup, cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if not cfg.decay_lr:
        return cfg.learning_rate
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it >= cfg.lr_decay_iters:
        return cfg.min_lr
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
               autocast_ctx, device):
    """One optimizer step over this replica's micro-batches x[m], y[m] (gradient accumulation).

    Data-parallel grads are synced only after the last micro-step's backward. Returns (mean loss
    over the micro-batches, global grad norm) as device tensors: nothing here waits for the device
    (float16's GradScaler excepted: its step checks for infs on the host).
    """
    micro_steps = x.shape[0]
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
    grad_norm = clip_grad_norm_(raw_model.parameters(), grad_clip, tp_group)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum / micro_steps, grad_norm


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
    Returns ({'train': float, 'val': float}, measured syncs per forward)."""
    model.eval()
    losses, syncs = {}, None
    for split in ("train", "val"):
        data = open_split(data_dir, split)
        total = torch.zeros((), device=mesh.device)
        for k in range(mesh.dp_rank, cfg.eval_iters, mesh.dp):
            offsets = eval_offsets(split, k, len(data), cfg.block_size, cfg.batch_size)
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
            entry[key] = value.detach().cpu().clone() if torch.is_tensor(value) else value
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


def save_checkpoint(paths, raw_model, optimizer, scaler, model_args, cfg, mesh, iter_num, best_val_loss):
    """Write the checkpoint (checkpoint.py's format), atomically, to every path in `paths`.
    Only data-parallel replica 0 gathers (its TP ranks all must call this); rank 0 writes."""
    if mesh.dp_rank != 0:
        return
    model_sd = {k: v.detach().cpu() for k, v in raw_model.state_dict().items()}
    optim_sd = full_optimizer_state(optimizer, raw_model)
    if not mesh.is_master:
        return
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
    write_checkpoint(paths, checkpoint)


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
                        if f.read(1) != b"\n":
                            f.write(b"\n")

    def write(self, text, record=None):
        if not self.enabled:
            return
        print(text, flush=True)
        with open(self.txt, "a") as f:
            f.write(text + "\n")
        if record is not None:
            with open(self.jsonl, "a") as f:
                f.write(json.dumps(record) + "\n")


def check_vocab(ckpt_vocab, data_vocab, ckpt_path, data_dir, mesh):
    """The checkpoint's vocabulary must be the dataset's (whose token ids were checked against it)."""
    if ckpt_vocab != data_vocab:
        fail(f"{ckpt_path} has a vocabulary of {ckpt_vocab} ids but the dataset {data_dir} has {data_vocab}: it was "
             f"trained on another dataset or tokenizer; choose its dataset with --dataset", mesh)


def fail(message, mesh=None, code=1, every_rank=False):
    """Print one clear message (once, not per rank) and exit without a traceback. every_rank: an error
    that only this rank may have seen (its rendezvous), printed by each rank with its rank."""
    env_rank = os.environ.get("RANK", "0")
    rank = mesh.rank if mesh is not None else int(env_rank) if env_rank.isdigit() else 0
    if every_rank and rank > 0:
        print(f"error: rank {rank}: {message}", file=sys.stderr, flush=True)
    elif rank <= 0:
        print(f"error: {message}", file=sys.stderr, flush=True)
    record_error_for_torchrun(f"error: {message}")  # torchrun's summary, printed last, then names it
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(code)


# ----------------------------------------------------------------------------- main
def main(argv):
    # ---- configuration, layout, data and model: everything that can be wrong about the
    # request is checked before out_dir is created.
    if "-h" in argv or "--help" in argv:
        try:
            text = help_text(argv)
        except ConfigError as e:
            fail(str(e))
        if int(os.environ.get("RANK", "0")) == 0:  # once under torchrun
            print(text)
        return 0
    try:
        cfg = parse(argv)
        layout = resolve_layout(cfg, env_int("WORLD_SIZE", 1))
    except (ConfigError, ValueError) as e:
        fail(str(e))
    if cfg.data_dir:  # as typed, from the cwd; stored absolute, so sample.py finds meta.pkl from anywhere
        cfg.data_dir = os.path.abspath(cfg.data_dir)
    tp_requested, cfg.tp = cfg.tp, layout.tp  # config.json and checkpoints record the tp that ran
    if cfg.device == "cuda" and not torch.cuda.is_available():
        fail("device='cuda' but CUDA is not available; use --device=cpu or --device=auto")
    # 'auto' takes CUDA only when every local process gets its own GPU (NCCL needs one each)
    try:
        local_procs = env_int("LOCAL_WORLD_SIZE", 1)
        cuda_fits = torch.cuda.is_available() and torch.cuda.device_count() >= local_procs
        device_type = "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and cuda_fits) else "cpu"
        mesh = init_mesh(layout.tp, device_type, cfg.rendezvous_timeout)
    except ValueError as e:  # RendezvousError: only this rank may know, so every rank says it
        fail(str(e), every_rank=isinstance(e, RendezvousError))
    device = mesh.device
    control = Control(mesh)  # every rank, now: it creates a process group
    fresh = cfg.init_from != "resume"
    try:
        micro_steps = layout.micro_steps
        data_dir, vocab_size = check_data(cfg.dataset, cfg.block_size, cfg.data_dir)
        check_one_pass(cfg, data_dir)
        check_out_dir(cfg.out_dir)
        refuse_existing_run(cfg.out_dir, fresh, cfg.overwrite)
        check_memory(cfg, vocab_size, micro_steps, cfg.tp, device)
    except (ConfigError, RunError, OutDirError, ValueError) as e:
        fail(str(e), mesh)
    dtype = cfg.dtype
    if dtype == "auto":
        dtype = ("bfloat16" if torch.cuda.is_bf16_supported() else "float16") if device_type == "cuda" else "float32"
    if device_type == "cpu" and dtype != "float32":
        fail(f"dtype={dtype!r} is only supported on CUDA; use float32 or auto on CPU", mesh)
    if cfg.wandb_log and importlib.util.find_spec("wandb") is None:
        fail("wandb_log=True but wandb is not installed: pip install wandb (or --wandb_log=False)", mesh)

    checkpoint, ckpt_path = None, os.path.join(cfg.out_dir, "ckpt.pt")
    resumed_from = fallback_note = None  # the file resumed from (ckpt_best.pt if ckpt.pt is unusable)
    if cfg.init_from == "resume":
        try:  # checkpoint.py: weights_only=True, and a one-line error for any bad file
            checkpoint, resumed_from, fallback_note = read_for_resume(cfg.out_dir)
        except CheckpointError as e:
            fail(f"init_from='resume': {e}", mesh)
        if fallback_note and mesh.is_master:
            print(f"note: {fallback_note}", flush=True)
        # The architecture comes from the checkpoint (as nanoGPT); say so if the request differed.
        for key, value in checkpoint["model_args"].items():
            if hasattr(cfg, key) and getattr(cfg, key) != value and key != "dropout":
                if mesh.is_master:
                    print(f"note: resuming with {key}={value!r} from the checkpoint (requested {getattr(cfg, key)!r})")
                setattr(cfg, key, value)
        check_vocab(checkpoint["model_args"]["vocab_size"], vocab_size, resumed_from, data_dir, mesh)
        saved_data = checkpoint["data"]
        if mesh.is_master and any(saved_data[k] != getattr(cfg, k)
                                  for k in ("seed", "batch_size", "block_size", "gradient_accumulation_steps")):
            print("note: seed/batch_size/block_size/gradient_accumulation_steps differ from the "
                  "checkpoint's: the data order after resuming differs from the original run's")

    init_weights = None
    if cfg.init_from not in ("scratch", "resume"):
        # Fine-tune: the weights (and so the architecture) of a checkpoint; the sync policy,
        # dropout, optimizer and schedule come from this config, from iteration 0.
        try:
            source = read_checkpoint(cfg.init_from, MODEL_KEYS)
        except CheckpointError as e:
            fail(f"init_from: {e}", mesh)
        check_vocab(source["model_args"]["vocab_size"], vocab_size, cfg.init_from, data_dir, mesh)
        for key in ("n_layer", "n_head", "n_embd", "block_size", "bias", "n_tracks"):
            if getattr(cfg, key) != source["model_args"][key] and mesh.is_master:
                print(f"note: fine-tuning with {key}={source['model_args'][key]!r} from the checkpoint "
                      f"(requested {getattr(cfg, key)!r})")
            setattr(cfg, key, source["model_args"][key])
        init_weights = source["model"]
        del source

    model_args = dict(block_size=cfg.block_size, vocab_size=vocab_size, n_layer=cfg.n_layer,
                      n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias,
                      n_tracks=cfg.n_tracks, sync_policy=cfg.sync_policy)
    if checkpoint is not None:
        model_args["vocab_size"] = checkpoint["model_args"]["vocab_size"]
    try:
        torch.manual_seed(cfg.seed)  # identical on every rank: GPT draws the full weights from it
        raw_model = GPT(GPTConfig(**model_args), tp_group=mesh.tp_group, async_grad_allreduce=cfg.tp_async_grad)
    except ValueError as e:
        fail(str(e), mesh)
    try:
        if checkpoint is not None:
            load_weights(raw_model, checkpoint, resumed_from)
        elif init_weights is not None:
            load_weights(raw_model, {"model": init_weights}, cfg.init_from)
            init_weights = None
    except CheckpointError as e:
        fail(str(e), mesh)
    raw_model.to(device)

    # ---- output directory, config and log: the request is valid from here on. Rank 0 creates and locks
    # out_dir, removes orphan temp files and (--overwrite=True) moves an old run aside; all ranks agree.
    claim_error, claim_notes = None, []
    if mesh.is_master:
        try:
            claim_notes = claim(cfg.out_dir, fresh, cfg.overwrite)
        except OutDirError as e:
            claim_error = str(e)
    if control.any_error(claim_error is not None):
        fail(claim_error or "rank 0 could not claim out_dir", mesh)
    tokens_per_iter = cfg.gradient_accumulation_steps * cfg.batch_size * cfg.block_size
    derived = {"world_size": mesh.world_size, "dp": mesh.dp, "micro_steps_per_replica": micro_steps,
               "tokens_per_iter": tokens_per_iter, "device": device, "resolved_dtype": dtype,
               "vocab_size": model_args["vocab_size"], "n_params": raw_model.get_num_params(),
               "declared_syncs_per_forward": raw_model.syncs_per_forward, "tp_requested": tp_requested}
    if mesh.is_master:
        save_config(cfg, os.path.join(cfg.out_dir, "config.json"), extra={"derived": derived})
    log = RunLog(cfg.out_dir, mesh.is_master, fresh=fresh)
    for note in claim_notes:
        log.write(f"note: {note}", {"type": "note", "note": note})
    log.write(f"layout: world {mesh.world_size} = dp {mesh.dp} x tp {mesh.tp} ({layout.why}), {micro_steps} "
              f"micro-step{'s' if micro_steps > 1 else ''} per replica, {tokens_per_iter:,} tokens per iteration, "
              f"{derived['n_params'] / 1e6:.2f}M parameters, {dtype} on {device_type}",
              {"type": "layout", "world_size": mesh.world_size, "dp": mesh.dp, "tp": mesh.tp,
               "tp_requested": tp_requested})
    if mesh.is_master:
        print(f"config:\n{format_config(cfg)}", flush=True)
    comm.barrier()  # out_dir exists before any rank goes on

    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast_ctx = (torch.amp.autocast(device_type="cuda", dtype=getattr(torch, dtype))
                    if device_type == "cuda" and dtype != "float32" else nullcontext())
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))

    optimizer = configure_optimizer(raw_model, cfg, device)
    iter_num, best_val_loss = 0, 1e9
    if checkpoint is not None:
        load_full_optimizer_state(optimizer, raw_model, checkpoint["optimizer"])
        if dtype == "float16" and checkpoint.get("scaler"):
            scaler.load_state_dict(checkpoint["scaler"])
        restore_rng_states(checkpoint["rng"], device)
        iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
        if fallback_note:  # keep the unusable ckpt.pt: the next checkpoint would overwrite it
            kept = set_aside(ckpt_path) if mesh.is_master else None
            log.write(f"note: {fallback_note}" + (f"; the unusable file is kept as {kept}" if kept else ""),
                      {"type": "resume_fallback", "iter": iter_num, "from": resumed_from, "kept": kept})
        log.write(f"resumed from {resumed_from} at iter {iter_num} (saved at tp={checkpoint['layout']['tp']} "
                  f"dp={checkpoint['layout']['dp']}; now tp={mesh.tp} dp={mesh.dp})",
                  {"type": "resume", "iter": iter_num, "tp": mesh.tp, "dp": mesh.dp})
        checkpoint = None  # free the memory
    start_iter = iter_num

    # fullgraph: a graph break would silently run eager; the model is built to trace whole (tests/test_compile.py)
    if cfg.compile:
        if mesh.is_master:  # compiling happens at the first call, silently otherwise
            print("compiling the model (torch.compile, fullgraph=True): the first eval and the first iteration "
                  "wait for it, from under a minute to several minutes (longer on CPU)", flush=True)
        model = torch.compile(raw_model, fullgraph=True, backend=cfg.compile_backend,
                              mode=None if cfg.compile_mode == "default" else cfg.compile_mode)
    else:
        model = raw_model
    model = BucketedDDP(  # a dp group of one replica is fine too: then no communication
        model, process_group=mesh.dp_group, bucket_cap_mb=cfg.bucket_cap_mb)

    wandb = None
    if cfg.wandb_log and mesh.is_master:
        import wandb  # optional dependency; WANDB_MODE=offline runs without network
        wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name, config={**cfg.to_dict(), **derived})

    # ---- the training loop
    nonfinite = NonFiniteTracker(device)
    peak_flops = peak_flops_total(device, dtype, mesh.world_size)
    timer_start, timed_iters = time.time(), 0

    def check_finite(at_iter):
        """All replicas agree (one all-reduce) whether any step so far went non-finite; stop if so."""
        flag = nonfinite.count.clone()
        comm.all_reduce(flag, mesh.dp_group, kind="train_metrics")
        if flag.item() > 0:
            first = nonfinite.first_iter.item()
            where = f"iter {first}" if first >= 0 else f"an iteration before iter {at_iter}"
            log.write(f"non-finite loss or gradient norm at {where}: stopping. The last good checkpoint "
                      f"({ckpt_path}, if any) is left as it was.",
                      {"type": "error", "iter": first if first >= 0 else at_iter, "error": "non-finite"})
            fail(f"training diverged (non-finite loss/grad norm at {where}); "
                 f"try a lower learning_rate or grad_clip", mesh, code=2)

    def save(paths):
        """save_checkpoint on every rank; a write that fails (a full disk) stops every rank, in one line."""
        error = None
        try:
            save_checkpoint(paths, raw_model, optimizer, scaler, model_args, cfg, mesh, iter_num, best_val_loss)
        except CheckpointError as e:
            error = str(e)
        if control.any_error(error is not None):
            fail(error or "rank 0 could not write the checkpoint", mesh)

    signum = 0
    control.start()
    while True:
        # Evaluate and checkpoint at an iteration boundary (weights after iter_num steps).
        if iter_num % cfg.eval_interval == 0 or iter_num >= cfg.max_iters or cfg.eval_only:
            check_finite(iter_num)
            losses, syncs = estimate_loss(model, raw_model, data_dir, cfg, mesh, autocast_ctx)
            if not all(math.isfinite(v) for v in losses.values()):
                log.write(f"step {iter_num}: non-finite eval loss {losses}: stopping without saving",
                          {"type": "error", "iter": iter_num, "error": "non-finite eval loss"})
                fail(f"training diverged: non-finite eval loss at iter {iter_num}", mesh, code=2)
            log.write(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                      f"syncs/fwd {syncs}",
                      {"type": "eval", "iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"],
                       "syncs_per_fwd": syncs, "lr": get_lr(iter_num, cfg), "time": time.time()})
            if wandb is not None:
                wandb.log({"iter": iter_num, "train/loss": losses["train"], "val/loss": losses["val"],
                           "syncs_per_fwd": syncs, "lr": get_lr(iter_num, cfg)})
            is_best = losses["val"] < best_val_loss
            best_val_loss = min(best_val_loss, losses["val"])
            if iter_num > start_iter and not cfg.eval_only and (is_best or cfg.always_save_checkpoint):
                paths = [ckpt_path] + ([os.path.join(cfg.out_dir, "ckpt_best.pt")] if is_best else [])
                save(paths)
            timer_start, timed_iters = time.time(), 0
        if cfg.eval_only or iter_num >= cfg.max_iters:
            break

        lr = get_lr(iter_num, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y, micro_batches = get_train_batch(data_dir, cfg, iter_num, mesh.dp_rank, micro_steps, device)
        seeds = [dropout_seed(cfg.seed, iter_num, g) for g in micro_batches]
        train_loss, grad_norm = train_step(model, raw_model, optimizer, scaler, x, y, seeds, cfg.grad_clip,
                                           mesh.tp_group, autocast_ctx, device)
        nonfinite.update(iter_num, train_loss, None if scaler.is_enabled() else grad_norm)
        timed_iters += 1

        if iter_num % cfg.log_interval == 0:  # the only host-device sync of a normal step
            metrics = torch.stack([train_loss, grad_norm, nonfinite.count])
            comm.all_reduce(metrics, mesh.dp_group, kind="train_metrics")
            loss_value, norm_value, n_bad = (metrics / mesh.dp).tolist()
            if n_bad > 0:
                check_finite(iter_num)
            dt = (time.time() - timer_start) / timed_iters
            mfu = estimate_mfu(raw_model, cfg, tokens_per_iter, dt, peak_flops)
            tok_per_s = tokens_per_iter / dt
            record = {"type": "train", "iter": iter_num, "loss": loss_value, "grad_norm": norm_value, "lr": lr,
                      "time_ms": dt * 1000, "tok_per_s": tok_per_s, "mfu": mfu}
            log.write(f"iter {iter_num}: loss {loss_value:.4f}, time {dt * 1000:.2f}ms, tok/s {tok_per_s:.0f}, "
                      + (f"mfu {mfu * 100:.2f}%" if mfu is not None else "mfu n/a"), record)
            if wandb is not None:
                wandb.log({"iter": iter_num, "train/step_loss": loss_value, "grad_norm": norm_value, "lr": lr,
                           "tok_per_s": tok_per_s, "mfu": mfu})
            timer_start, timed_iters = time.time(), 0
        iter_num += 1
        signum = control.agreed_stop()  # SIGINT/SIGTERM: every rank stops after the same step
        if signum:
            save([ckpt_path])
            name = signal.Signals(signum).name
            log.write(f"stopped by {name} at iter {iter_num}: saved {ckpt_path}; continue with --init_from=resume",
                      {"type": "stop", "iter": iter_num, "signal": name})
            break

    control.finish()
    if wandb is not None:
        wandb.finish()
    if dist.is_initialized():
        # every rank done with every collective before any tears its group down: a gloo rank that
        # exited while a peer still talked to it aborted once ("terminate called without an active
        # exception", dp2 x tp2 on a loaded CPU)
        comm.barrier()
        dist.destroy_process_group()
    return 128 + signum if signum else 0  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them


if __name__ == "__main__":
    install_signal_handlers()  # SIGINT/SIGTERM: at once until training starts, then after a step with a checkpoint
    sys.exit(report_fatal(main, sys.argv[1:]))
