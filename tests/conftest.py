"""Shared test fixtures: a tiny synthetic character dataset and helpers to run the training script.

The dataset is written once per session into a temp work dir laid out like the repo
(data/syn/{train,val}.bin, meta.pkl), and training runs use that dir as their cwd with --data_dir=data
(the trainer reads the repository's data/<dataset>/ unless told otherwise). The text is a first-order
Markov chain over 32 symbols with peaked transitions, so a tiny model's loss falls quickly.
"""
import json
import os
import pickle
import subprocess
import sys
import traceback

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_SCRIPT = os.path.join(REPO, "train_reduced_sync.py")
if REPO not in sys.path:
    sys.path.insert(0, REPO)

SYN_VOCAB = 32
SYN_CHARS = "abcdefghijklmnopqrstuvwxyz .,;!\n"  # 32 characters: meta.pkl's itos/stoi for sample.py

# A tiny model that still exercises tracks, dp and tp.
TINY = ["--dataset=syn", "--data_dir=data", "--n_layer=2", "--n_head=4", "--n_embd=32", "--block_size=32", "--batch_size=4",
        "--n_tracks=2", "--eval_interval=5", "--eval_iters=2", "--log_interval=1",
        "--gradient_accumulation_steps=4", "--learning_rate=1e-2", "--warmup_iters=2",
        "--lr_decay_iters=20", "--min_lr=1e-3", "--device=cpu"]


def write_markov_text(data_dir, n_train=60_000, n_val=6_000, seed=0):
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(rng.dirichlet(np.full(SYN_VOCAB, 0.1), size=SYN_VOCAB), axis=1)
    draws = rng.random(n_train + n_val)
    tokens = np.empty(n_train + n_val, dtype=np.uint16)
    state = 0
    for i, u in enumerate(draws):
        state = min(int(np.searchsorted(cumulative[state], u)), SYN_VOCAB - 1)
        tokens[i] = state
    os.makedirs(data_dir, exist_ok=True)
    tokens[:n_train].tofile(os.path.join(data_dir, "train.bin"))
    tokens[n_train:].tofile(os.path.join(data_dir, "val.bin"))
    meta = {"vocab_size": SYN_VOCAB, "itos": dict(enumerate(SYN_CHARS)),
            "stoi": {c: i for i, c in enumerate(SYN_CHARS)}}
    with open(os.path.join(data_dir, "meta.pkl"), "wb") as f:
        pickle.dump(meta, f)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    """A cwd for training runs holding data/syn (the synthetic dataset)."""
    root = tmp_path_factory.mktemp("work")
    write_markov_text(os.path.join(root, "data", "syn"))
    return str(root)


@pytest.fixture(scope="session")
def fuzz_root(workdir, tmp_path_factory):
    """A cwd holding data/syn (the session's dataset) and every bad file the fuzz cases name (tests/fuzz_common.py).
    One per session: tests/test_fuzz.py and tests/test_fuzz_issues.py share it, as they did as one module, so that its
    training run and checkpoints are made once; no case changes it (test_fuzz.py's mains check so after each case)."""
    from tests.fuzz_common import plant_fuzz_root  # torch and the trainer: imported only where a fuzz test runs
    return plant_fuzz_root(workdir, str(tmp_path_factory.mktemp("fuzz")))


def run_env():
    env = dict(os.environ)
    # One thread per process: 2-core CI machines, and bit-exact repeatability between runs.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env


def train_command(args, nproc=1, script=TRAIN_SCRIPT):
    if nproc == 1:
        return [sys.executable, script, *args]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            script, *args]


def run_train(args, cwd, nproc=1, timeout=240, check=True, script=TRAIN_SCRIPT):
    """Run the training script to completion (torchrun when nproc > 1); returns CompletedProcess."""
    proc = subprocess.run(train_command(args, nproc, script), cwd=cwd, env=run_env(), capture_output=True,
                          text=True, timeout=timeout)
    if check:
        check_trained(proc)
    return proc


def check_trained(proc):
    if proc.returncode != 0:
        raise AssertionError(f"training failed (rc {proc.returncode}):\nSTDOUT:\n{proc.stdout[-4000:]}\n"
                             f"STDERR:\n{proc.stderr[-4000:]}")


def run_trains(arg_lists, cwd, nproc=1, timeout=240, check=True, script=TRAIN_SCRIPT):
    """run_train of each argument list, all started at once (for independent runs: a process spends
    most of its seconds importing torch on one core, and the machine has more than one); returns
    their CompletedProcesses in order. nproc: one for all, or a list with one per run."""
    nprocs = nproc if isinstance(nproc, list) else [nproc] * len(arg_lists)
    procs = [start_train(args, cwd, n, script) for args, n in zip(arg_lists, nprocs)]
    try:
        outputs = [proc.communicate(timeout=timeout) for proc in procs]
        done = [subprocess.CompletedProcess(proc.args, proc.returncode, *out) for proc, out in zip(procs, outputs)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    if check:
        for proc in done:
            check_trained(proc)
    return done


def start_train(args, cwd, nproc=1, script=TRAIN_SCRIPT):
    """Start the training script without waiting (for kill tests and concurrent runs)."""
    return subprocess.Popen(train_command(args, nproc, script), cwd=cwd, env=run_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Started:
    """A command started now and read later, so that it runs beside other work: its output goes to files in folder
    (a pipe that nobody reads stops a command once it is full). result(timeout) waits for it: a CompletedProcess."""

    def __init__(self, argv, folder, **popen_kwargs):
        os.makedirs(folder, exist_ok=True)
        self.files = [open(os.path.join(folder, name), "w+", encoding="utf-8") for name in ("stdout", "stderr")]
        self.proc = subprocess.Popen(argv, stdout=self.files[0], stderr=self.files[1], text=True, **popen_kwargs)

    def result(self, timeout):
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        outputs = []
        for f in self.files:
            f.seek(0)
            outputs.append(f.read())
            f.close()
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, *outputs)

    def close(self):
        """Ends it if it still runs (its test did not read it), and closes its files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in self.files:
            f.close()


def selected(request, *names):
    """The names of tests of the requesting module that this session runs, of those given."""
    return {getattr(item, "originalname", None) for item in request.session.items
            if getattr(item, "module", None) is request.module} & set(names)


def process_alive(pid):
    """True while pid runs, from /proc/PID/stat's state (Linux): a zombie, which has exited and awaits its reaper,
    counts as gone, and so does a process that ends between the open and the read (ESRCH)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def read_metrics(out_dir):
    """Records of metrics.jsonl; a line cut short by a killed run is skipped."""
    records = []
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return records


def train_losses(out_dir):
    """{iter: loss} of the logged training steps (a resumed run's later lines win)."""
    return {r["iter"]: r["loss"] for r in read_metrics(out_dir) if r["type"] == "train"}


def eval_records(out_dir):
    return {r["iter"]: r for r in read_metrics(out_dir) if r["type"] == "eval"}


def _scenarios_worker(rank, world_size, scenarios):
    out, failed = {}, None
    for name, fn in scenarios.items():
        if failed:  # the ranks may be out of step after a failure: the later scenarios are not run
            out[name] = ("error", f"not run: {failed!r} failed before it")
            continue
        try:
            out[name] = ("ok", fn(rank, world_size))
        except Exception:
            out[name], failed = ("error", traceback.format_exc()), name
    return out


def run_gloo_scenarios(scenarios, world_size=2):
    """Every fn(rank, world_size) of scenarios ({name: fn}, top-level functions) in one gloo job, in order:
    starting the ranks costs seconds. Per rank, {name: ("ok", value) or ("error", traceback)}; read with
    scenario_outcome."""
    from parallel.launch import run_on_gloo
    return run_on_gloo(_scenarios_worker, world_size, scenarios)


def scenario_outcome(results, name):
    """The scenario's value on each rank, or a failure with the rank's traceback."""
    for rank, result in enumerate(results):
        status, value = result[name]
        assert status == "ok", f"rank {rank}:\n{value}"
    return [result[name][1] for result in results]
