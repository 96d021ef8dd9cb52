"""Issue 70's fuzz cases, in-process: each was a traceback, a hang or a silent wrong result, and is now one line
(or the right behaviour). Process-level versions of the stop and stall cases are in test_stall.py and
test_kill.py."""
import json
import os
import pickle
import re
import shutil
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.compare import RunError, load_run
from data.loader import DataError, check_data
from experiments.runner import Run, SweepError, check_args, visible_gpu_ids
from model.gpt import GPTConfig
from parallel.mesh import RendezvousError, env_int
from tests.checkpoint_cases import write_valid
from tests.conftest import SYN_CHARS
from training.checkpoint import CheckpointError, read_checkpoint
from training.config import ConfigError, parse


# ----------------------------------------------------------------------------- the trainer
@pytest.mark.parametrize("name, value, allowed", [
    ("WORLD_SIZE", "0", "an integer >= 1"), ("WORLD_SIZE", "-2", "an integer >= 1"),
    ("LOCAL_WORLD_SIZE", "0", "an integer >= 1"), ("RANK", "-1", "an integer >= 0"),
    ("MASTER_PORT", "99999", "an integer in [0, 65535]"),
])
def test_environment_numbers_out_of_range(monkeypatch, name, value, allowed):
    """WORLD_SIZE=0 was a ZeroDivisionError traceback."""
    monkeypatch.setenv(name, value)
    with pytest.raises(RendezvousError) as e:
        env_int(name, 1)
    assert str(e.value) == f"environment variable {name}={value!r}: must be {allowed}"


@pytest.mark.parametrize("key", ["n_layer", "n_head", "n_tracks"])
def test_huge_model_counts_are_one_line(key):
    """--n_layer=100000000000000000000 was an OverflowError traceback (a tuple per layer)."""
    with pytest.raises((ConfigError, ValueError), match=f"invalid {key}=100000000000000000000; must be in "
                                                        r"\[1, 65536\]"):
        parse([f"--{key}=100000000000000000000"])
    assert GPTConfig(n_layer=2, n_head=4, n_embd=32, n_tracks=2).n_layer == 2  # sane values pass


@pytest.mark.parametrize("key, value", [("stall_timeout", "0"), ("stall_timeout", "-1"), ("rendezvous_timeout", "0")])
def test_timeouts_must_be_positive(key, value):
    with pytest.raises(ConfigError, match=f"invalid {key}=.*must be > 0"):
        parse([f"--{key}={value}"])


def test_a_launch_with_a_bad_master_port_is_refused_in_one_line(capsys):
    from training.launch import main
    assert main(["--master_port=99999", "train_reduced_sync.py"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--master_port=99999 must be a port number in [0, 65535]" in err, err


def test_a_fifo_checkpoint_is_refused_without_blocking(tmp_path):
    """Resume with ckpt.pt a FIFO blocked in open() for ever."""
    path = str(tmp_path / "ckpt.pt")
    os.mkfifo(path)
    box = {}

    def read():
        try:
            read_checkpoint(path)
        except CheckpointError as e:
            box["error"] = e
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():  # release it: a writer at the other end
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert not thread.is_alive(), "read_checkpoint blocked on a FIFO"
    assert str(box["error"]) == f"{path}: is a FIFO (named pipe), not a checkpoint file"
    assert box["error"].kind == "unreadable"  # read_for_resume falls back to ckpt_best.pt


def char_data(root, name, meta):
    folder = os.path.join(root, name)
    os.makedirs(folder)
    ids = np.arange(2000, dtype=np.uint16) % len(SYN_CHARS)
    for split in ("train", "val"):
        ids.tofile(os.path.join(folder, f"{split}.bin"))
    if meta:
        with open(os.path.join(folder, "meta.pkl"), "wb") as f:
            pickle.dump({"vocab_size": len(SYN_CHARS)}, f)


@pytest.mark.parametrize("name", ["shakespeare_char", "mine_char"])
def test_a_char_dataset_without_meta_is_refused(tmp_path, name):
    """It trained with GPT-2's 50304 ids, silently; sample.py then refused the run."""
    char_data(tmp_path, name, meta=False)
    with pytest.raises(DataError, match=f"meta.pkl not found: dataset '{name}' is character-level"):
        check_data(name, 32, str(tmp_path))
    char_data(tmp_path, "with_meta_char", meta=True)
    assert check_data("with_meta_char", 32, str(tmp_path))[1] == len(SYN_CHARS)
    char_data(tmp_path, "bpe", meta=False)  # not character-level by name or prepare script: GPT-2's ids
    assert check_data("bpe", 32, str(tmp_path))[1] == 50304


# ----------------------------------------------------------------------------- the sweeps
def sweep_args(tmp_path, **changes):
    args = dict(jobs=1, deadline=None, status_every=60.0, root=str(tmp_path), scratch=str(tmp_path / "s"), pack=None)
    return SimpleNamespace(**{**args, **changes})


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_status_every_must_be_positive(tmp_path, value):
    with pytest.raises(SweepError, match="--status-every=.*must be a number of seconds > 0"):
        check_args(sweep_args(tmp_path, status_every=value))


@pytest.mark.parametrize("flag", ["root", "scratch", "pack"])
def test_sweep_folders_that_are_files_are_refused_before_any_run(tmp_path, flag):
    """experiments.char_sweep.run --root <a file> was not checked at all."""
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    for where in (str(a_file), str(a_file / "below")):
        with pytest.raises(SweepError, match=f"--{flag} {where}: .*not a folder"):
            check_args(sweep_args(tmp_path, **{flag: where}))
    check_args(sweep_args(tmp_path))  # the defaults pass
    assert a_file.read_text() == "kept"


# ----------------------------------------------------------------------------- compare_runs
def run_dir(tmp_path, config, val_loss=2.5):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config))
    (run / "metrics.jsonl").write_text(json.dumps({"type": "eval", "iter": 0, "val_loss": val_loss}) + "\n")
    return str(run)


@pytest.mark.parametrize("val_loss", [1e308, -0.5, 1e3])
def test_an_impossible_val_loss_is_not_tabled(tmp_path, val_loss):
    with pytest.raises(RunError, match=re.escape(f"'val_loss' is {val_loss!r}, not a cross-entropy in [0, 1000)")):
        load_run(run_dir(tmp_path, {"sync_policy": "baseline"}, val_loss))


def test_a_policy_invalid_for_its_depth_is_not_tabled(tmp_path):
    with pytest.raises(RunError, match="config.json: .*grouped:7.* \\(at its n_layer=2\\)"):
        load_run(run_dir(tmp_path, {"sync_policy": "grouped:7", "n_layer": 2}))
    shutil.rmtree(tmp_path / "run")
    assert load_run(run_dir(tmp_path, {"sync_policy": "grouped:2", "n_layer": 2}))["policy"] == "grouped:2"


# ----------------------------------------------------------------------------- sample.py
def test_max_new_tokens_has_a_ceiling(capsys):
    import sample
    with pytest.raises(SystemExit) as e:
        sample.parse_args(["--max_new_tokens=1000000000"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert "--max_new_tokens must be at most 1,000,000, got 1,000,000,000" in err
    assert sample.parse_args(["--max_new_tokens=1000000"]).max_new_tokens == 1_000_000


def test_a_prompt_file_is_read_bounded(tmp_path, monkeypatch, capsys):
    """--start=FILE:/dev/zero read for ever."""
    import sample
    os.makedirs(tmp_path / "data" / "syn")
    with open(tmp_path / "data" / "syn" / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 32, "itos": dict(enumerate(SYN_CHARS)), "stoi": {c: i for i, c in
                                                                                  enumerate(SYN_CHARS)}}, f)
    os.makedirs(tmp_path / "run")
    write_valid(tmp_path / "run" / "ckpt.pt", data_dir=str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        sample.main(["--out_dir=run", "--device=cpu", "--start=FILE:/dev/zero", "--num_samples=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and err[-1] == ("error: --start='FILE:/dev/zero': the prompt file holds more than "
                                             "1,048,576 characters; the model sees only its last block_size tokens: "
                                             "give a shorter prompt")


# ----------------------------------------------------------------------------- analysis and the studies
@pytest.mark.parametrize("text", ["{}", "[]", '{"policies": 1, "level": 1, "measured": 1, "widths": 1, '
                                              '"size_measured": 1}'])
def test_plan_refuses_a_fit_that_is_not_one(tmp_path, capsys, text):
    """`analysis.plan --fit` of a JSON {} was a KeyError traceback."""
    from analysis.plan import main
    (tmp_path / "fit.json").write_text(text)
    with pytest.raises(SystemExit) as e:
        main(["--fit", str(tmp_path / "fit.json")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "not a size_fit.json (it lacks" in err, err


def test_docs_study_budgets_versus_a_file_is_one_line(tmp_path):
    from experiments.docs_study.run import main
    a_file = tmp_path / "not_a_run"
    a_file.write_text("x")
    with pytest.raises(SystemExit, match=f"^error: {a_file}: not a directory$"):
        main(["budgets", "--versus", str(a_file)])


@pytest.mark.parametrize("value", ["2", "0", "-0.5", "nan"])
def test_docs_study_cooldown_frac_is_named(monkeypatch, capsys, value):
    """--cooldown-frac 2 was blamed on the warmup ('the branch point -320 ... is inside the warmup')."""
    from experiments.docs_study.run import main
    from tests.conftest import REPO
    monkeypatch.chdir(REPO)  # run_main moves there; monkeypatch moves back
    assert main(["run", "--cooldown-frac", value, "--dry-run"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --cooldown-frac={float(value):g}: must be in (0, 1]") and "warmup" not in err, err


# ----------------------------------------------------------------------------- resuming logs
@pytest.mark.parametrize("jsonl, kept", [
    ('{"type": "eval", "iter": 0}\n{"type": "train", "it', '{"type": "eval", "iter": 0}\n'),
    ('{"type": "tra', ''),  # nothing but a fragment
    ('{"type": "eval", "iter": 0}\n', '{"type": "eval", "iter": 0}\n'),  # whole: untouched
])
def test_resume_cuts_a_half_written_record(tmp_path, jsonl, kept):
    """A resume kept a killed run's half line in metrics.jsonl (ended by a newline); compare_runs then skipped it
    without a word. log.txt, for people, keeps its half line, ended."""
    from training.step import RunLog
    (tmp_path / "metrics.jsonl").write_text(jsonl)
    (tmp_path / "log.txt").write_text("iter 0: loss 3.1\niter 1: lo")
    RunLog(str(tmp_path), enabled=True, fresh=False)
    assert (tmp_path / "metrics.jsonl").read_text() == kept
    assert (tmp_path / "log.txt").read_text() == "iter 0: loss 3.1\niter 1: lo\n"


def test_a_full_stdout_is_named_as_stdout(monkeypatch, capsys):
    """stdout to /dev/full said 'cannot write a file: No space left on device (74,974 MiB free)'."""
    import errno
    import sys
    from training.stop import report_fatal
    read, write = os.pipe()

    class Stdout:  # what the trainer's print wrote to; report_fatal points its descriptor at /dev/null
        def fileno(self):
            return write

    def main(argv):
        raise OSError(errno.ENOSPC, "No space left on device")  # print's error names no file
    monkeypatch.setattr(sys, "stdout", Stdout())
    try:
        assert report_fatal(main, []) == 1
    finally:
        os.close(read)
        os.close(write)
    err = capsys.readouterr().err.strip()
    assert err == ("error: rank 0: cannot write to stdout: No space left on device (is it redirected to a full disk "
                   "or /dev/full?); checkpoints written before are intact")


# ----------------------------------------------------------------------------- debian_docs
def test_debian_docs_too_small_for_a_split_is_one_line(monkeypatch):
    """A pack of a few documents left val (or train) empty: np.concatenate's ValueError traceback."""
    from data.debian_docs import prepare
    from data.prepare_utils import PrepareError
    ids = [f"doc{i}" for i in range(400)]
    val = next(i for i in ids if prepare.in_val(i))
    train = next(i for i in ids if not prepare.in_val(i))
    monkeypatch.setattr(prepare, "tokenize", lambda texts, workers: [[1, 2, 3] for _ in texts])
    for doc_ids, says in (([], "gave no document to train on"), ([train], "leave the val split empty"),
                          ([val], "leave the train split empty")):
        docs = [("domain", "package", doc_id, "text " * 20) for doc_id in doc_ids]
        monkeypatch.setattr(prepare, "documents", lambda members, pack, docs=docs: (list(docs), {"duplicate": 0,
                                                                                               "short": 0}))
        with pytest.raises(PrepareError, match=says):
            prepare.build({}, 1, pack="small.tar.xz")
    docs = [("domain", "package", doc_id, "text " * 20) for doc_id in (train, val)]
    monkeypatch.setattr(prepare, "documents", lambda members, pack: (docs, {"duplicate": 0, "short": 0}))
    arrays, _, _ = prepare.build({}, 1)
    assert [len(arrays[s]) for s in ("train", "val")] == [4, 4]  # 3 ids and <|endoftext|> each


def test_a_config_that_raises_keyboardinterrupt_is_one_line(tmp_path, monkeypatch):
    """`raise KeyboardInterrupt` in a config file was a traceback: the trainer takes SIGINT with its own handler,
    so the exception is the config's own. Under Python's default handler it stays a Ctrl-C."""
    import signal
    from training.config import read_config_file
    config = tmp_path / "kbi.py"
    config.write_text("n_layer = 2\nraise KeyboardInterrupt\n")
    # Python's default handler, set here: a process started in the background by a non-interactive shell inherits
    # SIGINT ignored, and Python then keeps it so (a CI run started that way failed here)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            read_config_file(str(config))
        signal.signal(signal.SIGINT, lambda signum, frame: None)  # as the trainer's stop.py does
        with pytest.raises(ConfigError, match=f"^error in config file {config}: it raised KeyboardInterrupt$"):
            read_config_file(str(config))
    finally:
        signal.signal(signal.SIGINT, previous)


# ----------------------------------------------------------------------------- other flags that took anything
@pytest.mark.parametrize("argv, says", [
    (["--gib", "nan"], "--gib=nan: must be a size in GiB in (0, 1024]"),
    (["--gib", "-1"], "--gib=-1: must be a size in GiB in (0, 1024]"),
    (["--out", os.devnull], f"--out: {os.devnull} is a character device, not a regular file"),
])
def test_hbm_bandwidth_checks_its_flags_before_the_device(monkeypatch, capsys, argv, says):
    import sys
    from bench import hbm_bandwidth
    monkeypatch.setattr(sys, "argv", ["hbm_bandwidth", *argv])
    with pytest.raises(SystemExit) as e:
        hbm_bandwidth.main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and says in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("argv, says", [
    (["--tol", "nan"], "--tol=nan: must be a number > 0"), (["--tol", "-1"], "--tol=-1.0: must be a number > 0"),
    (["--steps", "0"], "--steps=0: must be an integer >= 1"),
    (["--batch_size", "-2"], "--batch_size=-2: must be an integer >= 1"),
])
def test_bisect_partial_grads_flags(capsys, argv, says):
    from experiments.compiler_repros.partial_grads import bisect_partial_grads
    with pytest.raises(SystemExit) as e:
        bisect_partial_grads.main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and says in err and len(err.splitlines()) == 1, err


def test_spd_sensitivity_out_is_checked_before_the_measurement(tmp_path, capsys):
    import spd_sensitivity
    fifo = tmp_path / "table.json"
    os.mkfifo(fifo)
    for out, what in ((os.devnull, "a character device"), (str(fifo), "a FIFO (named pipe)")):
        with pytest.raises(SystemExit) as e:
            spd_sensitivity.main(["never-read.pt", "--device", "cpu", "--out", out])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 1 and err == f"error: --out: {out} is {what}, not a regular file: refusing to replace it"


def test_runner_maps_its_gpus_through_a_narrowed_visible_list(monkeypatch):
    # a sweep started with CUDA_VISIBLE_DEVICES=2,3 must put its runs on physical GPUs 2 and 3, not 0 and 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpu_ids(2) == ["2", "3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpu_ids(4) == ["0", "1", "2", "3"]


def test_runner_keeps_a_sweeps_own_data_root():
    # the default data root comes last, so it would override a --set data_dir: it is left out then
    plain = Run("r", "sweep", ["config/x.py", "--seed=1"], "baseline", 1, "g").argv("/scratch")
    own = Run("r", "sweep", ["config/x.py", "--data_dir=/root/study/data19"], "baseline", 1, "g").argv("/scratch")
    assert plain[-1] == "--data_dir=data"
    assert [a for a in own if a.startswith("--data_dir=")] == ["--data_dir=/root/study/data19"]
