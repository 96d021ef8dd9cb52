"""Fuzz: the cases issues named one by one, each rejected cleanly (exit code != 0, one stderr line 'error: ...', no
traceback) or noted in one line: the launch environment a user sets by hand outside torchrun (issue 28), a run from
another directory, the fatal errors one rank meets alone, the closing fuzz passes (issue 40), failed writes, a closed
stdout, a rendezvous nobody answers, the sweep runners' options; and, beside them, what such runs must still do
(greedy sampling at a tiny temperature, the fallback from a wrong-shaped checkpoint, fine-tuning's notes).

The generated inputs at every entry point: tests/test_fuzz.py; the fuzz folder (the fuzz_root fixture) and the
checks both use: tests/fuzz_common.py.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.archives import tar_bytes
from tests.checkpoint_cases import tree_state
from tests.conftest import REPO, TINY, run_env, run_train
from tests.fuzz_common import NEW_OUT, TRAIN, assert_clean_error, run_in_process

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow


# ----------------------------------------------------------------------------- issue 28: launch environment
def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ENV_CASES = [  # outside torchrun, the environment a user set by hand: one line, from the rank that knows
    ({"RANK": "1", "WORLD_SIZE": "2"}, "rank 1: WORLD_SIZE=2 without MASTER_ADDR"),
    ({"LOCAL_WORLD_SIZE": "abc"}, "LOCAL_WORLD_SIZE='abc' is not an integer"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not an integer"),
    ({"RANK": "1", "WORLD_SIZE": "two"}, "rank 1: environment variable WORLD_SIZE='two' is not an integer"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "x", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())},
     "rank 1: environment variable LOCAL_RANK='x' is not an integer"),  # was exit 1 without a word
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())},
     "rank 1: no rendezvous of the 2 ranks at 127.0.0.1:"),  # nobody listens: gives up after 3 s
]


def test_launch_environment_rejected_cleanly(fuzz_root):
    before = tree_state(fuzz_root)
    procs = [subprocess.Popen([sys.executable, os.path.join(REPO, "train_reduced_sync.py"), *TRAIN, NEW_OUT,
                               "--rendezvous_timeout=3"], cwd=fuzz_root, env={**run_env(), **env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for env, _ in ENV_CASES]
    for (env, want), proc in zip(ENV_CASES, procs):
        _, err = proc.communicate(timeout=120)
        assert_clean_error(proc.returncode, err)
        assert want in err, (env, err)
    assert tree_state(fuzz_root) == before


def test_run_from_another_directory(fuzz_root, tmp_path):
    # the cwd holds no data/: the trainer's and spd_sensitivity.py's advice looks in the repository's data/ (a
    # dataset without a prepare script there: the datasets that have one); sample.py decodes a run with its own
    # characters (meta.pkl through the run's data_dir)
    commands = [["train_reduced_sync.py", *TRAIN[2:], NEW_OUT, "--dataset=missing_ds"],
                ["spd_sensitivity.py", os.path.join(fuzz_root, "ckpts", "nodataset.pt"), "--device", "cpu", "--syncs", "2"],
                ["sample.py", f"--out_dir={fuzz_root}/runs/trained", "--num_samples=1", "--max_new_tokens=20", "--start=ab"]]
    procs = [subprocess.Popen([sys.executable, os.path.join(REPO, script), *args], cwd=tmp_path, env=run_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for script, *args in commands]
    (_, train_err), (_, spd_err), (text, sample_err) = [p.communicate(timeout=120) for p in procs]
    for proc, err in zip(procs[:2], (train_err, spd_err)):
        assert_clean_error(proc.returncode, err)
        assert "the repository does not have for dataset='missing_ds' (datasets with one: debian_docs, " \
               "debian_large, openwebtext, shakespeare, shakespeare_char;" in err, err
    assert procs[2].returncode == 0, sample_err
    text = text.split("---------------")[0]
    from tests.conftest import SYN_CHARS
    assert text.startswith("ab") and len(text.rstrip("\n")) >= 2 and set(text) <= set(SYN_CHARS)
    assert os.listdir(tmp_path) == []


def test_sample_tiny_temperature_is_greedy(fuzz_root, monkeypatch, capsys):
    import sample
    monkeypatch.chdir(fuzz_root)
    texts = []
    for args in (["--temperature=1e-300"], ["--temperature=1.0", "--top_k=1"], ["--temperature=1e-300", "--seed=7"]):
        capsys.readouterr()
        assert sample.main(["--out_dir=runs/trained", "--num_samples=1", "--max_new_tokens=30", "--start=ab", *args]) == 0
        texts.append(capsys.readouterr().out.split("---------------")[0])
    assert texts[0] == texts[1] == texts[2] and len(texts[0].strip()) > 2, texts


def test_wrong_shaped_ckpt_falls_back_to_ckpt_best(fuzz_root, tmp_path):
    import torch

    from training.checkpoint import read_for_resume
    run = tmp_path / "run"
    shutil.copytree(os.path.join(fuzz_root, "runs", "trained"), run)
    bad = torch.load(run / "ckpt.pt", weights_only=True)
    bad["model"]["transformer.wte.weight"] = bad["model"]["transformer.wte.weight"][:-1]
    torch.save(bad, run / "ckpt.pt")
    checkpoint, path, note = read_for_resume(str(run))
    assert path == str(run / "ckpt_best.pt") and "transformer.wte.weight has shape" in note
    assert checkpoint["iter_num"] >= 1


def test_finetune_says_which_settings_come_from_the_checkpoint(fuzz_root, tmp_path):
    out = tmp_path / "ft"
    proc = run_train([*TRAIN, f"--out_dir={out}", "--init_from=runs/trained/ckpt.pt", "--block_size=16",
                      "--max_iters=1"], fuzz_root)
    assert "note: fine-tuning with block_size=32 from the checkpoint (requested 16)" in proc.stdout


def test_fatal_errors_of_one_rank_are_one_line(capsys, monkeypatch, tmp_path):
    # what a rank meets alone (a full disk while logging, a lost peer, memory) is one line with its rank
    import errno

    import torch

    import socket
    import zlib

    import training.stop as stop
    from training.stop import report_fatal
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()  # reaped: its pid names no process now
    host = zlib.crc32(socket.gethostname().encode())
    monkeypatch.setattr(stop, "_peers", [(host, gone.pid), (host, os.getpid()), (host + 1, 1)])  # rank 2 elsewhere
    log = str(tmp_path / "log.txt")

    def raiser(error):
        def main(argv):
            raise error
        return main

    for error, want in ((OSError(errno.ENOSPC, "No space left on device", log), f"cannot write {log}: No space left"),
                        (OSError(errno.EDQUOT, "Disk quota exceeded", log), "MiB free there"),
                        (RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:4321"),
                         "lost contact with rank 0 (Connection closed by peer, peer [10.0.0.2]:4321)"),
                        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out of memory")):
        capsys.readouterr()
        code, err = run_in_process(lambda argv: report_fatal(raiser(error), argv), [], capsys)
        assert_clean_error(code, err)
        assert err.startswith("error: rank 1: ") and want in err, err
    with pytest.raises(KeyError):  # a bug keeps its traceback
        report_fatal(raiser(KeyError("x")), [])


# ----------------------------------------------------------------------------- issue 40's closing fuzz pass
def _pack(path, members):
    import lzma
    with open(path, "wb") as f:
        f.write(lzma.compress(tar_bytes(members)))


def test_closing_fuzz_cases_are_one_line_before_any_work(fuzz_root, tmp_path):
    """Cases the closing fuzz pass found: each is refused with exit 1 and one 'error:' line naming the bad input,
    before any work (no plot written, no file of the user's changed)."""
    from data.debian_docs.prepare import PACKAGES
    from tests.test_stops import tree_digests
    j = lambda *p: str(tmp_path.joinpath(*p))
    os.makedirs(j("jdir"))
    with open(j("cfg.yaml"), "w") as f:
        f.write("n_layer: 2\n")  # YAML habit: a Python annotation that assigns nothing
    pins = {p: {"version": v, "sha256": s} for _, p, v, s, _, _ in PACKAGES}
    members = {"pack.json": json.dumps(pins).encode()}
    members.update({f"{p}/usr/share/doc/{p}/x.txt": b"text" for _, p, _, _, _, _ in PACKAGES})  # no gcide files
    _pack(j("partial.tar.xz"), members)
    good = os.path.join(fuzz_root, "cr", "good")
    cases = [
        ([sys.executable, os.path.join(REPO, "compare_runs.py"), good, "--stats-json=jdir", "--out=c.png"],
         "--stats-json='jdir' is a directory"),
        ([sys.executable, os.path.join(REPO, "compare_runs.py"), good, "--margin=-1", "--out=c.png"],
         "--margin=-1.0: must be > 0"),
        ([sys.executable, os.path.join(REPO, "train_reduced_sync.py"), "cfg.yaml", *TINY, "--out_dir=out"],
         "'n_layer: 2' assigns nothing; config files are flat Python: write n_layer = 2"),
        ([sys.executable, os.path.join(REPO, "data", "debian_docs", "prepare.py"), "--from-pack", "partial.tar.xz", "--force"],
         "dict-gcide lacks ./usr/share/dictd/gcide.dict.dz, ./usr/share/dictd/gcide.index"),
    ]
    before, repo_data = tree_digests(str(tmp_path)), tree_digests(os.path.join(REPO, "data"))
    procs = [subprocess.Popen(cmd, cwd=str(tmp_path), env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for cmd, _ in cases]
    for proc, (cmd, want) in zip(procs, cases):
        out, err = proc.communicate(timeout=120)
        lines = [line for line in err.splitlines() if line.strip()]
        assert proc.returncode == 1 and "Traceback" not in out + err, (cmd, err[-2000:])
        assert len(lines) == 1 and lines[0].startswith("error: ") and want in lines[0], (cmd, err)
    assert tree_digests(str(tmp_path)) == before and tree_digests(os.path.join(REPO, "data")) == repo_data


def test_settings_that_do_nothing_are_noted(fuzz_root, tmp_path):
    """Accepted without a word before: save_iters beyond max_iters, cooldown_frac without lr_schedule='wsd', and a
    resume whose checkpoint is already at max_iters."""
    out = str(tmp_path / "out")
    args = [*TINY, "--max_iters=2", "--eval_interval=2", "--eval_iters=1", f"--out_dir={out}"]
    proc = run_train([*args, "--save_iters=1,100", "--cooldown_frac=0.5"], fuzz_root)
    assert "note: save_iters 100 > max_iters=2: this run ends before it" in proc.stdout, proc.stdout[-2000:]
    assert "note: cooldown_frac=0.5 does nothing with lr_schedule='cosine': only 'wsd' uses it" in proc.stdout
    assert os.path.exists(os.path.join(out, "ckpt_1.pt"))
    proc = run_train([*args, "--init_from=resume"], fuzz_root)
    assert "note: the checkpoint is at iter 2, max_iters=2: nothing to train; raise --max_iters to go on" in proc.stdout
    assert "note: cooldown_frac" not in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_closing_fuzz_pass_two_cases_are_one_line(fuzz_root, tmp_path):
    """The second closing pass: a pack without pack.json or with a broken one, --pack or a plot where no file can
    be made (/proc, which access() lets root write), --budgets with no policy to draw, a run whose metrics lines
    are all unreadable, an option of docs_study's run mode given without it. One 'error:' line naming the input,
    exit != 0, no file of the user's changed."""
    from tests.test_stops import tree_digests
    j = lambda *p: str(tmp_path.joinpath(*p))
    _pack(j("nojson.tar.xz"), {"linux-doc-6.1/usr/share/doc/x.txt": b"text"})
    _pack(j("badjson.tar.xz"), {"pack.json": b"{"})
    run = os.path.join(fuzz_root, "runs", "trained")
    shutil.copytree(run, j("badm"))
    with open(j("badm", "metrics.jsonl"), "w") as f:
        f.write("{not json\n")
    py, prep = sys.executable, os.path.join(REPO, "data", "debian_docs", "prepare.py")
    compare = os.path.join(REPO, "compare_runs.py")
    cases = [
        ([py, prep, "--from-pack", "nojson.tar.xz"], "nojson.tar.xz: it has no pack.json"),
        ([py, prep, "--from-pack", "badjson.tar.xz"], "badjson.tar.xz: its pack.json is not JSON"),
        ([py, prep, "--pack", "/proc/p.tar.xz"], "--pack /proc/p.tar.xz: cannot write in the directory /proc"),
        ([py, compare, run, "--out=/proc/x.png"], "--out='/proc/x.png': cannot write in the directory /proc"),
        ([py, compare, run, "--out=c.png", "--budgets=b.png"], "--budgets='b.png': no policy here has runs paired"),
        ([py, compare, "badm"], "no evaluation logged yet (badm/metrics.jsonl: 1 line(s) not JSON, skipped)"),
        ([py, "-m", "experiments.docs_study.run", "--budgets=1,2"], "error: unrecognized arguments: --budgets=1,2"),
    ]
    before, repo_data = tree_digests(str(tmp_path)), tree_digests(os.path.join(REPO, "data"))
    env = dict(run_env(), PYTHONPATH=REPO)
    procs = [subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for cmd, _ in cases]
    for proc, (cmd, want) in zip(procs, cases):
        out, err = proc.communicate(timeout=120)
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", "      "))]
        assert proc.returncode not in (0, None) and "Traceback" not in out + err, (cmd, err[-2000:])
        assert len(lines) == 1 and "error: " in lines[0] and want in lines[0], (cmd, err)
    left = set(tree_digests(str(tmp_path))) - set(before)
    assert left <= {"c.png"} and {k: v for k, v in tree_digests(str(tmp_path)).items() if k in before} == before
    assert tree_digests(os.path.join(REPO, "data")) == repo_data


def test_failed_writes_name_the_file_and_the_limit(tmp_path):
    """A log line on a full disk names its file (write() errors carry none); a checkpoint that a file size limit
    (ulimit -f) cuts short says so, since torch's writer reports only 'unexpected pos'."""
    from training.step import RunLog
    os.symlink("/dev/full", tmp_path / "log.txt")
    log = RunLog(str(tmp_path), enabled=True, fresh=False)
    with pytest.raises(OSError) as e:
        log.write("step 1")
    assert e.value.filename == str(tmp_path / "log.txt") and e.value.strerror == "No space left on device"
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))\n"
            "from tests.checkpoint_cases import tiny_checkpoint\n"
            "from training.checkpoint import CheckpointError, write_checkpoint\n"
            "try:\n    write_checkpoint([sys.argv[1]], tiny_checkpoint())\n"
            "except CheckpointError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt.pt")], cwd=REPO, env=run_env(),
                          capture_output=True, text=True, timeout=120)
    assert "cannot be written" in proc.stdout and "files of at most 100,000 bytes (ulimit -f)" in proc.stdout, \
        proc.stdout + proc.stderr
    assert not os.path.exists(tmp_path / "ckpt.pt")


def test_stdout_closed_by_its_reader_is_one_line(fuzz_root, tmp_path):
    """`python train_reduced_sync.py ... | head -1`: the reader goes, the next print fails; one line on stderr, not
    a BrokenPipeError traceback."""
    out = str(tmp_path / "out")
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "train_reduced_sync.py"), *TINY, "--max_iters=1000",
                             f"--out_dir={out}"], cwd=fuzz_root, env=run_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert err.strip().splitlines() == ["error: rank 0: stdout was closed (the reader of its pipe ended, e.g. | head): "
                                        "stopped; checkpoints written before are intact"], err


def test_rendezvous_timeout_is_kept_when_nobody_answers(fuzz_root):
    """The TCPStore client retries past its own timeout (torch 2.13: 6 s gave up after about 18 s); the wait
    ends at rendezvous_timeout, in one line."""
    import time
    env = {**run_env(), "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, os.path.join(REPO, "train_reduced_sync.py"), *TRAIN, NEW_OUT,
                           "--rendezvous_timeout=10"], cwd=fuzz_root, env=env, capture_output=True, text=True,
                          timeout=120)
    took = time.monotonic() - t0
    lines = proc.stderr.strip().splitlines()  # a 'waiting for' note, then the error
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(lines) <= 2, proc.stderr
    assert lines[-1].startswith("error: rank 1: no rendezvous of the 2 ranks") and \
        lines[-1].endswith("within 10 s (rendezvous_timeout): nobody answered at that address"), proc.stderr
    assert took < 22, took  # 10 s and the imports; it was about 30 s and the imports


@pytest.mark.parametrize("module, argv, want", [
    ("experiments.char_sweep.run", ["w384-n2", "--seeds=x", "--dry-run"], "--seeds='x': give comma-separated integers"),
    ("experiments.char_sweep.run", ["w384-n2", "--deadline=-1", "--dry-run"], "--deadline=-1: must be > 0 seconds"),
    ("experiments.docs_study.run", ["run", "--jobs=0", "--dry-run"], "--jobs=0: must be >= 1"),
    ("experiments.docs_study.run", ["run", "--deadline=0", "--dry-run"], "--deadline=0: must be > 0 seconds"),
    ("experiments.docs_study.run", ["run", "--hold=-5", "--dry-run"], "--hold=-5: must be the seconds > 0"),
    ("experiments.docs_study.run", ["run", "--hold=nan", "--dry-run"], "--hold=nan: must be the seconds > 0"),
])
def test_sweep_runners_name_a_bad_option_before_planning(module, argv, want, capsys):
    """--seeds=x said only int()'s message; --deadline=-1 was taken (and an unrelated run's state reported), and
    docs_study's --jobs=0 with --dry-run listed the runs without a word."""
    import importlib
    code, err = run_in_process(importlib.import_module(module).main, argv, capsys)
    assert_clean_error(code, err)
    assert want in err, err
