"""Smoke test of bench/train_throughput.py: a 2-process CPU (gloo) run at the tiny size, eager only,
gives a timed row for every variant group (plain, ours tp1, ours tp2 at n_tracks 2 and 4, ours and
torch DDP at dp2), the key ratios, and a profile table; with --floors, a no-sync twin of every tp2 row; bad arguments
stop it with one line."""
import json
import subprocess
import sys

from tests.conftest import REPO, run_env
import pytest

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

MODULE = ["-m", "bench.train_throughput"]


def torchrun(args, nproc=2, timeout=120):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *MODULE, *args]
    return subprocess.run(cmd, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=timeout)


def test_tiny_cpu_run_has_every_variant_and_ratios(tmp_path):
    proc = torchrun(["--size", "tiny", "--device", "cpu", "--warmup", "1", "--iters", "2", "--modes", "eager",
                     "--policies", "baseline,grouped:2", "--profile", "tp2 n2 grouped:2", "--out_dir", str(tmp_path)])
    assert proc.returncode == 0, f"rc {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}"
    md = (tmp_path / "train_throughput.md").read_text()
    data = json.loads((tmp_path / "train_throughput.json").read_text())
    rows = {r["name"]: r for r in data["rows"]}
    expected = ["plain eager", "ours tp1 n2 baseline eager", "ours tp1 n2 grouped:4 eager",
                "ours tp2 n2 baseline eager", "ours tp2 n2 grouped:2 eager",
                "ours tp2 n4 baseline eager", "ours tp2 n4 grouped:2 eager",
                "ours dp2 eager", "torch_ddp dp2 eager"]
    assert sorted(rows) == sorted(expected)
    for name in expected:
        r = rows[name]
        assert r["error"] is None and isinstance(r["ms"], float) and r["ms"] > 0, (name, r)
        assert r["tok_s"] > 0 and r["mfu"] is None  # no peak FLOP/s on CPU
        assert len(r["ms_per_rank"]) == 2
    # world tokens per iteration: dp2 twice tp2's, whose GPUs share one replica's batch
    assert rows["ours dp2 eager"]["tokens_per_iter"] == 2 * rows["ours tp2 n2 baseline eager"]["tokens_per_iter"]
    # declared syncs per forward (tiny: 4 layers)
    assert rows["ours tp2 n4 baseline eager"]["syncs_per_forward"] == 8
    assert rows["ours tp2 n2 grouped:2 eager"]["syncs_per_forward"] == 2
    assert rows["ours tp1 n2 grouped:4 eager"]["syncs_per_forward"] == 1
    assert rows["plain eager"]["syncs_per_forward"] is None
    # key ratios: every kind present, with values
    sections = {q["section"].split(" (")[0] for q in data["ratios"] if q["value"] is not None}
    assert sections == {"ours tp1 / plain", "tp2 baseline / tp1 baseline", "tp2 policy / tp2 baseline",
                        "ours dp2 / torch DDP dp2"}
    assert "## Key ratios" in md and "| ours tp2 n4 grouped:2 eager | 2 | 1 | 2 | 4 | grouped:2 | eager | 2 |" in md
    assert data["meta"]["commit"] and data["meta"]["command"].startswith("torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size tiny")
    profile = (tmp_path / "train_profile_ours_tp2_n2_grouped_2_eager.txt").read_text()
    assert "Name" in profile and "aten::" in profile


def test_four_processes_time_tp4_rows_and_skip_dp2(tmp_path):
    """At 4 processes the tp rows run tp=4 over every rank (named tp4, one replica on 4 GPUs); dp2, which needs
    exactly 2, is left out with a note; n_tracks must be a multiple of 4 there."""
    proc = torchrun(["--size", "tiny", "--device", "cpu", "--warmup", "1", "--iters", "2", "--modes", "eager",
                     "--variants", "tp2,dp2", "--policies", "baseline,grouped:2", "--tp2_n_tracks", "4",
                     "--out_dir", str(tmp_path)], nproc=4)
    assert proc.returncode == 0, f"rc {proc.returncode}\nSTDERR:\n{proc.stderr[-3000:]}"
    data = json.loads((tmp_path / "train_throughput.json").read_text())
    rows = {r["name"]: r for r in data["rows"]}
    assert sorted(rows) == ["ours tp4 n4 baseline eager", "ours tp4 n4 grouped:2 eager"]
    assert all((r["tp"], r["gpus"], len(r["ms_per_rank"]), r["error"]) == (4, 4, 4, None) for r in rows.values())
    assert rows["ours tp4 n4 grouped:2 eager"]["syncs_per_forward"] == 2
    assert "dp2 rows need exactly 2" in data["meta"]["note"]
    assert [q["section"].split(" (")[0] for q in data["ratios"]] == ["tp4 policy / tp4 baseline"]
    bad = torchrun(["--size", "tiny", "--device", "cpu", "--policies", "baseline", "--tp2_n_tracks", "2", "--out_dir",
                    str(tmp_path / "x")],
                   nproc=4)
    assert bad.returncode != 0 and "n_tracks=2 must divide n_head=4 and be divisible by tp=4" in bad.stderr


def test_one_process_skips_two_rank_groups(tmp_path):
    proc = subprocess.run([sys.executable, *MODULE, "--size", "tiny", "--device", "cpu", "--warmup", "0", "--iters",
                           "1", "--modes", "eager", "--variants", "tp1,dp2", "--tp1_policies", "baseline",
                           "--out_dir", str(tmp_path)], cwd=REPO, env=run_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "train_throughput.json").read_text())
    assert [r["name"] for r in data["rows"]] == ["ours tp1 n2 baseline eager"]
    assert "need 2" in data["meta"]["note"] and "note:" in proc.stdout


def test_bad_arguments_exit_with_one_line(capsys):
    cases = (["--policies", "grouped:5"], ["--size", "huge"], ["--modes", "graph"], ["--tp2_n_tracks", "3"],
             ["--tp_async_grad", "maybe"], ["--no_such_flag"])
    # the first case as a real process (what `python -m bench.train_throughput` runs: sys.exit(guarded(main)));
    # the others through the same guarded(main) in this process: a process spends seconds importing torch and
    # inductor before it parses its arguments
    proc = subprocess.run([sys.executable, *MODULE, *cases[0], "--out_dir", "/nonexistent/never-written"], cwd=REPO,
                          env=run_env(), capture_output=True, text=True, timeout=60)
    outcomes = [(proc.returncode, proc.stdout, proc.stderr)]
    from bench import train_throughput
    from training.cli import guarded
    for bad in cases[1:]:
        capsys.readouterr()
        try:
            code = guarded(train_throughput.main, [*bad, "--out_dir", "/nonexistent/never-written"])
        except SystemExit as e:
            code = e.code
        out = capsys.readouterr()
        outcomes.append((code, out.out, out.err))
    for bad, (code, stdout, stderr) in zip(cases, outcomes):
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert code == 2, (bad, stderr)
        assert len(lines) == 1 and lines[0].startswith("error: "), (bad, stderr)
        assert "Traceback" not in stderr + stdout



def test_tp_comm_times_plain_tp_sp_and_overlap_side_by_side(tmp_path):
    """--tp_comm off,sp,chunked,async_tp: per policy a plain TP row, a sequence-parallel row and one per overlap, with
    both ratio sections; async_tp's row holds its one-line error off CUDA and the run goes on."""
    proc = torchrun(["--size", "tiny", "--device", "cpu", "--warmup", "1", "--iters", "2", "--modes", "eager",
                     "--variants", "tp2", "--tp2_n_tracks", "2", "--policies", "baseline",
                     "--tp_comm", "off,sp,chunked,async_tp", "--out_dir", str(tmp_path)])
    assert proc.returncode == 0, f"rc {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}"
    data = json.loads((tmp_path / "train_throughput.json").read_text())
    rows = {r["name"]: r for r in data["rows"]}
    base = "ours tp2 n2 baseline eager"
    assert sorted(rows) == sorted([base, base + " sp", base + " sp+chunked", base + " sp+async_tp"])
    for name in (base, base + " sp", base + " sp+chunked"):
        assert rows[name]["error"] is None and rows[name]["ms"] > 0, rows[name]
    assert rows[base + " sp+async_tp"]["error"] == ("ValueError: tp_comm async_tp needs CUDA and a compiled mode "
                                                    "(inductor's micro-pipeline TP pass)")
    # the forced failure's whole record: type, message, the frame that raised; in the JSON, markdown and stderr
    detail = rows[base + " sp+async_tp"]["error_detail"]
    assert detail["type"] == "ValueError" and detail["message"].startswith("tp_comm async_tp needs CUDA")
    assert "bench/train_throughput.py" in detail["traceback"][-1] and " in build_variant: raise " in detail["traceback"][-1]
    assert "**" + base + " sp+async_tp**" in (tmp_path / "train_throughput.md").read_text().split("## Errors")[1]
    assert f"[rank 0] {base} sp+async_tp failed:" in proc.stderr and "[rank 1]" in proc.stderr
    labels = {(q["section"].split(" (")[0], q["label"]) for q in data["ratios"] if q["value"] is not None}
    assert labels == {("tp2 sequence parallel, alone or + overlap / tp2", "sp baseline n_tracks 2 eager"),
                      ("tp2 sequence parallel, alone or + overlap / tp2", "chunked baseline n_tracks 2 eager"),
                      ("tp2 sequence parallel + overlap / tp2 sequence parallel", "chunked baseline n_tracks 2 eager")}


def test_floors_time_a_no_sync_twin_of_every_tp_row(tmp_path):
    """--floors: each tp2 row is followed by its '[floor]' twin, timed with every collective skipped; the floor
    section has one ratio per tp2 row (row ms / floor ms), and no other ratio names a floor."""
    proc = torchrun(["--size", "tiny", "--device", "cpu", "--warmup", "1", "--iters", "2", "--modes", "eager",
                     "--policies", "baseline,grouped:2", "--floors", "--out_dir", str(tmp_path)])
    assert proc.returncode == 0, f"rc {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}"
    data = json.loads((tmp_path / "train_throughput.json").read_text())
    names = [r["name"] for r in data["rows"]]
    tp_rows = [r for r in data["rows"] if r["group"] == "tp2" and not r["floor"]]
    assert len(tp_rows) == 4 and all(not r["floor"] for r in data["rows"] if r["group"] != "tp2")
    for r in tp_rows:
        floor = data["rows"][names.index(r["name"]) + 1]
        assert (floor["name"], floor["floor"], floor["error"]) == (r["name"] + " [floor]", True, None), floor
        assert floor["ms"] > 0 and floor["syncs_per_forward"] == r["syncs_per_forward"]  # the plan's count
    floor_names = {r["name"] for r in data["rows"] if r["floor"]}
    floor_ratios = [q for q in data["ratios"] if q["section"].startswith("tp2 row / its no-sync floor")]
    assert [(q["a"], q["b"]) for q in floor_ratios] == [(r["name"], r["name"] + " [floor]") for r in tp_rows]
    assert all(q["value"] > 0 and set(q) == {"section", "label", "value", "a", "b"} for q in floor_ratios)
    assert not [q for q in data["ratios"] if q not in floor_ratios and {q["a"], q["b"]} & floor_names]
    md = (tmp_path / "train_throughput.md").read_text()
    assert "| ours tp2 n2 grouped:2 eager [floor] | 2 | 1 | 2 | 2 | grouped:2 | eager | 2 |" in md
