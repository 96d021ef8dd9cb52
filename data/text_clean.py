"""Text out of package files: fetching and reading pinned .debs, markup stripping, normalisation, the split by
document, and near-duplicate signatures.

Shared by data/debian_docs/prepare.py and data/debian_large/prepare.py. Per format:
    rst, pod, asciidoc   line-level rules: adornments, directives and fields dropped, inline roles unwrapped
    html                 the visible text, one block element per line; <head>, scripts, styles and any element
                         whose class is in skip_classes (navigation bars, sidebars) left out
    dictd                a dictd dictionary's entries (GCIDE, FOLDOC, the Jargon File), grouped by headword prefix
    code                 source text as it is, trailing spaces off, at most one blank line in a row (tabs kept:
                         GPT-2's BPE has tab tokens, and four spaces would cost four)

Near duplicates (minhash_signature): the set S(d) of a document's word 5-grams, lower-cased. For K = 32
multiply-shift hash functions h_k(s) = (a_k * s + b_k) mod 2^64 >> 32 (a_k odd), the signature is
m_k(d) = min over s in S(d) of h_k(s). For two documents, P[m_k(d) = m_k(e)] is their Jaccard similarity
|S(d) & S(e)| / |S(d) | S(e)|, so the fraction of equal entries estimates it.
"""
import gzip
import hashlib
import html.parser
import io
import os
import re
import subprocess
import tarfile
import urllib.request
import zlib

import numpy as np

from data.prepare_utils import write_atomic


class PackageError(Exception):
    """A package file that is not what it should be (not a .deb, no data.tar)."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# apt-get finds only the versions its package index lists: a new machine's index can be stale (one here listed
# linux-doc-6.1 up to 6.1.176-1 until `apt-get update`), and Debian drops superseded versions from the index while
# their .debs stay in the pool a while. So where apt-get fails, the pools of these archives are tried.
DEBIAN_ARCHIVES = ("http://deb.debian.org/debian/", "http://deb.debian.org/debian-security/")


def pool_urls(package, filename, archives=DEBIAN_ARCHIVES):
    """Where filename may lie in the archives' pools: the folder of any version of package that `apt-cache show`
    knows (every version of a binary package lies in its source package's folder), as it is and with the security
    archive's pool/updates/ prefix (a security upload lies there, the main archive's version under pool/). The pool
    names a file without the version's epoch, which apt-get download writes as <epoch>%3a."""
    try:
        shown = subprocess.run(["apt-cache", "show", package], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    folders = {os.path.dirname(line.split(":", 1)[1].strip()) for line in shown.splitlines()
               if line.startswith("Filename:")}
    folders |= {f.replace("pool/updates/", "pool/", 1) if f.startswith("pool/updates/") else
                f.replace("pool/", "pool/updates/", 1) for f in folders}
    pool_name = re.sub(r"_\d+%3a", "_", filename, count=1)
    return [f"{archive}{folder}/{pool_name}" for folder in sorted(folders) for archive in archives]


def download_from_pool(path, package, filename, sha256, archives=DEBIAN_ARCHIVES):
    """path from the first pool URL whose bytes have the pinned sha256 (written atomically); False if none."""
    for url in pool_urls(package, filename, archives):
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                blob = response.read()  # a .deb here is at most 140 MB
        except OSError:
            continue
        if hashlib.sha256(blob).hexdigest() == sha256:
            print(f"  from {url}", flush=True)
            write_atomic(path, blob)
            return True
    return False


def fetch_deb(deb_dir, filename, package, version, sha256, remedy="", archives=DEBIAN_ARCHIVES):
    """deb_dir/filename, downloaded with apt-get when absent (or, where apt-get no longer finds the pinned version,
    from an archive's pool), checked against its pinned sha256; PackageError in one line otherwise (remedy: the
    script's own way round a missing package, appended to the advice)."""
    path = os.path.join(deb_dir, filename)
    if not os.path.exists(path):
        print(f"apt-get download {package}={version}", flush=True)
        try:
            subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=deb_dir, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        except (OSError, subprocess.CalledProcessError) as e:
            if not download_from_pool(path, package, filename, sha256, archives):
                why = (getattr(e, "stderr", None) or str(e)).strip()
                raise PackageError(
                    f"package {package}={version} is missing: {path} does not exist, `apt-get download "
                    f"{package}={version}` failed ({why.splitlines()[-1] if why else e}) and no archive pool holds "
                    f"it with the pinned sha256. Run `apt-get update` on a Debian 12 machine with network, or take "
                    f"the .deb from https://snapshot.debian.org/binary/{package}/{remedy}") from None
    got = sha256_file(path)
    if got != sha256:
        raise PackageError(f"{path} has sha256 {got}, but {package}={version} is pinned at {sha256}: delete it "
                           f"and rerun")
    return path


def doc_hash(doc_id):
    return hashlib.sha256(doc_id.encode()).hexdigest()


def in_val(doc_id, permille):
    """A document is in val when sha256 of its id falls in the lowest permille/1000 of the range: the split depends
    on the id alone, not on what else the corpus holds."""
    return int(doc_hash(doc_id)[:8], 16) % 1000 < permille


def deb_members(path, pattern):
    """(name, bytes) of the members of a .deb's data.tar.* whose path matches pattern, in path order.
    A .deb is an ar archive; reading it here needs neither dpkg nor root."""
    with open(path, "rb") as f:
        blob = f.read()
    if not blob.startswith(b"!<arch>\n"):
        raise PackageError(f"{path} is not a .deb (no ar header)")
    pos, data_tar = 8, None
    while pos + 60 <= len(blob):
        name = blob[pos:pos + 16].decode().strip().rstrip("/")
        size = int(blob[pos + 48:pos + 58].decode().strip())
        if name.startswith("data.tar"):
            data_tar = blob[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)
    if data_tar is None:
        raise PackageError(f"{path} has no data.tar member")
    regex = re.compile(pattern)
    out = []
    with tarfile.open(fileobj=io.BytesIO(data_tar)) as tar:
        for member in tar:
            if member.isfile() and regex.match(member.name):
                out.append((member.name, tar.extractfile(member).read()))
    return sorted(out)


def decode(name, data):
    if name.endswith((".gz", ".dz")):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


RST_ADORNMENT = re.compile(r"^\s*([=\-~^\"'`#*+.:_<>])\1{2,}\s*$")
RST_DIRECTIVE = re.compile(r"^\s*\.\.(\s|$)")
RST_FIELD = re.compile(r"^\s*:[\w -]+:(\s.*)?$")
RST_TABLE_BORDER = re.compile(r"^\s*[+|]?[-=+| ]*[-=]{3,}[-=+| ]*$")
RST_INLINE = [
    (re.compile(r":[\w:.+-]+:`([^`<]*?)\s*<[^`>]*>`"), r"\1"),  # :ref:`text <target>`
    (re.compile(r":[\w:.+-]+:`~?!?([^`]*)`"), r"\1"),            # :func:`name`
    (re.compile(r"`([^`<]+?)\s*<[^`>]*>`__?"), r"\1"),            # `text <url>`_
    (re.compile(r"``([^`]+)``"), r"\1"),
    (re.compile(r"`([^`]+)`_{0,2}"), r"\1"),
    (re.compile(r"\*\*([^*\n]+)\*\*"), r"\1"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*\n]*?)\*(?![\w*])"), r"\1"),
]


def clean_rst(text):
    lines = []
    for line in text.splitlines():
        if RST_ADORNMENT.match(line) or RST_DIRECTIVE.match(line) or RST_FIELD.match(line) \
                or RST_TABLE_BORDER.match(line):
            continue
        if line.strip() == "::":
            continue
        for regex, repl in RST_INLINE:
            line = regex.sub(repl, line)
        lines.append(line[:-1] if line.endswith("::") else line)
    return "\n".join(lines)


POD_COMMAND = re.compile(r"^=(\w+)\s*(.*)$")
POD_CODE = re.compile(r"[A-Z]<([^<>]*)>")
POD_DOUBLE_CODE = re.compile(r"[A-Z]<<+\s+(.*?)\s+>>+")
POD_ENTITIES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}


def clean_pod(text):
    lines = []
    for line in text.splitlines():
        command = POD_COMMAND.match(line)
        if command:
            if command.group(1).startswith(("head", "item")) and command.group(2):
                lines.append(command.group(2).lstrip("* "))
            continue  # =pod =cut =over =back =begin =end =for =encoding
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r"E<(\w+)>", lambda m: POD_ENTITIES.get(m.group(1), ""), text)
    text = POD_DOUBLE_CODE.sub(r"\1", text)
    text = re.sub(r"L<([^<>|]*)\|[^<>]*>", r"\1", text)
    while True:
        stripped = POD_CODE.sub(r"\1", text)
        if stripped == text:
            return text
        text = stripped


ASCIIDOC_DROP = re.compile(r"^(\s*[-=~^+.*_/]{4,}\s*|\[[^\]]*\]|:\w[\w-]*:.*|\+|ifdef::.*|endif::.*|include::.*)$")


def clean_asciidoc(text):
    lines = [line for line in text.splitlines() if not ASCIIDOC_DROP.match(line)]
    text = "\n".join(lines)
    text = re.sub(r"linkgit:([\w.-]+)\[(\d)\]", r"\1(\2)", text)
    text = re.sub(r"(?:https?|link):(\S+?)\[([^\]]*)\]", lambda m: m.group(2) or m.group(1), text)
    return re.sub(r"(?<![\w`])[`'*_]{1,2}([^`'*_\n]+)[`'*_]{1,2}(?![\w`])", r"\1", text)


class _HTMLText(html.parser.HTMLParser):
    """Visible text of an HTML page, one block element per line; DocBook's navigation bars, the
    <head>, scripts and styles left out."""
    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "dt", "dd", "table",
              "title", "blockquote"}
    SKIP_CLASSES = ("navheader", "navfooter", "toc")

    def __init__(self, skip_classes=SKIP_CLASSES, skip_tags=()):
        super().__init__(convert_charrefs=True)
        self.parts, self.skip = [], []
        self.skip_classes, self.skip_tags = skip_classes, ("head", "script", "style") + tuple(skip_tags)

    def handle_starttag(self, tag, attrs):
        classes = dict(attrs).get("class") or ""
        if self.skip or tag in self.skip_tags or any(c in classes.split() for c in self.skip_classes):
            if tag not in ("br", "img", "meta", "link", "hr", "input"):
                self.skip.append(tag)
            return
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if self.skip:
            if self.skip[-1] == tag:
                self.skip.pop()
            return
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def clean_html(text, skip_classes=_HTMLText.SKIP_CLASSES, skip_tags=()):
    parser = _HTMLText(skip_classes, skip_tags)
    parser.feed(text)
    parser.close()
    return "".join(parser.parts)


GCIDE_PRONUNCIATION = re.compile(r"\\[^\\\n]*\\,?")
GCIDE_SOURCE = re.compile(r"\[(1913 Webster|WordNet 1\.5|PJC|Century Dict\.|Webster 1913 Suppl\.|RHD|Chambers 1728|"
                          r"Obs\.|R\.|Colloq\.)[^\]]*\]")


GCIDE_FILES = ("./usr/share/dictd/gcide.dict.dz", "./usr/share/dictd/gcide.index")


def _b64(s):
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for c in s:
        n = n * 64 + digits.index(c)
    return n


def dictd_documents(members, files=GCIDE_FILES, label="gcide"):
    """The entries of a dictd dictionary (its .dict.dz through its .index), grouped by the first two letters
    of the headword, so related entries such as "Water" and "Waterfall" never straddle the split. GCIDE's
    pronunciations, [source] tags and {braces} are stripped (harmless on FOLDOC's and the Jargon File's)."""
    members = dict(members)
    raw = gzip.decompress(members[files[0]])
    seen, groups = set(), {}
    index = members[files[1]].decode("utf-8", errors="replace")
    for line in index.splitlines():
        word, offset, length = line.split("\t")[:3]
        if word.startswith("00-database") or (offset, length) in seen:
            continue
        seen.add((offset, length))
        start = _b64(offset)
        entry = raw[start:start + _b64(length)].decode("utf-8", errors="replace")
        entry = GCIDE_SOURCE.sub("", GCIDE_PRONUNCIATION.sub("", entry))
        entry = re.sub(r"\{([^{}]*)\}", r"\1", entry)
        # entries are hard-wrapped and indented: join each paragraph into one line
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", entry)]
        key = re.sub(r"[^a-z]", "", word.lower())[:2] or "_"
        groups.setdefault(key, []).append("\n".join(p for p in paragraphs if p))
    return [(f"{label}:{key}", "\n\n".join(entries)) for key, entries in sorted(groups.items())]


def gcide_documents(members):
    """GCIDE entries (found through the dictd index), grouped by the first two letters of the headword."""
    return dictd_documents(members, GCIDE_FILES, "gcide")


CLEANERS = {"rst": clean_rst, "pod": clean_pod, "asciidoc": clean_asciidoc, "html": clean_html}


def normalise(text):
    """Trailing spaces off, tabs to spaces, at most one blank line in a row."""
    text = "\n".join(line.rstrip().replace("\t", "    ") for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def normalise_code(text):
    """Trailing spaces off, at most one blank line in a row; indentation (tabs included) kept."""
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


# ----------------------------------------------------------------------------- near duplicates
SIGNATURE_SIZE = 32
SHINGLE = 5
_WORD = re.compile(r"\w+")
_rng = np.random.default_rng(20261127)  # fixed: the signatures, and so the corpus, never depend on the run
_A = _rng.integers(1, 2**63, size=SIGNATURE_SIZE, dtype=np.uint64) | np.uint64(1)
_B = _rng.integers(0, 2**63, size=SIGNATURE_SIZE, dtype=np.uint64)
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
                 0xFF51AFD7ED558CCD], dtype=np.uint64)


def minhash_signature(text, chunk=1 << 16):
    """uint32[SIGNATURE_SIZE]: the min-hash signature of the document's lower-cased word 5-grams (module
    docstring). A document of fewer than 5 words has one shingle, its whole word sequence."""
    words = _WORD.findall(text.lower())
    ids = np.fromiter((zlib.crc32(w.encode()) for w in words), dtype=np.uint64, count=len(words))
    if len(ids) < SHINGLE:
        ids = np.concatenate([ids, np.zeros(SHINGLE - len(ids), dtype=np.uint64)])
    n = len(ids) - SHINGLE + 1
    with np.errstate(over="ignore"):
        shingles = sum(ids[j:j + n] * _MIX[j] for j in range(SHINGLE))
        signature = np.full(SIGNATURE_SIZE, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, n, chunk):
            s = shingles[start:start + chunk]
            hashed = _A[:, None] * s[None, :] + _B[:, None]
            signature = np.minimum(signature, hashed.min(axis=1))
    return (signature >> np.uint64(32)).astype(np.uint32)


class NearDuplicates:
    """Keeps the signatures of the documents seen so far. is_near_duplicate(sig) is True when an earlier
    document agrees with sig in at least `threshold` of the entries (estimated Jaccard >= threshold);
    candidates come from bands of `rows` entries (locality-sensitive hashing), so the check is not
    quadratic. A document that is not a near duplicate is added."""

    def __init__(self, threshold=0.8, rows=4):
        self.threshold, self.rows = threshold, rows
        self.buckets, self.kept = {}, []

    def is_near_duplicate(self, signature):
        keys = [(b, signature[b:b + self.rows].tobytes()) for b in range(0, len(signature), self.rows)]
        for key in keys:
            for other in self.buckets.get(key, ()):
                if np.mean(self.kept[other] == signature) >= self.threshold:
                    return True
        index = len(self.kept)
        self.kept.append(signature)
        for key in keys:
            self.buckets.setdefault(key, []).append(index)
        return False
