"""checkpoint.py: the format loads with weights_only=True; no file can run code through any entry point;
truncated, random, old-format and incomplete files give one line naming the file; resume falls back
to a valid ckpt_best.pt and overwrites nothing; old checkpoints convert."""
import os
import random
import shutil

import numpy as np
import pytest
import torch

import training.checkpoint as ckpt_mod
from training.checkpoint import (RESUME_KEYS, CheckpointError, read_checkpoint, read_for_resume, restore_rng_states,
                                 rng_states)
from tests.checkpoint_cases import (tiny_checkpoint, tree_state, write_malicious, write_old_format, write_random_bytes,
                                    write_truncated, write_valid)
from tests.conftest import TINY, read_metrics, run_train, start_train, train_losses


def one_error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def run_main(main, argv, capsys):
    """Call an entry point's main(argv) in-process; it must exit != 0. Returns its one stderr line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code not in (0, None)
    return one_error_line(capsys.readouterr().err)


def test_rng_states_roundtrip_through_a_weights_only_file(tmp_path):
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    random.gauss(0, 1)  # a cached gaussian in Python's state
    np.random.standard_normal()  # and in numpy's
    states = rng_states("cpu")
    expected = (torch.rand(3), np.random.standard_normal(3), [random.random() for _ in range(3)], random.gauss(0, 1))
    path = str(tmp_path / "rng.pt")
    ckpt_mod.write_checkpoint([path], {"rng": states})
    loaded = torch.load(path, weights_only=True)  # plain tensors and primitives only
    assert loaded["format"] == ckpt_mod.FORMAT_VERSION
    restore_rng_states(loaded["rng"], "cpu")
    got = (torch.rand(3), np.random.standard_normal(3), [random.random() for _ in range(3)], random.gauss(0, 1))
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2:] == expected[2:]


def test_write_checkpoint_refuses_objects_and_writes_nothing(tmp_path):
    path = tmp_path / "x.pt"
    with pytest.raises(TypeError, match="numpy.ndarray"):
        ckpt_mod.write_checkpoint([str(path)], {"rng": {"numpy": np.zeros(3)}})
    assert os.listdir(tmp_path) == []


def test_malicious_checkpoint_runs_nothing_at_any_entry_point(workdir, tmp_path, monkeypatch, capsys):
    import sample
    import spd_sensitivity
    import train_reduced_sync

    monkeypatch.chdir(workdir)
    marker = tmp_path / "PWNED"
    for raw in (False, True):
        run_dir = tmp_path / f"evil-run-{raw}"
        run_dir.mkdir()
        evil = write_malicious(run_dir / "ckpt.pt", marker, raw_pickle=raw)
        before = tree_state(tmp_path)
        lines = [
            run_main(train_reduced_sync.main, [*TINY, "--max_iters=2", f"--out_dir={run_dir}", "--init_from=resume"],
                     capsys),
            run_main(train_reduced_sync.main, [*TINY, "--max_iters=2", f"--out_dir={tmp_path / 'never'}",
                                               f"--init_from={evil}"], capsys),
            run_main(sample.main, [f"--out_dir={run_dir}", "--num_samples=1", "--max_new_tokens=2"], capsys),
            run_main(spd_sensitivity.main, [evil, "--device", "cpu"], capsys),
        ]
        assert not marker.exists(), "unpickling the checkpoint ran its payload"
        assert tree_state(tmp_path) == before  # nothing written, nothing changed
        for line in lines:
            assert evil in line, line
        if not raw:
            assert all("refused: it holds pickled Python objects (builtins.exec)" in line for line in lines)
        with pytest.raises(CheckpointError, match="convert it only if you trust its source|not a readable"):
            ckpt_mod.convert(evil)  # conversion refuses it too (without --trust)
        assert not marker.exists()


@pytest.mark.parametrize("kind", ["truncated", "random", "empty", "directory", "missing", "not_a_dict", "no_model_args"])
def test_bad_files_give_one_line_naming_the_file(tmp_path, kind):
    good = write_valid(tmp_path / "good.pt")
    path = str(tmp_path / "bad.pt")
    if kind == "truncated":
        write_truncated(path, good)
    elif kind == "random":
        write_random_bytes(path)
    elif kind == "empty":
        open(path, "wb").close()
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "not_a_dict":
        torch.save([1, 2, 3], path)
    elif kind == "no_model_args":
        checkpoint = read_checkpoint(good)
        del checkpoint["model_args"]
        torch.save(checkpoint, path)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(path)
    message = str(e.value)
    assert message.startswith(path + ": ") and "\n" not in message and len(message) < 400


def test_old_format_says_how_to_convert_and_converts(tmp_path, workdir, monkeypatch, capsys):
    import sample

    monkeypatch.chdir(workdir)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    old = write_old_format(run_dir / "ckpt.pt")
    numpy_state = torch.load(old, weights_only=False)["rng"]["numpy"]  # the test's own trusted file
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(old)
    assert e.value.kind == "old_format" and f"python -m training.checkpoint --convert {old}" in str(e.value)
    line = run_main(sample.main, [f"--out_dir={run_dir}", "--num_samples=1", "--max_new_tokens=2"], capsys)
    assert "python -m training.checkpoint --convert" in line

    assert ckpt_mod.main(["--convert", old]) == 0
    assert os.path.exists(old + ".old")  # the original is kept
    converted = read_checkpoint(old)
    np.random.seed(0)
    restore_rng_states({**converted["rng"], "torch_cpu": torch.get_rng_state()}, "cpu")
    assert np.array_equal(np.random.get_state()[1], numpy_state[1])
    assert ckpt_mod.main(["--convert", old]) == 0  # already converted: says so, changes nothing
    capsys.readouterr()
    assert ckpt_mod.main(["--convert", old + ".old", "--out", str(tmp_path / "nodir" / "x.pt")]) == 1
    assert one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_resume_falls_back_to_best_and_overwrites_nothing(workdir):
    """A run to 10 (checkpoints at 5 and 10); ckpt.pt truncated: resume takes ckpt_best.pt, says so,
    keeps the bad file, and continues with the losses of an uninterrupted run. With both files bad it
    stops with one line, changing nothing."""
    args = [*TINY, "--max_iters=10"]
    out, ref = os.path.join(workdir, "out-fallback"), os.path.join(workdir, "out-fallback-ref")
    reference = start_train([*args, "--max_iters=15", f"--out_dir={ref}"], workdir)  # meanwhile
    run_train([*args, f"--out_dir={out}"], workdir)
    last, best = os.path.join(out, "ckpt.pt"), os.path.join(out, "ckpt_best.pt")
    best_iter = read_checkpoint(best, RESUME_KEYS)["iter_num"]
    write_truncated(last, last)
    truncated = open(last, "rb").read()

    # Both unusable: one line, nothing changes.
    saved_best = os.path.join(workdir, "best-copy.pt")
    shutil.copy(best, saved_best)
    write_random_bytes(best)
    before = tree_state(out)
    proc = run_train([*args, "--max_iters=15", f"--out_dir={out}", "--init_from=resume"], workdir, check=False)
    assert proc.returncode == 1
    line = one_error_line(proc.stderr)
    assert last in line and best in line
    assert tree_state(out) == before
    shutil.copy(saved_best, best)

    proc = run_train([*args, "--max_iters=15", f"--out_dir={out}", "--init_from=resume"], workdir)
    assert f"{last} is not usable" in proc.stdout and f"resuming from {best} at iter {best_iter}" in proc.stdout
    assert open(last + ".invalid", "rb").read() == truncated  # kept, not overwritten
    assert read_checkpoint(last, RESUME_KEYS)["iter_num"] == 15
    assert [r["iter"] for r in read_metrics(out) if r["type"] == "resume_fallback"] == [best_iter]
    assert reference.wait(timeout=240) == 0, reference.stderr.read()
    reference.stdout.close()
    reference.stderr.close()
    got, want = train_losses(out), train_losses(ref)
    assert sorted(got) == list(range(15))
    for it in range(15):
        assert got[it] == want[it], f"iter {it}"


def test_resume_of_a_run_still_before_its_first_checkpoint_says_it_is_running(tmp_path):
    """Another trainer holding out_dir's lock, with no checkpoint yet: it was described as a run that "stopped
    before its first checkpoint"; it is running."""
    from training import run_dir
    out = str(tmp_path / "out")
    os.makedirs(out)
    with open(os.path.join(out, "log.txt"), "w") as f:
        f.write("layout: ...\n")
    run_dir.lock(out)  # held as another trainer would hold it
    try:
        with pytest.raises(CheckpointError) as e:
            read_for_resume(out)
        assert f"the run there is still running (pid {os.getpid()} holds its lock)" in str(e.value)
    finally:
        os.close(run_dir._held.pop())
    with pytest.raises(CheckpointError) as e:  # released: the old description holds again
        read_for_resume(out)
    assert "stopped before its first checkpoint" in str(e.value)


def test_resume_from_a_checkpoint_of_nan_weights_takes_ckpt_best(tmp_path):
    """A diverged run's ckpt.pt full of NaN was resumed and then said only "training diverged"; it is unusable,
    so the resume takes ckpt_best.pt with a note, or, without one, says why in one line."""
    out = str(tmp_path / "out")
    os.makedirs(out)

    def resumable(weights_fill=None):  # the keys a resume reads, around a tiny model
        c = {**tiny_checkpoint(), "optimizer": {"state": {}, "param_groups": []}, "layout": {"tp": 1, "dp": 1},
             "best_val_loss": 3.0, "data": {"seed": 0, "batch_size": 2, "block_size": 8, "gradient_accumulation_steps": 1},
             "rng": rng_states("cpu"), "scaler": {}, "iter_num": 8}
        if weights_fill is not None:
            c["model"] = {k: torch.full_like(v, weights_fill) if v.is_floating_point() else v
                          for k, v in c["model"].items()}
        return c
    ckpt_mod.write_checkpoint([os.path.join(out, "ckpt.pt")], resumable(float("nan")))
    with pytest.raises(CheckpointError) as e:
        read_for_resume(out)
    assert e.value.kind == "nonfinite" and "its model weights hold NaN or inf" in str(e.value)
    ckpt_mod.write_checkpoint([os.path.join(out, "ckpt_best.pt")], resumable())
    checkpoint, path, note = read_for_resume(out)
    assert path.endswith("ckpt_best.pt") and "its model weights hold NaN or inf" in note and "resuming from" in note
