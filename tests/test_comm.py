"""parallel/comm.py on 2 gloo processes: barrier(None) waits for the whole world, and
skipped_collectives() counts every collective without running it."""
import time

import torch

from parallel import comm
from parallel.launch import run_on_gloo


def _worker(rank, world_size):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    if rank == 1:
        time.sleep(1.0)
    t0 = time.perf_counter()
    comm.barrier()  # the default group: the whole world
    waited = time.perf_counter() - t0
    comm.stats.reset()
    x = torch.full((3,), float(rank + 1))
    with comm.skipped_collectives():
        comm.all_reduce(x, group, "test")
        comm.broadcast(x, 1, group, "test")
        gathered = comm.all_gather(x, group, "test")
        reduced = comm.reduce_from_tp_region(x.clone(), group)
    counts = comm.stats.snapshot()
    comm.all_reduce(x, group, "test")  # outside: communicates again
    return dict(waited=waited, local=gathered[1].tolist(), reduced=reduced.tolist(), counts=counts, summed=x.tolist())


def test_barrier_waits_and_skipped_collectives_skip_every_kind():
    r0, r1 = run_on_gloo(_worker, 2)
    assert r0["waited"] > 0.5  # rank 0 waited for rank 1's late arrival
    for rank, r in enumerate((r0, r1)):
        own = [float(rank + 1)] * 3
        assert r["local"] == own and r["reduced"] == own  # nothing crossed ranks
        assert r["counts"] == {"test": 3, "tp_fwd": 1}
        assert r["summed"] == [3.0] * 3


def test_functional_collectives_take_the_name_this_torch_has():
    """The functional all_gather / reduce_scatter: `<name>_single` where torch has it, else the older `<name>_tensor`
    (a torch without the new name must not fail inside the traced model)."""
    import types

    def new(*args):
        return "new"

    def old(*args):
        return "old"
    both = types.SimpleNamespace(all_gather_single=new, all_gather_tensor=old,
                                 reduce_scatter_single=new, reduce_scatter_tensor=old)
    older = types.SimpleNamespace(all_gather_tensor=old, reduce_scatter_tensor=old)
    for name in ("all_gather", "reduce_scatter"):
        assert comm.functional_collective(name, both) is new
        assert comm.functional_collective(name, older) is old
    import torch.distributed._functional_collectives as funcol
    assert comm._functional_all_gather in (getattr(funcol, "all_gather_single", None), funcol.all_gather_tensor)
