"""The training data: checks of a prepared dataset, and which tokens each iteration reads.

Files. data/<dataset>/{train,val}.bin are uint16 GPT-2 (or character) token ids written by the
dataset's prepare.py; a char-level dataset also has meta.pkl with its vocab_size. The data root is
the repository's data/ whatever the cwd, or --data_dir as the user typed it.

Data order (deterministic, resumable, independent of the dp x tp layout).
    Iteration `it` trains on gradient_accumulation_steps * batch_size sequences. Their start
    offsets come from one numpy PCG64 stream seeded with (seed, it) (SeedSequence hashing), drawn
    as a [gradient_accumulation_steps, batch_size] array: row g is global micro-batch g.
    Replica r runs micro-batches g = r*M .. r*M + M-1 (M = gradient_accumulation_steps / dp).
    So the sampler has no state: the data position is the iteration number, a resumed run sees
    exactly the batches it would have seen, and changing tp or dp keeps the same samples in
    every iteration (changing seed, batch_size, block_size or gradient_accumulation_steps
    changes the stream). data_order='one_pass' reads the split's disjoint block_size windows in one
    seeded permutation instead, none twice. data_order='passes' goes on where one_pass would stop:
    sequence i of the run is window perm_k[i mod W] with k = i // W (W windows), perm_0 the one_pass
    order and perm_k (k >= 1) a permutation keyed by (seed, k); so every window is read once per pass,
    and up to one pass the batches are one_pass's. Dropout is reseeded before each micro-batch from
    (seed, it, g), so its masks do not depend on the layout either. Eval batches are a fixed set
    per split, seeded independently of `seed`, so every run and every eval measures the same tokens.
"""
import functools
import glob
import os
import pickle
import re
import zlib

import numpy as np
import torch


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # plain containers and primitives need no global
        raise pickle.UnpicklingError(f"it refers to {module}.{name}; only plain data (dict, list, str, int, ...) "
                                     "is allowed")


def read_plain_pickle(path):
    """Unpickle a file of plain data only (a dataset's meta.pkl): any class or function it names is
    refused, so no code runs. Raises ValueError with one line naming the file."""
    try:
        with open(path, "rb") as f:
            return _PlainUnpickler(f).load()
    except OSError as e:
        raise ValueError(f"{path}: cannot be read: {e.strerror or e}") from None
    except Exception as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:240]
        raise ValueError(f"{path}: not a plain-data pickle ({reason})") from None


DATA_DIR = os.path.dirname(os.path.abspath(__file__))  # the repository's data/: one dataset per folder
# Tags that keep the seed streams of different uses apart.
TRAIN_DATA, EVAL_DATA, DROPOUT, LATER_PASS = 0, 1, 2, 3
EVAL_SPLIT_IDS = {"train": 0, "val": 1}
DATA_SCHEME = "stateless-v1: offsets[it] = PCG64(seed, it) [grad_accum, batch]; replica r takes rows r*M..r*M+M-1"


class DataError(Exception):
    """A dataset that cannot be read as asked: one line for the user, naming the file and the fix."""


def data_dir_for(dataset, root=""):
    """<root>/<dataset>; root '' is the repository's data/, so the cwd does not matter (a root given by
    the user, --data_dir, is a path as typed: relative to the cwd)."""
    return os.path.join(root or DATA_DIR, dataset)


def prepare_command(dataset):
    """The command that prepares a dataset, as the user can type it from the cwd; for a dataset the
    repository has no prepare script for, the datasets it has."""
    script = os.path.join(DATA_DIR, dataset, "prepare.py")
    if not os.path.isfile(script):
        known = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(DATA_DIR, "*", "prepare.py")))
        return (f"its prepare.py, which the repository does not have for dataset={dataset!r} (datasets with one: "
                f"{', '.join(known)}; or prepare your own into data/{dataset}/train.bin and val.bin)")
    rel = os.path.relpath(script)
    return f"`python {rel if not rel.startswith('..') else script}`"


def writes_meta(dataset):
    """Whether the repository's prepare script of dataset writes a meta.pkl (a character-level dataset; so does
    a name ending in _char, nanoGPT's convention)."""
    try:
        with open(os.path.join(DATA_DIR, dataset, "prepare.py"), encoding="utf-8") as f:
            return "meta.pkl" in f.read()
    except (OSError, UnicodeDecodeError):
        return False


def check_data(dataset, block_size, root=""):
    """Return (data_dir, vocab_size) or raise DataError naming the prepare script."""
    data_dir = data_dir_for(dataset, root)
    prepare = prepare_command(dataset)
    vocab_size = 50304  # GPT-2 BPE's 50257 padded up to a multiple of 64 (nanoGPT)
    meta_path = os.path.join(data_dir, "meta.pkl")
    if not os.path.exists(meta_path) and (dataset.endswith("_char") or writes_meta(dataset)):  # else: GPT-2's vocabulary
        raise DataError(f"{meta_path} not found: dataset {dataset!r} is character-level and its vocabulary is "
                        f"there; rerun {prepare}")
    if os.path.exists(meta_path):  # char-level datasets store their vocabulary size
        try:
            meta = read_plain_pickle(meta_path)  # plain data only: unpickling it runs no code
        except ValueError as e:
            raise DataError(f"{e}; rerun {prepare}") from None
        vocab_size = meta.get("vocab_size") if isinstance(meta, dict) else None
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            raise DataError(f"{meta_path} has no valid 'vocab_size' (got {vocab_size!r}); rerun {prepare}")
    for split in eval_splits(data_dir):
        path = os.path.join(data_dir, f"{split}.bin")
        if not os.path.exists(path):
            raise DataError(f"{path} not found: prepare the dataset first with {prepare}")
        if not os.path.isfile(path):
            raise DataError(f"{path} is not a file; rerun {prepare}")
        size = os.path.getsize(path)
        if size % 2:
            raise DataError(f"{path} has an odd size ({size} bytes), so it is not uint16 tokens: the file is "
                           f"corrupt or truncated; rerun {prepare}")
        n_tokens = size // 2  # uint16 tokens
        if n_tokens <= block_size + 1:
            raise DataError(f"{path} holds {n_tokens} tokens, too few for block_size={block_size}")
        check_token_ids(path, vocab_size, prepare)
    return data_dir, vocab_size


def check_token_ids(path, vocab_size, prepare, chunk=1 << 20, whole_up_to=1 << 27):
    """DataError if a token id of the file is >= vocab_size (a corrupt file, or another tokenizer's).
    Files of up to whole_up_to tokens are read whole; larger ones at 64 evenly spaced chunks."""
    try:
        data = np.memmap(path, dtype=np.uint16, mode="r")
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    n = len(data)
    starts = range(0, n, chunk) if n <= whole_up_to else np.linspace(0, n - chunk, 64).astype(np.int64)
    for start in starts:
        top = int(data[start:start + chunk].max())
        if top >= vocab_size:
            raise DataError(f"{path} holds token id {top} (near offset {int(start)}), outside the vocabulary of "
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
    per_iter = shape[0] * shape[1]
    if cfg.data_order == "one_pass":
        windows = one_pass_order(seed, n_tokens, cfg.block_size)
        if (iter_num + 1) * per_iter > len(windows):
            raise DataError(f"data_order='one_pass': iteration {iter_num} needs more than the split's "
                           f"{len(windows)} windows of block_size={cfg.block_size}")
        return windows[iter_num * per_iter:(iter_num + 1) * per_iter].reshape(shape) * cfg.block_size
    if cfg.data_order == "passes":
        n_windows = (n_tokens - 1) // cfg.block_size
        sequence = np.arange(iter_num * per_iter, (iter_num + 1) * per_iter)
        windows = np.empty_like(sequence)
        for k in np.unique(sequence // n_windows):  # one pass, or two where an iteration straddles them
            at = sequence // n_windows == k
            windows[at] = pass_order(seed, int(k), n_tokens, cfg.block_size)[sequence[at] % n_windows]
        return windows.reshape(shape) * cfg.block_size
    high = n_tokens - cfg.block_size
    return seeded_rng(TRAIN_DATA, seed, iter_num).integers(0, high, size=shape)


@functools.lru_cache(maxsize=2)
def one_pass_order(seed, n_tokens, block_size):
    """A seeded permutation of the (n_tokens - 1) // block_size disjoint windows (each needs block_size + 1
    tokens: inputs and the next-token targets)."""
    return seeded_rng(TRAIN_DATA, seed).permutation((n_tokens - 1) // block_size)


@functools.lru_cache(maxsize=4)
def pass_order(seed, k, n_tokens, block_size):
    """data_order='passes': the window order of pass k; pass 0 is one_pass's."""
    if k == 0:
        return one_pass_order(seed, n_tokens, block_size)
    return seeded_rng(LATER_PASS, seed, k).permutation((n_tokens - 1) // block_size)


def passes_read(cfg, n_tokens, iters):
    """How many passes over the train split's windows `iters` iterations read (a fraction; for
    data_order='random', the tokens read over the split's tokens)."""
    sequences = iters * cfg.gradient_accumulation_steps * cfg.batch_size
    if cfg.data_order == "random":
        return sequences * cfg.block_size / n_tokens
    return sequences / ((n_tokens - 1) // cfg.block_size)


def check_one_pass(cfg, data_dir):
    """DataError unless a one_pass run's max_iters fit in the train split without reading a window twice."""
    if cfg.data_order != "one_pass":
        return
    windows = (os.path.getsize(os.path.join(data_dir, "train.bin")) // 2 - 1) // cfg.block_size
    need = cfg.max_iters * cfg.gradient_accumulation_steps * cfg.batch_size
    if need > windows:
        raise DataError(f"data_order='one_pass' with max_iters={cfg.max_iters}: the run reads {need:,} sequences "
                       f"but {os.path.join(data_dir, 'train.bin')} holds {windows:,} windows of block_size={cfg.block_size}; "
                       f"lower max_iters to {windows // (cfg.gradient_accumulation_steps * cfg.batch_size):,} or "
                       f"use data_order='random'")


def eval_splits(data_dir):
    """The splits each eval measures: train, val, and every val_<part>.bin of the dataset (a corpus of several
    domains has one per domain: data/debian_large's val_prose and val_code), sorted by name."""
    extra = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(data_dir, "val_*.bin")))
    return ("train", "val", *(name for name in extra if re.fullmatch(r"val_\w+", name)))


def eval_split_id(split):
    """The seed-stream tag of a split's eval batches: fixed per name, whatever else the dataset holds."""
    return EVAL_SPLIT_IDS.get(split, 2 + zlib.crc32(split.encode()) % (1 << 16))


def eval_offsets(split, k, n_tokens, block_size, batch_size):
    """Offsets of eval batch k of a split: the same for every run, seed and eval."""
    return seeded_rng(EVAL_DATA, eval_split_id(split), k).integers(0, n_tokens - block_size, size=batch_size)


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
