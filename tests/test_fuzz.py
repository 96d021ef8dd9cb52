"""Fuzz: generated bad inputs at every entry point must be rejected cleanly.

Entry points: parse_sync_policy, GPTConfig (API: ValueError with a one-line message), configurator.parse
(the training CLI and config files: ConfigError, a ValueError), and the main(argv) of
train_reduced_sync.py, sample.py, spd_sensitivity.py, compare_runs.py and checkpoint.py (exit code != 0,
exactly one stderr line 'error: ...', no traceback). No case may leave or change a file (the fuzz
directory is compared before and after each one), and no checkpoint may run the code it carries.

The mains run in-process (fast); a handful of cases also run as real processes, concurrently, to see
the exit code and stderr a user sees. The cases issues named one by one (the launch environment, the closing fuzz
passes): tests/test_fuzz_issues.py; the fuzz folder and the checks both use: tests/fuzz_common.py.
"""
import os
import subprocess
import sys

import pytest

from training.config import ConfigError, parse
from model.gpt import GPTConfig
from model.sync_policy import parse_sync_policy
from tests.checkpoint_cases import tree_state
from tests.conftest import REPO, run_env
from tests.fuzz_common import AR3, AR11, CONFIG_FILES, FW3, NEW_OUT, SUP2, TRAIN, assert_clean_error, run_in_process

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

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
    ["n_layer=3"], ["--n_layer"], ["--dataset="], ["--eval_interval=0"], ["--checkpoint_every=0"],
    ["--bucket_cap_mb=0"], ["--grad_clip=-1.0"], [f"--sync_policy=grouped:{AR3}"], ["--sync_policy=selective:"],
    ["--sync_policy=baseline:"], ["--n_layer=2", "--sync_policy=selective:1-0"], ["--n_tracks=5"],
    ["--device=cpu", "--dtype=bfloat16"], ["--compile_backend=tvm"], ["--max_iters=-5"],
    ["--learning_rate=1e-3", "--min_lr=1e-2"], ["--rendezvous_timeout=0"], ["--overwrite=yes"],
]


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


# ----------------------------------------------------------------------------- the mains (the fuzz folder: fuzz_root)
def entry_points():
    import training.checkpoint as checkpoint
    import analysis.compare as compare_runs
    import sample
    import spd_sensitivity
    import train_reduced_sync
    return {"train": train_reduced_sync.main, "sample": sample.main, "spd": spd_sensitivity.main,
            "compare": compare_runs.main, "convert": checkpoint.main}


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
