"""bench/throughput/profile.py's device timeline of a bench/train_throughput.py --profile run (device_timeline), on made
kernel events."""
import pytest

from bench.throughput.profile import device_timeline, union_ms


def test_device_timeline_by_hand():
    """Two iterations of made kernels (us): compute 0-100 and 150-250, an all-reduce 80-130 (20 us of it beside
    compute), a CPU op ignored. Span 250, busy 230, idle 20, all-reduce 50, compute 200, both at once 20; per
    iteration half of each, in ms."""
    events = [dict(cat="kernel", name="sm90_gemm", ts=0, dur=100), dict(cat="kernel", name="triton_add", ts=150, dur=100),
              dict(cat="kernel", name="ncclDevKernel_AllReduce_Sum_bf16", ts=80, dur=50),
              dict(cat="cpu_op", name="aten::mm", ts=0, dur=400)]
    t = device_timeline(events, 2)
    assert t == {k: pytest.approx(v / 2e3) for k, v in dict(span=250, busy=230, idle=20, allreduce=50, compute=200,
                                                             both=20).items()}
    assert device_timeline([dict(cat="cpu_op", name="x", ts=0, dur=5)], 3) is None
    assert union_ms([(0, 10), (5, 20), (30, 40)]) == pytest.approx(0.03)
