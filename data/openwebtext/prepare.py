"""
Prepare OpenWebText with GPT-2 BPE tokens (as nanoGPT's data/openwebtext/prepare.py).

Downloads the dataset with HuggingFace `datasets`, holds out 0.05% of the
documents as val (seed 2357, as nanoGPT), tokenizes each document with the GPT-2
encoding (tiktoken.get_encoding("gpt2"), as nanoGPT) plus a trailing
<|endoftext|>, and writes train.bin and val.bin of np.uint16 next to this script
(nanoGPT's README gives ~54 GB of HF cache, ~9B train tokens = ~17 GB, ~4M val
tokens). Needs internet and the optional requirements:

    pip install -r requirements-optional.txt
    python data/openwebtext/prepare.py [--num_proc 8]

Each .bin is written to a temp file and moved into place when complete, so an
interrupted run never leaves a half-written .bin; existing .bin files are
rebuilt only with --force.
"""
import argparse
import os
import sys

import numpy as np
import tiktoken
from tqdm import tqdm

# run as a file (python data/<name>/prepare.py, as in nanoGPT), this script has only its own folder on
# sys.path: the repository root goes first, so that it imports as `python -m data.<name>.prepare` does
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data.prepare_utils import OneLineArgumentParser, PrepareError, run  # noqa: E402
from atomic_files import replace_problem  # noqa: E402


def main():
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_proc", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="worker processes for tokenization and loading (default: half the CPUs)")
    parser.add_argument("--val_size", type=float, default=0.0005, help="fraction of documents held out as val (default %(default)s)")
    parser.add_argument("--seed", type=int, default=2357, help="seed of the train/val document split (default %(default)s)")
    parser.add_argument("--force", action="store_true", help="rebuild train.bin/val.bin even if they exist")
    args = parser.parse_args()
    if args.num_proc < 1:
        parser.error(f"--num_proc must be >= 1, got {args.num_proc}")
    if not 0 < args.val_size < 1:
        parser.error(f"--val_size must be in (0, 1), got {args.val_size}")

    out_dir = os.path.dirname(os.path.abspath(__file__))
    outputs = [os.path.join(out_dir, f"{split}.bin") for split in ("train", "val")]
    if all(os.path.exists(p) for p in outputs) and not args.force:
        print(f"{out_dir}/train.bin and val.bin exist; nothing to do (--force rebuilds them)")
        return
    for path in outputs:  # a FIFO or a device there is refused before the download, never replaced
        if replace_problem(path):
            raise PrepareError(replace_problem(path))

    try:
        from datasets import load_dataset
    except ImportError:
        sys.exit("error: data/openwebtext/prepare.py needs the HuggingFace `datasets` package and internet: "
                 "pip install -r requirements-optional.txt")

    enc = tiktoken.get_encoding("gpt2")  # downloads its two files once, as the dataset needs internet anyway

    dataset = load_dataset("openwebtext", num_proc=args.num_proc)
    split_dataset = dataset["train"].train_test_split(test_size=args.val_size, seed=args.seed, shuffle=True)
    split_dataset["val"] = split_dataset.pop("test")

    def process(example):
        ids = enc.encode_ordinary(example["text"])  # ignores any special tokens
        ids.append(enc.eot_token)  # 50256 for gpt2
        return {"ids": ids, "len": len(ids)}

    tokenized = split_dataset.map(process, remove_columns=["text"], desc="tokenizing the splits",
                                  num_proc=args.num_proc)

    # concatenate all the ids of each split into one file, 1024 shards at a time
    for split, dset in tokenized.items():
        arr_len = np.sum(dset["len"], dtype=np.uint64)
        filename = os.path.join(out_dir, f"{split}.bin")
        tmp = os.path.join(out_dir, f"{split}.tmp-{os.getpid()}.bin")  # same folder: os.replace is atomic
        try:
            arr = np.memmap(tmp, dtype=np.uint16, mode="w+", shape=(arr_len,))  # enc.max_token_value < 2**16
            total_batches = min(1024, len(dset))
            idx = 0
            for batch_idx in tqdm(range(total_batches), desc=f"writing {filename}"):
                batch = dset.shard(num_shards=total_batches, index=batch_idx, contiguous=True).with_format("numpy")
                arr_batch = np.concatenate(batch["ids"])
                arr[idx: idx + len(arr_batch)] = arr_batch
                idx += len(arr_batch)
            arr.flush()
            del arr
            os.replace(tmp, filename)
        except OSError as e:  # a full disk, `ulimit -f`
            raise PrepareError(f"cannot write {filename}: {e.strerror or e}; it was left as it was") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        print(f"{split} has {int(arr_len):,} tokens")


if __name__ == "__main__":
    sys.exit(run(main))  # Ctrl-C, SIGTERM, a failed write: one line, no traceback
