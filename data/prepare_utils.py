"""Small helpers shared by the data/<name>/prepare.py scripts.

    sys.exit(run(main))        main under cli_guard's guard (issue 53): Ctrl-C, SIGTERM or SIGHUP ends in one
                               "stopped (...)" line, a PrepareError in one "error: ..." line (exit 1), never a traceback
    write_atomic(path, data)   a temp file in the same folder + os.replace: never half-written, and only over
                               a regular file
    worker_pool(n)             a process pool whose workers never outlive this process
    interruptible(fn, *args)   a long C call (lzma) that a stop still ends at once
    OneLineArgumentParser      argparse whose errors are one line (cli_guard.py)
"""
import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor

from tqdm import tqdm

from cli_guard import OneLineArgumentParser, Stopped, guarded  # noqa: F401 -- OneLineArgumentParser: the scripts' parser

# No tqdm monitor thread. A stop (SIGTERM, SIGHUP, Ctrl-C) is process-directed: the kernel hands it to any thread
# that does not block it, and a signal taken on another thread does not wake a main thread blocked on a pool's
# result, so the stop waited for the work in flight (a minute in tests/test_prepare_guards.py's harness, whenever
# the kernel picked that thread). worker_pool starts the pool's threads with the stop signals blocked, so with no
# monitor the main thread is the only one that takes them.
tqdm.monitor_interval = 0

from atomic_files import NotReplaceable, replace_target  # noqa: E402


class PrepareError(Exception):
    """A problem the user can fix; run() prints it as one 'error: ...' line and exits 1."""


def _on_sighup(signum, frame):
    raise Stopped("SIGHUP", 128 + signal.SIGHUP)


_abandoned_pools = []  # pools left by an exception (a stop, an error): their manager thread may never end


def run(main, *args):
    """Exit code of main(*args) under cli_guard.guarded, SIGHUP (a closed terminal) handled as SIGTERM is,
    a PrepareError as one line; `finally` blocks run, so temp files are removed and pools ended."""
    def body():
        try:
            return main(*args)
        except PrepareError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:  # under nohup: keep ignoring it
        return _exit_past_abandoned_pools(guarded(body))
    previous = signal.signal(signal.SIGHUP, _on_sighup)
    try:
        return _exit_past_abandoned_pools(guarded(body))
    finally:
        signal.signal(signal.SIGHUP, previous)


def _exit_past_abandoned_pools(code):
    """code; but after a pool was left by an exception, end the process here (os._exit, streams flushed):
    concurrent.futures joins each executor's manager thread at interpreter exit, and with its workers
    terminated mid-task that thread could wait for ever (a stop during tokenizing hung at exit about one
    run in ten). The with-blocks and finally-blocks have already run: temp files are gone."""
    if not _abandoned_pools:
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def temp_path(path):
    """data/x/train.bin -> data/x/train.tmp-<pid>.bin: same folder (so os.replace is atomic), still *.bin."""
    root, ext = os.path.splitext(path)
    return f"{root}.tmp-{os.getpid()}{ext}"


def write_atomic(path, data):
    """Write bytes to path via a temp file in the same folder + os.replace: never half-written. A failed write
    (a full disk, `ulimit -f`) is a PrepareError naming path, which is left as it was; so is a path that is not
    a regular file (a device, a FIFO, a directory: atomic_files.py), refused before anything is written."""
    try:
        target = replace_target(path)
    except NotReplaceable as e:
        raise PrepareError(str(e)) from None
    tmp = temp_path(target)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        raise PrepareError(f"cannot write {path}: {e.strerror or e} ({len(data):,} bytes); "
                           f"it was left as it was") from None
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


# ----------------------------------------------------------------------------- worker pool
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def interruptible(fn, *args):
    """fn(*args), run in a daemon thread while the main thread waits, so that a stop (SIGTERM, SIGHUP, Ctrl-C) is
    taken at once: one long C call in the main thread (lzma.compress of a pack, a minute) holds Python's
    handlers off until it returns. The thread blocks the stop signals, so the kernel hands them to the main
    thread; after a stop it ends with the process."""
    box = {}

    def call():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 -- raised in the main thread below
            box["error"] = e
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)  # the thread inherits the mask
    try:
        thread = threading.Thread(target=call, name="interruptible", daemon=True)
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    while thread.is_alive():
        thread.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _die_with_parent(parent):
    """Pool worker initializer: the parent's signal handlers (inherited through fork) are not ours; on Linux
    the kernel sends us SIGTERM when the parent dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # ended by the parent or the kernel: quietly
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C reaches the whole process group: the parent handles it
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


_quiet_threads = set()  # the manager threads of pools left by an exception: their errors are not news
_thread_excepthook = threading.excepthook


def _excepthook(args):
    if args.thread not in _quiet_threads:
        _thread_excepthook(args)


threading.excepthook = _excepthook


@contextlib.contextmanager
def worker_pool(workers):
    """A ProcessPoolExecutor of `workers` forked processes that never outlive this one: leaving the with block by
    an exception (an error, Ctrl-C, SIGTERM) terminates them at once, and the kernel ends them if this process
    is killed. Leaving it normally waits for the work submitted."""
    before = set(multiprocessing.active_children())
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)  # until each worker has its own handlers
    try:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_die_with_parent, initargs=(os.getpid(),))
        pool.submit(int)  # with fork, the first submit starts every worker
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    try:
        yield pool
    except BaseException:
        # the pool's manager thread finds its workers gone and may fail as it marks their work broken (Python
        # 3.11's terminate_broken sets an exception on a future the map already cancelled: InvalidStateError);
        # its traceback followed the stop's line (issue 70). The process ends past it (run()): quiet it first
        _quiet_threads.add(getattr(pool, "_executor_manager_thread", None))
        for process in set(multiprocessing.active_children()) - before:
            process.terminate()
        # no pool.shutdown(): the exception (a signal's) may have left the pool's locks and queues mid-call,
        # and a shutdown then waited for ever about one stop in ten; run() ends the process without it
        _abandoned_pools.append(pool)
        raise
    pool.shutdown()
