"""What the fuzz cases of tests/test_fuzz.py and tests/test_fuzz_issues.py share: the fuzz folder (the bad datasets,
config files, checkpoints, runs and run folders every case names; the session's fuzz_root fixture of
tests/conftest.py plants it), the training arguments a case starts from, and the check of a clean rejection
(exit code != 0, exactly one stderr line 'error: ...', no traceback)."""
import json
import os
import pickle
import shutil

import numpy as np

from training.checkpoint import write_checkpoint
from tests.checkpoint_cases import (Payload, marker_code, tiny_checkpoint, write_malicious, write_old_format,
                                    write_random_bytes, write_truncated, write_valid)
from tests.conftest import TINY, run_train

AR3, FW3, SUP2, AR11 = "\u0663", "\uff13", "\u00b2", "\u0661\u0661"  # Arabic-Indic 3, full-width 3, superscript 2

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


def plant_fuzz_root(workdir, root):
    """Fills root (an empty folder) with data/syn (a link to workdir's, the session's dataset) and every bad file the
    cases name; returns root."""
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


TRAIN = [*TINY, "--max_iters=2", "--eval_iters=1"]  # should a case not fail, it would at least end soon
NEW_OUT = "--out_dir=runs/never"  # must not be created


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
