"""bench/comm_table.py: each policy's fastest row against the baseline's plain TP, TP + SP, fastest overlap and
strongest rows of the same file, on synthetic bench.train_throughput JSONs (savings by hand), its one-line refusals,
and the stored table in docs/benchmarks.md regenerated from the committed files."""
import json
import os
import re

import pytest

from bench import comm_table
from tests.conftest import REPO


def invocation(tmp_path, rows, name="inv.json"):
    meta = dict(size="124m", world_size=4, device="NVIDIA H200", commit="abc1234")
    full = []
    for policy, comm, ms, *floor in rows:
        tag = "" if comm == "off" else " sp" if comm == "sp" else f" sp+{comm}"
        base = dict(group="tp2", n_tracks=4, mode="compiled-graphs", policy=policy, tp_comm=comm, async_grad="off",
                    syncs_per_forward=24 if policy == "baseline" else 3, name=f"ours tp4 n4 {policy}{tag}")
        full.append(dict(base, ms=ms, error=None if ms else "RuntimeError: boom", floor=False))
        if floor:
            full.append(dict(base, name=base["name"] + " [floor]", ms=floor[0], error=None, floor=True))
    path = tmp_path / name
    path.write_text(json.dumps({"meta": meta, "rows": full}))
    return str(path)


def test_savings_against_each_baseline_by_hand(tmp_path):
    path = invocation(tmp_path, [("baseline", "off", 20.0), ("baseline", "sp", 16.0), ("baseline", "chunked", 25.0),
                                 ("baseline", "async_tp", None), ("grouped:4", "off", 12.0, 10.5),
                                 ("grouped:4", "sp", 13.0)])
    rows = {r["policy"]: r for r in comm_table.invocation_rows(path)}
    g = rows["grouped:4"]
    assert g["best"] == "off" and g["comm_ms"] == pytest.approx(1.5)  # 12.0 - its floor 10.5
    assert g["savings"] == pytest.approx({"plain TP": 1 - 12 / 20, "TP + SP": 1 - 12 / 16,
                                          "overlap": 1 - 12 / 25, "strongest": 1 - 12 / 16})
    assert rows["baseline"]["best"] == "sp" and rows["baseline"]["savings"]["plain TP"] == pytest.approx(0.2)
    text = comm_table.render(list(rows.values()))
    assert ("| 124m | 4 | inv.json | compiled-graphs | grouped:4 | 3 | 12.000 / 13.000 / - | plain TP | 40.0% | 25.0% "
            "| 52.0% | 25.0% | 1.500 |") in text
    # the baseline's failed async_tp row is no overlap baseline; its chunked row is
    assert "| baseline | 24 | 20.000 / 16.000 / 25.000 (chunked) | TP + SP | 20.0% | 0.0% | 36.0% | 0.0% |  |" in text


def test_a_row_not_run_or_failed_leaves_its_cells_blank(tmp_path):
    path = invocation(tmp_path, [("baseline", "sp", 16.0), ("baseline", "async_tp", None), ("spd", "off", 14.0)])
    text = comm_table.render(comm_table.invocation_rows(path))
    assert "| baseline | 24 | - / 16.000 / error | TP + SP |  | 0.0% |  | 0.0% |  |" in text
    assert "| spd | 3 | 14.000 / - / - | plain TP |  | 12.5% |  | 12.5% |  |" in text


def test_bad_input_is_one_line(tmp_path, capsys):
    (tmp_path / "junk.json").write_text("[1, 2]")
    out = tmp_path / "t.md"
    out.write_text("kept")
    good = invocation(tmp_path, [("baseline", "off", 20.0)])
    for argv, needle in (([str(tmp_path / "junk.json")], "not a bench.train_throughput JSON"),
                         ([str(tmp_path / "missing.json")], "cannot be read"),
                         ([good, "--out", str(out)], "exists; give a new path, or --force")):
        with pytest.raises(SystemExit) as e:
            comm_table.main(argv)
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert e.value.code == 2 and len(err) == 1 and needle in err[0], (argv, err)
    assert out.read_text() == "kept"
    assert comm_table.main([good, "--out", str(out), "--force"]) == 0 and "| baseline |" in out.read_text()


def test_the_stored_table_is_the_committed_files():
    """docs/benchmarks.md's table is what the command above it prints from bench/results/ (byte for byte)."""
    doc = open(os.path.join(REPO, "docs", "benchmarks.md")).read()
    block = re.search(r"```bash\n(python -m bench\.comm_table .*?)```", doc, re.S)[1]
    files = block.replace("\\\n", " ").split()[3:]
    rows = [r for f in files for r in comm_table.invocation_rows(os.path.join(REPO, f))]
    # every stored sequence-parallelism invocation but tp=4's third (stopped with errors before its graphs rows;
    # invocation 4 ran them all again)
    import glob
    pattern = os.path.join(REPO, "bench/results/tp[24]_comm_h200/invocation*.json")
    stored = {os.path.relpath(f, REPO) for f in glob.glob(pattern)}
    assert set(files) == stored - {"bench/results/tp4_comm_h200/invocation3_compiled_and_graphs.json"}, files
    assert comm_table.render(rows) in doc


def test_every_overlap_value_counts_as_an_overlap_baseline(tmp_path):
    """chunked:K rows are overlaps too: the fastest overlap row of the baseline is the one a policy is set against."""
    path = invocation(tmp_path, [("baseline", "sp", 16.0), ("baseline", "chunked:4", 18.0),
                                 ("baseline", "chunked", 20.0), ("spd", "off", 15.0)])
    rows = {r["policy"]: r for r in comm_table.invocation_rows(path)}
    assert rows["spd"]["savings"]["overlap"] == pytest.approx(1 - 15 / 18)
    assert "| baseline | 24 | - / 16.000 / 18.000 (chunked:4) | TP + SP |" in comm_table.render(list(rows.values()))


def test_plain_tp_with_the_async_grad_all_reduce_is_an_overlap_baseline(tmp_path):
    """--tp_async_grad on rows: plain TP's becomes the 'async_grad' mode (an overlap, a candidate for the strongest
    baseline and for a policy's fastest mode); an SP row with it on is the SP row again (the model turns it off) and
    is left out."""
    def r(policy, comm, ms, on):
        return dict(group="tp2", n_tracks=2, mode="compiled-graphs", policy=policy, tp_comm=comm, floor=False,
                    async_grad="on" if on else "off", ms=ms, error=None, syncs_per_forward=24, name=f"{policy} {comm} {on}")
    path = tmp_path / "async.json"
    path.write_text(json.dumps({"meta": dict(size="124m", world_size=2, device="NVIDIA H200", commit="abc1234"),
                                "rows": [r("baseline", "off", 20.0, False), r("baseline", "off", 18.0, True),
                                         r("baseline", "sp", 21.0, False), r("baseline", "sp", 1.0, True),
                                         r("spd", "off", 16.0, False), r("spd", "off", 15.0, True)]}))
    rows = {row["policy"]: row for row in comm_table.invocation_rows(str(path))}
    assert rows["baseline"]["ms"] == {"off": 20.0, "async_grad": 18.0, "sp": 21.0}
    assert rows["spd"]["best"] == "async_grad" and rows["spd"]["savings"] == pytest.approx(
        {"plain TP": 1 - 15 / 20, "TP + SP": 1 - 15 / 21, "overlap": 1 - 15 / 18, "strongest": 1 - 15 / 18})
    text = comm_table.render(list(rows.values()))
    assert "| baseline | 24 | 20.000 / 21.000 / 18.000 (async_grad) | plain TP + async_grad |" in text
