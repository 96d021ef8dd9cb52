"""bench.tp_latency's floor-and-saving table (--floors, --before/--after) and its --tp_comm ratios on hand-made rows."""
from bench.tp_latency import markdown, savings


def run(rows):
    keys = ("size", "workload", "mode", "n_tracks", "policy", "floor", "ms")
    return {"meta": {"tp": 2}, "rows": [dict(zip(keys, ("124m", "decode_b1", "graph", 2, *r))) for r in rows]}


def test_floor_ratio_and_saving_by_hand():
    rows = [("baseline", False, 1.0), ("baseline", True, 0.8), ("spd", False, 0.9), ("spd", True, 0.82)]
    one = savings(("", [run(rows)])).splitlines()
    assert one[0].startswith("| size |") and "| ms |" in one[0]
    # spd: floor 0.82 / 0.8 = 1.025; saving 1 - 0.9 / 1.0 = 10.0%
    assert one[-1] == "| 124m | decode_b1 | graph | 2 | 2 | spd | 0.900 | 1.025 | 10.0% |"
    later = [("baseline", False, 1.0), ("baseline", True, 0.8), ("spd", False, 0.8), ("spd", True, 0.8)]
    two = savings(("before", [run(rows)]), ("after", [run(later)])).splitlines()
    assert "before ms" in two[0] and "after ms" in two[0]
    assert two[-1] == "| 124m | decode_b1 | graph | 2 | 2 | spd | 0.900 | 1.025 | 10.0% | 0.800 | 1.000 | 20.0% |"
    # a policy missing on one side shows dashes there
    gone = savings(("before", [run(rows)]), ("after", [run(later[:2])])).splitlines()
    assert gone[-1].endswith("| - | - | - |")


def comm_run(rows):
    """tp=2 rows of (workload, tp_comm, policy, floor, ms); as run() records them (no tp_comm: older, plain TP)."""
    keys = ("workload", "tp_comm", "policy", "floor", "ms")
    return {"meta": {"tp": 2}, "rows": [dict(zip(keys, r), size="124m", mode="graph", n_tracks=2, syncs=24, fwd=24,
                                             bwd=0) for r in rows]}


def test_tp_comm_rows_get_their_own_tables_and_ratios_to_both_baselines():
    rows = [("prefill_b8", "off", "baseline", False, 2.0), ("prefill_b8", "off", "spd", False, 1.6),
            ("prefill_b8", "sp", "baseline", False, 3.0), ("prefill_b8", "sp", "baseline", True, 1.5),
            ("prefill_b8", "sp", "spd", False, 1.5), ("decode_b1", "off", "baseline", False, 1.0),
            ("decode_b1", "sp", "baseline", False, "n/a: one token")]
    text = markdown([comm_run(rows)], with_runs=False)
    assert "### 124m prefill_b8 graph sp\n" in text and "### 124m decode_b1 graph sp\n" in text
    assert "| 2 | baseline | 24 | 24/0 | 3.000 | 2.00 | 1.00 |" in text  # sp's own table: ÷ its floor, its baseline
    assert "| 2 | baseline | 24 | 24/0 | n/a: one token | - | - |" in text
    lines = text.split("## TP communication (--tp_comm)")[1].splitlines()
    assert "| off ms | ÷ baseline off | sp ms | ÷ baseline sp | ÷ baseline off |" in lines[4]
    # baseline sp ÷ baseline off = 1.50; spd sp ÷ baseline sp = 0.50, ÷ baseline off = 0.75
    assert "| 124m | prefill_b8 | graph | 2 | 2 | baseline | 2.000 | 1.00 | 3.000 | 1.00 | 1.50 |" in lines
    assert "| 124m | prefill_b8 | graph | 2 | 2 | spd | 1.600 | 0.80 | 1.500 | 0.50 | 0.75 |" in lines
    assert "| 124m | decode_b1 | graph | 2 | 2 | baseline | 1.000 | 1.00 | n/a | - | - |" in lines
    # plain TP alone (every run before --tp_comm): no such section, tables named as before
    plain = markdown([comm_run([r for r in rows if r[1] == "off"])], with_runs=False)
    assert "TP communication" not in plain and "### 124m prefill_b8 graph\n" in plain
