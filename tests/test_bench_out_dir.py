"""Benchmarks never overwrite a stored result by default (issue 70): a default run writes to a fresh folder under
bench/results/local/ (ignored by git), the committed tables change only with --out_dir given, and an --out_dir
that cannot be a folder stops in one line before any work."""
import os
import re
import shutil
import subprocess

import pytest

from bench import common, compile_check, ddp_buckets, sync_frequency, train_throughput
from tests.conftest import REPO
from tests.test_sync_frequency_smoke import TINY

IN_GIT = shutil.which("git") is not None and os.path.exists(os.path.join(REPO, ".git"))
TT = ["--size", "tiny", "--device", "cpu", "--policies", "baseline"]  # train_throughput: tiny has 4 layers


def git_status():
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.skipif(not IN_GIT, reason="needs the git checkout")
def test_a_default_run_leaves_the_tree_unchanged():
    before_status = git_status()
    before = set(os.listdir(common.LOCAL_RESULTS)) if os.path.isdir(common.LOCAL_RESULTS) else set()
    sync_frequency.main(TINY)  # no --out_dir
    new = set(os.listdir(common.LOCAL_RESULTS)) - before
    try:
        assert len(new) == 1 and re.fullmatch(r"sync_frequency-cpu-\d{8}-\d{6}-\d+", next(iter(new))), new
        folder = os.path.join(common.LOCAL_RESULTS, next(iter(new)))
        assert sorted(os.listdir(folder)) == ["sync_frequency_cpu.json", "sync_frequency_cpu.md"]
        assert git_status() == before_status  # nothing tracked changed, nothing untracked appeared
    finally:
        for name in new:
            shutil.rmtree(os.path.join(common.LOCAL_RESULTS, name))


def test_every_out_dir_defaults_to_none():
    """Each bench CLI's --out_dir defaults to None: a fresh local folder (results_dir) or no files at all."""
    seen = 0
    for name in sorted(os.listdir(os.path.join(REPO, "bench"))):
        if not name.endswith(".py"):
            continue
        text = open(os.path.join(REPO, "bench", name)).read()
        for default in re.findall(r'add_argument\("--out_dir",\s*default=([^,)]+)', text):
            assert default == "None", f"bench/{name}: --out_dir defaults to {default}"
            seen += name == "step_model.py"
    assert seen == 1  # step_model's, for its main parser and its calibrate's (out_dir_arg)


def fake_step_model(monkeypatch):
    """bench.step_model without its fits (seconds) and with its writers recording the folder they were given."""
    from bench import step_model
    got = []
    monkeypatch.setattr(step_model, "validate", lambda: ({}, {"H200": {}}, [], {}))
    monkeypatch.setattr(step_model, "time_error", lambda rows: 0.1)
    monkeypatch.setattr(step_model, "score_table", lambda rows: [])
    monkeypatch.setattr(step_model, "write_json", lambda out_dir, name, obj: got.append(("json", out_dir)))
    monkeypatch.setattr(step_model, "write_validation",
                        lambda *a: got.append(("validation", a[-1])) or ["## Scores per code, device and tp", ""])
    monkeypatch.setattr(step_model, "pareto", lambda *a: got.append(("pareto", a[-1])) or [])
    monkeypatch.setattr(step_model, "paper_table", lambda *a: got.append(("70b", a[-1])) or [])
    monkeypatch.setattr(step_model, "calibrate", lambda *a: got.append(("calibrate", a[-1])) or "done")
    return step_model, got


def test_step_model_writes_to_a_local_folder_unless_told(monkeypatch, capsys):
    """--validate, --pareto and calibrate wrote into the committed bench/results by default."""
    step_model, got = fake_step_model(monkeypatch)
    step_model.main(["--validate", "--pareto"])
    step_model.main(["calibrate", "--device", "cpu"])
    folders = {out_dir for _, out_dir in got}
    assert [kind for kind, _ in got] == ["json", "json", "validation", "pareto", "70b", "calibrate"]
    assert len(folders) == 2 and all(os.path.dirname(f) == common.LOCAL_RESULTS for f in folders), folders
    assert re.fullmatch(r"step_model_calibration-cpu-\d{8}-\d{6}-\d+", os.path.basename(got[-1][1]))
    got.clear()
    stored = os.path.join("bench", "results")
    step_model.main(["--validate", "--pareto", "--out_dir", stored])
    step_model.main(["calibrate", "--device", "cpu", "--out_dir", stored])
    assert {out_dir for _, out_dir in got} == {stored}
    assert "table: bench/results/step_model_validation.md" in capsys.readouterr().out


def test_step_model_out_dir_that_is_a_file_stops_before_the_fits(monkeypatch, capsys):
    step_model, got = fake_step_model(monkeypatch)
    monkeypatch.setattr(step_model, "validate", lambda: pytest.fail("the fits loaded"))
    for argv in (["--validate", "--out_dir", os.devnull], ["calibrate", "--out_dir", os.devnull]):
        with pytest.raises(SystemExit) as stop:
            step_model.main(argv)
        err = capsys.readouterr().err.splitlines()
        assert stop.value.code == 2 and len(err) == 1, err
        assert err[0].startswith(f"error: --out_dir {os.devnull}: exists and is not a folder; give a folder"), err
    assert got == []


@pytest.mark.slow
@pytest.mark.skipif(not IN_GIT, reason="needs the git checkout")
def test_step_model_default_run_leaves_the_tree_unchanged():
    """The real fits (about 5 s): the stored tables are read, a fresh local folder takes the output."""
    from bench import step_model
    before_status = git_status()
    before = set(os.listdir(common.LOCAL_RESULTS)) if os.path.isdir(common.LOCAL_RESULTS) else set()
    step_model.main(["--validate"])
    new = set(os.listdir(common.LOCAL_RESULTS)) - before
    try:
        assert len(new) == 1, new
        folder = os.path.join(common.LOCAL_RESULTS, next(iter(new)))
        assert "step_model_validation.md" in os.listdir(folder)
        with open(os.path.join(folder, "step_model_validation.md")) as f, \
                open(os.path.join(REPO, "bench", "results", "step_model_validation.md")) as g:
            assert f.read() == g.read()  # the stored table is what the stored rows give
        assert git_status() == before_status
    finally:
        for name in new:
            shutil.rmtree(os.path.join(common.LOCAL_RESULTS, name))


def test_default_folders_are_fresh_and_given_ones_kept(tmp_path):
    a = common.results_dir(None, "x", "NVIDIA H100 80GB HBM3")
    assert os.path.dirname(a) == common.LOCAL_RESULTS and os.path.basename(a).startswith("x-nvidia-h100-80gb-hbm3-")
    assert not os.path.exists(a)  # named, not made: only the rank that writes makes it
    assert common.results_dir(str(tmp_path / "new" / "deeper"), "x", "cpu") == str(tmp_path / "new" / "deeper")
    if IN_GIT:
        probe = os.path.relpath(os.path.join(a, "t.md"), REPO)
        assert subprocess.run(["git", "check-ignore", "-q", probe], cwd=REPO).returncode == 0


def test_an_out_dir_that_is_a_file_stops_before_the_work(tmp_path, capsys):
    a_file = tmp_path / "results.md"
    a_file.write_text("kept")
    for bad in (str(a_file), str(a_file / "under"), os.devnull):
        assert "not a folder" in common.out_dir_problem(bad)
    with pytest.raises(SystemExit, match="exists and is not a folder"):
        sync_frequency.main(TINY + ["--out_dir", str(a_file)])
    with pytest.raises(SystemExit):
        compile_check.main(["--device", "cpu", "--out_dir", str(a_file)])
    assert "--out_dir" in capsys.readouterr().err
    with pytest.raises(train_throughput.ArgError, match="not a folder"):
        train_throughput.parse_args(TT + ["--out_dir", str(a_file / "x")])
    with pytest.raises(SystemExit, match=f"--out_dir {os.devnull}: exists and is not a folder"):
        ddp_buckets.parse_args(["--device", "cpu", "--out_dir", os.devnull])
    assert a_file.read_text() == "kept"


def test_ddp_buckets_cpu_default_goes_to_a_local_folder():
    args = ddp_buckets.parse_args(["--device", "cpu"])
    assert os.path.dirname(args.out_dir) == common.LOCAL_RESULTS


@pytest.mark.parametrize("argv, says", [
    (["--sizes", "foo"], "--sizes ['foo'] not allowed"),
    (["--variants", "bucketed_x"], "--variants ['bucketed_x'] not allowed"),
    (["--device", "tpu"], "--device='tpu' not allowed"),
])
def test_ddp_buckets_bad_values_are_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        ddp_buckets.parse_args(argv + ["--device", "cpu"] if "--device" not in argv else argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("flag, value", [("--tol", "nan"), ("--tol", "-1"), ("--tol", "0"), ("--lr", "nan"),
                                         ("--lr", "inf")])
def test_compile_check_refuses_checks_that_cannot_fail(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        compile_check.main(["--device", "cpu", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert f"{flag}=" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_sync_frequency_seconds_per_timing(value, capsys):
    with pytest.raises(SystemExit):
        sync_frequency.parse_args(TINY[:-2] + ["--seconds_per_timing", value])
    err = capsys.readouterr().err.strip()
    assert "--seconds_per_timing" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("flag, value", [("--bucket_cap_mb", "nan"), ("--bucket_cap_mb", "0"),
                                         ("--bucket_cap_mb", "inf"), ("--grad_clip", "nan"), ("--grad_clip", "-1")])
def test_train_throughput_numbers(flag, value):
    with pytest.raises(train_throughput.ArgError, match=re.escape(flag)):
        train_throughput.parse_args(TT + [flag, value])
