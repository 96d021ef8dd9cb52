"""parallel/mesh.py at the ends of a distributed run: close_process_groups destroys the groups, and a teardown
that hangs (an NCCL communicator that a live CUDA graph still references waits for ever) is cut at its
deadline with the stage named, instead of hanging the process (on CPU: a destroy_process_group that blocks);
a rendezvous whose MASTER_ADDR does not resolve says so at once."""
import threading
import time

import pytest
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


def test_a_master_addr_that_does_not_resolve_is_named_at_once(monkeypatch):
    """It ended, after the whole rendezvous_timeout, in "client socket has timed out"; now one line at once."""
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    started = time.monotonic()
    with pytest.raises(mesh.RendezvousError) as e:
        mesh._rendezvous("gloo", timeout_s=60)
    assert time.monotonic() - started < 10
    assert str(e.value).startswith("MASTER_ADDR='no-such-host.invalid' does not resolve to an address (")
    assert str(e.value).endswith("set it to rank 0's host name or IP address")
