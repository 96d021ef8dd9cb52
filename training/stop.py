"""Stopping every rank together: on SIGINT/SIGTERM, and when one rank hits an error the others must share.

    install_signal_handlers()          first: until training starts, SIGINT/SIGTERM exit at once (the
                                       rendezvous included: init_mesh(on_wait=waiting) waits in Python)
    watch_parent()                     under torchrun: a worker whose launcher died stops (SIGTERM to itself)
    control = Control(mesh, limit)     every rank, once (creates a gloo group over the world; names a peer that
                                       stops running for limit s: training/stall.py)
    control.start()                    the first step is done: a signal now sets a flag; a second SIGINT exits at once
    signum = control.agreed_stop()     once per training step, every rank: 0, or the signal all stop on
    control.any_error(bool)            every rank: whether some rank failed (e.g. rank 0's checkpoint write)

Why a step's stop flag is reduced one step late, on the CPU. Ranks must stop after the same step (the next
collective of a rank that stopped alone would hang or reset its peers), so the local flags are summed over
the world. A device tensor would make the host wait for the device every step; instead a 2-element CPU
tensor goes through a separate gloo group, posted asynchronously after step i and waited for after step
i+1, when it has long arrived: no device sync, and no wait on the peers beyond what the step's own
collectives already impose. Every rank reads the same sum, so all stop after the same step (one step after
the signal).

torchrun forwards a SIGINT/SIGTERM it receives to every worker, and a terminal's Ctrl-C reaches the
workers directly as well: under torchrun a repeat of the first signal within FORWARD_WINDOW seconds is
that copy, not a second Ctrl-C.
"""
import errno
import io
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import zlib

import torch
import torch.distributed as dist

from parallel import comm
from training.stall import StallWatch

SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORWARD_WINDOW = 2.0


_signal = {"num": 0, "at": 0.0, "training": False,  # what the handler saw; set only by it and Control.start
           "waiting": None}  # what the rendezvous waits for (waiting()), named if a signal stops it
_peers = []  # (host hash, pid) of every rank, by rank


def install_signal_handlers():
    """First thing in main: until the training loop starts there is nothing to save, so a signal stops at once."""
    for s in SIGNALS:
        signal.signal(s, _handle)


def waiting(text):
    """on_wait of parallel.mesh.init_mesh: what this rank waits for now (None: no longer waiting). A signal
    during the wait names it, on every rank (outside torchrun each rank is a terminal of its own)."""
    _signal["waiting"] = text


def watch_parent(interval=1.0):
    """Under torchrun: a worker whose launcher died (kill -9 of torchrun) would train on and hold its GPU. A
    daemon thread notices that the parent changed and sends this process SIGTERM, which stops it as any SIGTERM
    does: at once before training, else after a step agreed by every rank, with a checkpoint."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    launcher = os.getppid()

    def watch():
        while os.getppid() == launcher:
            time.sleep(interval)
        print(f"error: rank {os.environ.get('RANK', '?')}: its launcher (pid {launcher}) is gone: stopping",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-launcher", daemon=True).start()


def _last_words(line):
    """Print line to stderr from a signal handler that exits next. The signal may land inside another print
    to sys.stderr (the rendezvous' 'waiting for' line); a second print into that buffered writer raises
    'reentrant call', so the line goes straight to its file descriptor."""
    try:
        sys.stderr.flush()
    except (RuntimeError, ValueError, OSError):
        pass  # the interrupted print still holds the buffer: what it had is lost with the exit
    try:
        os.write(sys.stderr.fileno(), (line + "\n").encode())
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        print(line, file=sys.stderr, flush=True)  # a stderr without a descriptor (captured by a test runner)


def _say(line):
    if os.environ.get("RANK", "0") in ("0", ""):  # once, not per rank
        _last_words(line)


def _handle(signum, frame):
    name = signal.Signals(signum).name
    if _signal["waiting"]:
        rank = os.environ.get("RANK", "0")
        _last_words(f"error: {'' if rank in ('0', '') else f'rank {rank}: '}{name} while {_signal['waiting']}: "
                    f"stopped, nothing to save")
        os._exit(128 + signum)
    if not _signal["training"]:
        # under torchrun a SIGTERM is most often the launcher's, stopping this rank because another failed
        # (its error follows): this rank's line must not read as the cause (issue 52)
        why = (" (from the launcher: another rank failed, or the launch was stopped)"
               if signum == signal.SIGTERM and "TORCHELASTIC_RUN_ID" in os.environ else "")
        _say(f"error: {name} before training began{why}: stopped, nothing to save")
        os._exit(128 + signum)
    if not _signal["num"]:
        _signal["num"], _signal["at"] = signum, time.monotonic()  # the loop stops, saves and says so
        return
    forwarded = "TORCHELASTIC_RUN_ID" in os.environ and time.monotonic() - _signal["at"] < FORWARD_WINDOW
    if signum == signal.SIGINT and not forwarded:
        _say("error: second SIGINT: stopped at once, without a checkpoint (one written before, if any, is intact)")
        os._exit(128 + signum)  # no cleanup: a checkpoint write in progress leaves only its temp file


class Control:
    def __init__(self, mesh, stall_timeout=None):
        self.mesh = mesh
        self.group = dist.new_group(backend="gloo") if mesh.world_size > 1 else None
        # a peer that stops running (SIGSTOP) is named after stall_timeout s instead of a silent hang
        self.watch = StallWatch(mesh, stall_timeout) if self.group is not None and stall_timeout else None
        self.pending = None  # (work, tensor) of the flag posted after the previous step
        if self.group is not None:  # every rank's host and pid, so that a survivor can name a rank that died
            me = torch.tensor([zlib.crc32(socket.gethostname().encode()), os.getpid()], dtype=torch.int64)
            _peers[:] = [tuple(t.tolist()) for t in comm.all_gather(me, self.group, kind="control")]

    def start(self):
        """The first step is done: from now on a signal stops after a step, with a checkpoint. (Until then, the
        first eval and compiling included, there is nothing new to save: a signal stops at once.)"""
        _signal["training"] = True

    @property
    def signum(self):
        return _signal["num"]

    def agreed_stop(self):
        """The signal every rank stops on after this step (0: go on). Rank r's flag of step i is read by
        every rank after step i+1 (see the module's docstring); one process reads its own at once."""
        if self.group is None:
            return self.signum
        if self.watch is not None:
            self.watch.steps += 1  # a Python int: no sync
        posted = torch.tensor([self.signum == signal.SIGINT, self.signum == signal.SIGTERM], dtype=torch.int64)
        work = comm.all_reduce(posted, self.group, kind="control", async_op=True)
        previous, self.pending = self.pending, (work, posted)
        if previous is None:
            return 0
        previous[0].wait()
        n_int, n_term = previous[1].tolist()  # a CPU tensor: no device sync
        return signal.SIGTERM if n_term else signal.SIGINT if n_int else 0

    def finish(self):
        """Wait for the flag still in flight (every rank posted it), before the groups go down."""
        if self.pending is not None:
            self.pending[0].wait()
            self.pending = None

    # ---- errors that one rank sees
    def any_error(self, failed):
        """Whether any rank passed failed=True (blocking; for rare events such as a checkpoint write)."""
        if self.group is None:
            return failed
        self.finish()  # keep the group's collectives in the same order on every rank
        flag = torch.tensor([int(failed)], dtype=torch.int64)
        comm.all_reduce(flag, self.group, kind="control")
        return flag.item() > 0


# ----------------------------------------------------------------------------- errors only one rank sees
PEER_LOST = re.compile(r"Connection (reset|closed) by peer|Broken pipe|remote process exited|"
                       r"NCCL communicator was aborted|Socket Timeout|Connection refused", re.I)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _first_line(e):
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return re.sub(r"^\[enforce fail at [^\]]*\] ?(err == 0\. )?", "", line)[:200]


def _rank():
    r = os.environ.get("RANK", "0")
    return int(r) if r.isdigit() else 0


def _dead(pid):
    """Whether a process of this host is gone (or a zombie that its launcher has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _lost_ranks():
    """Who died: the ranks of this host whose process is gone; with two ranks, the other one."""
    rank, host = _rank(), zlib.crc32(socket.gethostname().encode())
    dead = [r for r, (h, pid) in enumerate(_peers) if r != rank and h == host and _dead(pid)]
    if dead:
        return "rank " + ", ".join(map(str, dead))
    return f"rank {1 - rank}" if len(_peers) == 2 else "another rank"


def _oom(e):
    print(f"error: rank {_rank()}: out of memory ({_first_line(e)}): lower batch_size (and raise "
          f"gradient_accumulation_steps to keep the tokens per iteration) or block_size", file=sys.stderr, flush=True)
    return 1


def report_fatal(main, argv):
    """main(argv)'s exit code. Failures that one rank may meet alone, where the one-line message that rank 0
    prints for everyone is not enough, become one line naming the rank: a write on a full disk (logs, config;
    checkpoints say so themselves), running out of memory, and the loss of a peer process (named when it ran
    on this host). Anything else keeps its traceback (a bug)."""
    try:
        return main(argv)
    except BrokenPipeError:  # stdout's reader ended (`... | head`): say it where it can still be read
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        print(f"error: rank {_rank()}: stdout was closed (the reader of its pipe ended, e.g. | head): stopped; "
              f"checkpoints written before are intact", file=sys.stderr, flush=True)
        return 1
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        if e.filename is None:  # a print: the run's files name themselves (RunLog, checkpoints), stdout does not
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            print(f"error: rank {_rank()}: cannot write to stdout: {e.strerror} (is it redirected to a full disk or "
                  f"/dev/full?); checkpoints written before are intact", file=sys.stderr, flush=True)
            return 1
        where = os.path.dirname(os.path.abspath(e.filename)) if e.filename else "."
        try:
            free = f"{shutil.disk_usage(where).free / 2**20:,.1f} MiB free there"
        except OSError:
            free = "free space unknown"
        print(f"error: rank {_rank()}: cannot write {e.filename or 'a file'}: {e.strerror} ({free}); "
              f"checkpoints written before are intact", file=sys.stderr, flush=True)
        return 1
    except (MemoryError, torch.OutOfMemoryError) as e:
        return _oom(e)
    except Exception as e:  # DistBackendError and gloo's RuntimeErrors; the CPU allocator's RuntimeError
        text = str(e)
        if "can't allocate memory" in text:
            return _oom(e)
        if not PEER_LOST.search(text):
            raise
        # gloo names the peer by its address, not its rank: _lost_ranks finds it by its pid
        address = re.search(r"\[?\d+\.\d+\.\d+\.\d+\]?:\d+", text)
        print(f"error: rank {_rank()}: lost contact with {_lost_ranks()} ({PEER_LOST.search(text).group(0)}"
              f"{', peer ' + address.group(0) if address else ''}): it died or was killed; its own message, if "
              f"any, is above", file=sys.stderr, flush=True)
        return 1
