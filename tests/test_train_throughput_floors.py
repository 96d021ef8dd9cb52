"""bench/train_throughput.py --floors without processes: the plan puts a no-sync twin after every tp row only, a
variant that raises leaves the collectives on, and the report compares a floor with its own row and nothing else.
(The 2-process run: tests/test_train_throughput_smoke.py, slow tier.)"""
import pytest

from bench import train_throughput
from bench.throughput.report import key_ratios, markdown
from parallel import comm

TOKENS = 768


def row(name, group="tp2", tp=2, policy="baseline", ms=10.0, floor=False, tp_comm="off", async_grad="off"):
    return dict(name=name, group=group, impl="ours", tp=tp, dp=1, gpus=tp, n_tracks=2, policy=policy, mode="eager",
                tp_comm=tp_comm, async_grad=async_grad, floor=floor, syncs_per_forward=8, ms=ms,
                tok_s=TOKENS / (ms / 1e3), mfu=None, error=None, error_detail=None)


def test_a_floor_is_compared_with_its_own_row_only():
    """Each floor comes right after its row with the same fields (the plan's order) and is faster: were floors not
    filtered out, the later one of a (group, n_tracks, policy, mode) would stand in for the row in every ratio."""
    rows = [row("ours tp1 n2 baseline eager", group="tp1", tp=1, ms=12.0)]
    for name, extra in (("baseline eager", {}), ("grouped:2 eager", dict(policy="grouped:2")),
                        ("baseline eager sp", dict(tp_comm="sp")), ("baseline eager async", dict(async_grad="on"))):
        rows += [row(f"ours tp2 n2 {name}", ms=8.0, **extra),
                 row(f"ours tp2 n2 {name} [floor]", ms=4.0, floor=True, **extra)]
    ratios = key_ratios(rows)
    floor_names = {r["name"] for r in rows if r["floor"]}
    floor_ratios = [q for q in ratios if "no-sync floor" in q["section"]]
    others = [q for q in ratios if q not in floor_ratios]
    assert {q["section"].split(" (")[0] for q in others} == {
        "tp2 baseline / tp1 baseline", "tp2 policy / tp2 baseline", "tp2 async grad / tp2",
        "tp2 sequence parallel, alone or + overlap / tp2"}
    assert all(q["a"] not in floor_names and q["b"] not in floor_names for q in others)
    assert all(q["value"] == pytest.approx(1.0) for q in others if q["b"] != "ours tp1 n2 baseline eager")
    # one per tp row, in row order: a the row, b its floor, row ms / floor ms
    assert [(q["a"], q["b"]) for q in floor_ratios] == [(n.removesuffix(" [floor]"), n) for n in
                                                        [r["name"] for r in rows if r["floor"]]]
    assert all(q["value"] == pytest.approx(2.0) and "communication 4.000 ms" in q["label"] for q in floor_ratios)
    meta = dict(device="CPU", n_gpus=0, world_size=2, torch="t", commit="c", command="cmd", size="tiny", n_layer=4,
                n_head=4, n_embd=64, vocab_size=512, batch_size=12, seq_len=64, micro_steps=1, dtype="float32",
                warmup=1, iters=2)
    md = markdown(meta, rows, ratios)
    assert "| ours tp2 n2 grouped:2 eager [floor] | 2 |" in md and "ms ratios, row / floor" in md
    assert "peak-memory" not in md and "reordering off for every row" in markdown(
        dict(meta, peak_memory_reorder="off"), rows, ratios)
    # a floor without its row, or a row without a floor, gives no floor ratio
    assert not [q for q in key_ratios(rows[:1] + rows[2:4]) if "no-sync floor" in q["section"]]


def test_floors_twin_every_tp_row_and_no_other():
    args = train_throughput.parse_args(["--size", "tiny", "--device", "cpu", "--modes", "eager", "--policies",
                                        "baseline,grouped:2", "--tp2_n_tracks", "2", "--floors"])
    plan = train_throughput.variant_plan(args, 2)
    tp = [v for v in plan if v["group"] == "tp2"]
    assert [(v["name"], v["floor"]) for v in tp] == [
        ("ours tp2 n2 baseline eager", False), ("ours tp2 n2 baseline eager [floor]", True),
        ("ours tp2 n2 grouped:2 eager", False), ("ours tp2 n2 grouped:2 eager [floor]", True)]
    assert tp[1] == dict(tp[0], name=tp[1]["name"], floor=True)  # the same variant but for its name
    assert {v["group"] for v in plan if not v["floor"]} == {"plain", "tp1", "tp2", "dp2"}
    assert len(plan) == 5 + len(tp)  # plain, 2 tp1 and 2 dp2 rows: none with a floor
    args.floors = False
    assert not any(v["floor"] for v in train_throughput.variant_plan(args, 2))


def test_a_floor_that_raises_leaves_the_collectives_on(monkeypatch):
    seen = []

    def failing(v, args, env):
        seen.append(comm._skip_collectives)
        raise RuntimeError("compile failed")

    monkeypatch.setattr(train_throughput, "time_variant", failing)
    for floor in (True, False):
        with pytest.raises(RuntimeError, match="compile failed"):
            train_throughput.run_variant(dict(floor=floor), None, None)
        assert comm._skip_collectives is False
    assert seen == [True, False]


def test_each_policys_fastest_row_against_the_baselines_fastest():
    """The strongest-baseline section: per (n_tracks, policy, mode) the fastest row over its --tp_comm values, set
    against the baseline's fastest (here its sp row, 8 ms, against grouped:2's plain row, 6 ms: 8 / 6 in tokens/s);
    floors and failed rows never count as fastest; no section when every row is plain TP."""
    rows = [row("b", ms=10.0), row("b sp", ms=8.0, tp_comm="sp"), row("b sp [floor]", ms=1.0, tp_comm="sp", floor=True),
            row("g", policy="grouped:2", ms=6.0), row("g sp", policy="grouped:2", ms=7.0, tp_comm="sp"),
            dict(row("g chunked", policy="grouped:2", ms=1.0, tp_comm="chunked"), ms=None, error="RuntimeError: x")]
    (q,) = [q for q in key_ratios(rows) if "fastest row" in q["section"]]
    assert (q["a"], q["b"], q["label"]) == ("g", "b sp", "grouped:2 (off) vs baseline (sp) n_tracks 2 eager")
    assert q["value"] == pytest.approx(8.0 / 6.0)
    assert not [q for q in key_ratios([rows[0], rows[3]]) if "fastest row" in q["section"]]


def test_the_baseline_can_take_its_own_tp_comm_values():
    """--baseline_tp_comm sp beside --tp_comm off: the baseline's one row is sequence parallel, the policies' plain;
    a bad value names the flag."""
    args = train_throughput.parse_args(["--size", "tiny", "--device", "cpu", "--modes", "eager", "--variants", "tp2",
                                        "--policies", "baseline,grouped:2", "--tp2_n_tracks", "2",
                                        "--tp_comm", "off", "--baseline_tp_comm", "sp"])
    plan = train_throughput.variant_plan(args, 2)
    assert [(v["name"], v["tp_comm"]) for v in plan] == [("ours tp2 n2 baseline eager sp", "sp"),
                                                         ("ours tp2 n2 grouped:2 eager", "off")]
    args = train_throughput.parse_args(["--size", "tiny", "--device", "cpu", "--modes", "eager", "--variants", "tp2",
                                        "--policies", "baseline", "--tp2_n_tracks", "2", "--baseline_tp_comm",
                                        "sp,chunked:1"])  # Megatron's SP overlap beside SP (gpu_suite.sh comm4)
    assert [v["name"] for v in train_throughput.variant_plan(args, 2)] == [
        "ours tp2 n2 baseline eager sp", "ours tp2 n2 baseline eager sp+chunked:1"]
    with pytest.raises(train_throughput.ArgError, match=r"^--baseline_tp_comm='sp,fast': 'fast' is not "):
        train_throughput.parse_args(["--baseline_tp_comm", "sp,fast"])


def test_peak_memory_reorder_is_the_trainers_rule_unless_set():
    """auto: inductor's peak-memory reordering off for compiled async-grad rows only (as the trainer compiles them);
    on or off: that, for every row, so that the async all-reduce's cost can be told from the setting's."""
    rule = train_throughput.reorder_for_peak_memory
    assert [rule("auto", a, c) for a, c in ((True, True), (True, False), (False, True), (False, False))] == [
        False, True, True, True]
    assert {rule("off", a, c) for a in (True, False) for c in (True, False)} == {False}
    assert {rule("on", a, c) for a in (True, False) for c in (True, False)} == {True}
    assert train_throughput.parse_args(["--peak_memory_reorder", "off"]).peak_memory_reorder == "off"
    with pytest.raises(train_throughput.ArgError, match="maybe"):
        train_throughput.parse_args(["--peak_memory_reorder", "maybe"])
