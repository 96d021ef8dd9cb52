"""
Prepare `debian_large`: 672M GPT-2 training tokens from 25 pinned Debian 12 packages, offline after the download.

The corpus that the budget study's longest runs read once (issue 68). debian_docs (25M tokens) stays as it is;
this one has two domains, labelled per document, with a validation split of each:

    prose   English documentation and dictionaries: debian_docs' 7 packages, the LLVM, Django, SciPy, pandas,
            Rust, Java SE 17 and Boost manuals and API references, the Debian Administrator's Handbook
            (en-US), FOLDOC and the Jargon File
    code    source code: Go 1.19 (BSD-3-Clause), the Boost 1.81 headers (BSL-1.0), the Rust 1.63 library and
            compiler (MIT or Apache-2.0), the Java SE 17 class library (GPL-2.0 with the Classpath exception),
            Linux 6.1 (GPL-2.0; its Documentation/ is prose and comes from linux-doc, so it is left out here),
            glibc 2.36 (LGPL-2.1+), GCC 12 without its testsuite (GPL-3.0+) and Emacs 28's Lisp (GPL-3.0+)

Prose gives 58M of the 672M training tokens (8.6%): prose runs short (the largest documentation packages are
mostly generated API pages, navigation and translations), hence the code domain (615M), and the loss is
reported per domain. Every
package is pinned by version and by the sha256 of its .deb (PACKAGES; corpus.json repeats them with the
licenses). Per document (one file; for a dictionary, the entries whose headword starts with the same two
letters): markup is stripped (data/text_clean.py), prose whitespace normalised, code indentation kept; documents
under 64 characters, code files over 256 Ki characters (generated tables) and exact duplicates (after lower-casing and
collapsing whitespace) are dropped, and so are near duplicates: a document whose word-5-gram min-hash signature
agrees with an earlier kept one's in at least 80% of its 32 entries (estimated Jaccard similarity >= 0.8;
text_clean.NearDuplicates), first occurrence kept, in the order of PACKAGES and of the member names.

Train/val is split by document: a document is in val when sha256 of its id falls in the lowest
VAL_PERMILLE/1000 of the range. Documents are written in the order of sha256(id), each followed by
<|endoftext|> (50256), as uint16 ids: train.bin, val.bin (both domains), val_prose.bin and val_code.bin (one
each, so the trainer reports the loss per domain). So every prefix of train.bin is a uniform sample of the
documents: a run that reads the first N tokens sees the same mix of domains as one that reads them all.
corpus.json (committed) records the pins, the counts per package, domain and split, the sha256 of every .bin
and of every CHUNK_TOKENS-token chunk of train.bin (`python -m data.debian_large.stage` carries chunks to a GPU machine
and checks them); a rebuild that gives other bytes is an error, not a silent new corpus.

    python data/debian_large/prepare.py             # apt-get download the 25 .debs (564 MB), then build
    python data/debian_large/prepare.py --workers 8 # more processes (12 min on a loaded 2-core machine)

Idempotent: with the outputs present and matching corpus.json it does nothing. Every file is written via a
temp file and os.replace, train.bin last, so an interrupted run leaves no half-written file.
"""
import argparse
import hashlib
import io
import json
import lzma
import os
import re
import sys
import tarfile
import time
import zipfile

import numpy as np
from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
# run as a file (python data/<name>/prepare.py, as in nanoGPT), this script has only its own folder on
# sys.path: the repository root goes first, so that it imports as `python -m data.<name>.prepare` does
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from data.gpt2_tokenizer import EOT_TOKEN, get_gpt2_encoding  # noqa: E402
from data.prepare_utils import OneLineArgumentParser, PrepareError, run, worker_pool, write_atomic  # noqa: E402
from data import text_clean  # noqa: E402
from data.text_clean import (CLEANERS, NearDuplicates, PackageError, clean_html, deb_members, decode,  # noqa: E402
                             dictd_documents, doc_hash, fetch_deb, minhash_signature, normalise, normalise_code,
                             sha256_file)

DEB_DIR = os.path.join(HERE, "debs")
MANIFEST = os.path.join(HERE, "corpus.json")
VAL_PERMILLE = 10  # 1% of documents: about 6M tokens, over 1M per domain
MIN_CHARS = 64
MAX_CODE_CHARS = 256 << 10
NEAR_DUPLICATE = 0.8
CHUNK_TOKENS = 1 << 24  # 32 MiB of uint16: the unit stage.py carries and checks
DOMAINS = ("prose", "code")

LINUX_CODE = (r"^linux-source-6\.1/(?!Documentation/|drivers/gpu/drm/amd/include/asic_reg/)"
              r"(.*\.(c|h|S|rs|py|sh|pl|awk)|(.*/)?(Kconfig[^/]*|Makefile))$")
SPHINX_SKIP = r"(?!.*/(_modules|_sources|_static|_images)/)(?!.*/(genindex|search|py-modindex)\.html$)"
# navigation, sidebars and search boxes of Sphinx, rustdoc and javadoc pages: the same on every page
HTML_SKIP_CLASSES = ("navheader", "navfooter", "toc", "sidebar", "sphinxsidebar", "related", "footer", "headerlink",
                     "bd-sidebar-primary", "bd-sidebar-secondary", "bd-header", "bd-footer", "prev-next-area",
                     "top-nav", "sub-nav", "search-form", "rustdoc-toggle", "srclink", "out-of-band")
HTML_SKIP_TAGS = ("nav", "header", "footer")

# (domain, package, version, sha256 of the .deb, regex of the data.tar members read, format, license)
PACKAGES = [
    ("prose", "linux-doc-6.1", "6.1.192-2", "d1d1b5a602f0d439ecc39e713e044bf2df30d839fb4bf8a7b859ba3273c47993",
     r"^\./usr/share/doc/linux-doc-6\.1/Documentation/(?!translations/).*\.(rst|txt)\.gz$", "rst", "GPL-2.0"),
    ("prose", "python3.11-doc", "3.11.2-6+deb12u9", "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be",
     r"^\./usr/share/doc/python3\.11/html/_sources/.*\.rst\.txt$", "rst", "PSF-2.0"),
    ("prose", "perl-doc", "5.36.0-7+deb12u4", "f4269cff4576d6f02a6756df842988e58451c7e945b08517dd235531b24e48f8",
     r"^\./usr/share/perl/5\.36\.0/pod/.*\.pod$", "pod", "Artistic-1.0 or GPL-1.0+"),
    ("prose", "postgresql-doc-15", "15.20-0+deb12u1", "4c44bf2c599f208b3f46454a6cf7a72e25ec46ff74d37b59dd31ad76b00eebb7",
     r"^\./usr/share/doc/postgresql-doc-15/html/.*\.html$", "html", "PostgreSQL"),
    ("prose", "git-doc", "1:2.39.5-0+deb12u3", "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec",
     r"^\./usr/share/doc/git-doc/.*\.txt$", "asciidoc", "GPL-2.0"),
    ("prose", "debian-reference-en", "2.100", "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f",
     r"^\./usr/share/debian-reference/.*\.en\.html$", "html", "GPL-2.0+"),
    ("prose", "dict-gcide", "0.48.5+nmu2", "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f",
     r"^\./usr/share/dictd/gcide\.(dict\.dz|index)$", "gcide", "GPL-3.0+"),
    ("prose", "dict-foldoc", "20230119-1", "745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3",
     r"^\./usr/share/dictd/foldoc\.(dict\.dz|index)$", "dictd", "GFDL-1.1+"),
    ("prose", "dict-jargon", "4.4.7-3.1", "405f8168d7994ed2cb71407bb95493daec2e9aa66fc0461dafa74a9d6728a8c1",
     r"^\./usr/share/dictd/jargon\.(dict\.dz|index)$", "dictd", "public domain"),
    ("prose", "llvm-16-doc", "1:16.0.6-15~deb12u1", "6f2323357bad4aa2942bf815a8d1ced18fb808746583faeee28e0dc9238112da",
     r"^\./usr/share/doc/llvm-16-doc/html/_sources/.*\.txt$", "rst", "Apache-2.0 WITH LLVM-exception"),
    ("prose", "python-django-doc", "3:3.2.25-0+deb12u7",
     "87307f067916df72e17180d35b7cde5c7ea6080336cda518efd7f6e66988a7ca",
     r"^\./usr/share/doc/python-django-doc/html/" + SPHINX_SKIP + r".*\.html$", "html", "BSD-3-Clause"),
    ("prose", "python-scipy-doc", "1.10.1-2", "a237fdcef1675622f1a5d8a291c64feba140615130ee625554f94772d4ea3ad7",
     r"^\./usr/share/doc/python-scipy-doc/html/" + SPHINX_SKIP + r".*\.html$", "html", "BSD-3-Clause"),
    ("prose", "python-pandas-doc", "1.5.3+dfsg-2", "4998405ff6b12432f46594963e95554ade1104705795428396345fca58d853f8",
     r"^\./usr/share/doc/python-pandas-doc/html/" + SPHINX_SKIP + r".*\.html$", "html", "BSD-3-Clause"),
    ("prose", "rust-doc", "1.63.0+dfsg1-2", "96ef96fe6df87d939ca713bd7df3d15c2b778ccb892eca025c4ee504146f697b",
     r"^\./usr/share/doc/rust-doc/html/(?!src/)(?!.*/(all|settings|help)\.html$).*\.html$", "html",
     "MIT or Apache-2.0"),
    ("prose", "openjdk-17-doc", "17.0.21.1+2-1~deb12u1",
     "3e04db24dbcb31d598774973998f1d8212e3424e288befbfef235077325f841d",
     r"^\./usr/share/doc/openjdk-17-jre-headless/api/(?!index-files/)(?!.*/class-use/)(?!.*-(summary|tree)\.html$)"
     r"(?!all)[^/]+/.*\.html$", "html", "GPL-2.0 WITH Classpath-exception-2.0"),
    ("prose", "libboost1.81-doc", "1.81.0-5+deb12u1", "da1e2182ea8955cf6155924066dd611588f855aebf961d0ea0e7ac0092216ebb",
     r"^\./usr/share/doc/libboost1\.81-doc/.*\.html?$", "html", "BSL-1.0"),
    ("prose", "debian-handbook", "11.20220922", "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa",
     r"^\./usr/share/doc/debian-handbook/html/en-US/.*\.html$", "html", "GPL-2.0+ or CC-BY-SA-3.0"),
    ("code", "golang-1.19-src", "1.19.8-2", "2dfa82fe4f08f4e0193c532e561af4c91871f5235608f04f2bb8d57bb288df5a",
     r"^\./usr/share/go-1\.19/src/.*\.go$", "code", "BSD-3-Clause"),
    ("code", "libboost1.81-dev", "1.81.0-5+deb12u1", "bfe6d942c9fa4d68c8455e712a16fe3911f85d92959a0753cb22e5c13c2067de",
     r"^\./usr/include/boost/.*\.(hpp|ipp|h)$", "code", "BSL-1.0"),
    ("code", "linux-source-6.1", "6.1.192-2", "ae95fe63d4c553f8d0e6c86cb1ab566f3894a43743eb19ab585cd97d82f26514",
     r"^\./usr/src/linux-source-6\.1\.tar\.xz$", "code", "GPL-2.0"),
    ("code", "openjdk-17-source", "17.0.21.1+2-1~deb12u1",
     "5106aa3881e3b49568823ebdfc3755d4043f6f53bbfc996d0efee03172dc0a9b",
     r"^\./usr/lib/jvm/openjdk-17/lib/src\.zip$", "code", "GPL-2.0 WITH Classpath-exception-2.0"),
    ("code", "rust-src", "1.63.0+dfsg1-2", "410b8c6d464cabbe5fb3154ab8c3d374980dd597fbe7e3b7bb3ed8dd1bf11e25",
     r"^\./usr/src/rustc-1\.63\.0/.*\.rs$", "code", "MIT or Apache-2.0"),
    ("code", "glibc-source", "2.36-9+deb12u14", "8e9f57b1df23396b05cf5b1561fd83bd53dc01b86432fd2dc75ab7b48645c3b2",
     r"^\./usr/src/glibc/glibc-2\.36\.tar\.xz$", "code", "LGPL-2.1+"),
    ("code", "emacs-el", "1:28.2+1-15+deb12u4", "d07939c0e5b9f150211f5bcf85fb37f812a3710f1ec1e74a6237d12e3bade559",
     r"^\./usr/share/emacs/28\.2/lisp/(?!leim/).*\.el\.gz$", "code", "GPL-3.0+"),
    ("code", "gcc-12-source", "12.2.0-14+deb12u1", "8f2a5411028dfe216aeb6346b926df0cc7471f375c6a375bf180fbf279af02a1",
     r"^\./usr/src/gcc-12/gcc-12\.2\.0-dfsg\.tar\.xz$", "code", "GPL-3.0+ WITH GCC-exception-3.1"),
]
# packages whose files come in a source archive: (kind, regex of the archive members read)
INNER = {"linux-source-6.1": ("tar", LINUX_CODE), "openjdk-17-source": ("zip", r"^.*\.java$"),
         "glibc-source": ("tar", r"^glibc-2\.36/.*\.(c|h|S)$"),
         "gcc-12-source": ("tar", r"^gcc-12\.2\.0/(?!.*/testsuite/).*\.(c|cc|h|hpp|tcc|def|md)$")}
ARCH = {"libboost1.81-dev": "amd64"}  # the others are Architecture: all


def deb_filename(package, version):
    return f"{package}_{version.replace(':', '%3a')}_{ARCH.get(package, 'all')}.deb"


# ----------------------------------------------------------------------------- package files
def fetch_debs():
    """data/debian_large/debs/<package>.deb for every package, downloaded with apt-get when absent and checked
    against its pinned sha256."""
    os.makedirs(DEB_DIR, exist_ok=True)
    for _, package, version, sha256, _, _, _ in PACKAGES:
        try:
            fetch_deb(DEB_DIR, deb_filename(package, version), package, version, sha256, "")
        except PackageError as e:
            raise PrepareError(str(e)) from None


def inner_members(package, blob):
    """(name, bytes) of the source files inside a package's source archive (INNER), in name order."""
    kind, pattern = INNER[package]
    regex, out = re.compile(pattern), []
    if kind == "zip":
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            for info in archive.infolist():
                if not info.is_dir() and regex.match(info.filename):
                    out.append((info.filename, archive.read(info)))
        return sorted(out)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
        for member in tar:
            if member.isfile() and regex.match(member.name):
                out.append((member.name, tar.extractfile(member).read()))
    return sorted(out)


def package_members(package, version, pattern):
    try:
        members = deb_members(os.path.join(DEB_DIR, deb_filename(package, version)), pattern)
        if package in INNER:
            members = inner_members(package, members[0][1])
    except (PackageError, tarfile.TarError, zipfile.BadZipFile, lzma.LZMAError, IndexError, EOFError) as e:
        raise PrepareError(f"{package}={version}: cannot read its files ({type(e).__name__}: {e}); delete "
                           f"{DEB_DIR}/{deb_filename(package, version)} and rerun") from None
    if not members:
        raise PrepareError(f"{package}={version}: no file matches {pattern}")
    return members


# ----------------------------------------------------------------------------- documents
def clean(fmt, name, data):
    """Plain text of one package file (text_clean's rules for its format)."""
    text = decode(name, data)
    if fmt == "code":
        return normalise_code(text)
    text = clean_html(text, HTML_SKIP_CLASSES, HTML_SKIP_TAGS) if fmt == "html" else CLEANERS[fmt](text)
    return normalise(text)


def _clean_batch(batch):
    """[(doc id, text, signature)] of a batch of (package, fmt, name, bytes); (doc id, None, 'short' or 'long')
    for a document that is dropped for its length."""
    out = []
    for package, fmt, name, data in batch:
        text = clean(fmt, name, data)
        if fmt == "code" and len(text) > MAX_CODE_CHARS:
            out.append((f"{package}:{name}", None, "long"))
        elif len(text) < MIN_CHARS:
            out.append((f"{package}:{name}", None, "short"))
        else:
            out.append((f"{package}:{name}", text, minhash_signature(text)))
    return out


def package_documents(domain, package, version, pattern, fmt, pool, exact, near, dropped):
    """[(domain, package, doc id, text)] of one package, after cleaning and both kinds of dedup."""
    members = package_members(package, version, pattern)
    if fmt in ("gcide", "dictd"):
        files = tuple(sorted((n for n, _ in members), key=lambda n: not n.endswith(".dict.dz")))
        raw = dictd_documents(members, files, "gcide" if fmt == "gcide" else package)
        texts = [(doc_id, normalise(text)) for doc_id, text in raw]
        batches = [[(doc_id, text, minhash_signature(text)) if len(text) >= MIN_CHARS else (doc_id, None, "short")
                    for doc_id, text in texts]]
        work = batches
    else:
        batches, batch, size = [], [], 0
        for name, data in members:
            batch.append((package, fmt, name, data))
            size += len(data)
            if size > (4 << 20):
                batches.append(batch)
                batch, size = [], 0
        batches.append(batch)
        work = pool.map(_clean_batch, batches)
    docs = []
    for results in tqdm(work, total=len(batches), desc=package, unit="batch", leave=False):
        for doc_id, text, signature in results:
            if text is None:
                dropped[signature] += 1
                continue
            key = hashlib.sha1(" ".join(text.lower().split()).encode()).digest()
            if key in exact:
                dropped["duplicate"] += 1
                continue
            exact.add(key)
            if near.is_near_duplicate(signature):
                dropped["near_duplicate"] += 1
                continue
            docs.append((domain, package, doc_id, text))
    return docs


def in_val(doc_id):
    return text_clean.in_val(doc_id, VAL_PERMILLE)


def _encode(texts):
    enc = get_gpt2_encoding()
    return [np.array(enc.encode_ordinary(t) + [EOT_TOKEN], dtype=np.uint16) for t in texts]


# ----------------------------------------------------------------------------- build
def build(workers):
    fetch_debs()
    exact, near = set(), NearDuplicates(NEAR_DUPLICATE)
    dropped = {"short": 0, "long": 0, "duplicate": 0, "near_duplicate": 0}
    docs = []
    with worker_pool(workers) as pool:  # its workers end with this process, however it ends
        for domain, package, version, _, pattern, fmt, _ in PACKAGES:
            t0 = time.time()
            got = package_documents(domain, package, version, pattern, fmt, pool, exact, near, dropped)
            docs.extend(got)
            print(f"{package}: {len(got):,} documents, {sum(len(d[3]) for d in got) / 1e6:.1f}M characters "
                  f"({time.time() - t0:.0f} s)", flush=True)
        print(f"{len(docs):,} documents; dropped: {dropped}", flush=True)
        docs.sort(key=lambda d: doc_hash(d[2]))
        texts = [d[3] for d in docs]
        chunks = [texts[i:i + 256] for i in range(0, len(texts), 256)]
        ids = []
        for arrays in tqdm(pool.map(_encode, chunks), total=len(chunks), desc="tokenize", unit="chunk"):
            ids.extend(arrays)
    splits = {name: [] for name in ("train", "val", "val_prose", "val_code")}
    counts = {}
    for (domain, package, doc_id, _), tokens in zip(docs, ids):
        split = "val" if in_val(doc_id) else "train"
        splits[split].append(tokens)
        if split == "val":
            splits[f"val_{domain}"].append(tokens)
        for key in (f"{domain}/{package}", f"domain/{domain}"):
            row = counts.setdefault(key, {"train_docs": 0, "train_tokens": 0, "val_docs": 0, "val_tokens": 0})
            row[f"{split}_docs"] += 1
            row[f"{split}_tokens"] += len(tokens)
    return ({split: np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.uint16) for split, arrays in splits.items()},
            counts, dropped)


def manifest(arrays, counts, dropped):
    train = arrays["train"]
    return {
        "packages": [{"domain": d, "package": p, "version": v, "deb_sha256": s, "members": m, "format": f,
                      "license": lic} for d, p, v, s, m, f, lic in PACKAGES],
        "linux_code_members": LINUX_CODE, "val_permille": VAL_PERMILLE, "min_chars": MIN_CHARS,
        "max_code_chars": MAX_CODE_CHARS, "near_duplicate_jaccard": NEAR_DUPLICATE, "dropped": dropped,
        "counts": counts, "tokens": {split: int(len(a)) for split, a in arrays.items()},
        "sha256": {f"{split}.bin": hashlib.sha256(a.tobytes()).hexdigest() for split, a in arrays.items()},
        "chunk_tokens": CHUNK_TOKENS,
        "train_chunk_sha256": [hashlib.sha256(train[i:i + CHUNK_TOKENS].tobytes()).hexdigest()
                               for i in range(0, len(train), CHUNK_TOKENS)],
    }


def outputs_match_manifest():
    if not os.path.exists(MANIFEST):
        return False
    with open(MANIFEST) as f:
        recorded = json.load(f)["sha256"]
    return all(os.path.isfile(os.path.join(HERE, name)) and sha256_file(os.path.join(HERE, name)) == sha
               for name, sha in recorded.items())


def main(argv=None):
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=os.cpu_count(),
                        help="cleaning and tokenizer processes (default: the CPUs, %(default)s here)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the outputs match corpus.json")
    parser.add_argument("--update-manifest", action="store_true",
                        help="write corpus.json from this build (after changing the recipe) instead of checking")
    args = parser.parse_args(argv)
    if args.workers is None or args.workers < 1:
        raise PrepareError(f"--workers {args.workers}: give 1 or more processes")
    t0 = time.time()
    if not (args.force or args.update_manifest) and outputs_match_manifest():
        print(f"{HERE}/*.bin exist and match corpus.json: nothing to do")
        return 0
    arrays, counts, dropped = build(args.workers)
    made = manifest(arrays, counts, dropped)
    if not args.update_manifest:
        if not os.path.exists(MANIFEST):
            raise PrepareError(f"{MANIFEST} is missing: restore it (git checkout {os.path.relpath(MANIFEST)}), or "
                               f"write a new one with --update-manifest")
        with open(MANIFEST) as f:
            recorded = json.load(f)
        if made["sha256"] != recorded["sha256"]:
            raise PrepareError(f"this build gives {made['sha256']}, but corpus.json records {recorded['sha256']}: "
                               f"the packages or the recipe differ (with a deliberate recipe change, rerun with "
                               f"--update-manifest)")
    # train.bin last: its presence means the dataset is complete
    for split in ("val_prose", "val_code", "val", "train"):
        write_atomic(os.path.join(HERE, f"{split}.bin"), arrays[split].tobytes())
    if args.update_manifest:
        write_atomic(MANIFEST, (json.dumps(made, indent=1) + "\n").encode())
    for split, a in arrays.items():
        print(f"{split} has {len(a):,} tokens")
    print(f"wrote {HERE}/train.bin, val.bin, val_prose.bin, val_code.bin in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # Ctrl-C, SIGTERM, SIGHUP: one line, no traceback, no temp file or worker left
