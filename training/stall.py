"""A stalled rank is named (issue 70). A rank that stops without dying (SIGSTOP, a debugger, a frozen host)
leaves its peers waiting in their next collective with no message and no end: the backends' own timeouts
(NCCL 10 minutes, gloo 30) end in a backtrace that names a collective, not the rank.

    watch = StallWatch(mesh, limit_s)   every rank, once the process groups exist: starts a daemon thread
    watch.steps += 1                    the training loop, once a step: a Python int, no device sync

Every few seconds the thread adds one to this rank's heartbeat in the run's store (its own connection to the
store torchrun's agent, or rank 0 outside torchrun, serves) and reads every peer's. When this rank has done no
step for limit_s seconds and a peer's heartbeat has not moved for half that, the peer is not running: the
lowest rank still running prints one line naming it, every running rank writes it to torchrun's error file
and ends its process (os._exit: the main thread is blocked in the collective). Checkpoints are written
atomically, so the last one is intact; a write cut midway leaves only its temp file, which the next start
removes.

A rank that is slow but alive (a long checkpoint write, compiling, a long eval) keeps beating and is never
named; a rank that died is named by its peers' own error (training/stop.py's report_fatal).
"""
import atexit
import os
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from parallel.mesh import record_error_for_torchrun

EXIT_STALLED = 1


class StallWatch:
    def __init__(self, mesh, limit_s, interval_s=None):
        self.rank, self.world, self.limit = mesh.rank, mesh.world_size, float(limit_s)
        self.interval = interval_s or min(5.0, self.limit / 10)
        self.steps = 0  # the training loop's count: read here, written there (an int: no lock needed)
        self.prefix = f"reduced_sync/beat/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self._stopped = threading.Event()
        if self.world > 1:
            self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
            self._thread.start()
            # ended before the interpreter is: a daemon thread still holding its store client when the process
            # exits aborted ranks of an 8-process CPU launch ("terminate called without an active exception")
            atexit.register(self.stop)

    def stop(self):
        """End the watch and wait for its thread, which then drops its store client."""
        self._stopped.set()
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(2.0, 2 * self.interval) + 1.0)

    def _connect(self):
        """A client of the run's store of its own, whose calls give up after a few seconds: a store served by a
        stopped rank 0 must not block this thread, and the process group's client must keep its timeout."""
        store = dist.distributed_c10d._get_default_store().clone()
        store.set_timeout(timedelta(seconds=max(2.0, 2 * self.interval)))
        return store

    def _watch(self):
        try:
            store = self._connect()
        except Exception:  # noqa: BLE001 -- a store that cannot be cloned: no watch, the run goes on as before
            return
        peers = [r for r in range(self.world) if r != self.rank]
        beats, moved = {}, {}
        my_steps, my_since = self.steps, time.monotonic()
        store_since = None  # since when the store has not answered
        while True:
            now = time.monotonic()
            try:
                store.add(self.prefix + str(self.rank), 1)
                for r in peers:
                    beat = store.add(self.prefix + str(r), 0)
                    if beats.get(r) != beat:
                        beats[r], moved[r] = beat, now
                store_since = None
            except Exception:  # noqa: BLE001 -- the store did not answer in time
                store_since = store_since or now
            for r in peers:
                moved.setdefault(r, now)
            if self.steps != my_steps:
                my_steps, my_since = self.steps, now
            if now - my_since >= self.limit:
                if store_since is None:
                    stalled = [r for r in peers if now - moved[r] >= self.limit / 2]
                else:  # no news of anyone: only where rank 0 serves the store (no torchrun) is that news of rank 0
                    stalled = [0] if (now - store_since >= self.limit / 2 and self.rank != 0
                                      and "TORCHELASTIC_RUN_ID" not in os.environ) else []
                if stalled:
                    self._end(stalled, now - my_since, max(now - moved[r] for r in stalled))
            if self._stopped.wait(self.interval):
                del store
                return

    def _end(self, stalled, waited, silent):
        names = ", ".join(map(str, stalled))
        line = (f"error: rank {names} did not arrive: rank {self.rank} waited {waited:.0f} s for it (stall_timeout="
                f"{self.limit:g}) and it has not run for {silent:.0f} s (stopped, e.g. SIGSTOP or a debugger, or "
                f"frozen): ending the run; the last checkpoint is intact")
        if self.rank == min(r for r in range(self.world) if r not in stalled):
            print(line, file=sys.stderr, flush=True)
        record_error_for_torchrun(line)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os._exit(EXIT_STALLED)
