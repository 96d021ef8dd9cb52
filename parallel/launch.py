"""Run a function on N CPU processes joined by a gloo process group (for tests and CPU checks).

    results = run_on_gloo(fn, world_size, *args)   # fn(rank, world_size, *args) -> picklable

Each rank's return value comes back in rank order; an exception in any rank is re-raised here. A job that runs
past deadline_s (a hang outside a collective, which gloo's own timeout does not see) is killed and raises
TimeoutError.
"""
import os
import socket
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, result_dir, fn, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # N processes share few cores; oversubscription makes gloo crawl
    # a failing rank must not leave the others blocked forever in a collective
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=120))
    try:
        result = ("ok", fn(rank, world_size, *args))
    except Exception:
        result = ("error", traceback.format_exc())
    torch.save(result, os.path.join(result_dir, f"{rank}.pt"))
    dist.destroy_process_group()


def run_on_gloo(fn, world_size, *args, deadline_s=1800):
    with tempfile.TemporaryDirectory() as result_dir:
        job = mp.start_processes(_worker, args=(world_size, free_port(), result_dir, fn, args),
                                 nprocs=world_size, start_method="spawn", join=False)
        deadline = time.monotonic() + deadline_s
        while not job.join(timeout=1):
            if time.monotonic() > deadline:
                running = [rank for rank, p in enumerate(job.processes) if p.is_alive()]
                for p in job.processes:
                    p.kill()
                    p.join()
                raise TimeoutError(f"{getattr(fn, '__name__', fn)} on {world_size} gloo ranks ran past its deadline "
                                   f"of {deadline_s} s; killed, ranks {running} were still running")
        results = [torch.load(os.path.join(result_dir, f"{r}.pt"), weights_only=True) for r in range(world_size)]
    errors = [f"rank {r}:\n{value}" for r, (status, value) in enumerate(results) if status == "error"]
    if errors:
        raise RuntimeError("\n".join(errors))
    return [value for _, value in results]
