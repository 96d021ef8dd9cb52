"""run_dir.py in the corners a user reaches: a run stopped before its first checkpoint starts again (its logs kept
aside) and a resume of it says what to run; --overwrite moves only the trainer's files and names them."""
import os

from tests.conftest import TINY, run_train, run_trains
import pytest

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests


def test_a_run_without_a_checkpoint_starts_again_and_keeps_its_logs(workdir, tmp_path):
    out = tmp_path / "out-no-ckpt"
    out.mkdir()
    for name, text in (("log.txt", "layout: ...\n"), ("metrics.jsonl", '{"type": "layout"}\n'), ("config.json", "{}")):
        (out / name).write_text(text)  # what a run killed while compiling leaves
    proc = run_train([*TINY, "--max_iters=2", f"--out_dir={out}", "--init_from=resume"], workdir, check=False)
    assert proc.returncode == 1
    assert "stopped before its first checkpoint; start it again with the same command without --init_from=resume" \
        in proc.stderr and proc.stderr.count("\n") == 1
    proc = run_train([*TINY, "--max_iters=2", f"--out_dir={out}"], workdir)
    assert "stopped before its first checkpoint (nothing to resume): moved its files (config.json, log.txt, " \
           "metrics.jsonl)" in proc.stdout
    (aside,) = [n for n in os.listdir(out) if n.startswith("replaced-")]
    assert (out / aside / "log.txt").read_text() == "layout: ...\n" and (out / "ckpt.pt").exists()


def test_overwrite_moves_only_the_runs_files(workdir, tmp_path):
    out = tmp_path / "out-overwrite"
    run_train([*TINY, "--max_iters=2", f"--out_dir={out}"], workdir)
    (out / "notes.txt").write_text("mine")
    (out / "plots").mkdir()
    proc = run_train([*TINY, "--max_iters=2", f"--out_dir={out}", "--overwrite=True"], workdir)
    assert "--overwrite=True: moved its files (ckpt.pt, ckpt_best.pt, config.json, log.txt, metrics.jsonl)" in proc.stdout
    (aside,) = [n for n in os.listdir(out) if n.startswith("replaced-")]
    assert sorted(os.listdir(out / aside)) == ["ckpt.pt", "ckpt_best.pt", "config.json", "log.txt", "metrics.jsonl"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "plots").is_dir()


def test_a_directory_where_the_run_writes_a_file_is_one_line(workdir, tmp_path):
    cases = [(tmp_path / f"out-dir-{name}", name, extra) for name in ("metrics.jsonl", "config.json", "ckpt.pt")
             for extra in ([], ["--init_from=resume"])]
    for out, name, _ in cases:
        (out / name).mkdir(parents=True, exist_ok=True)
    procs = run_trains([[*TINY, "--max_iters=2", f"--out_dir={out}", *extra] for out, _, extra in cases], workdir,
                       check=False)
    for (out, name, _), proc in zip(cases, procs):
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"{out / name} is a directory, but the run writes a file of that name there" in proc.stderr
        assert sorted(os.listdir(out)) == [name]  # nothing written


def test_the_logs_of_a_run_past_its_first_eval_are_a_record_not_a_false_start(workdir, tmp_path):
    """A run dir with logs up to an eval after iter 0 but no checkpoint (a stored record, such as
    experiments/*/runs/<run>/) is refused in one line, fresh or resumed, and nothing in it moves; --overwrite=True
    moves it aside as for any run."""
    out = tmp_path / "out-record"
    out.mkdir()
    records = '{"type": "layout"}\n{"type": "eval", "iter": 0}\n{"type": "eval", "iter": 300}\n{"type": "summary"'
    for name, text in (("log.txt", "step 300: ...\n"), ("metrics.jsonl", records), ("config.json", "{}")):
        (out / name).write_text(text)  # the last line cut short, as a kill leaves it
    cases = (([], "already holds the records of a run evaluated up to iter 300, without its "
                  "checkpoints: choose another --out_dir, or pass --overwrite=True"),
             (["--init_from=resume"], "the run there was evaluated up to iter 300, but its checkpoints "
                                      "are gone (a record); train into another --out_dir"))
    procs = run_trains([[*TINY, "--max_iters=2", f"--out_dir={out}", *extra] for extra, _ in cases], workdir, check=False)
    for (_, message), proc in zip(cases, procs):
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert sorted(os.listdir(out)) == ["config.json", "log.txt", "metrics.jsonl"]
    proc = run_train([*TINY, "--max_iters=2", f"--out_dir={out}", "--overwrite=True"], workdir)
    (aside,) = [n for n in os.listdir(out) if n.startswith("replaced-")]
    assert (out / aside / "log.txt").read_text() == "step 300: ...\n" and (out / "ckpt.pt").exists()
