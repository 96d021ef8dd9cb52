"""Fuzz: generated bad inputs at every entry point must be rejected cleanly.

Entry points: parse_sync_policy, GPTConfig (API: ValueError with a one-line message), configurator.parse
(the training CLI and config files: ConfigError, a ValueError), and the main(argv) of
train_reduced_sync.py, sample.py, spd_sensitivity.py, compare_runs.py and checkpoint.py (exit code != 0,
exactly one stderr line 'error: ...', no traceback). No case may leave or change a file (the fuzz
directory is compared before and after each one), and no checkpoint may run the code it carries.

The mains run in-process (fast); a handful of cases also run as real processes, concurrently, to see
the exit code and stderr a user sees.
"""
import json
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

from training.checkpoint import write_checkpoint
from training.config import ConfigError, parse
from model.gpt import GPTConfig
from model.sync_policy import parse_sync_policy
from tests.checkpoint_cases import (Payload, marker_code, tiny_checkpoint, tree_state, write_malicious,
                                    write_old_format, write_random_bytes, write_truncated, write_valid)
from tests.conftest import REPO, TINY, run_env, run_train

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

AR3, FW3, SUP2, AR11 = "\u0663", "\uff13", "\u00b2", "\u0661\u0661"  # Arabic-Indic 3, full-width 3, superscript 2

# ----------------------------------------------------------------------------- API cases
SYNC_POLICY_CASES = [
    (f"grouped:{AR3}", 12), (f"grouped:{FW3}", 12), (f"grouped:{SUP2}", 12), (f"selective:m{AR11}", 12),
    (f"selective:{AR3}-5,m11", 12), ("baseline:", 12), ("spd:", 12), ("spd:2", 12), ("parallel:1", 12),
    ("ladder:", 12), ("selective:", 12), ("selective: ", 12), ("selective:3-1,m11", 12), ("selective:m5-2,m11", 12),
    ("selective:m11,", 12), ("selective:,m11", 12), ("selective:m0,,m11", 12), ("selective:m1-", 12),
    ("selective:x1,m11", 12), ("selective:m12", 12), ("selective:m0-12", 12), ("selective:a11", 12),
    ("selective:-1,m11", 12), ("grouped:0", 12), ("grouped:5", 12), ("grouped:-3", 12), ("grouped:", 12),
    ("grouped:3:", 12), ("grouped:3.0", 12), ("grouped: 3", 12), ("fastest", 12), ("", 12), (" baseline", 12),
    ("Baseline", 12), ("baseline\n", 12), (None, 12), (3, 12), (b"baseline", 12),
    ("baseline", 0), ("baseline", -1), ("baseline", 2.0), ("baseline", True), ("baseline", "12"),
]

GOOD_CONFIG = dict(block_size=32, vocab_size=32, n_layer=2, n_head=4, n_embd=32, n_tracks=2)
GPTCONFIG_CASES = [
    dict(n_head=0), dict(n_head=-6), dict(n_embd=0), dict(n_embd=-32), dict(n_tracks=3.0), dict(n_tracks=0),
    dict(n_tracks=3), dict(n_layer=0), dict(n_layer=True), dict(n_layer=2.5), dict(vocab_size=0),
    dict(block_size=-1), dict(block_size="32"), dict(n_embd=33), dict(dropout=1.0), dict(dropout=-0.1),
    dict(dropout=float("nan")), dict(dropout="0.1"), dict(dropout=True), dict(bias="yes"), dict(bias=1),
    dict(sync_policy=f"grouped:{AR3}"), dict(sync_policy="grouped:3"), dict(sync_policy=None),
]

CLI_CASES = [  # configurator.parse, as the training script's argv
    [f"--n_layer={AR3}"], ["--n_layer=3.0"], ["--n_layer=True"], ["--n_layer=0"], ["--n_layer=-1"],
    ["--batch_size=abc"], ["--batch_size=[4]"], ["--dropout=1.0"], ["--dropout=nan"], ["--dropout=-0.5"],
    ["--learning_rate=1e999"], ["--learning_rate=-1"], [f"--learning_rate=1e-{AR3}"], ["--beta1=1.5"],
    ["--beta2=-0.1"], ["--seed=-1"], ["--seed=99999999999999999999"], ["--tp=0"], ["--device=gpu"],
    ["--dtype=half"], ["--init_from=foo"], ["--out_dir="], ["--out_dir=a\x00b"], ["--bias=1"], ["--n_layr=3"],
    ["n_layer=3"], ["--n_layer"], ["--dataset="], ["--eval_interval=0"], ["--bucket_cap_mb=0"],
    ["--grad_clip=-1.0"], [f"--sync_policy=grouped:{AR3}"], ["--sync_policy=selective:"],
    ["--sync_policy=baseline:"], ["--n_layer=2", "--sync_policy=selective:1-0"], ["--n_tracks=5"],
    ["--device=cpu", "--dtype=bfloat16"], ["--compile_backend=tvm"], ["--max_iters=-5"],
    ["--learning_rate=1e-3", "--min_lr=1e-2"], ["--rendezvous_timeout=0"], ["--overwrite=yes"],
]
CONFIG_FILES = {  # name: content (bytes), each given as the training script's config file
    "latin1.py": b"n_layer = 2  # caf\xe9\n",
    "syntax.py": b"n_layer = = 2\n",
    "unknown.py": b"n_layr = 2\n",
    "wrongtype.py": b"n_layer = '2'\n",
    "arabic.py": "n_layer = \u0663\n".encode(),
    "nan.py": b"dropout = float('nan')\n",
    "inf.py": b"learning_rate = float('inf')\n",
    "boolint.py": b"n_layer = True\n",
    "policy.py": f"sync_policy = 'grouped:{AR3}'\n".encode(),
    "raises.py": b"raise RuntimeError('boom\\nsecond line')\n",
    "json.py": b'{"n_layer": 2}\n',  # a JSON habit: a dict computed and dropped
    "compare.py": b"n_layer == 2\n",
}


@pytest.mark.parametrize("spec, n_layer", SYNC_POLICY_CASES, ids=repr)
def test_parse_sync_policy_rejects(spec, n_layer):
    with pytest.raises(ValueError) as e:
        parse_sync_policy(spec, n_layer)
    message = str(e.value)
    assert "\n" not in message and (repr(spec) in message or repr(n_layer) in message), message


@pytest.mark.parametrize("bad", GPTCONFIG_CASES, ids=repr)
def test_gptconfig_rejects(bad):
    with pytest.raises(ValueError) as e:
        GPTConfig(**{**GOOD_CONFIG, **bad})
    message = str(e.value)
    assert "\n" not in message and any(key in message for key in bad), message


@pytest.mark.parametrize("argv", CLI_CASES, ids=repr)
def test_training_cli_rejects(argv):
    with pytest.raises(ConfigError) as e:  # a ValueError
        parse(argv)
    assert "\n" not in str(e.value) and str(e.value)


@pytest.mark.parametrize("name", [*CONFIG_FILES, "missing.py", "adir.py"])
def test_config_files_rejected(fuzz_root, name):
    path = os.path.join(fuzz_root, "configs", name)
    with pytest.raises(ConfigError) as e:
        parse([path])
    named = f"grouped:{AR3}" if name == "policy.py" else path  # a cross-key check names the value
    assert "\n" not in str(e.value) and named in str(e.value), str(e.value)


# ----------------------------------------------------------------------------- files for the mains
@pytest.fixture(scope="module")
def fuzz_root(workdir, tmp_path_factory):
    """A cwd holding data/syn (the session's dataset) and every bad file the cases below name."""
    root = str(tmp_path_factory.mktemp("fuzz"))
    j = lambda *p: os.path.join(root, *p)
    os.makedirs(j("data"))
    os.symlink(os.path.join(workdir, "data", "syn"), j("data", "syn"))
    syn = lambda name: os.path.join(workdir, "data", "syn", name)
    tokens = np.fromfile(syn("train.bin"), dtype=np.uint16)
    with open(syn("meta.pkl"), "rb") as f:
        meta = f.read()

    def dataset(name, train=None, val=True, meta_bytes=meta):
        os.makedirs(j("data", name))
        if train is not None:
            with open(j("data", name, "train.bin"), "wb") as f:
                f.write(train)
        if val:
            tokens[:5000].tofile(j("data", name, "val.bin"))
        if meta_bytes is not None:
            with open(j("data", name, "meta.pkl"), "wb") as f:
                f.write(meta_bytes)

    good = tokens.tobytes()
    dataset("odd", good + b"\x01")
    dataset("badids", np.concatenate([tokens, [60000]]).astype(np.uint16).tobytes())
    dataset("tiny", tokens[:10].tobytes())
    dataset("noval", good, val=False)
    dataset("badmeta", good, meta_bytes=b"not a pickle")
    dataset("evilmeta", good, meta_bytes=pickle.dumps({"vocab_size": Payload(marker_code(j("PWNED")))}))
    dataset("novocab", good, meta_bytes=pickle.dumps({"stoi": {}, "itos": {}}))
    dataset("dirbin")
    os.makedirs(j("data", "dirbin", "train.bin"))
    dataset("bpe", good, meta_bytes=None)  # no meta.pkl: GPT-2's vocabulary (50304), not the checkpoints' 32
    os.symlink(j("nowhere"), j("dangling"))

    with open(j("afile"), "w") as f:
        f.write("a file, not a directory\n")
    os.makedirs(j("configs", "adir.py"))
    for name, content in CONFIG_FILES.items():
        with open(j("configs", name), "wb") as f:
            f.write(content)
    with open(j("prompt_latin1.txt"), "wb") as f:
        f.write(b"caf\xe9")

    c = lambda name: j("ckpts", name)
    os.makedirs(c("dir.pt"))
    write_valid(c("valid.pt"), data_dir=j("data"))
    nan = tiny_checkpoint(data_dir=j("data"))
    nan["model"]["transformer.h.0.mlp.c_fc.weight"][0, 0] = float("nan")
    write_checkpoint([c("nan.pt")], nan)
    write_malicious(c("evil.pt"), j("PWNED"))
    write_malicious(c("evil_raw.pt"), j("PWNED"), raw_pickle=True)
    write_truncated(c("trunc.pt"), c("valid.pt"))
    write_random_bytes(c("random.pt"))
    open(c("empty.pt"), "wb").close()
    write_old_format(c("old.pt"))
    import torch
    torch.save([1, 2, 3], c("list.pt"))
    torch.save({"model": tiny_checkpoint()["model"]}, c("nomodelargs.pt"))
    torch.save({**tiny_checkpoint(), "model_args": {**tiny_checkpoint()["model_args"], "n_head": 0}}, c("badargs.pt"))
    torch.save({**tiny_checkpoint(), "model_args": {**tiny_checkpoint()["model_args"], "n_embd": 64}}, c("badshape.pt"))
    torch.save({**tiny_checkpoint(), "model_args": {**tiny_checkpoint()["model_args"], "bogus": 1}}, c("extraarg.pt"))
    torch.save({k: v for k, v in tiny_checkpoint().items() if k != "config"}, c("noconfig.pt"))
    write_valid(c("nodataset.pt"), dataset="missing_ds")
    for name, source in (("resume_trunc", "trunc.pt"), ("resume_evil", "evil.pt"), ("resume_old", "old.pt"),
                         ("resume_incomplete", "valid.pt")):  # valid for sampling, not for resuming
        os.makedirs(j("runs", name))
        shutil.copy(c(source), j("runs", name, "ckpt.pt"))
    os.makedirs(j("runs", "resume_none"))
    run_train([*TINY, "--max_iters=2", "--eval_interval=1", "--eval_iters=1", "--out_dir=runs/trained"], root)

    def run_dir(name, config=b'{"sync_policy": "baseline"}', metrics=None, log=None):
        os.makedirs(j("cr", name))
        if config is not None:
            with open(j("cr", name, "config.json"), "wb") as f:
                f.write(config)
        for fname, content in (("metrics.jsonl", metrics), ("log.txt", log)):
            if content is not None:
                with open(j("cr", name, fname), "wb") as f:
                    f.write(content)

    ev = lambda **kw: (json.dumps({"type": "eval", "iter": 0, "val_loss": 3.0, "syncs_per_fwd": 4, **kw}) + "\n").encode()
    run_dir("good", metrics=ev())
    run_dir("nocfg", config=None, metrics=ev())
    run_dir("badjson", config=b"{", metrics=ev())
    run_dir("listcfg", config=b"[1, 2]", metrics=ev())
    run_dir("latin1cfg", config=b'{"sync_policy": "caf\xe9"}', metrics=ev())
    run_dir("notype", metrics=b'{"iter": 0, "val_loss": 3.0}\n')
    run_dir("notobject", metrics=b"[1, 2]\n")
    run_dir("striter", metrics=ev(iter="3"))
    run_dir("strloss", metrics=ev(val_loss="low"))
    run_dir("boolsyncs", metrics=ev(syncs_per_fwd=True))
    run_dir("noeval", metrics=b'{"type": "train", "iter": 0, "loss": 3.0}\n')
    run_dir("nothing")
    run_dir("latin1log", log=b"step 0: train loss 3.0, val loss 3.0, syncs/fwd 4 \xff\n")
    run_dir("nanloss", metrics=b'{"type": "eval", "iter": 0, "val_loss": NaN, "syncs_per_fwd": 4}\n')
    run_dir("strlayer", config=b'{"sync_policy": "baseline", "n_layer": "two"}', metrics=ev())
    return root


def entry_points():
    import training.checkpoint as checkpoint
    import analysis.compare as compare_runs
    import sample
    import spd_sensitivity
    import train_reduced_sync
    return {"train": train_reduced_sync.main, "sample": sample.main, "spd": spd_sensitivity.main,
            "compare": compare_runs.main, "convert": checkpoint.main}


TRAIN = [*TINY, "--max_iters=2", "--eval_iters=1"]  # should a case not fail, it would at least end soon
NEW_OUT = "--out_dir=runs/never"  # must not be created
S = ["--num_samples=1", "--max_new_tokens=2"]
MAIN_CASES = [
    # train_reduced_sync.py: model, data, out_dir and checkpoint problems (cwd: fuzz_root)
    ("train", [*TRAIN, NEW_OUT, f"--sync_policy=grouped:{AR3}"]),
    ("train", [*TRAIN, NEW_OUT, "--sync_policy=selective:1-0"]),
    ("train", [*TRAIN, NEW_OUT, "--n_tracks=3"]),
    ("train", [*TRAIN, NEW_OUT, "--tp=2"]),
    ("train", [*TRAIN, NEW_OUT, "--device=cuda"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=missing_ds"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=odd"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=badids"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=tiny"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=noval"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=badmeta"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=evilmeta"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=novocab"]),
    ("train", [*TRAIN, NEW_OUT, "--dataset=dirbin"]),
    ("train", [*TRAIN, "--out_dir=afile"]),
    ("train", [*TRAIN, "--out_dir=afile/sub"]),
    ("train", [*TRAIN, NEW_OUT, "--init_from=ckpts/missing.pt"]),
    *[("train", [*TRAIN, NEW_OUT, f"--init_from=ckpts/{name}"])
      for name in ("dir.pt", "evil.pt", "evil_raw.pt", "trunc.pt", "random.pt", "empty.pt", "old.pt", "list.pt",
                   "nomodelargs.pt", "badargs.pt", "badshape.pt", "extraarg.pt")],
    *[("train", [*TRAIN, f"--out_dir=runs/{name}", "--init_from=resume"])
      for name in ("resume_none", "resume_trunc", "resume_evil", "resume_old", "resume_incomplete")],
    ("train", [*TRAIN, "--out_dir=runs/missing_run", "--init_from=resume"]),
    # issue 28: a run in the way, a vocabulary mismatch, a batch that cannot fit, out_dirs that cannot be
    ("train", [*TRAIN, "--out_dir=runs/trained"]),  # a fresh run over a run
    ("train", [*TRAIN, "--out_dir=runs/trained", "--init_from=resume", "--dataset=bpe"]),
    ("train", [*TRAIN, NEW_OUT, "--init_from=runs/trained/ckpt.pt", "--dataset=bpe"]),
    ("train", [*TRAIN, NEW_OUT, "--init_from=ckpts/valid.pt", "--dataset=bpe"]),
    ("train", [*TRAIN, NEW_OUT, "--batch_size=1000000000000"]),  # issue: 10000000; this refuses on any machine
    ("train", [*TRAIN, "--out_dir=" + "x" * 300]),
    ("train", [*TRAIN, "--out_dir=dangling"]),
    ("train", [*TRAIN, "--out_dir=dangling/sub"]),
    ("train", [*TRAIN, "--out_dir=/proc/foo"]),
    # sample.py
    *[("sample", [*S, "--out_dir=ckpts", "--ckpt=valid.pt", arg]) for arg in (
        "--num_samples=0", "--num_samples=-1", f"--num_samples={AR3}", "--num_samples=1.5", "--max_new_tokens=0",
        "--temperature=0", "--temperature=-1", "--temperature=nan", "--temperature=inf", "--temperature=\u0661.5",
        "--top_k=-1", "--seed=-1", "--tp=0", "--tp=2", "--device=gpu", "--dtype=half", "--frobnicate=1",
        "--decode=graph", "--decode=fast", "--compile_mode=reduce-overhead",
        "--start=FILE:missing.txt", "--start=FILE:ckpts", "--start=FILE:prompt_latin1.txt", "--start=",
        "--start=\u00c4\u00d6")],
    *[("sample", [*S, "--out_dir=ckpts", f"--ckpt={name}"]) for name in (
        "missing.pt", "dir.pt", "evil.pt", "evil_raw.pt", "trunc.pt", "random.pt", "empty.pt", "old.pt", "list.pt",
        "nomodelargs.pt", "badargs.pt", "badshape.pt", "nan.pt", "nodataset.pt")],
    ("sample", [*S, "--out_dir=no_such_run"]),
    ("sample", [*S, "--out_dir="]),
    # spd_sensitivity.py
    *[("spd", [f"ckpts/{name}", "--device", "cpu", "--syncs", "2"]) for name in (
        "missing.pt", "evil.pt", "trunc.pt", "random.pt", "old.pt", "noconfig.pt", "nodataset.pt", "badshape.pt")],
    *[("spd", ["ckpts/valid.pt", "--device", "cpu", *extra]) for extra in (
        ["--syncs", "0"], ["--syncs", AR3], ["--syncs", "99"], ["--eval_iters", "0"], ["--batch_size", "-1"],
        ["--out", "no_dir/x.json"], ["--out", "ckpts"], ["--out", "afile/x.json"])],
    ("spd", ["ckpts/valid.pt", "--device", "gpu"]),
    ("spd", ["ckpts/valid.pt", "--device", "cuda:0"]),
    # compare_runs.py
    *[("compare", [f"cr/{name}", "--out", "cr-plot.png"]) for name in (
        "nocfg", "badjson", "listcfg", "latin1cfg", "notype", "notobject", "striter", "strloss", "boolsyncs",
        "noeval", "nothing", "latin1log", "missing_dir", "nomatch-*", "afile", "nanloss", "strlayer")],
    *[("compare", ["cr/good", "--out", out]) for out in ("plot.xyz", "ckpts", "afile/x.png", "noext")],
    ("compare", ["cr/good", "--frobnicate"]),
    ("compare", []),
    # checkpoint.py --convert
    *[("convert", ["--convert", f"ckpts/{name}"]) for name in ("missing.pt", "evil.pt", "trunc.pt", "random.pt", "dir.pt")],
    ("convert", ["--convert"]),
]


def run_in_process(main, argv, capsys):
    """(exit code, stderr) of main(argv), which may return a code or raise SystemExit."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def assert_clean_error(code, err):
    assert code not in (0, None), f"accepted: exit code {code!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), f"expected one 'error: ' line, got:\n{err}"


@pytest.mark.parametrize("entry, argv", MAIN_CASES, ids=lambda x: x if isinstance(x, str) else " ".join(x)[-80:])
def test_main_rejects_cleanly(fuzz_root, monkeypatch, capsys, entry, argv):
    monkeypatch.chdir(fuzz_root)
    before = tree_state(fuzz_root)
    code, err = run_in_process(entry_points()[entry], argv, capsys)
    assert_clean_error(code, err)
    assert tree_state(fuzz_root) == before, "a file was left, removed or changed"
    assert not os.path.exists(os.path.join(fuzz_root, "PWNED")), "a pickle payload ran"


SUBPROCESS_CASES = [  # the user's view: real processes, exit code and stderr
    ["train_reduced_sync.py", *TRAIN, NEW_OUT, f"--n_layer={AR3}"],
    ["train_reduced_sync.py", *TRAIN, NEW_OUT, "--init_from=ckpts/evil.pt"],
    ["train_reduced_sync.py", *TRAIN, "--out_dir=afile"],
    ["train_reduced_sync.py", *TRAIN, NEW_OUT, "--dataset=odd"],
    ["sample.py", "--out_dir=runs/resume_evil"],
    ["spd_sensitivity.py", "ckpts/trunc.pt", "--device", "cpu"],
    ["compare_runs.py", "cr/badjson"],
    ["-m", "training.checkpoint", "--convert", "ckpts/evil.pt"],
]


def test_cli_processes_reject_cleanly(fuzz_root):
    before = tree_state(fuzz_root)
    env = dict(run_env(), PYTHONPATH=REPO)  # python -m training.checkpoint from another directory
    procs = [subprocess.Popen([sys.executable, *(["-m"] if script == "-m" else [os.path.join(REPO, script)]), *args],
                              cwd=fuzz_root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for script, *args in SUBPROCESS_CASES]
    for case, proc in zip(SUBPROCESS_CASES, procs):
        _, err = proc.communicate(timeout=120)
        try:
            assert_clean_error(proc.returncode, err)
        except AssertionError as e:
            raise AssertionError(f"{' '.join(case)}: {e}") from None
    assert tree_state(fuzz_root) == before
    assert not os.path.exists(os.path.join(fuzz_root, "PWNED"))


def test_enough_generated_inputs():
    n = (len(SYNC_POLICY_CASES) + len(GPTCONFIG_CASES) + len(CLI_CASES) + len(CONFIG_FILES) + 2 + len(MAIN_CASES)
         + len(SUBPROCESS_CASES))
    assert n >= 60, n


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
    import io
    import lzma
    import tarfile
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with open(path, "wb") as f:
        f.write(lzma.compress(buffer.getvalue()))


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
])
def test_sweep_runners_name_a_bad_option_before_planning(module, argv, want, capsys):
    """--seeds=x said only int()'s message; --deadline=-1 was taken (and an unrelated run's state reported), and
    docs_study's --jobs=0 with --dry-run listed the runs without a word."""
    import importlib
    code, err = run_in_process(importlib.import_module(module).main, argv, capsys)
    assert_clean_error(code, err)
    assert want in err, err
