"""Atomic file writes: a temp file in the target's folder, fsynced, then renamed over the target, so that a
reader (or a run killed midway) sees the old file or the new one, never half of one.

Only a regular file, or a name not taken yet, is ever replaced. Renaming over a device such as /dev/full, a
FIFO or a directory would put a regular file where it was (issue 70: `compare_runs.py --stats-json=/dev/full`
run as root replaced the device node), so those are refused in one line that names them. So are this
process's own stdout and stderr, even when they are regular files: a stream is written through, never
replaced. A symlink is followed: the file it points to is replaced and the link stays.
"""
import os
import stat
import sys
import tempfile

# The suffix of every temp file the trainer writes (atomic_write, training/checkpoint.py's links): the start of
# a run removes the ones a killed run left (training/run_dir.remove_orphans), and only those: a user's own
# '.tmp-notes' in the out_dir is never touched.
TEMP_SUFFIX = ".partial-write"

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


class NotReplaceable(OSError):
    """The target of an atomic write is not a regular file we may replace: `what` it is instead. An OSError, so
    that every caller's `except OSError` (a full disk, `ulimit -f`) reports it in its one line; str() is that
    line, path included."""

    def __init__(self, path, what):
        self.what = what
        why = ("not a regular file: refusing to replace it" if "stream" not in what
               else "written through the stream, never replaced")
        super().__init__(0, f"{path} is {what}, {why}", path)

    def __str__(self):
        return self.strerror


class WriteError(OSError):
    """atomic_write failed midway (a full disk, a file size limit): the OSError, naming the target."""


def replaceable(path):
    """None where an atomic write may replace path (a regular file, or nothing yet), else the NotReplaceable
    (or other OSError) that says why not, in one line naming path."""
    try:
        st = os.stat(path)  # follows links: /dev/stdout is whatever fd 1 is
    except FileNotFoundError:
        return None  # nothing there (or a dangling link): the write creates it
    except OSError as e:
        return e
    if not stat.S_ISREG(st.st_mode):
        return NotReplaceable(path, kind(st.st_mode))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            own = os.fstat(fd)
        except OSError:
            continue  # closed
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return NotReplaceable(path, f"this process's {name} stream")
    return None


def replace_problem(path):
    """Why an atomic write must not replace path (one line naming it), or None."""
    error = replaceable(path)
    return None if error is None else str(error) if isinstance(error, NotReplaceable) else f"{path}: {error.strerror}"


def kind(mode):
    """What a file of this st_mode is, in words: 'a directory', 'a FIFO (named pipe)', ..., 'a regular file'."""
    return next((what for is_kind, what in _KINDS if is_kind(mode)),
                "a regular file" if stat.S_ISREG(mode) else "a special file")


def replace_target(path):
    """The file an atomic write of path replaces (path, or where its symlinks lead); the error of
    replaceable(path) where it may not."""
    error = replaceable(path)
    if error is not None:
        raise error
    return os.path.realpath(path)


def folder_problem(path, flag):
    """Why path cannot be a folder that files are written into (one line naming flag and path), or None: it
    must be a writable folder or one that can be made (its nearest existing parent a writable folder). Checked
    before the work that fills it; nothing is created."""
    if os.path.lexists(path) and not os.path.isdir(path):
        return f"{flag} {path}: exists and is not a folder; give a folder"
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{flag} {path}: {probe} is not a folder; give a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{flag} {path}: {probe} is not writable; give a folder you can write"
    return None


def atomic_write(path, write):
    """Call write(f) on a binary temp file in the target's folder, fsync, then os.replace it onto the target
    (module docstring): NotReplaceable, before anything is written, where that is not a regular file."""
    path = replace_target(path)
    directory = os.path.dirname(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=f"-{os.path.basename(path)}{TEMP_SUFFIX}")
    except OSError as e:  # a folder we may not write in
        raise WriteError(e.errno, e.strerror or str(e), path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)  # make the rename itself durable
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError):  # a full disk, `ulimit -f`: named by the target (write() errors name no file)
            raise WriteError(e.errno, e.strerror or str(e), path) from None
        raise


def one_line_write_errors(main):
    """main, where a result file it cannot write (a full disk, `ulimit -f`, a device there) ends in one line
    naming it (exit 1), not a traceback; the file that was there is left as it was."""
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except NotReplaceable as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
        except WriteError as e:
            print(f"error: cannot write {e.filename}: {e.strerror}; the file there before, if any, is intact",
                  file=sys.stderr, flush=True)
        return 1
    return wrapped


def write_text(path, text):
    """Write a result file (table, JSON) atomically, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def save_figure(fig, path, dpi=120):
    """fig.savefig(path) atomically (the format from the suffix), creating its folder; closes fig."""
    import io
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format=os.path.splitext(path)[1][1:].lower())
    plt.close(fig)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))
