"""
Prepare the Shakespeare dataset at the character level, offline.

Same text and same train/val split as data/shakespeare/prepare.py (the last ~10%
of each play, cut at a speech boundary; plays in sorted path order; see
data/shakespeare_text.py). Plays are separated by their trailing blank line.
Writes next to this script, as nanoGPT's shakespeare_char does:
  train.bin, val.bin  np.uint16 character ids
  meta.pkl            {'vocab_size', 'itos', 'stoi'}; the vocabulary is every
                      character of train + val, sorted

Run from anywhere:  python data/shakespeare_char/prepare.py
Re-running rewrites identical files, each via a temp file moved into place.
"""
import os
import pickle
import sys
import time

import numpy as np
from tqdm import tqdm

# run as a file (python data/<name>/prepare.py, as in nanoGPT), this script has only its own folder on
# sys.path: the repository root goes first, so that it imports as `python -m data.<name>.prepare` does
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data.prepare_utils import check_no_arguments, run, write_atomic
from data.shakespeare_text import load_play, play_paths


def main():
    t0 = time.time()
    out_dir = os.path.dirname(os.path.abspath(__file__))
    train_parts, val_parts = [], []
    for path in tqdm(play_paths(), desc="plays", unit="play"):
        train_text, val_text = load_play(path)
        train_parts.append(train_text)
        val_parts.append(val_text)
    train_text, val_text = "".join(train_parts), "".join(val_parts)

    chars = sorted(set(train_text + val_text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    print(f"vocab size: {len(chars)}")
    print(f"train has {len(train_text):,} characters")
    print(f"val has {len(val_text):,} characters")

    encode = lambda s: np.array([stoi[c] for c in s], dtype=np.uint16).tobytes()
    meta = {"vocab_size": len(chars), "itos": itos, "stoi": stoi}
    write_atomic(os.path.join(out_dir, "meta.pkl"), pickle.dumps(meta))
    write_atomic(os.path.join(out_dir, "val.bin"), encode(val_text))
    write_atomic(os.path.join(out_dir, "train.bin"), encode(train_text))  # last: marks completion
    print(f"wrote {out_dir}/train.bin, val.bin, meta.pkl in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    check_no_arguments(sys.argv[1:], __doc__, "data/shakespeare_char/prepare.py")
    sys.exit(run(main))  # Ctrl-C, SIGTERM, a failed write: one line, no traceback
