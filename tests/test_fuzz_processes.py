"""Fuzz, part 2: issue 70's cases, each as the real process a user starts (tests/test_fuzz.py holds the generated
inputs at every entry point, mostly in process).

Each case is a bash command line ({py} the interpreter, REPO/ the repository, {home} the folder) run from a
user's folder (data/syn, run folders, a FIFO, a JSON {}, config files, a checkpoint), the repository on PYTHONPATH.
It must end as the issue asks: one stderr line holding the words given (or none, where the right answer is silence),
the exit code given, no traceback. And it must change nothing: the
sha256 of the repository's tree (every file git lists, tracked or new and not ignored) and of every planted file
are taken before and after each case. The slow tier (pytest.ini), one gate case.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.checkpoint_cases import write_valid
from tests.conftest import REPO, TINY, run_env
from tests.test_compare_runs import write_run
from tests.test_prepare_guards import lines_beside_progress_bars, write_pack

pytestmark = pytest.mark.slow

TRAIN = f"{{py}} {REPO}/train_reduced_sync.py {' '.join(TINY)} --max_iters=2"
CASES = [  # (id, command line: {py} the interpreter, run from the user's folder; exit code; words of the one line)
    # data loss
    ("throughput nan", "{py} -m bench.train_throughput --bucket_cap_mb nan --device cpu", 2, "--bucket_cap_mb=nan"),
    ("stats-json fifo", "{py} REPO/compare_runs.py runs/* --stats-json=fifo", 1, "is a FIFO"),
    ("pack fifo", "{py} REPO/data/debian_docs/prepare.py --pack fifo", 1, "--pack fifo is a FIFO"),
    # hangs
    ("resume fifo ckpt", TRAIN + " --init_from=resume --out_dir=fifo_run", 1, "fifo_run/ckpt.pt"),
    ("prompt /dev/zero", "{py} REPO/sample.py --out_dir=run --device=cpu --start=FILE:/dev/zero", 1,
     "more than 1,048,576 characters"),
    ("max_new_tokens 1e9", "{py} REPO/sample.py --out_dir=run --max_new_tokens=1000000000", 2, "at most 1,000,000"),
    # tracebacks
    ("compare_runs >&-", "{py} REPO/compare_runs.py runs/* --out=../outputs/plot.png >&-", 0, None),
    ("plan >&-", "{py} -m analysis.plan >&-", 0, None),
    ("sample >&-", "{py} REPO/sample.py --out_dir=run --device=cpu --num_samples=1 --max_new_tokens=3 >&-", 0,
     "sample 1/1: 3 tokens"),  # its progress line, on stderr
    ("WORLD_SIZE=0", "WORLD_SIZE=0 " + TRAIN, 1, "WORLD_SIZE='0'"),
    ("n_layer 1e20", TRAIN + " --n_layer=1e20", 1, "'n_layer'"),
    ("plan --fit {}", "{py} -m analysis.plan --fit {home}/empty.json", 2, "not a size_fit.json"),
    ("ulimit -f compare_runs", "ulimit -f 0; {py} REPO/compare_runs.py runs/* --out=../outputs/limited.png", 1,
     "limited.png: File too large"),
    ("master_port 99999", "{py} -m training.launch --master_port=99999 " + TRAIN[5:], 2, "--master_port=99999"),
    ("ddp_buckets --sizes foo", "{py} -m bench.ddp_buckets --sizes foo", 2, "'foo'"),
    ("config raises KeyboardInterrupt", TRAIN + " kbi.py", 1, "kbi.py: it raised KeyboardInterrupt"),
    ("budgets --versus file", ("{py} -m experiments.docs_study.run budgets --sweep REPO/experiments/docs_study/budgets "
     "--versus notes.txt"), 1, "not a directory"),
    ("pack too small", "{py} REPO/data/debian_docs/prepare.py --from-pack small.tar.xz --workers=1 --force", 1,
     "split empty"),
    # misleading
    ("cooldown-frac 2", "{py} -m experiments.docs_study.run run --cooldown-frac 2", 1, "--cooldown-frac=2"),
    ("run.sh --bad", "bash REPO/experiments/shakespeare_sweep/run.sh --bad", 2, "--bad"),
    ("from-pack /dev/null", "{py} REPO/data/debian_docs/prepare.py --from-pack /dev/null", 1, "a character device"),
    ("from-pack fifo", "{py} REPO/data/debian_docs/prepare.py --from-pack fifo", 1, "is a FIFO"),
    ("plan >/dev/full", "{py} -m analysis.plan >/dev/full", 1, "cannot write to stdout: No space left"),
    ("train >/dev/full", TRAIN + " --out_dir=../outputs/full >/dev/full", 1, "cannot write to stdout"),
    # silent
    ("char dataset without meta.pkl", TRAIN.replace("--dataset=syn", "--dataset=nometa_char") + " --out_dir=never",
     1, "meta.pkl not found"),
    ("val_loss 1e308", "{py} REPO/compare_runs.py huge/*", 1, "'val_loss' is 1e+308"),
    ("grouped:7 at n_layer 2", "{py} REPO/compare_runs.py deep7/*", 1, "grouped:7"),
    ("plan n_tracks 8192", "{py} -m analysis.plan --tp 8 --n_tracks 8192", 2, "--n_tracks 8192"),
    ("step_model n_tracks 1e8", "{py} -m bench.step_model --n_tracks 100000000", 2, "--n_tracks 100000000"),
    ("compile_check --tol nan", "{py} -m bench.compile_check --device cpu --tol nan", 2, "--tol=nan"),
    ("compile_check --tol -1", "{py} -m bench.compile_check --device cpu --tol -1", 2, "--tol=-1"),
    ("compile_check --lr nan", "{py} -m bench.compile_check --device cpu --lr nan", 2, "--lr=nan"),
    ("sync_frequency timing -1", "{py} -m bench.sync_frequency --device cpu --seconds_per_timing -1", 2, "got -1"),
    ("compile_check --out_dir file", "{py} -m bench.compile_check --device cpu --out_dir notes.txt", 2,
     "notes.txt: exists and is not a folder"),
    ("sync_frequency --out_dir /dev/null", "{py} -m bench.sync_frequency --device cpu --out_dir /dev/null", 1,
     "/dev/null: exists and is not a folder"),
    ("profile_policy --out_dir file", "{py} -m bench.profile_policy --out_dir notes.txt", 1,
     "notes.txt: exists and is not a folder"),
    ("char_sweep --root file", "{py} -m experiments.char_sweep.run --root {home}/notes.txt", 1, "notes.txt: exists"),
    ("char_sweep --status-every 0", "{py} -m experiments.char_sweep.run --status-every 0", 1, "--status-every=0"),
    ("docs_study --status-every 0", "{py} -m experiments.docs_study.run run --status-every 0", 1, "--status-every=0"),
]
SIGNAL_CASES = [  # (id, command line, signal, seconds after the start, exit code, words of the one line)
    ("config loops, SIGTERM", TRAIN + " loop.py --out_dir=never", signal.SIGTERM, 3.0, 143, "loop.py"),
    ("Ctrl-C in sample's imports", "{py} REPO/sample.py --out_dir=run --device=cpu", signal.SIGINT, 0.3, 130,
     "stopped (Ctrl-C)"),
]
PLANTED = ["notes.txt", "empty.json", "kbi.py", "loop.py", "run/ckpt.pt", "small.tar.xz", "runs/base/metrics.jsonl",
           "runs/g/config.json", "huge/base/metrics.jsonl", "deep7/g7/config.json", "data/nometa_char/train.bin"]


@pytest.fixture(scope="module")
def user(workdir, tmp_path_factory):
    """The user's folder: data/syn (the session's dataset), and the files the cases name."""
    root = tmp_path_factory.mktemp("fuzz70")
    home = root / "user"
    (home / "data").mkdir(parents=True)
    (root / "outputs").mkdir()
    os.symlink(os.path.join(workdir, "data", "syn"), home / "data" / "syn")
    (home / "data" / "nometa_char").mkdir()
    for split in ("train", "val"):
        with open(os.path.join(workdir, "data", "syn", f"{split}.bin"), "rb") as f:
            (home / "data" / "nometa_char" / f"{split}.bin").write_bytes(f.read())
    write_run(home / "runs", "base", "baseline", [3.0, 2.5], 24)
    write_run(home / "runs", "g", "grouped:2", [3.0, 2.6], 12)
    write_run(home / "huge", "base", "baseline", [3.0, 1e308], 24)
    write_run(home / "deep7", "g7", "grouped:7", [3.0, 2.6], 3)
    (home / "deep7" / "g7" / "config.json").write_text(json.dumps({"sync_policy": "grouped:7", "n_layer": 2}))
    os.mkfifo(home / "fifo")
    (home / "fifo_run").mkdir()
    os.mkfifo(home / "fifo_run" / "ckpt.pt")
    (home / "run").mkdir()
    write_valid(home / "run" / "ckpt.pt", data_dir=str(home / "data"))
    write_pack(home / "small.tar.xz")
    (home / "empty.json").write_text("{}")
    (home / "notes.txt").write_text("the user's notes\n")
    (home / "kbi.py").write_text("raise KeyboardInterrupt\n")
    (home / "loop.py").write_text("while True:\n    pass\n")
    return str(home)


def tree_sha256():
    """sha256 over the repository's files that git lists (tracked, or new and not ignored): path and content."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.split(b"\0")
    h = hashlib.sha256()
    for name in sorted(n for n in names if n):
        path = os.path.join(REPO, os.fsdecode(name))
        h.update(name + b"\0")
        if os.path.isfile(path):  # a tracked file deleted hashes as its name alone
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def planted_sha256(home):
    return {name: hashlib.sha256(open(os.path.join(home, name), "rb").read()).hexdigest() for name in PLANTED}


def start(command, home):
    command = command.replace("{py}", sys.executable).replace("REPO/", REPO + "/").replace("{home}", home)
    # SIGINT and SIGHUP at their defaults whatever this test inherited (a shell's `&` ignores SIGINT)
    return subprocess.Popen(["bash", "-c", command], cwd=home, env=dict(run_env(), PYTHONPATH=REPO), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT,
                                                                                            signal.SIGHUP)])


def check(proc, home, before, code, words, timeout=120):
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = lines_beside_progress_bars(err)  # debian_docs' tqdm bars
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode == code, (proc.returncode, err)
    assert lines == [] if words is None else (len(lines) == 1 and words in lines[0]), err
    assert (tree_sha256(), planted_sha256(home)) == before, "the case changed the repository or a planted file"


@pytest.mark.parametrize("command, code, words", [  # one gate case: the default tier runs it too
    pytest.param(*c[1:], id=c[0], marks=[pytest.mark.gate] if c[0] == "plan >&-" else []) for c in CASES])
def test_issue70_case(user, command, code, words):
    before = tree_sha256(), planted_sha256(user)
    check(start(command, user), user, before, code, words)


@pytest.mark.parametrize("command, sig, after, code, words", [pytest.param(*c[1:], id=c[0]) for c in SIGNAL_CASES])
def test_issue70_stop_case(user, command, sig, after, code, words):
    before = tree_sha256(), planted_sha256(user)
    proc = start(command, user)
    time.sleep(after)
    os.killpg(proc.pid, sig)  # bash and its python: a Ctrl-C reaches the terminal's process group
    check(proc, user, before, code, words, timeout=20)
