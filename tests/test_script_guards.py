"""Issue 53 for sample.py, spd_sensitivity.py and compare_runs.py: what a user does ends in one line.

- Ctrl-C / SIGTERM while they work: "stopped (Ctrl-C)" / "stopped (SIGTERM)", exit 130 / 143 (training/cli.guarded);
- a closed stdout (`sample.py | head -c 20`): quiet, exit 0;
- a bad numeric value of sample.py: one line naming it and what is allowed, exit 2;
- a character dataset without its meta.pkl: sample.py refuses in one line instead of decoding the ids as GPT-2 BPE;
- compare_runs: a plain-file argument is named in one line, and a loss of 1e308 (no cross-entropy) refused in one.

Signals and the closed pipe run as real processes (the user's view); the rest runs in process. Each case asserts
the exit code, one stderr line without a traceback, and that the runs and data it read are unchanged.
"""
import hashlib
import json
import os
import pickle
import runpy
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.checkpoint_cases import write_valid
from tests.conftest import REPO, SYN_CHARS, run_env

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

BPE_VOCAB = 50304  # what the trainer takes for a dataset without meta.pkl


def digest(*roots):
    """sha256 of every file under roots (and the list of paths): 'unchanged' means this is equal."""
    h = hashlib.sha256()
    for root in roots:
        for dirpath, dirnames, filenames in sorted(os.walk(root)):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


def one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def root(workdir, tmp_path_factory):
    """data/: syn (meta.pkl, 32 ids), syn_char and mychars (the same character ids, no meta.pkl); runs/: a valid
    32-id run, and 50304-id runs (trained without meta.pkl) of syn_char, mychars and syn; a 100 KB prompt."""
    root = str(tmp_path_factory.mktemp("guards"))
    data = os.path.join(root, "data")
    shutil.copytree(os.path.join(workdir, "data", "syn"), os.path.join(data, "syn"))
    for name in ("syn_char", "mychars"):
        os.makedirs(os.path.join(data, name))
        for split in ("train.bin", "val.bin"):
            shutil.copy(os.path.join(data, "syn", split), os.path.join(data, name, split))
    for run, dataset, vocab in (("valid", "syn", 32), ("char_named", "syn_char", BPE_VOCAB),
                                ("char_ids", "mychars", BPE_VOCAB), ("char_meta", "syn", BPE_VOCAB)):
        os.makedirs(os.path.join(root, "runs", run))
        write_valid(os.path.join(root, "runs", run, "ckpt.pt"), dataset=dataset, data_dir=data, vocab_size=vocab)
    with open(os.path.join(root, "prompt.txt"), "w") as f:
        f.write(SYN_CHARS[:10] * 10_000)  # printed back with each sample: more than a pipe's buffer
    return root


def popen(args, cwd):
    # SIGINT as a terminal delivers it: a child of a background job would otherwise inherit SIG_IGN
    return subprocess.Popen([sys.executable, *args], cwd=cwd, env=run_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def signal_when(proc, stream, marker, sig, timeout=120):
    """Send sig once `marker` appears on the process's stream (so its main is working); (rc, stdout, stderr)."""
    seen = ""
    try:
        while True:
            line = stream.readline()
            seen += line
            if not line or marker in line:
                break
        assert marker in seen, f"{marker!r} never came: {seen}{proc.stderr.read() if stream is proc.stdout else ''}"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, (seen if stream is proc.stdout else "") + out, (seen if stream is proc.stderr else "") + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


SAMPLE = [os.path.join(REPO, "sample.py"), "--out_dir=runs/valid", "--device=cpu"]


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_sample_stopped_by_a_signal_is_one_line(root, sig, code, word):
    before = digest(os.path.join(root, "runs"), os.path.join(root, "data"))
    proc = popen([*SAMPLE, "--num_samples=100000", "--max_new_tokens=20"], root)
    rc, _, err = signal_when(proc, proc.stderr, "sample 1/", sig)
    assert rc == code
    rest = err.split("\n", 1)[1] if "\n" in err else ""  # after the first rate line, which came before the signal
    assert "Traceback" not in err and rest.strip().splitlines()[-1] == f"stopped ({word})", err
    assert all(line.startswith("sample ") for line in rest.strip().splitlines()[:-1]), err
    assert digest(os.path.join(root, "runs"), os.path.join(root, "data")) == before


def finish(proc):
    """(stderr, exit code) of a child whose stdout its reader closed; killed if it outlives the wait."""
    try:
        err = proc.stderr.read()
        return err, proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sample_into_a_closed_pipe_is_quiet(root):
    """`python sample.py ... | head -c 20`: before issue 53, a BrokenPipeError traceback."""
    proc = popen([*SAMPLE, "--num_samples=3", "--max_new_tokens=2", "--start=FILE:prompt.txt"], root)
    head = proc.stdout.read(20)
    proc.stdout.close()  # head exits
    err, rc = finish(proc)
    assert head == SYN_CHARS[:10] * 2
    assert rc == 0 and "Traceback" not in err and "Error" not in err, err


def test_spd_sensitivity_ctrl_c_is_one_line(root):
    proc = popen([os.path.join(REPO, "spd_sensitivity.py"), "runs/valid/ckpt.pt", "--device", "cpu", "--syncs", "2",
                  "--eval_iters", "1000000"], root)  # its baseline eval alone outlasts the test
    rc, out, err = signal_when(proc, proc.stdout, "measuring", signal.SIGINT)
    assert rc == 130 and one_line(err) == "stopped (Ctrl-C)", err
    assert not os.path.exists(os.path.join(root, "result.json"))


def test_compare_runs_script_runs_main_under_the_guard(monkeypatch, capsys):
    """compare_runs.py's own __main__ (run as a script, its main replaced by one that Ctrl-C interrupts)."""
    import analysis.compare

    def main():
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis.compare, "main", main)
    with pytest.raises((SystemExit, KeyboardInterrupt)) as stop:  # unguarded, KeyboardInterrupt would stop pytest
        runpy.run_path(os.path.join(REPO, "compare_runs.py"), run_name="__main__")
    assert stop.type is SystemExit and stop.value.code == 130 and one_line(capsys.readouterr().err) == "stopped (Ctrl-C)"


def test_compare_runs_into_a_closed_pipe_is_quiet(tmp_path):
    good = write_run(tmp_path / "runs", "good", "baseline", 3.0)
    proc = popen([os.path.join(REPO, "compare_runs.py"), good, "--out", str(tmp_path / "c.png")], tmp_path)
    proc.stdout.close()  # closed before the child prints its table (it is still importing)
    err, rc = finish(proc)
    assert rc == 0 and err == "", err


# ----------------------------------------------------------------------------- sample.py: values and vocabulary
def run_sample(argv, root, capsys, monkeypatch):
    import sample
    monkeypatch.chdir(root)
    capsys.readouterr()
    before = digest(os.path.join(root, "runs"), os.path.join(root, "data"))
    with pytest.raises(SystemExit) as stop:
        sample.main(argv)
    out, err = capsys.readouterr()
    assert digest(os.path.join(root, "runs"), os.path.join(root, "data")) == before
    return stop.value.code, out, err


@pytest.mark.parametrize("argv, named, allowed", [
    (["--max_new_tokens", "-5"], "-5", ">= 1"), (["--max_new_tokens=0"], "0", ">= 1"),
    (["--max_new_tokens", "five"], "'five'", "integer"), (["--num_samples", "-1"], "-1", ">= 1"),
    (["--top_k", "-3"], "-3", ">= 0"), (["--temperature", "-1"], "-1", "> 0"), (["--seed", "-1"], "-1", "[0, 2**63)"),
    (["--tp", "0"], "0", ">= 1"), (["--temperature", "1e999"], "'1e999'", "finite"),
])
def test_sample_bad_value_is_one_line_naming_it(root, capsys, monkeypatch, argv, named, allowed):
    code, out, err = run_sample(["--out_dir=runs/valid", *argv], root, capsys, monkeypatch)
    line = one_line(err)
    assert code == 2 and out == ""
    assert line.startswith("error: ") and argv[0].split("=")[0] in line and named in line and allowed in line, line


@pytest.mark.parametrize("run, why", [
    ("char_named", "its name ends in _char"),
    ("char_ids", "token ids of"),  # no _char in the name: its ids (all < 32) tell
    ("char_meta", "maps 32 ids to characters, not the model's 50304"),  # meta.pkl added after training
])
def test_sample_refuses_character_ids_without_their_meta(root, capsys, monkeypatch, run, why):
    """A model trained on character data without meta.pkl has GPT-2's 50304 ids: before issue 53, sample.py
    decoded its character ids as GPT-2 BPE (words, garbage)."""
    code, out, err = run_sample([f"--out_dir=runs/{run}", "--num_samples=1", "--max_new_tokens=3", "--start=a"],
                                root, capsys, monkeypatch)
    line = one_line(err)
    assert code == 1 and out == ""
    assert "character-level" in line and why in line and "GPT-2 BPE" in line, line


def test_character_ids_leaves_bpe_data_alone(tmp_path):
    import sample
    rng = np.random.default_rng(0)
    os.makedirs(tmp_path / "bpe")
    rng.integers(0, 50257, 5000).astype(np.uint16).tofile(tmp_path / "bpe" / "val.bin")
    os.makedirs(tmp_path / "tiny")
    np.arange(10, dtype=np.uint16).tofile(tmp_path / "tiny" / "val.bin")  # too few ids to tell
    assert sample.character_ids("bpe", [str(tmp_path)]) is None
    assert sample.character_ids("tiny", [str(tmp_path)]) is None
    assert sample.character_ids("missing", [str(tmp_path)]) is None
    assert sample.character_ids("shakespeare_char", [str(tmp_path)]) == "its name ends in _char"


# ----------------------------------------------------------------------------- compare_runs: files and numbers
def write_run(root, name, policy, val_loss, seed=1):
    run = os.path.join(root, name)
    os.makedirs(run)
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"sync_policy": policy, "seed": seed}, f)
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"type": "eval", "iter": 0, "val_loss": val_loss, "syncs_per_fwd": 4}) + "\n")
    return run


def run_compare(argv, runs_dir, capsys):
    import analysis.compare as compare
    capsys.readouterr()
    before = digest(runs_dir)
    code = compare.main(argv)
    out, err = capsys.readouterr()
    assert digest(runs_dir) == before
    return code, out, err


@pytest.mark.parametrize("as_glob", [False, True])
def test_compare_names_a_plain_file_argument(tmp_path, capsys, as_glob):
    runs = tmp_path / "runs"
    good = write_run(runs, "good", "baseline", 3.0)
    notes = runs / "notes.txt"
    notes.write_text("not a run\n")
    args = [str(runs / "*")] if as_glob else [good, str(notes)]
    code, out, err = run_compare([*args, "--out", str(tmp_path / "c.png")], runs, capsys)
    assert code == 0 and "good" in out  # the run is compared; the file is named, not silently dropped
    line = one_line(err)
    assert line == f"note: skipped 1 plain file, not run directory: {notes}", line


def test_compare_refuses_only_plain_files(tmp_path, capsys):
    runs = tmp_path / "runs"
    os.makedirs(runs)
    (runs / "notes.txt").write_text("not a run\n")
    code, out, err = run_compare([str(runs / "notes.txt"), "--out", str(tmp_path / "c.png")], runs, capsys)
    assert code == 1 and out == "" and "notes.txt" in one_line(err)
    assert not (tmp_path / "c.png").exists()


def test_compare_refuses_a_loss_no_run_can_log(tmp_path, capsys):
    """A loss of 1e308 was tabled (as 1e+308, issue 53); no cross-entropy is that large, so since issue 70 the run
    is refused in one line naming its file, and nothing is drawn."""
    runs = tmp_path / "runs"
    write_run(runs, "base", "baseline", 3.0)
    write_run(runs, "huge", "spd", 1e308)
    code, out, err = run_compare([str(runs / "*"), "--out", str(tmp_path / "c.png")], runs, capsys)
    line = one_line(err)
    assert code == 1 and out == "" and not (tmp_path / "c.png").exists()
    assert str(runs / "huge" / "metrics.jsonl") in line and "'val_loss' is 1e+308, not a cross-entropy" in line, line


def test_number_format_keeps_ordinary_values():
    from analysis.compare import num
    assert [num(2.31), num(-4.7619, "+.2f"), num(0.1414), num(12345.678)] == ["2.3100", "-4.76", "0.1414", "12345.6780"]
    assert [num(1e308), num(float("inf"), "+.2f"), num(float("nan")), num(-3.3e9, "+.2f")] == \
        ["1e+308", "+inf", "nan", "-3.3e+09"]


def test_compare_margin_must_be_a_finite_ascii_number(tmp_path, capsys):
    runs = tmp_path / "runs"
    good = write_run(runs, "good", "baseline", 3.0)
    for margin in ("1e999", "\u0661"):  # inf; an Arabic-Indic 1, which float() takes
        with pytest.raises(SystemExit) as stop:
            run_compare([good, "--margin", margin, "--out", str(tmp_path / "c.png")], runs, capsys)
        assert stop.value.code == 2
        assert repr(margin) in one_line(capsys.readouterr().err)
