"""
data/debian_large/prepare.py and stage.py without network or the real .debs: the committed manifest against the
script's pins, a build from small fake .debs (markup stripped, exact and near duplicates dropped, code kept as
code, the split by document, the per-domain val files, byte-identical on a rebuild), the near-duplicate
signature, and the staging round trip (pack here, unpack there, refusing a changed chunk). When the real bins
exist, they are checked against corpus.json.
"""
import gzip
import io
import json
import lzma
import os
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

from data import text_clean
from data.debian_large import prepare, stage
from tests.test_debian_docs import fake_deb, gcide_files

PROSE = " ".join(f"Sentence {i} of the manual says that task {i % 7} waits in the queue of processor {i % 3}."
                 for i in range(60))
OTHER = " ".join(f"Gardens {i} and rivers {i % 5} meet at the old bridge near market {i % 4}." for i in range(60))


def test_committed_manifest_matches_the_pins():
    """corpus.json was written by this recipe: same packages, versions, sha256, member patterns, formats and
    licenses, same split and filters, and chunk hashes that cover train.bin exactly."""
    with open(prepare.MANIFEST) as f:
        recorded = json.load(f)
    pins = [{"domain": d, "package": p, "version": v, "deb_sha256": s, "members": m, "format": f, "license": lic}
            for d, p, v, s, m, f, lic in prepare.PACKAGES]
    assert recorded["packages"] == pins
    assert recorded["linux_code_members"] == prepare.LINUX_CODE
    assert (recorded["val_permille"], recorded["min_chars"], recorded["max_code_chars"]) == \
        (prepare.VAL_PERMILLE, prepare.MIN_CHARS, prepare.MAX_CODE_CHARS)
    assert recorded["near_duplicate_jaccard"] == prepare.NEAR_DUPLICATE
    assert recorded["chunk_tokens"] == prepare.CHUNK_TOKENS
    n_chunks = -(-recorded["tokens"]["train"] // prepare.CHUNK_TOKENS)
    assert len(recorded["train_chunk_sha256"]) == n_chunks
    assert recorded["tokens"]["train"] >= 500_000_000  # the floor: the longest runs read it once
    domains = {k.split("/")[1]: v for k, v in recorded["counts"].items() if k.startswith("domain/")}
    assert set(domains) == set(prepare.DOMAINS)
    assert sum(v["train_tokens"] for v in domains.values()) == recorded["tokens"]["train"]
    assert sum(v["val_tokens"] for v in domains.values()) == recorded["tokens"]["val"]
    for domain in prepare.DOMAINS:
        assert domains[domain]["val_tokens"] == recorded["tokens"][f"val_{domain}"]


def test_near_duplicates_are_found_and_distinct_texts_are_not():
    a = text_clean.minhash_signature(PROSE)
    nearly_a = text_clean.minhash_signature(PROSE + " One more sentence at the end.")
    other = text_clean.minhash_signature(OTHER)
    assert a.dtype == np.uint32 and a.shape == (text_clean.SIGNATURE_SIZE,)
    assert np.array_equal(a, text_clean.minhash_signature(PROSE))  # deterministic
    assert np.mean(a == nearly_a) >= 0.8 and np.mean(a == other) < 0.2
    seen = text_clean.NearDuplicates(0.8)
    assert not seen.is_near_duplicate(a) and seen.is_near_duplicate(nearly_a) and not seen.is_near_duplicate(other)


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """Four small fake .debs: HTML prose (with a page that is a near copy of another and navigation to strip),
    a dictd dictionary, Go code, and a source tarball inside a .deb (as linux-source ships)."""
    deb_dir = tmp_path / "debs"
    deb_dir.mkdir()
    page = f"<html><body><nav>Home | Next</nav><div class='sidebar'>menu</div><p>{PROSE}</p></body></html>"
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:xz") as tar:
        for name, data in {"src-1/kernel/sched.c": b"/* the scheduler's entry point */\nint main(void)\n{\n\treturn 0;   \n}\n\n\n\n/* end of the scheduler */\n",
                           "src-1/Documentation/x.c": b"int skipped_by_the_pattern(void) { return 1; }\n" * 3}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    body, index = gcide_files({"Water": "Water n. The fluid which descends from the clouds in rain, and forms rivers.\n",
                         "Apple": "Apple n. The fleshy pome or fruit of a rosaceous tree, one of the most widely known.\n"})
    docs = {
        "doc-html": {"./usr/share/doc/a/one.html": page.encode(),
                     "./usr/share/doc/a/two.html": page.replace("task 3", "job 3").encode(),  # a near duplicate
                     "./usr/share/doc/a/three.html": page.replace(PROSE, OTHER).encode(),
                     "./usr/share/doc/a/short.html": b"<p>too short</p>"},
        "dict-x": {"./usr/share/dictd/x.dict.dz": body, "./usr/share/dictd/x.index": index},
        "go-src": {"./usr/share/go/src/a.go": b"package main\n\n// main greets the world\nfunc main() {\n\tprintln(\"hello, world of tabs\")\n}\n",
                   "./usr/share/go/src/big.go": b"// generated\n" + b"var x = 1\n" * 40000},
        "src-tar": {"./usr/src/src-1.tar.xz": inner.getvalue()},
    }
    specs = [("prose", "doc-html", r"^\./usr/share/doc/a/.*\.html$", "html"),
             ("prose", "dict-x", r"^\./usr/share/dictd/x\.(dict\.dz|index)$", "dictd"),
             ("code", "go-src", r"^\./usr/share/go/src/.*\.go$", "code"),
             ("code", "src-tar", r"^\./usr/src/src-1\.tar\.xz$", "code")]
    pinned = []
    for domain, package, pattern, fmt in specs:
        path = deb_dir / prepare.deb_filename(package, "1.0")
        fake_deb(path, docs[package])
        pinned.append((domain, package, "1.0", text_clean.sha256_file(path), pattern, fmt, "MIT"))
    monkeypatch.setattr(prepare, "PACKAGES", pinned)
    monkeypatch.setattr(prepare, "INNER", {"src-tar": ("tar", r"^src-1/(?!Documentation/).*\.c$")})
    monkeypatch.setattr(prepare, "DEB_DIR", str(deb_dir))
    monkeypatch.setattr(prepare, "HERE", str(tmp_path))
    monkeypatch.setattr(prepare, "MANIFEST", str(tmp_path / "corpus.json"))
    monkeypatch.setattr(prepare, "VAL_PERMILLE", 400)
    monkeypatch.setattr(prepare, "CHUNK_TOKENS", 64)
    return tmp_path


def test_build_from_small_debs(fake_packages, capsys):
    assert prepare.main(["--update-manifest", "--workers", "1"]) == 0
    made = json.loads((fake_packages / "corpus.json").read_text())
    assert made["dropped"] == {"short": 1, "long": 1, "duplicate": 0, "near_duplicate": 1}
    docs = {k: v["train_docs"] + v["val_docs"] for k, v in made["counts"].items()}
    assert docs == {"prose/doc-html": 2, "prose/dict-x": 2, "code/go-src": 1, "code/src-tar": 1,
                    "domain/prose": 4, "domain/code": 2}
    bins = {name: np.fromfile(fake_packages / f"{name}.bin", dtype=np.uint16)
            for name in ("train", "val", "val_prose", "val_code")}
    assert len(bins["val"]) == len(bins["val_prose"]) + len(bins["val_code"])
    assert len(bins["train"]) + len(bins["val"]) == sum(v["train_tokens"] + v["val_tokens"]
                                                         for k, v in made["counts"].items() if k.startswith("domain/"))
    assert len(made["train_chunk_sha256"]) == -(-len(bins["train"]) // 64)
    enc = prepare.get_gpt2_encoding()
    text = enc.decode(np.concatenate([bins["train"], bins["val"]]).tolist())
    assert "Home | Next" not in text and "menu" not in text and "<p>" not in text  # navigation and markup gone
    assert "\treturn 0;\n}\n\n/* end" in text  # code keeps its tabs, loses trailing spaces and extra blank lines
    assert "skipped_by_the_pattern" not in text and "Water n. The fluid" in text
    # a rebuild checks itself against the manifest and gives the same bytes; with the outputs there it does nothing
    before = {name: (fake_packages / f"{name}.bin").read_bytes() for name in bins}
    assert prepare.main(["--force", "--workers", "1"]) == 0
    assert before == {name: (fake_packages / f"{name}.bin").read_bytes() for name in bins}
    capsys.readouterr()
    assert prepare.main(["--workers", "1"]) == 0 and "nothing to do" in capsys.readouterr().out


def test_staging_round_trip_and_a_changed_chunk(fake_packages, tmp_path, monkeypatch, capsys):
    assert prepare.main(["--update-manifest", "--workers", "1"]) == 0
    monkeypatch.setattr(stage, "HERE", str(fake_packages))
    monkeypatch.setattr(stage, "MANIFEST", str(fake_packages / "corpus.json"))
    monkeypatch.setattr(stage, "CHUNK_DIR", str(fake_packages / "chunks"))
    carry = tmp_path / "carry"
    with pytest.raises(prepare.PrepareError, match="--workers 0: give 1 or more processes"):
        stage.main(["pack", "--chunks", "2", "--out", str(carry), "--workers", "0"])
    assert not carry.exists()  # refused before any work
    assert stage.main(["pack", "--chunks", "2", "--out", str(carry), "--workers", "2"]) == 0  # a chunk a process
    assert sorted(os.listdir(carry)) == ["train-000.xz", "train-001.xz", "val.xz"]
    full = (fake_packages / "train.bin").read_bytes()
    for name in ("train", "val", "val_prose", "val_code"):
        (fake_packages / f"{name}.bin").unlink()  # "there": nothing but the carried chunks
    # one chunk carried: kept, nothing written yet; the second: train.bin is the prefix of two chunks
    (carry / "train-001.xz").rename(tmp_path / "later.xz")
    assert stage.main(["unpack", "--from", str(carry), "--chunks", "2"]) == 0
    assert "still missing: [1]" in capsys.readouterr().out and not (fake_packages / "train.bin").exists()
    (tmp_path / "later.xz").rename(carry / "train-001.xz")
    assert stage.main(["unpack", "--from", str(carry), "--chunks", "2"]) == 0
    assert (fake_packages / "train.bin").read_bytes() == full[:2 * 64 * 2]
    assert json.loads((fake_packages / "staged.json").read_text())["train_tokens"] == 128
    assert (fake_packages / "val_code.bin").exists()
    # a chunk whose tokens differ from the manifest's is refused, and not kept
    (carry / "train-002.xz").write_bytes(lzma.compress(b"\0" * 128))
    with pytest.raises(prepare.PrepareError, match="differ from corpus.json's chunk 2"):
        stage.main(["unpack", "--from", str(carry), "--chunks", "3"])
    assert not (fake_packages / "chunks" / "002.bin").exists()
    with pytest.raises(prepare.PrepareError, match="--chunks 99: give 1 to"):
        stage.main(["pack", "--chunks", "99", "--out", str(carry)])


def test_call_groups_split_the_packed_files_under_the_limit(fake_packages, tmp_path, monkeypatch, capsys):
    """group: val.xz first, then the chunks in order, as many whole files a call as stay under --max-mb; each call's
    share replaces the last one's packed files in --out and nothing else there; a bad --index names the range."""
    assert prepare.main(["--update-manifest", "--workers", "1"]) == 0
    monkeypatch.setattr(stage, "HERE", str(fake_packages))
    monkeypatch.setattr(stage, "MANIFEST", str(fake_packages / "corpus.json"))
    packed = tmp_path / "packed"
    assert stage.main(["pack", "--chunks", "2", "--out", str(packed)]) == 0
    sizes = {p.name: p.stat().st_size for p in packed.iterdir()}
    limit_mb = (sizes["val.xz"] + sizes["train-000.xz"]) / 1e6  # val and chunk 0 fit together, chunk 1 does not
    assert stage.call_groups(str(packed), 2, limit_mb * 1e6) == [["val.xz", "train-000.xz"], ["train-001.xz"]]
    carry = tmp_path / "carry"
    carry.mkdir()
    (carry / "notes.txt").write_text("mine")
    for index, expected in ((0, ["notes.txt", "train-000.xz", "val.xz"]), (1, ["notes.txt", "train-001.xz"])):
        assert stage.main(["group", "--from", str(packed), "--chunks", "2", "--index", str(index), "--out", str(carry),
                           "--max-mb", str(limit_mb)]) == 0
        assert sorted(os.listdir(carry)) == expected
    assert (carry / "train-001.xz").read_bytes() == (packed / "train-001.xz").read_bytes()
    assert "call 2 of 2, train-001.xz" in capsys.readouterr().out
    with pytest.raises(prepare.PrepareError, match="--index 2: give 0 to 1 .2 calls of at most"):
        stage.main(["group", "--from", str(packed), "--chunks", "2", "--index", "2", "--out", str(carry),
                    "--max-mb", str(limit_mb)])
    with pytest.raises(prepare.PrepareError, match="lacks train-002.xz"):
        stage.main(["group", "--from", str(packed), "--chunks", "3", "--index", "0", "--out", str(carry)])


def test_call_groups_default_to_the_room_the_tracked_files_leave(fake_packages, tmp_path, monkeypatch, capsys):
    """Without --max-mb a call's share is what git's tracked files leave of the 64 MiB, less the spare: the same
    split as the explicit limit of that size; a checkout that leaves less than one packed file is refused."""
    assert prepare.main(["--update-manifest", "--workers", "1"]) == 0
    monkeypatch.setattr(stage, "HERE", str(fake_packages))
    monkeypatch.setattr(stage, "MANIFEST", str(fake_packages / "corpus.json"))
    packed, carry = tmp_path / "packed", tmp_path / "carry"
    assert stage.main(["pack", "--chunks", "2", "--out", str(packed)]) == 0
    sizes = {p.name: p.stat().st_size for p in packed.iterdir()}
    room = sizes["val.xz"] + sizes["train-000.xz"]
    monkeypatch.setattr(stage, "tracked_bytes", lambda: stage.CALL_BYTES - stage.CALL_SPARE - room)
    assert stage.main(["group", "--from", str(packed), "--chunks", "2", "--index", "1", "--out", str(carry)]) == 0
    assert sorted(os.listdir(carry)) == ["train-001.xz"]
    assert "call 2 of 2, train-001.xz" in capsys.readouterr().out
    monkeypatch.setattr(stage, "tracked_bytes", lambda: stage.CALL_BYTES - stage.CALL_SPARE - 10)
    with pytest.raises(prepare.PrepareError, match=r"leave 0.0 MB of a call's 64 MiB, less than one packed file"):
        stage.main(["group", "--from", str(packed), "--chunks", "2", "--index", "0", "--out", str(carry)])


def test_tracked_bytes_counts_what_git_tracks(tmp_path):
    """The part of a call that is not carried: tracked files' sizes, not an untracked one beside them."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_bytes(b"x" * 1000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"y" * 234)
    (tmp_path / "untracked.bin").write_bytes(b"z" * 5000)
    subprocess.run(["git", "-C", str(tmp_path), "add", "a.txt", "sub/b.bin"], check=True)
    assert stage.tracked_bytes(str(tmp_path)) == 1234


@pytest.mark.skipif(not os.path.exists(os.path.join(prepare.HERE, "val.bin")), reason="data/debian_large not built")
def test_prepared_val_files_match_manifest():
    with open(prepare.MANIFEST) as f:
        recorded = json.load(f)["sha256"]
    for name in ("val.bin", "val_prose.bin", "val_code.bin"):
        assert text_clean.sha256_file(os.path.join(prepare.HERE, name)) == recorded[name]


def test_gzip_members_decode():
    assert text_clean.decode("a.el.gz", gzip.compress(b"(defun f () 1)")) == "(defun f () 1)"


def test_a_pinned_deb_that_left_the_index_comes_from_the_pool(tmp_path, monkeypatch):
    """apt-get no longer finds a superseded version, but its .deb is still in the archive's pool: fetch_deb takes it
    from there (the folder from `apt-cache show` of any version, here a stale index's main-archive version while the
    pinned one is a security upload under pool/updates/; the pool's name without the epoch that apt-get's has),
    keeps it only with the pinned sha256, and fails in one line naming the package when no pool holds those bytes."""
    archive = tmp_path / "archive"
    folder = archive / "pool/updates/main/l/linux"
    folder.mkdir(parents=True)
    good, bad = b"!<arch>\nthe pinned bytes", b"!<arch>\nother bytes"
    (folder / "linux-doc-6.1_1-2_all.deb").write_bytes(good)
    (folder / "linux-doc-6.1_1-3_all.deb").write_bytes(bad)
    real_run = subprocess.run

    def fake_run(cmd, *args, **kwargs):
        if cmd[:2] == ["apt-get", "download"]:
            raise subprocess.CalledProcessError(100, cmd, stderr="E: Version '1:1-2' for 'linux-doc-6.1' was not found")
        if cmd[:2] == ["apt-cache", "show"]:
            return subprocess.CompletedProcess(cmd, 0, stdout="Package: linux-doc-6.1\nVersion: 1:1-0\n"
                                               "Filename: pool/main/l/linux/linux-doc-6.1_1-0_all.deb\n")
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(text_clean.subprocess, "run", fake_run)
    archives = ("file:///nonexistent/", archive.as_uri() + "/")
    debs = tmp_path / "debs"
    debs.mkdir()
    sha = text_clean.hashlib.sha256(good).hexdigest()
    path = text_clean.fetch_deb(str(debs), "linux-doc-6.1_1%3a1-2_all.deb", "linux-doc-6.1", "1:1-2", sha,
                                archives=archives)
    assert open(path, "rb").read() == good
    assert os.listdir(debs) == ["linux-doc-6.1_1%3a1-2_all.deb"]

    with pytest.raises(text_clean.PackageError, match=r"linux-doc-6\.1=1:1-3 is missing: .*no archive pool holds it"):
        text_clean.fetch_deb(str(debs), "linux-doc-6.1_1%3a1-3_all.deb", "linux-doc-6.1", "1:1-3", sha,
                             archives=archives)
    assert os.listdir(debs) == ["linux-doc-6.1_1%3a1-2_all.deb"]  # the wrong bytes were not kept
