"""Small helpers shared by the data/<name>/prepare.py scripts."""
import os


def write_atomic(path, data):
    """Write bytes to path via a temp file in the same folder + os.replace: never half-written."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
