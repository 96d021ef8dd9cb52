"""End-to-end tests of train_reduced_sync.py: real processes (torchrun, gloo, CPU) on a tiny model.

One reference run (one process, dropout on) anchors everything: the dp=2, tp=2 and dp=2 x tp=2
runs see the same samples and dropout masks (the data order does not depend on the layout), so
their losses must match it to float tolerance; a run killed with SIGKILL and resumed must match
it exactly; a tp=2 checkpoint resumed at tp=1 must continue it to float tolerance.
"""
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import sys
import time

import pytest
import torch

from tests.conftest import REPO, TINY, eval_records, read_metrics, run_train, run_trains, start_train, train_losses

ITERS = 20
DROPOUT = "--dropout=0.1"  # so the tests also cover dropout RNG handling


def tiny(out_dir, *extra):
    return [*TINY, DROPOUT, "--log_layer_grad_norms=True", f"--max_iters={ITERS}", f"--out_dir={out_dir}", *extra]


def layer_grad_norms(out_dir):
    """{iter: (grad_norm, {layer: its grad norm})} of the logged training steps."""
    return {r["iter"]: (r["grad_norm"], r["grad_norm_layers"]) for r in read_metrics(out_dir) if r["type"] == "train"}


@pytest.fixture(scope="module")
def first_runs(workdir, request):
    """The reference run (one process), dp=2 (world 2), dp=2 x tp=2 (world 4), and tp=2 (world 2) run as 10
    iterations then resumed to 20; the independent runs at once (run_trains: their processes spend most of
    their time starting). A copy of the tp=2 checkpoint at iteration 10 is kept for the tp=2 -> tp=1 test.
    The layout runs (14 processes) only when a selected test reads them: the slow tier needs the reference alone."""
    runs = {name: os.path.join(workdir, f"out-{name}") for name in ("ref", "dp2", "tp2", "dp2tp2")}
    if not any("layout_runs" in item.fixturenames for item in request.session.items):
        run_train(tiny(runs["ref"]), workdir)
        return {"ref": runs["ref"]}
    run_trains([tiny(runs["ref"]),
                tiny(runs["dp2"], "--tp=1"),  # tp='auto' would take tp=2
                tiny(runs["dp2tp2"], "--tp=2"),
                tiny(runs["tp2"], "--tp=2", "--max_iters=10")], workdir, nproc=[1, 2, 4, 2])
    shutil.copytree(runs["tp2"], os.path.join(workdir, "out-tp2-at10"))
    run_train(tiny(runs["tp2"], "--tp=2", "--init_from=resume"), workdir, nproc=2)
    return runs


@pytest.fixture(scope="module")
def reference_run(first_runs):
    return first_runs["ref"]


@pytest.fixture(scope="module")
def layout_runs(first_runs):
    return {name: first_runs[name] for name in ("dp2", "tp2", "dp2tp2")}


@pytest.mark.parametrize("name, dp, tp", [("dp2", 2, 1), ("tp2", 1, 2), ("dp2tp2", 2, 2)])
def test_layout_trains(layout_runs, name, dp, tp):
    out = layout_runs[name]
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert (config["tp"], config["derived"]["dp"]) == (tp, dp)
    evals = eval_records(out)
    assert sorted(evals) == [0, 5, 10, 15, 20]
    # syncs/fwd is measured from parallel.comm: 2 per layer under the baseline policy.
    assert all(e["syncs_per_fwd"] == 4 for e in evals.values())
    losses = train_losses(out)
    assert sorted(losses) == list(range(ITERS)) and all(math.isfinite(v) for v in losses.values())
    assert evals[20]["val_loss"] < evals[0]["val_loss"] - 0.3
    with open(os.path.join(out, "log.txt")) as f:
        log = f.read()
    assert "step 20: train loss" in log and "syncs/fwd 4" in log and "iter 19: loss" in log
    assert os.path.exists(os.path.join(out, "ckpt.pt")) and os.path.exists(os.path.join(out, "ckpt_best.pt"))


@pytest.mark.parametrize("name", ["dp2", "tp2", "dp2tp2"])
def test_layout_matches_single_process(reference_run, layout_runs, name):
    """Same global batch, same samples, same dropout masks: the losses of one process."""
    ref, got = train_losses(reference_run), train_losses(layout_runs[name])
    assert sorted(got) == sorted(ref)
    for it in ref:
        assert got[it] == pytest.approx(ref[it], rel=1e-4, abs=1e-5), f"iter {it}"
    ref_eval, got_eval = eval_records(reference_run), eval_records(layout_runs[name])
    assert got_eval[20]["val_loss"] == pytest.approx(ref_eval[20]["val_loss"], rel=1e-4)
    # --log_layer_grad_norms: each layer's norm (4 significant digits) as one process has it, and the layers
    # partition the parameters, so their norms add in quadrature to the global one
    ref_norms, got_norms = layer_grad_norms(reference_run), layer_grad_norms(layout_runs[name])
    for it, (norm, layers) in got_norms.items():
        assert list(layers) == ["emb", "h0", "h1", "final"], it
        assert layers == pytest.approx(ref_norms[it][1], rel=2e-3), f"iter {it}"
        assert math.sqrt(sum(v * v for v in layers.values())) == pytest.approx(norm, rel=2e-3), f"iter {it}"


def test_compiled_tp2_run_matches_single_process(workdir, reference_run):
    """--compile=True (fullgraph; aot_eager traces forward and backward without code generation)
    at tp=2 trains like the eager single process, and log.txt's syncs/fwd stays a measurement."""
    out = os.path.join(workdir, "out-compiled-tp2")
    proc = run_train(tiny(out, "--tp=2", "--max_iters=10", "--compile=True", "--compile_backend=aot_eager"), workdir,
                     nproc=2)
    assert proc.stdout.count("compiling the model (torch.compile, fullgraph=True)") == 1  # said once, before it waits
    ref, got = train_losses(reference_run), train_losses(out)
    assert sorted(got) == list(range(10))
    for it in got:
        assert got[it] == pytest.approx(ref[it], rel=1e-4, abs=1e-5), f"iter {it}"
    assert all(e["syncs_per_fwd"] == 4 for e in eval_records(out).values())


def test_tp2_checkpoint_resumes_at_tp1(workdir, reference_run, layout_runs):
    out = os.path.join(workdir, "out-tp2-at10")
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), map_location="cpu", weights_only=True)
    assert ckpt["iter_num"] == 10 and ckpt["layout"]["tp"] == 2
    # Full shapes and parameter names, whatever tp wrote it.
    assert ckpt["model"]["transformer.h.0.attn.c_attn.weight"].shape == (96, 32)
    assert ckpt["optimizer"]["state"]["transformer.h.0.mlp.c_fc.weight"]["exp_avg"].shape == (128, 32)
    run_train(tiny(out, "--init_from=resume"), workdir)  # tp=1, one process
    ref, got = train_losses(reference_run), train_losses(out)
    for it in range(10, ITERS):
        assert got[it] == pytest.approx(ref[it], rel=1e-4, abs=1e-5), f"iter {it}"
    with open(os.path.join(out, "log.txt")) as f:
        assert "resumed from" in f.read()


def wait_for(predicate, proc, timeout=120):
    deadline = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"run ended (rc {proc.returncode}) before the awaited point:\n"
                                 f"{proc.stderr.read()[-3000:]}")
        if time.time() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the run")
        time.sleep(0.01)


def last_logged_iter(out_dir):
    """Highest 'iter N: loss' line in log.txt so far (-1 if none), read while the run writes it."""
    try:
        with open(os.path.join(out_dir, "log.txt")) as f:
            lines = f.read().split("\n")[:-1]  # drop a possibly unfinished last line
    except FileNotFoundError:
        return -1
    iters = [int(line.split()[1].rstrip(":")) for line in lines if line.startswith("iter ")]
    return max(iters, default=-1)


@pytest.mark.slow
@pytest.mark.gate  # the default tier runs it: pytest.ini
def test_resume_after_sigkill_is_exact(workdir, reference_run):
    """Kill a run right after its first checkpoint; the resumed run prints exactly the reference losses."""
    out = os.path.join(workdir, "out-killed")
    ckpt = os.path.join(out, "ckpt.pt")
    # Same run as the reference, but it would go on for 10000 iterations (the lr schedule doesn't depend on max_iters).
    proc = start_train(tiny(out, "--max_iters=10000"), workdir)
    # Kill mid-way between checkpoints: the steps after the checkpoint are lost and redone.
    wait_for(lambda: os.path.exists(ckpt) and last_logged_iter(out) >= 7, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    resume_iter = torch.load(ckpt, map_location="cpu", weights_only=True)["iter_num"]
    assert resume_iter < ITERS, "the killed run got too far for the comparison"
    run_train(tiny(out, "--init_from=resume"), workdir)

    ref, got = train_losses(reference_run), train_losses(out)
    resumed = [r for r in read_metrics(out) if r["type"] == "resume"]
    assert [r["iter"] for r in resumed] == [resume_iter]
    for it in range(resume_iter, ITERS):
        assert got[it] == ref[it], f"iter {it}: resumed {got[it]!r} != uninterrupted {ref[it]!r}"
    for it in (resume_iter, ITERS):
        assert eval_records(out)[it]["val_loss"] == eval_records(reference_run)[it]["val_loss"]


def file_digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_nonfinite_loss_stops_and_keeps_checkpoint(workdir, reference_run):
    out = os.path.join(workdir, "out-diverge")
    shutil.copytree(reference_run, out)
    before = file_digest(os.path.join(out, "ckpt.pt"))
    # Resume the finished run with an absurd learning rate: it diverges within a few steps.
    proc = run_train(tiny(out, "--init_from=resume", "--max_iters=40", "--learning_rate=1e38",
                          "--decay_lr=False", "--grad_clip=0.0"), workdir, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "error: training diverged (non-finite loss/grad norm at iter " in proc.stderr
    assert "Traceback" not in proc.stderr
    assert file_digest(os.path.join(out, "ckpt.pt")) == before
    errors = [r for r in read_metrics(out) if r["type"] == "error"]
    assert len(errors) == 1 and errors[0]["iter"] >= ITERS
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), map_location="cpu", weights_only=True)
    assert ckpt["iter_num"] == ITERS and all(torch.isfinite(t).all() for t in ckpt["model"].values())


BAD_REQUESTS = [
    (["--n_layr=3"], 1, "unknown config key 'n_layr'"),
    (["--n_layer=abc"], 1, "config key 'n_layer' expects int, got 'abc'"),
    (["--sync_policy=fastest"], 1, "bad sync_policy 'fastest'"),
    (["--dataset=nonexistent"], 1, "does not have for dataset='nonexistent' (datasets with one: "),
    (["--tp=4"], 2, "tp=4 does not divide the world size 2"),
]


@pytest.fixture(scope="module")
def bad_request_runs(workdir):
    """{case index: (out_dir, CompletedProcess)} of every BAD_REQUESTS case, run at once (run_trains: each process
    mostly imports torch before it refuses), each with an out_dir of its own."""
    outs = [os.path.join(workdir, f"out-never-{i}") for i in range(len(BAD_REQUESTS))]
    procs = run_trains([[*TINY, f"--out_dir={out}", *extra] for out, (extra, _, _) in zip(outs, BAD_REQUESTS)],
                       workdir, nproc=[nproc for _, nproc, _ in BAD_REQUESTS], check=False)
    return dict(enumerate(zip(outs, procs)))


@pytest.mark.parametrize("case", range(len(BAD_REQUESTS)), ids=[" ".join(extra) for extra, _, _ in BAD_REQUESTS])
def test_bad_requests_fail_cleanly_without_out_dir(bad_request_runs, case):
    _, nproc, message = BAD_REQUESTS[case]
    out, proc = bad_request_runs[case]
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not os.path.exists(out)
    # Our message comes once, without a Python traceback from the script (torchrun adds its own summary,
    # which quotes it as each failed rank's 'traceback : error: ...').
    assert sum(line.startswith("error: ") for line in proc.stderr.splitlines()) == 1
    if nproc == 1:
        assert "Traceback" not in proc.stderr


def test_sample_is_the_same_at_tp1_and_tp2(workdir, reference_run):
    """sample.py loads the full checkpoint at any tp; TP ranks draw the same tokens as one process."""
    sample = os.path.join(REPO, "sample.py")
    args = [f"--out_dir={reference_run}", "--prompt=the ", "--num_samples=2", "--max_new_tokens=30"]
    proc, proc2 = run_trains([args, args + ["--tp=2"]], workdir, nproc=[1, 2], script=sample)  # at once
    one, two = proc.stdout, proc2.stdout
    texts = one.split("---------------\n")[:-1]
    assert len(texts) == 2 and all(t.startswith("the ") and len(t) == len("the ") + 30 + 1 for t in texts)
    assert two == one
    # on CPU --decode=auto is eager; each sample's decode rate goes to stderr, then the median of samples 2..n
    assert re.search(r"sample 2/2: 30 tokens in [0-9.]+ s, [0-9.]+ tokens/s \(decode=eager, cpu, tp=1\)", proc.stderr)
    assert re.search(r"decode: median [0-9.]+ tokens/s over samples 2-2", proc.stderr)


def test_wandb_offline_or_clear_error(workdir, monkeypatch):
    """wandb is optional: with it installed, WANDB_MODE=offline runs without network; without it,
    wandb_log=True is refused up front (before out_dir exists)."""
    out = os.path.join(workdir, "out-wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", workdir)
    proc = run_train([*TINY, f"--out_dir={out}", "--max_iters=2", "--wandb_log=True"], workdir, check=False)
    if importlib.util.find_spec("wandb") is None:
        assert proc.returncode == 1 and "wandb_log=True but wandb is not installed" in proc.stderr
        assert not os.path.exists(out)
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert eval_records(out)[2]["val_loss"] > 0


def test_finetune_from_checkpoint_under_another_policy_and_sensitivity(workdir, reference_run):
    """init_from=path/ckpt.pt starts at iteration 0 from those weights under this run's sync policy;
    spd_sensitivity.py ranks the sync points of that checkpoint and prints a valid policy."""
    import subprocess
    from tests.conftest import run_env
    ckpt = os.path.join(reference_run, "ckpt.pt")
    out = os.path.join(workdir, "out-finetune")
    scratch = os.path.join(workdir, "out-spd-scratch")
    # the three processes are independent (they read the reference checkpoint): all at once
    sensitivity = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "spd_sensitivity.py"), ckpt, "--syncs", "2", "--device", "cpu",
         "--out", os.path.join(workdir, "sens.json")], cwd=workdir, env=run_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    run_trains([tiny(out, f"--init_from={ckpt}", "--sync_policy=spd", "--max_iters=5", "--n_layer=7"),
                tiny(scratch, "--sync_policy=spd", "--max_iters=5")], workdir)
    evals = eval_records(out)
    assert evals[0]["iter"] == 0 and evals[0]["syncs_per_fwd"] == 2  # spd at the checkpoint's 2 layers
    assert evals[0]["val_loss"] < eval_records(scratch)[0]["val_loss"] - 0.1  # it starts trained

    stdout, stderr = sensitivity.communicate(timeout=240)
    result = subprocess.CompletedProcess(sensitivity.args, sensitivity.returncode, stdout, stderr)
    assert result.returncode == 0, result.stderr
    # progress: one bar per pass (each point alone, then cumulative), on stderr beside the tables on stdout
    assert "each point dropped alone" in result.stderr and "cumulative drop" in result.stderr
    assert "measuring 7 val losses" in result.stdout
    with open(os.path.join(workdir, "sens.json")) as f:
        sens = json.load(f)
    assert sorted(sens["sensitivity"]) == ["a0", "a1", "m0"]  # every point but the final m1
    order = ["a0", "m0", "a1", "m1"]
    assert sens["policy"] == "selective:" + ",".join(sorted([sens["ranking"][0], "m1"], key=order.index))
    assert [c["syncs"] for c in sens["cumulative"]] == [3, 2, 1]
