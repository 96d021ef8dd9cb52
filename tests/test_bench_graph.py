"""bench.common.as_graph keeps alive what a captured CUDA graph reads and writes (issue 49's decode crash).

A graph replays raw addresses. bench/tp_latency.py --modes graph captured a decode step whose KV cache
only the step's closure held; as_graph returned graph.replay alone, the closure was dropped, and the
caching allocator handed the cache's memory to other tensors, which every replay then overwrote
(illegal memory accesses at tp=1, SIGSEGV at tp=2). The property is about Python lifetimes, so it is
checked on CPU with stand-ins for torch.cuda's stream, graph and capture context."""
import gc
import weakref
from contextlib import contextmanager

import torch

from bench import common


class FakeStream:
    def wait_stream(self, other):
        pass


class FakeGraph:
    replays = 0

    def replay(self):
        FakeGraph.replays += 1


@contextmanager
def fake_context(*args, **kwargs):
    yield


def test_as_graph_keeps_what_the_graph_reads_alive(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", fake_context)
    monkeypatch.setattr(torch.cuda, "graph", fake_context)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)

    def decode_step():
        cache = torch.zeros(4)  # held by the step's closure only, as make_workload's KV cache

        def step():
            cache.add_(1)
        return step, weakref.ref(cache)

    step, cache = decode_step()
    replay = common.as_graph(step)
    assert cache().tolist() == [4.0] * 4  # 3 warm-up calls and the capture ran the step
    del step
    gc.collect()
    assert cache() is not None, "the cache the graph writes was freed while its replay lives"
    before = FakeGraph.replays
    replay()
    assert FakeGraph.replays == before + 1
    del replay
    gc.collect()
    assert cache() is None  # and nothing outlives the replay
