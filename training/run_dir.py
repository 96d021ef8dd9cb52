"""An out_dir holds one run: train_reduced_sync.py claims it here before writing anything.

    check_out_dir(out_dir)                    every rank, before anything is built: can out_dir be made?
    refuse_existing_run(out_dir, cfg)         every rank: a fresh run does not replace a run silently
    claim(out_dir, fresh, overwrite)          rank 0: create, lock, clean orphans, move an old run aside

The lock is flock() on out_dir/.lock, held until the process exits: the kernel releases it when the
process dies, however it dies (kill -9 too), so a stale lock never blocks a later run. A second
trainer on the same out_dir is refused. With the lock held no other trainer writes there, so every
start removes the temp files ('.tmp-*.partial-write', TEMP_SUFFIX) that an atomic write cut short (a killed
run) left behind, and no other file.
"""
import fcntl
import glob
import json
import os
import re
import time

from training.config import TEMP_SUFFIX

# The files a run writes; any of them means out_dir holds a run (ckpt.pt.invalid*: a resume set it aside).
RUN_FILES = ("ckpt.pt", "ckpt_best.pt", "log.txt", "metrics.jsonl", "config.json")
KEPT_CHECKPOINT = re.compile(r"ckpt_([0-9]+)\.pt")  # save_iters' copies (a trunk's branch points)
LOCK_NAME = ".lock"
ASIDE_PREFIX = "replaced-"  # --overwrite=True moves an old run into out_dir/replaced-<UTC time>/


def kept_checkpoint_iter(path):
    """The iteration of a save_iters copy (.../ckpt_<iter>.pt), else None."""
    m = KEPT_CHECKPOINT.fullmatch(os.path.basename(path or ""))
    return int(m.group(1)) if m else None


_held = []  # the open lock files: flock lasts as long as the descriptor, so keep them open


class OutDirError(Exception):
    """One line for the user: why this out_dir cannot take this run."""


def check_out_dir(out_dir):
    """OutDirError unless out_dir is, or can be created as, a writable directory (checked before any
    file is written): no part of it may be an existing file, a dangling symlink or a name too long."""
    path = os.path.abspath(out_dir)
    for part in path.split(os.sep):
        if len(part.encode()) > 255:  # NAME_MAX of every common Linux file system
            raise OutDirError(f"out_dir={out_dir!r}: the name {part[:40]!r}... is {len(part.encode())} bytes "
                              f"long; a file name may have at most 255")
    while not os.path.exists(path):
        if os.path.islink(path):
            raise OutDirError(f"out_dir={out_dir!r}: {path} is a symlink to {os.readlink(path)!r}, which does "
                              f"not exist")
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent
    if not os.path.isdir(path):
        raise OutDirError(f"out_dir={out_dir!r}: {path} exists and is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutDirError(f"out_dir={out_dir!r}: {path} is not writable")
    for name in RUN_FILES:  # the trainer writes these as files: a directory in the way fails only later
        where = os.path.join(out_dir, name)
        if os.path.isdir(where):
            raise OutDirError(f"out_dir={out_dir!r}: {where} is a directory, but the run writes a file of that name "
                              f"there; move it away or choose another --out_dir")


def run_files(out_dir):
    """The files of a run in out_dir (sorted names), [] if it holds none."""
    try:
        names = os.listdir(out_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if n in RUN_FILES or n.startswith("ckpt.pt.invalid") or KEPT_CHECKPOINT.fullmatch(n))


def has_checkpoint(names):
    return any(n.endswith(".pt") or ".pt.invalid" in n for n in names)


def last_eval_iter(out_dir):
    """The last iteration after 0 at which out_dir/metrics.jsonl records an eval, else 0. A run that got that
    far wrote a checkpoint, so its logs without one are a record whose checkpoints were removed (as in
    experiments/), not a run that stopped before its first checkpoint."""
    last = 0
    try:
        with open(os.path.join(out_dir, "metrics.jsonl"), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a kill
                    continue
                if isinstance(record, dict) and record.get("type") == "eval" and isinstance(record.get("iter"), int):
                    last = max(last, record["iter"])
    except OSError:
        pass
    return last


def refuse_existing_run(out_dir, fresh, overwrite):
    """OutDirError if a fresh run (not a resume) would write into an out_dir that holds a run, unless
    overwrite (then claim() moves that run aside). A run that stopped before its first checkpoint has
    nothing to resume: a fresh start is let through, and claim() keeps its logs aside. Reads only; every
    rank may call it."""
    found = run_files(out_dir) if fresh and not overwrite else []
    aside = os.path.join(out_dir, ASIDE_PREFIX + "<time>")
    if found and has_checkpoint(found):
        raise OutDirError(f"out_dir={out_dir!r} already holds a run ({', '.join(found)}): continue it with "
                          f"--init_from=resume, choose another --out_dir, or pass --overwrite=True to move the old "
                          f"run aside into {aside}/")
    evaluated_to = last_eval_iter(out_dir) if found else 0
    if evaluated_to:
        raise OutDirError(f"out_dir={out_dir!r} already holds the records of a run evaluated up to iter "
                          f"{evaluated_to}, without its checkpoints: choose another --out_dir, or pass "
                          f"--overwrite=True to move them aside into {aside}/")


def lock_holder(out_dir):
    """The pid (as written) of another process that holds out_dir's lock now, or None. Takes no lock."""
    path = os.path.join(out_dir, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)


def lock(out_dir):
    """flock out_dir/.lock for this process, or OutDirError if another process holds it."""
    path = os.path.join(out_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise OutDirError(f"out_dir={out_dir!r} is in use by another trainer (pid {holder}, holding {path}); "
                          f"wait for it to end or choose another --out_dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # who holds it, for the message above
    _held.append(fd)
    return path


def remove_orphans(out_dir):
    """Remove the temp files of atomic writes a killed run cut short; returns their names.
    Only while holding the lock: then no other process is writing one."""
    orphans = sorted(glob.glob(os.path.join(glob.escape(out_dir), ".tmp-*" + TEMP_SUFFIX)))
    for path in orphans:
        os.remove(path)
    return [os.path.basename(p) for p in orphans]


def move_aside(out_dir):
    """Move the files of the run in out_dir (run_files: what the trainer writes; a user's own files stay)
    into out_dir/replaced-<UTC time>/ (nothing is deleted); returns (that directory, the names moved), or
    (None, []) if there was nothing to move."""
    names = run_files(out_dir)
    if not names:
        return None, []
    base = os.path.join(out_dir, ASIDE_PREFIX + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    aside, n = base, 1
    while os.path.exists(aside):
        aside, n = f"{base}.{n}", n + 1
    os.mkdir(aside)
    for name in names:  # renames within one directory tree: atomic, no copies
        os.rename(os.path.join(out_dir, name), os.path.join(aside, name))
    return aside, names


def claim(out_dir, fresh, overwrite):
    """Create and lock out_dir for this run (rank 0 only), remove orphan temp files, and for a fresh run
    with overwrite move an old run aside. Returns notes to log. OutDirError for anything in the way."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        lock(out_dir)
        notes = []
        orphans = remove_orphans(out_dir)
        if orphans:
            notes.append(f"removed {len(orphans)} temp file(s) of writes a killed run cut short: {', '.join(orphans)}")
        if fresh:
            refuse_existing_run(out_dir, fresh, overwrite)  # again, now under the lock
            found = run_files(out_dir)
            if found:
                why = ("--overwrite=True" if overwrite else
                       "the previous run here stopped before its first checkpoint (nothing to resume)")
                aside, moved = move_aside(out_dir)
                notes.append(f"{why}: moved its files ({', '.join(moved)}) to {aside}/")
        return notes
    except OSError as e:
        raise OutDirError(f"out_dir={out_dir!r}: cannot create or lock it: {e.strerror or e}"
                          + (f" ({e.filename})" if e.filename else "")) from None
