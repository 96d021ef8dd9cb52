"""bench.tp_latency's floor-and-saving table (--floors, --before/--after) on hand-made rows."""
from bench.tp_latency import savings


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
