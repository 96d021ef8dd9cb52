"""Small helpers shared by the data/<name>/prepare.py scripts."""
import os
import sys


def temp_path(path):
    """data/x/train.bin -> data/x/train.tmp-<pid>.bin: same folder (so os.replace is atomic), still *.bin."""
    root, ext = os.path.splitext(path)
    return f"{root}.tmp-{os.getpid()}{ext}"


def write_atomic(path, data):
    """Write bytes to path via a temp file in the same folder + os.replace: never half-written."""
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_no_arguments(argv, doc, script):
    """For a prepare script without options: --help prints its docstring; any other argument is refused in
    one line (given by mistake, it would otherwise pass unnoticed)."""
    if argv in (["-h"], ["--help"]):
        print(doc.strip())
        sys.exit(0)
    if argv:
        sys.exit(f"error: {script} takes no arguments (got {' '.join(argv)}); run: python {script}")
