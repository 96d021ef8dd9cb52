"""Small helpers shared by the data/<name>/prepare.py scripts."""
import os


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
