"""The data-parallel x tensor-parallel process mesh.

    world = dp * tp,   global rank = dp_rank * tp + tp_rank

TP ranks of one replica are adjacent (on one node they share NVLink); the DP group of a rank
holds the ranks with its tp_rank in every replica. All TP ranks of one replica read the same batch.
"""
import json
import os
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
    """An integer environment variable (torchrun's RANK, WORLD_SIZE, ...), ValueError in one line if not."""
    text = os.environ.get(name, str(default))
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not an integer") from None


def _rendezvous(backend, timeout_s):
    """init_process_group; outside torchrun with a time limit on finding the other ranks. Under torchrun
    its agent has already gathered every worker (workers use the agent's store), so nothing waits there.
    Only the store gets the limit: collectives keep torch's default timeout (a long checkpoint write of
    rank 0 must not time out the others' next collective)."""
    if "TORCHELASTIC_RUN_ID" in os.environ or dist.is_initialized():
        if not dist.is_initialized():
            dist.init_process_group(backend=backend)
        return
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RendezvousError(f"WORLD_SIZE={world} without {', '.join(missing)}: launch with torchrun, or set RANK, "
                              f"MASTER_ADDR and MASTER_PORT for every rank")
    if not 0 <= rank < world:
        raise RendezvousError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    addr, port = os.environ["MASTER_ADDR"], env_int("MASTER_PORT", 0)
    saved = os.dup(2)  # c10d logs each failed try to fd 2 with a C++ backtrace: the error below says it in a line
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        store = dist.TCPStore(addr, port, world, is_master=rank == 0, timeout=timedelta(seconds=timeout_s),
                              wait_for_workers=True)
    except Exception as e:  # DistNetworkError, DistStoreError, RuntimeError: one line, whatever it is
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise RendezvousError(f"no rendezvous of the {world} ranks at {addr}:{port} within {timeout_s:g} s "
                              f"(rendezvous_timeout): {reason}") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world)


def init_mesh(tp, device=None, rendezvous_timeout=300.0):
    """Initialize torch.distributed from torchrun's environment (or a single process without it).

    NCCL on CUDA, gloo otherwise. Returns the Mesh; mesh.device is this rank's device string.
    Outside torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by hand), finding the other ranks
    gives up after rendezvous_timeout seconds with a RendezvousError.
    """
    if env_int("WORLD_SIZE", 1) > 1 or dist.is_initialized():
        local_rank = env_int("LOCAL_RANK", 0)
        device = device_for_local_rank(local_rank, device)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        _rendezvous("nccl" if device.startswith("cuda") else "gloo", rendezvous_timeout)
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
