"""
Carry data/debian_large to a GPU machine in xz chunks, each checked against corpus.json's sha256.

A device call carries at most 64 MiB, and a machine keeps its files between calls while it is held. So the
corpus travels as chunks: train.bin in corpus.json's chunks of chunk_tokens (2^24) tokens, each compressed
with xz (about 6.7 MB for 32 MiB of tokens), and the val files in one more. Here:

    python -m data.debian_large.stage pack --chunks 15 --out .stage      # write .stage/train-000.xz ... and val.xz
                                                                         # (17 s a chunk, --workers at once)

Here again, before each call, the call's share of them (hard links in a folder of their own; val.xz in the first):

    python -m data.debian_large.stage group --from .stage_all --chunks 19 --index 0 --out .stage   # 1 of 7

There, one call per group of chunks that fits in a call (carry=[".stage"] or a folder of its own):

    python -m data.debian_large.stage unpack --from .stage --chunks 15   # verify, keep, and once all 15 are
                                                                         # there, write data/debian_large/train.bin

unpack keeps each verified chunk in data/debian_large/chunks/ (so a later call only brings the ones still
missing), and writes train.bin as the concatenation of chunks 0 .. N-1, the first N * 2^24 tokens of the
full train.bin, once all of them are there. Because documents are in sha256(id) order, that prefix is a
uniform sample of the documents (prepare.py). staged.json records the prefix's tokens and chunks, and the
training runs read it from there. Every write goes through a temp file and os.replace; a chunk whose sha256
differs from corpus.json's is refused, not kept.
"""
import hashlib
import json
import lzma
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__" and not __package__:  # run by its path: the imports below need the repository root
    sys.exit("run it from the repository root as: python -m data.debian_large.stage " + " ".join(sys.argv[1:]))
from cli_guard import HelpFormatter  # noqa: E402
from data.prepare_utils import OneLineArgumentParser, PrepareError, run, worker_pool, write_atomic  # noqa: E402

MANIFEST = os.path.join(HERE, "corpus.json")
CHUNK_DIR = os.path.join(HERE, "chunks")
VAL_SPLITS = ("val", "val_prose", "val_code")
# A call carries the working tree (git's tracked files) with the carried folder, 64 MiB in all. Four chunks (30.1 MiB)
# went through beside 30.8 MiB of tracked files and were refused beside 31.2 MiB, where three (25.3 MiB with
# val.xz) went through (experiments/large_budgets/w768/calls/README.md): so the room is what the tracked files leave,
# less 4 MiB, and it shrinks as each session commits its runs.
CALL_BYTES = 64 * 2**20
CALL_SPARE = 4 * 2**20
# xz's preset for a train chunk. On chunk 0 (1x 2-core CPU, 2026-11-30): preset 1 8.12 MB in 1.5 s, 6 6.92 MB in
# 13.8 s, 9 6.75 MB in 17.3 s, 9 extreme 6.72 MB in 19.3 s; each decompresses in 0.4 s. The 17% that preset 9 saves
# puts three chunks in a call where preset 1's took two: beside 38.7 MiB of tracked files (22.3 MB of room), `group`
# splits 25 chunks into 9 calls instead of 13. Chunks packed at another preset unpack the same (the sha256 is of the
# tokens).
CHUNK_PRESET = 9


def load_manifest():
    try:
        with open(MANIFEST) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise PrepareError(f"{MANIFEST} cannot be read ({e}); restore it with git checkout") from None


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def chunk_name(k):
    return f"train-{k:03d}.xz"


def pack_chunk(out, k, chunk_tokens, expected_sha256):
    """Write train.bin's chunk k, checked against the manifest's sha256, to out as xz; (path, seconds)."""
    train = np.memmap(os.path.join(HERE, "train.bin"), dtype=np.uint16, mode="r")
    data = train[k * chunk_tokens:(k + 1) * chunk_tokens].tobytes()
    if sha256(data) != expected_sha256:
        raise PrepareError(f"train.bin's chunk {k} differs from corpus.json: rebuild it with "
                           f"python data/debian_large/prepare.py")
    t0 = time.time()
    path = os.path.join(out, chunk_name(k))
    write_atomic(path, lzma.compress(data, preset=CHUNK_PRESET))
    return path, time.time() - t0


def pack(args, manifest):
    """Write the xz chunks of the first --chunks chunks of train.bin (checked) and of the val files."""
    os.makedirs(args.out, exist_ok=True)
    todo = [k for k in range(args.first, args.chunks) if not os.path.exists(os.path.join(args.out, chunk_name(k)))]
    if todo:
        with worker_pool(min(args.workers, len(todo))) as pool:  # its workers end with this process
            done = [pool.submit(pack_chunk, args.out, k, manifest["chunk_tokens"], manifest["train_chunk_sha256"][k])
                    for k in todo]
            for future in done:
                path, seconds = future.result()
                print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB ({seconds:.0f} s)", flush=True)
    path = os.path.join(args.out, "val.xz")
    if not os.path.exists(path):
        blobs = []
        for split in VAL_SPLITS:
            with open(os.path.join(HERE, f"{split}.bin"), "rb") as f:
                data = f.read()
            if sha256(data) != manifest["sha256"][f"{split}.bin"]:
                raise PrepareError(f"{split}.bin differs from corpus.json: rebuild it with prepare.py")
            blobs.append(data)
        header = json.dumps([len(b) for b in blobs]).encode() + b"\n"
        write_atomic(path, lzma.compress(header + b"".join(blobs), preset=9))
        print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB", flush=True)
    return 0


def packed_names(folder, chunks):
    """val.xz and chunks 0 .. chunks-1's packed files, in that order; PrepareError if folder lacks any."""
    names = ["val.xz"] + [chunk_name(k) for k in range(chunks)]
    missing = [n for n in names if not os.path.exists(os.path.join(folder, n))]
    if missing:
        raise PrepareError(f"--from {folder} lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}: "
                           f"write them with python -m data.debian_large.stage pack --chunks {chunks} --out {folder}")
    return names


def call_groups(folder, chunks, max_bytes):
    """[[file name]] of the packed files in folder: val.xz, then chunks 0 .. chunks-1 in order, each group as many
    whole files as stay under max_bytes (a file larger than that alone in its group)."""
    groups, size = [[]], 0
    for name in packed_names(folder, chunks):
        n = os.path.getsize(os.path.join(folder, name))
        if groups[-1] and size + n > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    return groups


def tracked_bytes(root=None):
    """The bytes of git's tracked files in root (default: the checkout holding this file), as they are on disk: the
    part of a call that is not carried."""
    here = os.path.dirname(os.path.abspath(__file__))  # not HERE, which tests point at their fixtures

    def git(*args):
        return subprocess.run(["git", *args], cwd=root or here, capture_output=True, check=True).stdout
    try:
        root = root or git("rev-parse", "--show-toplevel").decode().strip()
        listed = git("ls-files", "-z")
    except (OSError, subprocess.CalledProcessError) as e:
        raise PrepareError(f"cannot list the tracked files of {root or here} ({e}); give --max-mb") from None
    paths = (os.path.join(root, p) for p in listed.decode().split("\0") if p)
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def group(args, manifest):
    """Put the --index-th call's share of --from's packed files into --out, in place of the ones there."""
    if os.path.isdir(args.out) and os.path.samefile(args.out, args.source):
        raise PrepareError(f"--out {args.out}: the same folder as --from; give the folder the call carries")
    packed_names(args.source, args.chunks)
    measured = args.max_mb is None
    if measured:
        tracked = tracked_bytes()
        args.max_mb = (CALL_BYTES - CALL_SPARE - tracked) / 1e6
    groups = call_groups(args.source, args.chunks, args.max_mb * 1e6)
    largest = max(sum(os.path.getsize(os.path.join(args.source, n)) for n in g) for g in groups) / 1e6
    if measured and largest > args.max_mb:
        raise PrepareError(f"the tracked files ({tracked / 2**20:.1f} MiB) leave {max(args.max_mb, 0):.1f} MB of a "
                           f"call's 64 MiB, less than one packed file ({largest:.1f} MB): stage from a smaller checkout")
    if not 0 <= args.index < len(groups):
        raise PrepareError(f"--index {args.index}: give 0 to {len(groups) - 1} ({len(groups)} calls of at most "
                           f"{args.max_mb:.1f} MB carry val.xz and {args.chunks} chunks)")
    os.makedirs(args.out, exist_ok=True)
    packed = {"val.xz"} | {chunk_name(k) for k in range(len(manifest["train_chunk_sha256"]))}
    for name in os.listdir(args.out):  # only the packed files of an earlier call: nothing else in --out is touched
        if name in packed:
            os.remove(os.path.join(args.out, name))
    for name in groups[args.index]:
        source, target = os.path.join(args.source, name), os.path.join(args.out, name)
        try:
            os.link(source, target)
        except OSError:  # another file system: a copy, through a temp file
            with open(source, "rb") as f:
                write_atomic(target, f.read())
    size = sum(os.path.getsize(os.path.join(args.out, n)) for n in groups[args.index])
    print(f"{args.out}: call {args.index + 1} of {len(groups)}, {', '.join(groups[args.index])} "
          f"({size / 1e6:.1f} MB{f' of the {args.max_mb:.1f} MB the tracked files leave' if measured else ''})",
          flush=True)
    return 0


def unpack(args, manifest):
    """Verify the carried chunks into chunks/, then write train.bin (the prefix) and the val files."""
    t0 = time.time()
    os.makedirs(CHUNK_DIR, exist_ok=True)
    for k in range(args.chunks):
        kept = os.path.join(CHUNK_DIR, f"{k:03d}.bin")
        carried = os.path.join(args.source, chunk_name(k))
        if os.path.exists(kept) or not os.path.exists(carried):
            continue
        try:
            with open(carried, "rb") as f:
                data = lzma.decompress(f.read())
        except (OSError, lzma.LZMAError) as e:
            raise PrepareError(f"{carried}: not a readable xz chunk ({e}); pack it again") from None
        if sha256(data) != manifest["train_chunk_sha256"][k]:
            raise PrepareError(f"{carried}: its tokens differ from corpus.json's chunk {k}: pack it again")
        write_atomic(kept, data)
    val = os.path.join(args.source, "val.xz")
    if os.path.exists(val) and not os.path.exists(os.path.join(HERE, "val.bin")):
        with open(val, "rb") as f:
            raw = lzma.decompress(f.read())
        header, body = raw.split(b"\n", 1)
        offset = 0
        for split, n in zip(VAL_SPLITS, json.loads(header)):
            data = body[offset:offset + n]
            offset += n
            if sha256(data) != manifest["sha256"][f"{split}.bin"]:
                raise PrepareError(f"{val}: its {split} differs from corpus.json: pack it again")
            write_atomic(os.path.join(HERE, f"{split}.bin"), data)
    missing = [k for k in range(args.chunks) if not os.path.exists(os.path.join(CHUNK_DIR, f"{k:03d}.bin"))]
    if missing:
        print(f"staged {args.chunks - len(missing)} of {args.chunks} chunks ({time.time() - t0:.0f} s); still "
              f"missing: {missing}", flush=True)
        return 0
    staged = os.path.join(HERE, "staged.json")
    if os.path.exists(staged):
        with open(staged) as f:
            if json.load(f).get("chunks") == args.chunks:
                print(f"train.bin holds chunks 0-{args.chunks - 1} already", flush=True)
                return 0
    parts = []
    for k in range(args.chunks):
        with open(os.path.join(CHUNK_DIR, f"{k:03d}.bin"), "rb") as f:
            parts.append(f.read())
    write_atomic(os.path.join(HERE, "train.bin"), b"".join(parts))
    tokens = args.chunks * manifest["chunk_tokens"]
    write_atomic(staged, (json.dumps({"chunks": args.chunks, "train_tokens": tokens,
                                      "chunk_sha256": manifest["train_chunk_sha256"][:args.chunks]}) + "\n").encode())
    print(f"train.bin: the first {tokens:,} tokens of the corpus ({args.chunks} chunks), staged in "
          f"{time.time() - t0:.0f} s", flush=True)
    return 0


def main(argv=None):
    parser = OneLineArgumentParser(prog="python -m data.debian_large.stage", formatter_class=HelpFormatter,
                                   description=__doc__.split("\n\n")[0].strip())
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("pack", help="write xz chunks here", formatter_class=HelpFormatter)
    p.add_argument("--chunks", type=int, required=True, help="how many chunks of train.bin, from the start")
    p.add_argument("--first", type=int, default=0, help="skip the chunks before this one (already carried)")
    p.add_argument("--out", required=True, help="the folder to write them to")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="chunks compressed at once (xz's preset 9 takes about 0.7 GB a process)")
    u = sub.add_parser("unpack", help="verify carried chunks there and write train.bin once all are in",
                       formatter_class=HelpFormatter)
    u.add_argument("--from", dest="source", required=True, help="the folder of carried chunks")
    u.add_argument("--chunks", type=int, required=True, help="how many chunks train.bin should hold")
    g = sub.add_parser("group", help="put one call's share of the packed files into the folder the call carries",
                       formatter_class=HelpFormatter)
    g.add_argument("--from", dest="source", required=True, help="the folder pack wrote")
    g.add_argument("--chunks", type=int, required=True, help="how many chunks train.bin should hold")
    g.add_argument("--index", type=int, required=True, help="which call's share, from 0")
    g.add_argument("--out", required=True, help="the folder the call carries (its packed files are replaced)")
    g.add_argument("--max-mb", type=float, default=None,
                   help="the most megabytes of chunks a call carries (default: what the tracked files leave of 64 MiB, "
                        "less 4 MiB)")
    args = parser.parse_args(argv)
    if args.verb == "pack" and args.workers < 1:
        raise PrepareError(f"--workers {args.workers}: give 1 or more processes")
    manifest = load_manifest()
    total = len(manifest["train_chunk_sha256"])
    if not 1 <= args.chunks <= total:
        raise PrepareError(f"--chunks {args.chunks}: give 1 to {total} (the corpus has {total} chunks of "
                           f"{manifest['chunk_tokens']:,} tokens)")
    if args.verb == "pack":
        if not 0 <= args.first < args.chunks:
            raise PrepareError(f"--first {args.first}: give 0 to {args.chunks - 1}")
        return pack(args, manifest)
    if not os.path.isdir(args.source):
        raise PrepareError(f"--from {args.source}: no such folder")
    if args.verb == "group":
        if args.max_mb is not None and not args.max_mb > 0:
            raise PrepareError(f"--max-mb {args.max_mb:g}: give a positive number of megabytes")
        return group(args, manifest)
    return unpack(args, manifest)


if __name__ == "__main__":
    sys.exit(run(main))
