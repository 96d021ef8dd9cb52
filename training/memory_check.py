"""Refuse a batch that cannot fit, before out_dir is touched (train_reduced_sync.py calls it).

The estimate is a lower bound of one process's memory in a training step: the int64 token batches of its
micro-steps (inputs and targets), one micro-batch's logits over its vocabulary shard, and one activation
per layer kept for the backward pass (both at 2 bytes an element, the least any dtype takes). A request above the memory
that is available (CPU: MemAvailable; CUDA: the device's free memory) can only fail, after minutes of setup
and with an allocator traceback; one below it may still run out, which report_fatal (stop.py) says in a line.
"""
import os

import torch


def available_bytes(device):
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def step_bytes_at_least(cfg, vocab_size, micro_steps, tp):
    tokens = cfg.batch_size * cfg.block_size
    return (micro_steps * tokens * 8 * 2                # x, y
            + tokens * -(-vocab_size // tp) * 2         # logits
            + cfg.n_layer * tokens * cfg.n_embd * 2)    # one saved activation per layer


def check_memory(cfg, vocab_size, micro_steps, tp, device):
    """ValueError (one line) if a training step cannot fit in the memory available to this process."""
    need, have = step_bytes_at_least(cfg, vocab_size, micro_steps, tp), available_bytes(device)
    if need > have:
        raise ValueError(f"batch_size={cfg.batch_size} x block_size={cfg.block_size} needs at least "
                         f"{need / 2**30:,.1f} GiB per process for a training step, but {device} has "
                         f"{have / 2**30:,.1f} GiB available: lower batch_size (and raise "
                         f"gradient_accumulation_steps to keep the tokens per iteration)")
