"""
data/debian_docs/prepare.py without network or the real .debs: its markup strippers on small samples,
its .deb reader on a .deb built here (ar + data.tar.xz), the pack round trip, the split by document,
dedup, and the error for a missing package. When the real train.bin/val.bin exist, they are checked
against corpus.json.
"""
import gzip
import hashlib
import io
import json
import os
import tarfile

import numpy as np
import pytest

from data import text_clean
from data.debian_docs import prepare
from tests.archives import tar_bytes
from tests.conftest import REPO


def test_rst_markup_is_stripped():
    text = text_clean.clean_rst(
        ".. _label:\n\nTitle here\n==========\n\n:Author: someone\n\nSee :ref:`the guide <guide>` and "
        ":c:func:`kref_get`, ``literal``, **bold**, *emph* and `a link <http://x>`_ like this::\n\n"
        "    code stays\n\n+-----+-----+\n| a   | b   |\n+=====+=====+\n")
    assert "Title here" in text and "code stays" in text and "| a   | b   |" in text
    assert "See the guide and kref_get, literal, bold, emph and a link like this:" in text
    for markup in ("==", ":ref:", "``", "**", ".. _label", ":Author:", "+-----", "::", "<http"):
        assert markup not in text, markup


def test_pod_markup_is_stripped():
    text = text_clean.clean_pod("=head1 NAME\n\nperlintro - intro\n\n=over 4\n\n=item * one\n\n"
                             "Use C<print>, I<really> B<C<nested>>, L<perlfunc|perlfunc/print>, "
                             "C<< $a <=> $b >> and E<lt>E<gt>.\n\n=back\n\n=cut\n")
    assert text.split("\n")[0] == "NAME"
    assert "one" in text and "Use print, really nested, perlfunc, $a <=> $b and <>." in text
    assert "=over" not in text and "=cut" not in text and "C<" not in text


def test_html_keeps_visible_text_only():
    text = text_clean.clean_html(
        "<html><head><title>T</title><style>p{}</style></head><body>"
        "<div class='navheader'>Prev Next</div><h1>Chapter&nbsp;1</h1><p>Plain &amp; simple "
        "<b>text</b>.</p><script>var x;</script><div class='navfooter'>Home</div></body></html>")
    assert prepare.normalise(text) == "Chapter\xa01\n\nPlain & simple text."


def test_asciidoc_markup_is_stripped():
    text = text_clean.clean_asciidoc("git-add(1)\n==========\n\nNAME\n----\nSee linkgit:git-commit[1] and "
                                  "`--patch` and link:howto.html[the howto].\n\n[verse]\n--------\n")
    assert "See git-commit(1) and --patch and the howto." in text
    assert "====" not in text and "[verse]" not in text and "linkgit" not in text


def fake_deb(path, files):
    """A minimal .deb: an ar archive whose data.tar.xz holds files ({'./usr/...': bytes})."""
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", tar_bytes(files, "w:xz"))]
    with open(path, "wb") as f:
        f.write(b"!<arch>\n")
        for name, data in members:
            f.write(f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode())
            f.write(data + (b"\n" if len(data) % 2 else b""))


def gcide_files(entries):
    """A gcide.dict.dz and gcide.index for {headword: entry text} (dictd's base64 offsets)."""
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def b64(n):
        out = ""
        while True:
            out = digits[n % 64] + out
            n //= 64
            if not n:
                return out
    body, index = b"", []
    for word, entry in entries.items():
        data = entry.encode()
        index.append(f"{word}\t{b64(len(body))}\t{b64(len(data))}")
        body += data
    return gzip.compress(body), "\n".join(index).encode()


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """Every pinned package as a small fake .deb with its real name, and PACKAGES pinned to their sha256."""
    deb_dir = tmp_path / "debs"
    deb_dir.mkdir()
    docs = {
        "linux-doc-6.1": {"./usr/share/doc/linux-doc-6.1/Documentation/a.rst.gz":
                          gzip.compress(b"Kernel doc\n==========\n\nThe kernel has many interesting parts. " * 3),
                          "./usr/share/doc/linux-doc-6.1/Documentation/translations/zh.rst.gz": gzip.compress(b"x" * 99),
                          "./usr/share/doc/linux-doc-6.1/Documentation/copy.rst.gz":
                          gzip.compress(b"Kernel   DOC\n==========\n\nThe kernel has many interesting parts. " * 3)},
        "python3.11-doc": {"./usr/share/doc/python3.11/html/_sources/b.rst.txt":
                           b"Python docs explain the :func:`len` builtin in some detail here. " * 3},
        "perl-doc": {"./usr/share/perl/5.36.0/pod/c.pod": b"=head1 NAME\n\nPerl docs say C<print> a lot, really a lot, in every one of their many pages.\n"},
        "postgresql-doc-15": {"./usr/share/doc/postgresql-doc-15/html/d.html":
                              b"<p>PostgreSQL documentation about tables, rows and many columns, and the queries over them.</p>"},
        "git-doc": {"./usr/share/doc/git-doc/e.txt": b"git-add(1)\n=====\n\nAdd file contents to the index, " * 3},
        "debian-reference-en": {"./usr/share/debian-reference/f.en.html":
                                b"<p>The Debian Reference is a broad overview of system administration.</p>",
                                "./usr/share/debian-reference/short.en.html": b"<p>too short</p>"},
    }
    dict_dz, index = gcide_files({
        "Water": "Water \\Wa\"ter\\, n. The fluid which descends from the clouds in rain. {Ice}.\n   [1913 Webster]\n",
        "Waterfall": "Waterfall n. A fall, or perpendicular descent, of the water of a river or stream.\n",
        "Apple": "Apple n. The fleshy pome or fruit of a rosaceous tree, one of the most widely known.\n"})
    docs["dict-gcide"] = {"./usr/share/dictd/gcide.dict.dz": dict_dz, "./usr/share/dictd/gcide.index": index}
    pinned = []
    for domain, package, version, _, pattern, fmt in prepare.PACKAGES:
        path = deb_dir / prepare.deb_filename(package, version)
        fake_deb(path, docs[package])
        pinned.append((domain, package, version, prepare.sha256_file(path), pattern, fmt))
    monkeypatch.setattr(prepare, "PACKAGES", pinned)
    monkeypatch.setattr(prepare, "DEB_DIR", str(deb_dir))
    monkeypatch.setattr(prepare, "HERE", str(tmp_path))
    monkeypatch.setattr(prepare, "MANIFEST", str(tmp_path / "corpus.json"))
    monkeypatch.setattr(prepare, "VAL_PERMILLE", 500)
    return tmp_path


def test_build_from_debs_and_from_pack_agree(fake_packages, capsys):
    tmp = fake_packages
    assert prepare.main(["--update-manifest", "--pack", str(tmp / "p.tar.xz"), "--workers", "1"]) == 0
    manifest = json.loads((tmp / "corpus.json").read_text())
    counts = manifest["counts"]
    # one duplicate (copy.rst differs only in case and spacing), one short page and the translation dropped
    assert manifest["dropped"] == {"short": 1, "duplicate": 1}
    assert counts["documentation/linux-doc-6.1"]["train_docs"] + counts["documentation/linux-doc-6.1"]["val_docs"] == 1
    # GCIDE: documents are the headwords' first two letters: 'ap' and 'wa' (Water and Waterfall together)
    assert sum(counts["dictionary/dict-gcide"][f"{s}_docs"] for s in ("train", "val")) == 2
    train = np.fromfile(tmp / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp / "val.bin", dtype=np.uint16)
    assert manifest["tokens"] == {"train": len(train), "val": len(val)} and len(train) and len(val)
    assert sum(r["train_tokens"] + r["val_tokens"] for r in counts.values()) == len(train) + len(val)
    assert manifest["sha256"]["train.bin"] == hashlib.sha256(train.tobytes()).hexdigest()
    text = prepare.get_gpt2_encoding().decode(np.concatenate([train, val]).tolist())
    assert "The fluid which descends from the clouds in rain. Ice." in text  # no pronunciation, source tag, braces
    assert "[1913 Webster]" not in text and "\\Wa" not in text
    # nothing to do on a rerun; the pack alone rebuilds the same bytes
    capsys.readouterr()
    assert prepare.main([]) == 0 and "nothing to do" in capsys.readouterr().out
    os.remove(tmp / "train.bin")
    for deb in os.listdir(tmp / "debs"):
        os.remove(tmp / "debs" / deb)
    assert prepare.main(["--from-pack", str(tmp / "p.tar.xz"), "--workers", "1"]) == 0
    assert np.array_equal(np.fromfile(tmp / "train.bin", dtype=np.uint16), train)


def test_split_is_by_document_and_stable():
    ids = [f"pkg:./doc{i}.rst" for i in range(2000)]
    val = [d for d in ids if prepare.in_val(d)]
    assert 0.01 < len(val) / len(ids) < 0.06  # VAL_PERMILLE = 30
    assert val == [d for d in ids if prepare.in_val(d)]  # a pure function of the id


def test_missing_package_is_one_clear_error(fake_packages, capsys, monkeypatch):
    domain, package, version, sha, pattern, fmt = prepare.PACKAGES[0]
    os.remove(os.path.join(prepare.DEB_DIR, prepare.deb_filename(package, version)))
    monkeypatch.setenv("PATH", "/nonexistent")  # no apt-get
    assert prepare.main(["--update-manifest"]) == 1
    err = capsys.readouterr().err
    assert f"package {package}={version} is missing" in err and "Traceback" not in err
    assert not os.path.exists(fake_packages / "train.bin")


def test_changed_deb_is_refused(fake_packages, capsys):
    domain, package, version, sha, pattern, fmt = prepare.PACKAGES[1]
    with open(os.path.join(prepare.DEB_DIR, prepare.deb_filename(package, version)), "ab") as f:
        f.write(b"tampered")
    assert prepare.main(["--update-manifest"]) == 1
    assert f"is pinned at {sha}" in capsys.readouterr().err


def test_prepared_corpus_matches_manifest():
    here = os.path.join(REPO, "data", "debian_docs")
    with open(os.path.join(here, "corpus.json")) as f:
        manifest = json.load(f)
    assert manifest["tokens"]["train"] + manifest["tokens"]["val"] >= 25_000_000  # the floor
    assert {p["package"] for p in manifest["packages"]} == {p[1] for p in prepare.PACKAGES}
    if not os.path.exists(os.path.join(here, "train.bin")):
        pytest.skip("run python data/debian_docs/prepare.py first")
    for name, sha in manifest["sha256"].items():
        assert prepare.sha256_file(os.path.join(here, name)) == sha


def test_bad_packs_and_arguments_are_one_line_before_any_work(fake_packages, capsys):
    """Each bad --from-pack or --pack: exit 1, one 'error:' line naming the file and the fix, no train.bin."""
    tmp = fake_packages
    assert prepare.main(["--update-manifest", "--pack", str(tmp / "good.tar.xz"), "--workers", "1"]) == 0
    os.remove(tmp / "train.bin")
    os.remove(tmp / "val.bin")
    good = (tmp / "good.tar.xz").read_bytes()
    gz = io.BytesIO()
    with tarfile.open(fileobj=gz, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("pack.json"), io.BytesIO(b""))
    without = io.BytesIO()  # a pack whose pack.json lacks one package's pin
    with tarfile.open(fileobj=io.BytesIO(good), mode="r:xz") as src, tarfile.open(fileobj=without, mode="w:xz") as dst:
        for member in src:
            data = src.extractfile(member).read()
            if member.name == "pack.json":
                pins = json.loads(data)
                pins.pop(prepare.PACKAGES[0][1])
                data = json.dumps(pins).encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    import lzma
    bad = {"empty.tar.xz": b"", "truncated.tar.xz": good[:len(good) // 2], "gzip.tar.xz": gz.getvalue(),
           "malformed.tar.xz": lzma.compress(b"not a tar archive at all" * 40), "missing.tar.xz": without.getvalue()}
    for name, data in bad.items():
        (tmp / name).write_bytes(data)
    (tmp / "adir.tar.xz").mkdir()
    cases = [[f"--from-pack={tmp / name}"] for name in [*bad, "adir.tar.xz", "absent.tar.xz"]]
    cases += [["--pack", str(tmp / "nowhere" / "p.tar.xz")], ["--pack", str(tmp / "adir.tar.xz")], ["--workers", "0"]]
    for args in cases:
        capsys.readouterr()
        assert prepare.main([*args, "--force"]) == 1, args
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, (args, err)
        assert not os.path.exists(tmp / "train.bin") and not os.path.exists(tmp / "val.bin"), args
    assert prepare.main(["--pack", str(tmp / "nowhere" / "p.tar.xz")]) == 1
    assert "does not exist; create it first" in capsys.readouterr().err
