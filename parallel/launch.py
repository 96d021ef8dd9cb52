"""Run a function on N CPU processes joined by a gloo process group (for tests and CPU checks).

    results = run_on_gloo(fn, world_size, *args)   # fn(rank, world_size, *args) -> picklable

Each rank's return value comes back in rank order; an exception in any rank is re-raised here. A job that runs
past deadline_s (a hang outside a collective, which gloo's own timeout does not see) is killed and raises
TimeoutError.

The ranks are forked by a forkserver that imported torch once (per calling process, at its first job) rather than
spawned: a spawned rank spends seconds of CPU importing torch before it runs anything, and the tests start a dozen
such jobs. Each rank gets the caller's environment and working folder at the call, as a spawned one would; the
function and its module are imported in the rank, as under spawn.
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


def _worker(rank, world_size, environ, cwd, port, result_dir, fn, args):
    os.environ.clear()  # the caller's environment and folder at the call (the forkserver has them as at its start)
    os.environ.update(environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.chdir(cwd)
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
        mp.set_forkserver_preload(["torch", "torch.distributed"])  # read when the server starts: the first job
        job = mp.start_processes(_worker, args=(world_size, dict(os.environ), os.getcwd(), free_port(), result_dir, fn,
                                                args), nprocs=world_size, start_method="forkserver", join=False)
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
