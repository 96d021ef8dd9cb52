"""parallel/launch.py: a gloo job that hangs outside a collective (where gloo's own timeout does not reach) is
killed at its deadline and raises, instead of holding the test run until CI's limit."""
import time

import pytest

from parallel.launch import run_on_gloo


def _rank_1_hangs(rank, world_size):
    if rank == 1:
        time.sleep(3600)
    return rank


def test_a_job_past_its_deadline_is_killed_and_named():
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"_rank_1_hangs on 2 gloo ranks ran past its deadline of 20 s; "
                                           r"killed, ranks \[.*1\] were still running"):
        run_on_gloo(_rank_1_hangs, 2, deadline_s=20)
    assert time.monotonic() - t0 < 60  # killed at the deadline, not after the hour's sleep
