"""The data-parallel x tensor-parallel process mesh.

    world = dp * tp,   global rank = dp_rank * tp + tp_rank

TP ranks of one replica are adjacent (on one node they share NVLink); the DP group of a rank
holds the ranks with its tp_rank in every replica. All TP ranks of one replica read the same batch.

On NCCL the process groups are bound to this rank's GPU (init_process_group's device_id). At the end of a run
close_process_groups tears them down in named stages (TEARDOWN_STAGES: barrier, graphs, dynamo, gc, sync,
arrivals, subgroups, destroy), cut after TEARDOWN_DEADLINE_S; a script that ends its process through os._exit right
after (leave_on_exit) stops after the barrier, the sync and the arrivals. Two environment variables help bisect a
teardown that hangs:

    REDUCED_SYNC_TEARDOWN_TRACE=1             one line per stage on stderr: 'rank R: teardown KEY (name): S s'
    REDUCED_SYNC_TEARDOWN_SKIP=dynamo,gc      run without those stages (any of the keys above, comma-separated);
                                              a key that is no stage stops the launch in one line at init_mesh
"""
import gc
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass
class Mesh:
    rank: int
    world_size: int
    tp: int
    dp: int
    tp_rank: int
    dp_rank: int
    tp_group: object
    dp_group: object
    device: str

    @property
    def is_master(self):
        return self.rank == 0


def device_for_local_rank(local_rank, device=None):
    """`device` is 'cuda', 'cpu', 'mps' or None for the best available one."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        return f"cuda:{local_rank}"
    return device


def build_groups(tp):
    """Create the TP and DP groups of an initialized world. Every rank must call this."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if tp < 1 or world % tp != 0:
        raise ValueError(f"world size {world} is not divisible by tp={tp}; "
                         f"tp must be one of {[d for d in range(1, world + 1) if world % d == 0]}")
    dp = world // tp
    tp_group = dp_group = None
    for d in range(dp):  # new_group must be called by every rank, in the same order
        ranks = list(range(d * tp, (d + 1) * tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            tp_group = g
    for t in range(tp):
        ranks = list(range(t, world, tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            dp_group = g
    return Mesh(rank=rank, world_size=world, tp=tp, dp=dp, tp_rank=rank % tp, dp_rank=rank // tp,
                tp_group=tp_group, dp_group=dp_group, device="")


class RendezvousError(ValueError):
    """This rank could not join the world. Only this rank may know: print it on every rank."""


def env_int(name, default):
    """An integer environment variable (torchrun's RANK, WORLD_SIZE, ...), RendezvousError in one line if not."""
    text = os.environ.get(name, str(default))
    low, high = (1 if name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE") else 0), (65535 if name == "MASTER_PORT" else None)
    try:
        value = int(text)
    except ValueError:  # this rank's own environment (outside torchrun, set by hand): it alone may know
        raise RendezvousError(f"environment variable {name}={text!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise RendezvousError(f"environment variable {name}={text!r}: must be {allowed}")
    return value


JOINED_KEY = "reduced_sync/joined"  # every rank adds 1 once it reached the store
FIRST_WAIT_NOTE, WAIT_NOTE_EVERY = 5.0, 30.0  # seconds: the first 'waiting for' line, then one each


def _in_thread(fn, poll):
    """fn() run in a daemon thread while this (main) thread calls poll() every 0.1 s: a C++ call that blocks
    (a TCPStore client connecting, which retries until its timeout) would keep Python's signal handlers from
    running, since they run only in the main thread between bytecodes. fn's exception is raised here."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the main thread
            box["error"] = e

    t = threading.Thread(target=run, name="rendezvous", daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.1)  # interruptible: SIGINT/SIGTERM handlers run here
        poll()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _listening(addr, port, deadline, poll):
    """Whether something listens at addr:port before deadline (time.monotonic()), probed every 0.1 s from
    Python: the TCPStore client would retry to about 3x its timeout (torch 2.13) before giving up."""
    while True:
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            poll()
            time.sleep(0.1)


def _check_resolves(addr, port):
    """A typo in MASTER_ADDR said as such, at once, not as a connection that timed out after rendezvous_timeout."""
    try:
        socket.getaddrinfo(addr, port)
    except (socket.gaierror, UnicodeError) as e:
        raise RendezvousError(f"MASTER_ADDR={addr!r} does not resolve to an address ({e}): set it to rank 0's host "
                              f"name or IP address") from None


def _rendezvous(backend, timeout_s, on_wait=None, device_id=None):
    """init_process_group (bound to device_id where given: init_mesh); outside torchrun with a time limit on
    finding the other ranks. Under torchrun its agent has already gathered every worker (workers use the agent's
    store), so nothing waits there. Only the store gets the limit: collectives keep torch's default timeout (a long
    checkpoint write of rank 0 must not time out the others' next collective).

    Outside torchrun the wait happens in Python (a C++ wait would hold off SIGINT/SIGTERM until its end):
    rank 0 opens the store at once, the others connect to it in a thread, then every rank adds itself to a
    counter and polls it until all are there. Every FIRST_WAIT_NOTE, then WAIT_NOTE_EVERY seconds a rank
    says what it waits for; on_wait(text) is told each change of it (stop.py names it if a signal comes)."""
    bind = {} if device_id is None else {"device_id": device_id}
    if "TORCHELASTIC_RUN_ID" in os.environ or dist.is_initialized():
        if not dist.is_initialized():
            dist.init_process_group(backend=backend, **bind)
        return
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RendezvousError(f"WORLD_SIZE={world} without {', '.join(missing)}: launch with torchrun, or set RANK, "
                              f"MASTER_ADDR and MASTER_PORT for every rank")
    if not 0 <= rank < world:
        raise RendezvousError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    addr, port = os.environ["MASTER_ADDR"], env_int("MASTER_PORT", 0)
    _check_resolves(addr, port)
    start = time.monotonic()
    deadline, next_note = start + timeout_s, start + FIRST_WAIT_NOTE
    state = {"waiting": f"rank 0 to open the rendezvous at {addr}:{port}" if rank else
             f"{world - 1} of {world} ranks at {addr}:{port}"}
    prefix = f"rank {rank}: " if rank else ""
    stderr = sys.stderr

    def poll(waiting=None):
        nonlocal next_note
        if waiting is not None and waiting != state["waiting"]:
            state["waiting"] = waiting
            if on_wait is not None:
                on_wait(f"waiting for {waiting}")
        now = time.monotonic()
        if next_note <= now < deadline - 1:  # past the deadline, the timeout's own line comes next
            print(f"{prefix}waiting for {state['waiting']} (timeout in {deadline - now:.0f} s)",
                  file=sys.stderr, flush=True)  # the terminal's, while fd 2 is hidden
            next_note = now + WAIT_NOTE_EVERY

    def give_up(reason):
        return RendezvousError(f"no rendezvous of the {world} ranks at {addr}:{port} within {timeout_s:g} s "
                               f"(rendezvous_timeout): {reason}")

    if on_wait is not None:
        on_wait(f"waiting for {state['waiting']}")
    saved = os.dup(2)  # c10d logs each failed try to fd 2 with a C++ backtrace: the error below says it in a line
    try:
        sys.stderr = os.fdopen(os.dup(saved), "w")  # our lines (and a signal's) still reach the terminal
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        try:
            if rank != 0 and not _listening(addr, port, deadline, poll):
                raise give_up("nobody answered at that address")
            store = _in_thread(lambda: dist.TCPStore(addr, port, world, is_master=rank == 0,
                                                     timeout=timedelta(seconds=timeout_s), wait_for_workers=False),
                               poll)
            store.add(JOINED_KEY, 1)
            while (joined := store.add(JOINED_KEY, 0)) < world:
                if time.monotonic() >= deadline:
                    raise give_up(f"{joined} of {world} ranks joined")
                poll(f"{world - joined} of {world} ranks at {addr}:{port}")
                time.sleep(0.1)
        except RendezvousError:
            raise
        except Exception as e:  # DistNetworkError, DistStoreError, RuntimeError: one line, whatever it is
            raise give_up((str(e).strip().splitlines() or [type(e).__name__])[0][:200]) from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        if sys.stderr is not stderr:
            sys.stderr.close()
            sys.stderr = stderr
    if on_wait is not None:
        on_wait(None)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world, **bind)


def init_mesh(tp, device=None, rendezvous_timeout=300.0, on_wait=None):
    """Initialize torch.distributed from torchrun's environment (or a single process without it).

    NCCL on CUDA, gloo otherwise. Returns the Mesh; mesh.device is this rank's device string.
    Outside torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by hand), finding the other ranks
    gives up after rendezvous_timeout seconds with a RendezvousError, saying what it waits for meanwhile
    (on_wait: see _rendezvous).
    """
    teardown_skip()  # a bad REDUCED_SYNC_TEARDOWN_SKIP is said now, in one line, not after the run
    if env_int("WORLD_SIZE", 1) > 1 or dist.is_initialized():
        local_rank = env_int("LOCAL_RANK", 0)
        device = device_for_local_rank(local_rank, device)
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(device)
        # device_id binds the NCCL groups to this rank's GPU. Unbound, a barrier on a group that has run no
        # collective yet (the default group: the model's collectives use the subgroups) picks its GPU by guessing,
        # with torch's warnings "barrier(): using the device under current context" and ProcessGroupNCCL's
        # "Guessing device ID based on global rank. This can cause a hang"; and the teardown's barrier runs in a
        # thread, whose current device is GPU 0 on every rank
        _rendezvous("nccl" if cuda else "gloo", rendezvous_timeout, on_wait,
                    device_id=torch.device(device) if cuda else None)
        mesh = build_groups(tp)
        mesh.device = device
        return mesh
    if tp != 1:
        raise ValueError(f"tp={tp} needs {tp} processes (world size 1 here); "
                         f"launch with torchrun --nproc_per_node={tp} or set tp=1")
    return Mesh(rank=0, world_size=1, tp=1, dp=1, tp_rank=0, dp_rank=0, tp_group=None,
                dp_group=None, device=device_for_local_rank(0, device))


def record_error_for_torchrun(message):
    """Under torchrun, write `message` to this worker's error file (TORCHELASTIC_ERROR_FILE, the file
    torch.distributed.elastic's @record writes). torchrun prints a failed worker's error file as the
    'traceback' of its ChildFailedError summary, the last lines it prints; without the file that
    summary says only 'To enable traceback see ...', below our message. A no-op outside torchrun."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w") as f:
            json.dump({"message": message, "timestamp": int(time.time())}, f)
    except OSError:
        pass  # the message was printed; the summary only loses its copy


TEARDOWN_DEADLINE_S = 30.0  # seconds for the stages after the barrier, all together
TRACE_ENV, SKIP_ENV = "REDUCED_SYNC_TEARDOWN_TRACE", "REDUCED_SYNC_TEARDOWN_SKIP"
# (key, name, where), in order. 'thread' stages may block in NCCL for ever: each runs in a daemon thread, cut at
# the deadline (a call blocked in C++ would also keep the main thread's signal handlers from running). 'main'
# stages must run in the main thread: the CUDA graph trees live in its thread-local state, and torch 2.13's
# reset_cudagraph_trees returns without doing anything in a thread that lacks it, so the teardown thread that
# used to run it freed no graph and ncclCommDestroy then waited for the graphs' references.
TEARDOWN_STAGES = (
    ("barrier", "barrier", "thread"),
    ("graphs", "freeing the CUDA graphs", "main"),
    ("dynamo", "resetting the compiler caches", "main"),
    ("gc", "collecting garbage", "main"),
    ("sync", "synchronizing the device", "thread"),
    ("arrivals", "every rank past its sync, counted in the store", "thread"),
    ("subgroups", "destroying the subgroups", "thread"),
    ("destroy", "destroying the process groups", "thread"),
)


def teardown_skip(text=None):
    """The stage keys that REDUCED_SYNC_TEARDOWN_SKIP (or text) names, comma-separated, for bisecting a hang;
    ValueError in one line naming a value that is no stage and the allowed ones."""
    text = os.environ.get(SKIP_ENV, "") if text is None else text
    allowed = [key for key, _, _ in TEARDOWN_STAGES]
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for key in keys:
        if key not in allowed:
            raise ValueError(f"{SKIP_ENV}={text!r}: {key!r} is not a teardown stage; allowed (comma-separated): "
                             f"{', '.join(allowed)}")
    return frozenset(keys)


def release_cuda_graphs():
    """Free the CUDA graphs that torch.compile(mode='reduce-overhead') captured. A graph that captured an
    NCCL collective holds a reference on its communicator until the graph object is destroyed, and
    ncclCommDestroy waits for that reference (pytorch/pytorch#115388; vllm-project/vllm#39846 explains the
    reference count). Nothing to do where no graph was made. Main thread only (TEARDOWN_STAGES)."""
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is not None:
        trees.reset_cudagraph_trees()


def reset_compiler():
    """Drop dynamo's compiled code and guards, which keep the compiled graphs (and what they captured) alive.
    Not imported, or imported but no frame compiled (its counters say so): nothing to drop. The reset took
    2.7-3.0 s on each rank of a sample.py at tp=4 on 4 H200s (torch 2.11) that had compiled nothing, 0.000 s
    after a compiled training run."""
    if "torch._dynamo" not in sys.modules:
        return
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    if counters is not None and not counters.get("frames", {}).get("total", 0):
        return
    torch.compiler.reset()


def _destroy_subgroups():
    """Every group but the default one, newest first (torch's own order for the default group's teardown)."""
    c10d = dist.distributed_c10d
    default = c10d._get_default_group()
    for group in reversed(list(c10d._world.pg_map)):
        if group is not default:
            dist.destroy_process_group(group)


_leaving = False  # leave_on_exit: the process ends through os._exit right after the teardown
LEFT_TO_EXIT = ("graphs", "dynamo", "gc", "subgroups", "destroy")


def leave_on_exit(on):
    """For a script whose process ends through cli_guard.exit_now (os._exit) right after close_process_groups: the
    teardown then stops after the barrier, the device's sync and the count of every rank's arrival in the store,
    and leaves the graphs, caches and communicators to the process's end. os._exit runs no destructor, so nothing
    waits in ncclCommDestroy and no 'process group not destroyed' warning is printed; the driver releases the
    context and the kernel the sockets. On 4 H200s the stages it skips took 0.85-1.55 s of the 1.4-1.6 s teardown
    (experiments/gpu_stop/README.md). The count makes every rank wait until all have synchronized their device, so
    no rank's exit can cut a collective another rank's GPU is still finishing. A process that goes on after the
    teardown (tests, in-process calls) leaves this off and tears everything down."""
    global _leaving
    _leaving = bool(on)


def _count_arrivals(deadline_s=10.0):
    """Every rank past its device sync: one add to the rendezvous store each, then wait (at most deadline_s) until
    the count holds the world. A store gone (its host rank left first) ends the wait: that rank had counted all."""
    store, world = dist.distributed_c10d._get_default_store(), dist.get_world_size()
    key, until = "reduced_sync/teardown_arrivals", time.monotonic() + deadline_s
    try:
        count = store.add(key, 1)
        while count < world and time.monotonic() < until:
            time.sleep(0.005)
            count = store.add(key, 0)
    except Exception:  # noqa: BLE001 -- the store's host has left: every rank had arrived
        pass


def _stage_calls(barrier):
    from parallel import comm  # here: comm is the model's, and mesh is imported by scripts before it
    device = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()  # read here: a new thread's current device is GPU 0
    calls = {"barrier": comm.barrier if barrier else None,
             "graphs": release_cuda_graphs,
             "dynamo": reset_compiler,
             "gc": gc.collect,
             "sync": None if device is None else (lambda: torch.cuda.synchronize(device)),
             "arrivals": _count_arrivals if _leaving and barrier else None,
             "subgroups": _destroy_subgroups,
             "destroy": dist.destroy_process_group}
    if _leaving and barrier:  # after an error (no barrier) every stage runs: a rank may be stuck mid-collective
        calls.update(dict.fromkeys(LEFT_TO_EXIT))
    return calls


def _run_in_thread(fn, until):
    """fn() in a daemon thread; True once it returned (its exception is raised here), False at `until`
    (time.monotonic(); None: no limit) with fn still running."""
    box = {}

    def run():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the main thread
            box["error"] = e

    thread = threading.Thread(target=run, name="teardown", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)  # interruptible: SIGINT/SIGTERM handlers run here
        if until is not None and time.monotonic() > until:
            return False
    if "error" in box:
        raise box["error"]
    return True


def close_process_groups(barrier=True, deadline_s=TEARDOWN_DEADLINE_S):
    """The end of a distributed run, in TEARDOWN_STAGES' order: a barrier (every rank done with every collective
    before any tears its group down: a gloo rank that exited while a peer still talked to it aborted once), the
    CUDA graphs freed, the compiler's caches dropped, garbage collected (the caller has dropped its compiled
    model, optimizer and batches by then: each may hold what references a communicator), the device
    synchronized, the subgroups destroyed, then the default group. Returns None when that finished, else the
    name of the stage that passed deadline_s (counted from the barrier's end): the caller then ends the process
    without it (end_process), its work being saved. A 124M tp=2 run with compile='auto' on 2 H200s finished,
    saved, and then hung in destroy_process_group. The barrier has no deadline of its own here: the process
    group's timeout ends it. A stage that fails is named in one line and the next runs.

    REDUCED_SYNC_TEARDOWN_TRACE=1: one line per stage on stderr, 'rank R: teardown KEY (name): S s';
    REDUCED_SYNC_TEARDOWN_SKIP=KEY,...: those stages not run (keys: TEARDOWN_STAGES'), to bisect a hang."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        skip = teardown_skip()
    except ValueError as e:  # init_mesh said it at the start; here the run is done: run every stage
        print(f"note: {e}; skipping none", file=sys.stderr, flush=True)
        skip = frozenset()
    trace = os.environ.get(TRACE_ENV, "") not in ("", "0")
    prefix, calls, until = f"rank {dist.get_rank()}: ", _stage_calls(barrier), None

    def say(key, name, what):
        if trace:  # one write, newline included: print's two let another rank's line in between on a shared terminal
            sys.stderr.write(f"{prefix}teardown {key} ({name}): {what}\n")
            sys.stderr.flush()

    for key, name, where in TEARDOWN_STAGES:
        fn = calls[key]
        if fn is None or key in skip:
            say(key, name, "skipped" if key in skip else "left to the process's exit"
                if _leaving and barrier and key in LEFT_TO_EXIT else "nothing to do")
        else:
            start = time.monotonic()
            try:
                if where == "main":
                    fn()
                elif not _run_in_thread(fn, until):
                    say(key, name, f"still running after {time.monotonic() - start:.3f} s: cut")
                    return name
            except Exception as e:  # noqa: BLE001 -- the run is saved: the next stages still free what they can
                print(f"{prefix}note: the teardown stage {key} ({name}) failed: "
                      f"{(str(e).strip().splitlines() or [type(e).__name__])[0][:200]}", file=sys.stderr, flush=True)
            say(key, name, f"{time.monotonic() - start:.3f} s")
        if key == "barrier":
            until = time.monotonic() + deadline_s
    return None


def end_process(code, stuck_stage):
    """code, to exit with; where the teardown passed its deadline (close_process_groups returned the stuck
    stage), say so and end the process at once: the thread stuck in NCCL would keep the interpreter from
    exiting, and everything the run made is written by then."""
    if stuck_stage is None:
        return code
    print(f"note: the process groups' teardown did not finish within {TEARDOWN_DEADLINE_S:.0f} s ({stuck_stage}); "
          f"exiting without it (nothing of the run is lost)", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)
