"""parallel.mesh.close_process_groups: the end of a distributed run destroys its groups, and a teardown that
hangs (an NCCL communicator that a live CUDA graph still references waits for ever) is cut at its deadline
with the stage named, instead of hanging the process (on CPU: a destroy_process_group that blocks)."""
import threading
import time

import torch.distributed as dist

from parallel import mesh


def start_one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)


def test_teardown_destroys_the_groups(tmp_path):
    start_one_rank_group(tmp_path)
    assert mesh.close_process_groups() is None
    assert not dist.is_initialized()
    assert mesh.close_process_groups() is None  # nothing left: nothing to do


def test_a_teardown_that_hangs_is_cut_at_its_deadline_and_named(tmp_path, monkeypatch):
    start_one_rank_group(tmp_path)
    destroy, released = dist.destroy_process_group, threading.Event()
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: released.wait(60))
    started = time.monotonic()
    stage = mesh.close_process_groups(deadline_s=0.5)
    took = time.monotonic() - started
    released.set()
    monkeypatch.undo()
    destroy()
    assert stage == "destroying the process groups"
    assert 0.5 <= took < 10
