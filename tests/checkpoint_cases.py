"""Checkpoint files for the hardening tests: valid, malicious, truncated, random bytes, old format.

Built in-process without training (a tiny GPT's initial weights), so they take milliseconds.
"""
import builtins
import os
import pickle
import random

import numpy as np
import torch

from training.checkpoint import write_checkpoint
from model.gpt import GPT, GPTConfig

# The architecture of conftest.TINY on the synthetic dataset (vocabulary of 32 characters).
TINY_MODEL_ARGS = dict(block_size=32, vocab_size=32, n_layer=2, n_head=4, n_embd=32, dropout=0.0, bias=False,
                       n_tracks=2, sync_policy="baseline")


class Payload:
    """Pickles as a call of exec(code): unpickling it without weights_only runs the code."""

    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return builtins.exec, (self.code,)


def marker_code(marker):
    return f"open({str(marker)!r}, 'w').write('pwned')"


def tiny_checkpoint(dataset="syn", data_dir="", **model_args):
    """A checkpoint with model, model_args, config and iter_num (what sample.py and spd_sensitivity.py read)."""
    args = {**TINY_MODEL_ARGS, **model_args}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**args))
    return {"model": dict(model.state_dict()), "model_args": args, "iter_num": 0,
            "config": {"dataset": dataset, "data_dir": data_dir, "eval_iters": 1, "batch_size": 2}}


def write_valid(path, dataset="syn", data_dir="", **model_args):
    write_checkpoint([str(path)], tiny_checkpoint(dataset, data_dir, **model_args))
    return str(path)


def write_malicious(path, marker, raw_pickle=False):
    """A checkpoint whose model_args is a code-running pickle payload (torch.save's zip format, or a
    plain pickle of protocol 4 when raw_pickle)."""
    checkpoint = tiny_checkpoint()
    checkpoint["model_args"] = Payload(marker_code(marker))
    if raw_pickle:
        with open(path, "wb") as f:
            pickle.dump(checkpoint, f, protocol=4)
    else:
        torch.save(checkpoint, str(path))
    return str(path)


def write_old_format(path, checkpoint=None):
    """What the previous main wrote: numpy's and Python's RNG states pickled as they are."""
    checkpoint = dict(checkpoint if checkpoint is not None else tiny_checkpoint())
    checkpoint.pop("format", None)
    checkpoint["rng"] = {"torch_cpu": torch.get_rng_state(), "numpy": np.random.get_state(),
                         "python": random.getstate()}
    torch.save(checkpoint, str(path))
    return str(path)


def write_truncated(path, source_path):
    with open(source_path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    return str(path)


def write_random_bytes(path, n=4096, seed=0):
    with open(path, "wb") as f:
        f.write(np.random.default_rng(seed).bytes(n))
    return str(path)


def tree_state(root):
    """{relative path: (size, mtime_ns)} of every file and directory under root (symlinks not followed)."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            state[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return state
