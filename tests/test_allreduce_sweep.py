"""bench/allreduce_sweep.py: the sizes it parses and sweeps, its bandwidth arithmetic on a hand-computed case, the
in-step difference (with less floor) by hand, and (slow tier) 2-process gloo runs writing their tables."""
import json
import subprocess
import sys

import pytest

from bench.allreduce_sweep import bus_factor, default_sizes, parse_sizes, table
from tests.conftest import REPO


def test_sizes_parse_in_bytes_and_refuse_what_is_not_bf16():
    assert parse_sizes("1k, 1.5m,64,1k") == [64, 1024, 3 * 2**19]
    for bad, named in (("3", "'3'"), ("1.5", "'1.5'"), ("x", "'x'"), ("0", "'0'"), ("inf", "'inf'"), ("nan", "'nan'"),
                       ("1e30", "'1e30'"), ("-4k", "'-4k'")):
        with pytest.raises(ValueError, match=named):
            parse_sizes(bad)


def test_default_sizes_cover_the_protocol_change_densely():
    sizes = default_sizes()
    assert sizes[0] == 1024 and sizes[-1] == 64 * 2**20 and sizes == sorted(set(sizes))
    mib = [s for s in sizes if 2**20 <= s <= 4 * 2**20]  # where the stored rows put the jump (1.57 to 2.1 MB)
    assert all(b - a <= 2**18 for a, b in zip(mib, mib[1:])) and len(mib) == 13


def test_bandwidths_by_hand():
    # 1 MiB in 10 us: algbw 104.8576 GB/s; busbw at 4 ranks x 2*3/4 = 157.2864 GB/s
    [row] = table({2**20: [12.0, 10.0, 9.0]}, 4)
    assert row["us"] == 10.0 and row["us_min"] == 9.0 and row["samples"] == 3
    assert row["algbw_GBps"] == pytest.approx(104.8576) and row["busbw_GBps"] == pytest.approx(157.2864)
    assert bus_factor(2) == 1.0 and bus_factor(8) == 1.75


def test_in_step_time_is_the_graph_with_all_reduces_less_the_one_without():
    # medians: with 30 us, floor 8 us -> 22 us per all-reduce; 2 MiB in 22 us is 95.325 GB/s; each sample less the
    # floor's median (min 25 - 8); every rank's medians kept
    [row] = table({2**21: ([31.0, 30.0, 25.0], [8.0, 9.0, 7.0])}, 2, {2**21: [(30.0, 8.0), (30.5, 6.0)]})
    assert (row["us"], row["us_with"], row["us_floor"], row["us_min"]) == (22.0, 30.0, 8.0, 17.0)
    assert row["algbw_GBps"] == pytest.approx(2**21 / 22e-6 / 1e9) and row["us_floor_ranks"] == [8.0, 6.0]


@pytest.mark.slow
def test_two_ranks_on_gloo_write_the_in_step_table(tmp_path):
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                    "bench.allreduce_sweep", "--device", "cpu", "--sizes", "1536,64k", "--calls", "2", "--repeats",
                    "2", "--rounds", "1", "--between", "32", "--producer", "gemm", "--out_dir", str(tmp_path)],
                   cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    data = json.load(open(tmp_path / "allreduce_instep_gemm_n2.json"))
    assert [r["bytes"] for r in data["rows"]] == [1536, 65536] and data["between"] == 32 and data["producer"] == "gemm"
    assert all(len(r["us_floor_ranks"]) == 2 and r["us"] == r["us_with"] - r["us_floor"] for r in data["rows"])


@pytest.mark.slow
def test_two_ranks_on_gloo_write_the_table(tmp_path):
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                    "bench.allreduce_sweep", "--device", "cpu", "--sizes", "4k,64k", "--calls", "2", "--repeats",
                    "2", "--rounds", "2", "--out_dir", str(tmp_path)], cwd=REPO, check=True, capture_output=True,
                   text=True, timeout=300)
    data = json.load(open(tmp_path / "allreduce_sweep_n2.json"))
    assert [r["bytes"] for r in data["rows"]] == [4096, 65536]
    assert all(r["us"] > 0 and r["samples"] == 4 for r in data["rows"]) and data["ranks"] == 2
    assert "| 65536 | 64 |" in (tmp_path / "allreduce_sweep_n2.md").read_text()
