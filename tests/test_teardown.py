"""parallel/mesh.py at the ends of a distributed run: close_process_groups destroys the groups, and a teardown
that hangs (an NCCL communicator that a live CUDA graph still references waits for ever) is cut at its
deadline with the stage named, instead of hanging the process (on CPU: a destroy_process_group that blocks);
its stages run in order, traced and skipped as the environment asks; NCCL groups are bound to the local GPU;
a rendezvous whose MASTER_ADDR does not resolve says so at once."""
import re
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

from parallel import comm, mesh


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


def stage_lines(err):
    return [line for line in err.splitlines() if line.startswith("rank 0: teardown ")]


def test_the_stages_run_in_order_each_traced_with_its_seconds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(mesh.TRACE_ENV, "1")
    monkeypatch.delenv(mesh.SKIP_ENV, raising=False)
    start_one_rank_group(tmp_path)
    sub = dist.new_group([0])
    destroyed, destroy = [], dist.destroy_process_group
    monkeypatch.setattr(dist, "destroy_process_group", lambda group=None: (destroyed.append(group), destroy(group)))
    assert mesh.close_process_groups() is None
    assert not dist.is_initialized()
    assert destroyed == [sub, None]  # the subgroup first, then the default group
    lines = stage_lines(capsys.readouterr().err)
    assert [line.split()[3] for line in lines] == [key for key, _, _ in mesh.TEARDOWN_STAGES]
    for line, (key, name, _) in zip(lines, mesh.TEARDOWN_STAGES):
        assert line.startswith(f"rank 0: teardown {key} ({name}): ")
        if key not in ("sync", "arrivals"):  # no CUDA here: nothing to synchronize; arrivals: only when leaving
            assert re.fullmatch(r"[0-9]+\.[0-9]{3} s", line.split("): ", 1)[1]), line
    assert lines[4].endswith("synchronizing the device): nothing to do")
    assert lines[5].endswith("counted in the store): nothing to do")


def test_a_process_that_leaves_through_os_exit_keeps_its_groups_for_the_exit(tmp_path, monkeypatch, capsys):
    """leave_on_exit: barrier, sync and the arrivals' count run; the graphs, caches and communicators are left to
    the process's end (os._exit runs no destructor: nothing waits in ncclCommDestroy)."""
    monkeypatch.setenv(mesh.TRACE_ENV, "1")
    monkeypatch.delenv(mesh.SKIP_ENV, raising=False)
    start_one_rank_group(tmp_path)
    mesh.leave_on_exit(True)
    try:
        assert mesh.close_process_groups() is None
        assert dist.is_initialized()  # left for the exit
        after_error = mesh._stage_calls(barrier=False)  # a run that failed tears everything down, leaving or not
        assert all(after_error[key] is not None for key in mesh.LEFT_TO_EXIT)
    finally:
        mesh.leave_on_exit(False)
        dist.destroy_process_group()
    lines = {line.split()[3]: line.split("): ", 1)[1] for line in stage_lines(capsys.readouterr().err)}
    assert list(lines) == [key for key, _, _ in mesh.TEARDOWN_STAGES]
    for key in ("barrier", "arrivals"):
        assert re.fullmatch(r"[0-9]+\.[0-9]{3} s", lines[key]), lines[key]
    assert all(lines[key] == "left to the process's exit" for key in mesh.LEFT_TO_EXIT)


def test_the_arrivals_wait_for_every_rank_then_give_up_at_their_deadline(tmp_path):
    start_one_rank_group(tmp_path)
    try:
        started = time.monotonic()
        mesh._count_arrivals(deadline_s=5)  # one rank of one: counted at once
        assert time.monotonic() - started < 1
        store = dist.distributed_c10d._get_default_store()
        assert store.add("reduced_sync/teardown_arrivals", 0) == 1
        real = dist.get_world_size
        dist.get_world_size = lambda *a: 3  # counted 2 of 3: a peer that never arrives, the wait ends at its deadline
        try:
            started = time.monotonic()
            mesh._count_arrivals(deadline_s=0.3)
            assert 0.3 <= time.monotonic() - started < 5
        finally:
            dist.get_world_size = real
    finally:
        dist.destroy_process_group()


def test_without_the_trace_variable_the_teardown_says_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(mesh.TRACE_ENV, raising=False)
    start_one_rank_group(tmp_path)
    assert mesh.close_process_groups() is None
    assert capsys.readouterr().err == ""


def test_the_graphs_are_freed_in_the_main_thread(tmp_path, monkeypatch):
    """torch 2.13's reset_cudagraph_trees does nothing in a thread without the main thread's graph trees: the
    teardown thread that used to call it freed no graph."""
    threads = []
    monkeypatch.setattr(mesh, "release_cuda_graphs", lambda: threads.append(threading.current_thread()))
    start_one_rank_group(tmp_path)
    assert mesh.close_process_groups() is None
    assert threads == [threading.main_thread()]


def test_skipped_stages_are_not_run_and_traced_as_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(mesh.TRACE_ENV, "1")
    monkeypatch.setenv(mesh.SKIP_ENV, "dynamo, gc")
    ran = []
    monkeypatch.setattr(mesh, "reset_compiler", lambda: ran.append("dynamo"))
    start_one_rank_group(tmp_path)
    assert mesh.close_process_groups() is None
    assert ran == [] and not dist.is_initialized()
    lines = stage_lines(capsys.readouterr().err)
    assert lines[2] == "rank 0: teardown dynamo (resetting the compiler caches): skipped"
    assert lines[3] == "rank 0: teardown gc (collecting garbage): skipped"


def test_a_stage_that_fails_is_named_and_the_next_ones_run(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(mesh.TRACE_ENV, raising=False)

    def broken():
        raise RuntimeError("no compiler here\nsecond line")
    monkeypatch.setattr(mesh, "reset_compiler", broken)
    start_one_rank_group(tmp_path)
    assert mesh.close_process_groups() is None
    assert not dist.is_initialized()
    assert capsys.readouterr().err == ("rank 0: note: the teardown stage dynamo (resetting the compiler caches) "
                                       "failed: no compiler here\n")


def test_the_skip_list_is_parsed_and_a_bad_value_named_with_the_allowed_ones():
    assert mesh.teardown_skip("") == frozenset()
    assert mesh.teardown_skip(" graphs,destroy ,") == {"graphs", "destroy"}
    with pytest.raises(ValueError) as e:
        mesh.teardown_skip("dynamo,gcc")
    assert str(e.value) == ("REDUCED_SYNC_TEARDOWN_SKIP='dynamo,gcc': 'gcc' is not a teardown stage; allowed "
                            "(comma-separated): barrier, graphs, dynamo, gc, sync, arrivals, subgroups, destroy")


def test_a_bad_skip_list_stops_the_launch_before_the_rendezvous(monkeypatch):
    monkeypatch.setenv(mesh.SKIP_ENV, "everything")
    monkeypatch.setattr(mesh, "_rendezvous", lambda *a, **k: pytest.fail("rendezvous despite a bad skip list"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="^REDUCED_SYNC_TEARDOWN_SKIP='everything': 'everything' is not"):
        mesh.init_mesh(2, "cpu")


@pytest.mark.parametrize("device, backend, bound", [("cuda", "nccl", torch.device("cuda", 1)), ("cpu", "gloo", None)])
def test_nccl_groups_are_bound_to_the_local_gpu_and_gloo_ones_are_not(monkeypatch, device, backend, bound):
    """Unbound, torch guesses a barrier's GPU ("Guessing device ID based on global rank. This can cause a hang")."""
    calls = []
    for key, value in {"WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **k: calls.append(k))
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(mesh, "build_groups", lambda tp: mesh.Mesh(0, 2, 2, 1, 0, 0, None, None, ""))
    got = mesh.init_mesh(2, device)
    assert got.device == ("cuda:1" if device == "cuda" else "cpu")
    assert calls == [{"backend": backend, **({"device_id": bound} if bound is not None else {})}]


@pytest.mark.parametrize("bound, backend, expected", [(None, "nccl", {"device_ids": [3]}), (None, "gloo", {}),
                                                      (torch.device("cuda", 3), "nccl", {})])
def test_a_barrier_on_an_unbound_nccl_group_names_its_gpu(monkeypatch, bound, backend, expected):
    group, calls = type("Group", (), {"bound_device_id": bound})(), []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda g: 2)
    monkeypatch.setattr(dist, "get_backend", lambda g: backend)
    monkeypatch.setattr(dist, "barrier", lambda **k: calls.append(k))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    comm.barrier(group)
    assert calls == [{"group": group, **expected}]


@pytest.mark.parametrize("frames, resets", [({}, 0), ({"frames": {"total": 0}}, 0), ({"frames": {"total": 2}}, 1)])
def test_the_compiler_is_reset_only_where_dynamo_compiled_a_frame(monkeypatch, frames, resets):
    """A sample.py at tp=4 on 4 H200s that compiled nothing spent 2.7-3.0 s per rank in torch.compiler.reset()
    (torch 2.11): dynamo was imported, its caches empty."""
    import torch._dynamo.utils
    calls = []
    monkeypatch.setattr(torch._dynamo.utils, "counters", frames)
    monkeypatch.setattr(torch.compiler, "reset", lambda: calls.append(1))
    mesh.reset_compiler()
    assert len(calls) == resets


def test_without_dynamo_imported_the_compiler_is_not_reset(monkeypatch):
    calls = []
    monkeypatch.delitem(sys.modules, "torch._dynamo", raising=False)
    monkeypatch.setattr(torch.compiler, "reset", lambda: calls.append(1))
    mesh.reset_compiler()
    assert calls == []
