"""Many budgets from one run: the WSD learning rate, a trunk's branch points (save_iters), a branch
(init_from='branch') that equals a single WSD run bit for bit, and data_order='passes'."""
import math
import os
import sys
import types

import numpy as np
import pytest

from training.config import ConfigError, parse, wsd_decay_start
from data.loader import passes_read, train_offsets
from tests.conftest import TINY, eval_records, read_metrics, run_train, run_trains, train_losses
from training.step import get_lr

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests


def wsd(**kw):
    return parse(["--lr_schedule=wsd", "--learning_rate=1e-3", "--min_lr=1e-4", "--warmup_iters=10",
                  "--lr_decay_iters=100", *[f"--{k}={v}" for k, v in kw.items()]])


def test_wsd_learning_rate_at_fixed_iterations():
    cfg = wsd()
    assert wsd_decay_start(cfg) == 80
    assert get_lr(0, cfg) == pytest.approx(1e-3 * 1 / 11)  # nanoGPT's warmup
    assert get_lr(9, cfg) == pytest.approx(1e-3 * 10 / 11)
    assert get_lr(10, cfg) == get_lr(50, cfg) == get_lr(79, cfg) == 1e-3  # stable
    assert get_lr(80, cfg) == 1e-3  # the decay's first step is still the peak: 1 - sqrt(0)
    assert get_lr(85, cfg) == pytest.approx(1e-4 + 0.9e-3 * (1 - math.sqrt(0.25)))  # 1 - sqrt
    assert get_lr(99, cfg) == pytest.approx(1e-4 + 0.9e-3 * (1 - math.sqrt(19 / 20)))
    assert get_lr(100, cfg) == get_lr(500, cfg) == 1e-4
    # before its decay a WSD schedule does not depend on the budget: the trunk is every budget's start
    longer = wsd(lr_decay_iters=400)
    assert all(get_lr(it, longer) == get_lr(it, cfg) for it in range(80))
    assert get_lr(80, parse(["--lr_decay_iters=100", "--warmup_iters=10"])) < get_lr(80, cfg)  # cosine is the default


def test_wsd_and_branch_settings_are_checked():
    with pytest.raises(ConfigError, match=r"cooldown_frac=1\.5.*\(0, 1\]"):
        wsd(cooldown_frac=1.5)
    with pytest.raises(ConfigError, match="decay would start at iteration 50, inside the warmup of warmup_iters=60"):
        wsd(cooldown_frac=0.5, warmup_iters=60)
    with pytest.raises(ConfigError, match=r"save_iters='256,x'.*'x' is not an iteration"):
        parse(["--save_iters=256,x"])
    with pytest.raises(ConfigError, match="a branch needs both --init_from=branch and --branch_from"):
        parse(["--init_from=branch"])
    with pytest.raises(ConfigError, match="branch_from needs init_from='branch'"):
        parse(["--branch_from=out/ckpt_8.pt"])
    with pytest.raises(ConfigError, match="invalid lr_schedule='linear'; allowed: cosine, wsd"):
        parse(["--lr_schedule=linear"])


# a WSD schedule whose budgets 10 and 20 decay from iterations 8 and 16; the trunk goes to 16 at constant rate
WSD_TINY = [*TINY, "--lr_schedule=wsd", "--cooldown_frac=0.2", "--eval_interval=4", "--data_order=passes"]


@pytest.mark.gate  # the default tier runs it: pytest.ini
def test_a_branch_equals_a_single_wsd_run_bit_for_bit(workdir, tmp_path):
    single = os.path.join(tmp_path, "out-wsd-single")
    trunk, branch = os.path.join(tmp_path, "out-wsd-trunk"), os.path.join(tmp_path, "out-wsd-branch")
    split = os.path.join(tmp_path, "out-wsd-branch-split")  # below: a branch stopped at 9, then resumed
    branch_args = [*WSD_TINY, "--lr_decay_iters=10", "--init_from=branch",
                   f"--branch_from={os.path.join(trunk, 'ckpt_8.pt')}", f"--out_dir={split}"]
    # independent runs go at once (run_trains): the single run and the trunk, then two branches of the trunk
    run_trains([[*WSD_TINY, "--max_iters=10", "--lr_decay_iters=10", f"--out_dir={single}"],
                [*WSD_TINY, "--max_iters=16", "--lr_decay_iters=20", "--save_iters=8,16", f"--out_dir={trunk}"]], workdir)
    assert sorted(n for n in os.listdir(trunk) if n.startswith("ckpt_") and n[5].isdigit()) == ["ckpt_16.pt", "ckpt_8.pt"]
    trunk_files = {n: os.path.getmtime(os.path.join(trunk, n)) for n in os.listdir(trunk)}
    proc, _ = run_trains([[*WSD_TINY, "--max_iters=10", "--lr_decay_iters=10", "--init_from=branch",
                           f"--branch_from={os.path.join(trunk, 'ckpt_8.pt')}", f"--out_dir={branch}"],
                          [*branch_args, "--max_iters=9"]], workdir)
    assert "branched from" in proc.stdout
    # the trunk is left as it was
    assert {n: os.path.getmtime(os.path.join(trunk, n)) for n in os.listdir(trunk)} == trunk_files
    whole, cut = train_losses(single), train_losses(branch)
    assert sorted(cut) == list(range(8, 10)) and all(cut[i] == whole[i] for i in cut)  # bit-equal losses
    assert eval_records(branch)[10]["val_loss"] == eval_records(single)[10]["val_loss"]
    lrs = {r["iter"]: r["lr"] for r in read_metrics(branch) if r["type"] == "train"}
    assert lrs == {i: r["lr"] for i, r in ((r["iter"], r) for r in read_metrics(single) if r["type"] == "train")
                   if i >= 8}
    # a branch stopped at 9 and resumed in its own out_dir (the same command plus --init_from=resume) goes on exactly
    proc = run_train([*branch_args, "--max_iters=10", "--init_from=resume"], workdir)
    assert "resumed from" in proc.stdout and "branched from" not in proc.stdout
    assert train_losses(split) == cut
    # the trunk's losses up to the branch point are the single run's too (constant rate until 8)
    assert all(train_losses(trunk)[i] == whole[i] for i in range(8))
    assert eval_records(trunk)[16]["passes"] == pytest.approx(16 * 16 / ((60_000 - 1) // 32))


@pytest.mark.gate  # the default tier runs it: pytest.ini
def test_a_trunk_trains_its_branches_in_its_own_process_bit_for_bit(workdir, tmp_path):
    """branches=: once the trunk ends, its process trains each cooldown branch from the branch point, with the model
    it built (and, on a GPU, compiled) already; each equals the branch a process of its own trains, bit for bit,
    and its config.json is that process's but for out_dir. A branch whose out_dir holds a run is left alone."""
    import json
    trunk, own = os.path.join(tmp_path, "out-trunk"), {b: os.path.join(tmp_path, f"out-own-{b}") for b in (10, 20)}
    inline = {b: os.path.join(tmp_path, f"out-inline-{b}") for b in (10, 20)}
    inline[20], own[20] = os.path.join(tmp_path, "check", "inline"), os.path.join(tmp_path, "check", "own")  # below
    proc = run_train([*WSD_TINY, "--max_iters=16", "--lr_decay_iters=20", "--save_iters=8,16",
                      f"--branches=20:{inline[20]},10:{inline[10]}", f"--out_dir={trunk}"], workdir)
    assert proc.stdout.count("branched from") == 2
    run_trains([[*WSD_TINY, f"--max_iters={b}", f"--lr_decay_iters={b}", "--init_from=branch",
                 f"--branch_from={os.path.join(trunk, f'ckpt_{b * 4 // 5}.pt')}", f"--out_dir={own[b]}"]
                for b in (10, 20)], workdir)
    for b in (10, 20):
        assert sorted(train_losses(inline[b])) == list(range(b * 4 // 5, b))
        assert train_losses(inline[b]) == train_losses(own[b])  # bit-equal
        assert {i: r["val_loss"] for i, r in eval_records(inline[b]).items()} == \
               {i: r["val_loss"] for i, r in eval_records(own[b]).items()}
        configs = [json.load(open(os.path.join(d, "config.json"))) for d in (inline[b], own[b])]
        for c in configs:
            c.pop("out_dir"), c.pop("derived")
        assert configs[0] == configs[1] and configs[0]["branches"] == "" and configs[0]["max_iters"] == b
    # gpu.sh branchcheck's report of such a pair (there on the GPU, with the processes' times)
    from experiments.large_budgets.branch_check import report
    lines = report(os.path.join(tmp_path, "check"), 100.0, 101.0, 103.5)
    assert "largest train-loss difference over 4 logged iterations: 0.00e+00" in lines
    assert any(line.startswith("final val loss: inline ") and line.endswith("(+0.00e+00)") for line in lines)
    own_line = next(line for line in lines if line.startswith("own branch's process: 2.5 s from launch to exit"))
    inline_loop = float(own_line.split("the inline branch's loop ")[1].split(" s")[0])
    assert own_line.endswith(f"spares {2.5 - inline_loop:.1f} s")
    trunk_log = open(os.path.join(trunk, "log.txt")).read()
    assert f"branch 10: trained in this process from {os.path.join(trunk, 'ckpt_8.pt')} into {inline[10]}" in trunk_log
    # again, over the same branch dirs: the trunk resumes (nothing to train) and leaves the branches as they are
    before = {b: open(os.path.join(inline[b], "metrics.jsonl")).read() for b in (10, 20)}
    proc = run_train([*WSD_TINY, "--max_iters=16", "--lr_decay_iters=20", "--save_iters=8,16", "--init_from=resume",
                      f"--branches=10:{inline[10]},20:{inline[20]}", f"--out_dir={trunk}"], workdir)
    assert proc.stdout.count("holds a run already") == 2
    assert before == {b: open(os.path.join(inline[b], "metrics.jsonl")).read() for b in (10, 20)}


def test_a_sweep_whose_trunks_train_their_branches(workdir, tmp_path, monkeypatch, capsys):
    """docs_study's --branches-in-trunk: one trainer process per chain, the runner collecting the branches the trunk
    trained; every run's losses equal those of the same sweep with a process per branch."""
    from experiments import runner
    from experiments.docs_study.run import budget_runs, trim_keeps
    monkeypatch.chdir(workdir)  # the runner's trainers read data/syn from their cwd
    losses = {}
    for in_trunk in (True, False):
        root = str(tmp_path / f"root-{in_trunk}")
        scratch = os.path.join(root, "scratch")
        runs = trim_keeps(budget_runs("config/docs_124m.py", [10, 20], ["ladder"], [1337], "sweep", scratch,
                                      [*TINY, "--eval_interval=4"], in_trunk=in_trunk), root, scratch)
        args = types.SimpleNamespace(root=root, scratch=scratch, jobs=2, dry_run=False, smoke=True, allow_cpu=False,
                                     deadline=None, poll=0.2, status_every=60.0)
        assert runner.sweep(runs, args) == 0
        assert capsys.readouterr().out.count("(trained by its trunk's process)") == (2 if in_trunk else 0)
        losses[in_trunk] = {r.name: train_losses(r.final_dir(root)) for r in runs}
        launched = sorted(name[:-4] for name in os.listdir(os.path.dirname(runs[0].scratch_dir(scratch)))
                          if name.endswith(".out"))
        assert launched == sorted(r.name for r in (runs[:1] if in_trunk else runs))
        if in_trunk:  # what the sweep's status line says of a trunk training its branches: the last one begun
            assert runner.in_trunk_branch(runs[0], scratch, 16) == (20, 19)
    assert losses[True] == losses[False] and len(losses[True]) == 3
    # the closing table calls the times concurrent only when the sweep ran runs side by side (a 1-GPU chain did not)
    assert runner.table_row("r", ("complete", 488.0), 63.4, concurrent=False).endswith("488 s  median 63.4 ms/iter")
    assert runner.table_row("r", ("complete", 0), 63.4, concurrent=True).endswith("ms/iter (concurrent runs)")


def test_a_trunk_at_tp2_trains_its_branch_as_a_process_of_its_own_would(workdir, tmp_path):
    """branches= under torchrun (tp=2): every rank trains the branch (rank 0 decides whether its out_dir is free),
    and its losses are those of the branch launched on its own at tp=2, bit for bit."""
    trunk, inline, own = (os.path.join(tmp_path, name) for name in ("trunk", "inline-10", "own-10"))
    proc = run_train([*WSD_TINY, "--max_iters=8", "--lr_decay_iters=20", "--save_iters=8", f"--branches=10:{inline}",
                      f"--out_dir={trunk}"], workdir, nproc=2)
    assert "world 2 = dp 1 x tp 2" in proc.stdout and "branched from" in proc.stdout
    run_train([*WSD_TINY, "--max_iters=10", "--lr_decay_iters=10", "--init_from=branch",
               f"--branch_from={os.path.join(trunk, 'ckpt_8.pt')}", f"--out_dir={own}"], workdir, nproc=2)
    assert sorted(train_losses(inline)) == [8, 9] and train_losses(inline) == train_losses(own)


def test_a_compiled_trunks_branches_reuse_its_compiled_model(workdir, tmp_path):
    """--compile=True (inductor on CPU, as the GPU runs compile): the trunk's process trains its branches without
    compiling again (no dynamo recompile after the first branch begins) and with the losses a branch compiled in its
    own process has (one thread: bit for bit)."""
    import subprocess
    from tests.conftest import run_env, train_command
    trunk, inline, own = (os.path.join(tmp_path, name) for name in ("trunk", "inline-20", "own-20"))
    compiled = [*WSD_TINY, "--compile=True"]
    proc = subprocess.run(train_command([*compiled, "--max_iters=16", "--lr_decay_iters=20", "--save_iters=8,16",
                                         f"--branches=10:{inline}-10,20:{inline}", f"--out_dir={trunk}"]),
                          cwd=workdir, env=run_env() | {"TORCH_LOGS": "recompiles"}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    before, branching, after = proc.stdout.partition("branch 10: trained in this process")
    assert branching and "compiling the model" in before and "Recompiling function" not in after, after[-3000:]
    run_train([*compiled, "--max_iters=20", "--lr_decay_iters=20", "--init_from=branch",
               f"--branch_from={os.path.join(trunk, 'ckpt_16.pt')}", f"--out_dir={own}"], workdir, timeout=600)
    assert sorted(train_losses(inline)) == [16, 17, 18, 19] and train_losses(inline) == train_losses(own)
    assert eval_records(inline)[20]["val_loss"] == eval_records(own)[20]["val_loss"]


def test_a_stop_during_a_branch_of_the_trunks_process_leaves_it_resumable(workdir, tmp_path):
    """SIGTERM while the trunk's process trains a branch: the process stops within seconds after a step, with the
    branch's checkpoint in the branch's out_dir and its stop line in the branch's log (exit 143), resumable there."""
    import signal
    import time
    from tests.conftest import start_train
    from tests.test_kill import logged_iters, wait_until
    trunk, branch = os.path.join(tmp_path, "trunk"), os.path.join(tmp_path, "branch-10000")
    # cooldown_frac 0.999: the budget 10000 branches at iteration 10, then decays for 9990 iterations
    proc = start_train([*TINY, "--lr_schedule=wsd", "--cooldown_frac=0.999", "--max_iters=10", "--lr_decay_iters=10000",
                        "--save_iters=10", "--eval_interval=100000", f"--branches=10000:{branch}",
                        f"--out_dir={trunk}"], workdir)
    assert wait_until(lambda: len(logged_iters(branch)) > 3, proc), proc.communicate()[1][-3000:]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and time.monotonic() - t0 <= 5.0, err[-3000:]
    assert os.path.exists(os.path.join(branch, "ckpt.pt")) and "Traceback" not in err
    assert "stopped by SIGTERM" in open(os.path.join(branch, "log.txt")).read()
    stop = [r for r in read_metrics(branch) if r["type"] == "stop"]
    assert len(stop) == 1 and 10 < stop[0]["iter"] < 10000


def test_gpu_sh_branchcheck_runs_on_cpu(workdir, tmp_path):
    """gpu.sh branchcheck, the device check of a trunk's in-process branch, with a tiny model on CPU: both branches
    train and the report finds their losses equal."""
    import subprocess
    from tests.conftest import REPO, run_env
    tiny = [a for a in TINY if not a.startswith("--data_dir")] + [f"--data_dir={os.path.join(workdir, 'data')}",
                                                                   "--batch_size=2", "--gradient_accumulation_steps=1"]
    proc = subprocess.run(["bash", "experiments/large_budgets/gpu.sh", "branchcheck", "256", *tiny], cwd=REPO,
                          env=run_env() | {"STUDY_DIR": str(tmp_path), "OUT": str(tmp_path / "out"),  # its python3: ours
                                           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (tmp_path / "out" / "branchcheck-256.txt").read_text()
    assert "largest train-loss difference over 40 logged iterations: 0.00e+00" in report, report
    assert "own branch's process: " in report and (tmp_path / "out" / "trunk.out").exists()


def test_branches_are_checked_before_training():
    for bad, says in ((["--branches=10:out-b"], "needs lr_schedule='wsd'"),
                      (["--lr_schedule=wsd", "--save_iters=8", "--max_iters=16", "--branches=20:out-b"],
                       r"invalid branches item '20:out-b'.*branch point .* is in save_iters='8'"),
                      (["--lr_schedule=wsd", "--save_iters=8", "--max_iters=4", "--branches=10:out-b"],
                       r"<= max_iters=4"),
                      (["--lr_schedule=wsd", "--save_iters=8", "--max_iters=16", "--branches=10"], r"BUDGET:out_dir"),
                      (["--lr_schedule=wsd", "--save_iters=8", "--max_iters=16", "--out_dir=t", "--branches=10:t"],
                       "an out_dir of its own"),
                      (["--lr_schedule=wsd", "--save_iters=8", "--max_iters=16", "--branches=10:b", "--wandb_log=True"],
                       "wandb_log=True")):
        with pytest.raises(ConfigError, match=says):
            parse(["--warmup_iters=2", *bad])
    cfg = parse(["--lr_schedule=wsd", "--warmup_iters=2", "--save_iters=8,16", "--max_iters=16",
                 "--branches=20:b20, 10:b10"])
    from training.config import branch_list
    assert branch_list(cfg) == [(10, "b10"), (20, "b20")]


def test_a_branch_must_continue_its_trunk(workdir, tmp_path):
    trunk = os.path.join(tmp_path, "out-wsd-trunk2")
    run_train([*WSD_TINY, "--max_iters=8", "--lr_decay_iters=20", "--save_iters=8", f"--out_dir={trunk}"], workdir)
    source = f"--branch_from={os.path.join(trunk, 'ckpt_8.pt')}"
    seed, early = run_trains([
        [*WSD_TINY, "--max_iters=10", "--lr_decay_iters=10", "--init_from=branch", source, "--seed=7",
         f"--out_dir={os.path.join(tmp_path, 'out-b1')}"],
        # budget 5 decays from iteration 4, before the branch point 8: not the trunk's rate
        [*WSD_TINY, "--max_iters=5", "--lr_decay_iters=5", "--init_from=branch", source,
         f"--out_dir={os.path.join(tmp_path, 'out-b2')}"]], workdir, check=False)
    assert seed.returncode == 1 and "was trained with seed=1337, this branch has seed=7" in seed.stderr
    assert early.returncode == 1 and "learning rate differs from the trunk's before it (iteration 4" in early.stderr
    assert not os.path.exists(os.path.join(tmp_path, "out-b1")) and not os.path.exists(os.path.join(tmp_path, "out-b2"))


def passes_cfg(**kw):
    return types.SimpleNamespace(**{**dict(data_order="passes", gradient_accumulation_steps=2, batch_size=3,
                                           block_size=8), **kw})


def test_passes_read_every_window_once_per_pass():
    n_tokens = 8 * 30 + 1  # 30 windows, 6 sequences per iteration: 5 iterations a pass
    c = passes_cfg()
    seq = np.concatenate([train_offsets(7, it, n_tokens, c).ravel() for it in range(20)]) // 8  # 4 passes
    passes = seq.reshape(4, 30)
    for k in range(4):
        assert sorted(passes[k].tolist()) == list(range(30))  # every window once in each pass
    assert len({tuple(p) for p in passes.tolist()}) == 4  # each pass its own order
    one_pass = passes_cfg(data_order="one_pass")
    assert all(np.array_equal(train_offsets(7, it, n_tokens, c), train_offsets(7, it, n_tokens, one_pass))
               for it in range(5))  # the first pass is one_pass's order
    assert not np.array_equal(train_offsets(8, 5, n_tokens, c), train_offsets(7, 5, n_tokens, c))  # keyed by seed
    # 7 sequences a step over 30 windows: iteration 4 straddles passes 0 and 1, and still reads each once
    odd = passes_cfg(gradient_accumulation_steps=1, batch_size=7)
    seq = np.concatenate([train_offsets(7, it, n_tokens, odd).ravel() for it in range(60)]) // 8
    assert all(sorted(seq[30 * k:30 * (k + 1)].tolist()) == list(range(30)) for k in range(14))
    assert passes_read(c, n_tokens, 10) == 2.0 and passes_read(odd, n_tokens, 6) == pytest.approx(42 / 30)


def test_passes_resume_mid_pass_is_exact(workdir, tmp_path):
    """syn's train split holds 1,874 windows of 32 and an iteration reads 16: 150 iterations are 1.28
    passes; a run stopped mid-pass (iteration 130, in pass 1) and resumed reads what the whole run reads."""
    args = [*TINY, "--data_order=passes", "--max_iters=150", "--eval_interval=65", "--log_interval=5",
            "--lr_decay_iters=150"]
    whole, split = os.path.join(tmp_path, "out-passes"), os.path.join(tmp_path, "out-passes-split")
    run_trains([[*args, f"--out_dir={whole}"], [*args, f"--out_dir={split}", "--max_iters=130"]], workdir)
    run_train([*args, f"--out_dir={split}", "--init_from=resume"], workdir)
    assert train_losses(split) == train_losses(whole) and max(train_losses(whole)) == 145
    assert eval_records(whole)[150]["passes"] == pytest.approx(150 * 16 / 1874)
    assert "passes 1.28" in open(os.path.join(whole, "log.txt")).read()


def finish(run, root, scratch):
    """Lay out a finished run's logs in the sweep directory, as the runner collects them."""
    import json
    from experiments.runner import planned_config
    final = run.final_dir(root)
    os.makedirs(final)
    cfg = planned_config(run, scratch)
    with open(os.path.join(final, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(final, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"type": "eval", "iter": cfg["max_iters"], "val_loss": 3.0}) + "\n")


def test_budget_plan_chains_branch_points_and_what_is_left(tmp_path):
    """docs_study run: one trunk and a branch per budget, each branch needing its trunk's checkpoint at 0.8 of
    its budget; a trunk keeps only the branch points of branches not done, is not trained when none is left,
    and is trained again when a branch still needs a branch point that is gone."""
    from experiments.runner import run_state
    from experiments.docs_study.run import budget_runs, trim_keeps
    root, scratch = str(tmp_path), str(tmp_path / "scratch")
    runs = budget_runs("config/docs_124m.py", [320, 640], ["grouped:12"], [1338], "sweep", scratch)
    trunk, b320, b640 = runs
    assert [r.name for r in runs] == ["d768-trunk512-grouped12-s1338", "d768-b320-grouped12-s1338",
                                      "d768-b640-grouped12-s1338"]
    assert b320.needs == os.path.join(trunk.scratch_dir(scratch), "ckpt_256.pt") and trunk.keep == {"ckpt_256.pt",
                                                                                                 "ckpt_512.pt"}
    assert "--save_iters=256,512" in trunk.args and "--lr_decay_iters=640" in trunk.args
    assert "--max_iters=512" in trunk.args and "--lr_decay_iters=320" in b320.args and "--init_from=branch" in b320.args
    finish(b320, root, scratch)
    assert trim_keeps(runs, root, scratch) == runs and trunk.keep == {"ckpt_512.pt"}
    finish(trunk, root, scratch)  # finished on a machine that is gone: its branch point for b640 with it
    assert run_state(trunk, root, scratch) == "start"
    finish(b640, root, scratch)
    assert trim_keeps(budget_runs("config/docs_124m.py", [320, 640], ["grouped:12"], [1338], "sweep", scratch),
                      root, scratch)[0].keep == set()  # nothing left to keep: the finished trunk stays done
    os.rename(trunk.final_dir(root), trunk.final_dir(root) + "-away")
    assert [r.name for r in trim_keeps(budget_runs("config/docs_124m.py", [320, 640], ["grouped:12"], [1338],
                                                   "sweep", scratch), root, scratch)] == [b320.name, b640.name]


def test_a_budget_plan_with_branches_in_the_trunk(tmp_path):
    """in_trunk: the trunk's --branches names each branch's scratch dir, each branch waits for the trunk's end, and a
    branch already done leaves the trunk's list (its branch point with it)."""
    from experiments.docs_study.run import budget_runs, trim_keeps
    root, scratch = str(tmp_path), str(tmp_path / "scratch")
    trunk, b320, b640 = runs = budget_runs("config/docs_124m.py", [320, 640], ["spd"], [1338], "sweep", scratch,
                                           in_trunk=True)
    assert f"--branches=320:{b320.scratch_dir(scratch)},640:{b640.scratch_dir(scratch)}" in trunk.args
    assert b320.after == b640.after == trunk.name and b320.needs.endswith("ckpt_256.pt")
    finish(b320, root, scratch)
    trim_keeps(runs, root, scratch)
    assert [a for a in trunk.args if a.startswith(("--branches=", "--save_iters="))] == \
        ["--save_iters=512", f"--branches=640:{b640.scratch_dir(scratch)}"]
    assert budget_runs("config/docs_124m.py", [320], ["spd"], [1338], "sweep", scratch)[1].after is None


def test_rerun_check_against_a_case_by_hand(tmp_path):
    """docs_study budgets' rerun_check.md: a trunk trained twice (earlier/ then runs/), its mean relative val-loss
    difference over the common evals from iteration 256 on, and the t-interval over pairs."""
    import json
    from experiments.docs_study.run import rerun_check

    def trunk(folder, name, device, losses):
        path = tmp_path / folder / name
        path.mkdir(parents=True)
        layout = {"type": "layout"} | ({"device_name": device} if device else {})
        evals = [{"type": "eval", "iter": it, "val_loss": v} for it, v in losses.items()]
        (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [layout, *evals]) + "\n")

    # pair 1: +1% and +3% at iterations 256 and 512 (iteration 0 is left out): mean +2%
    trunk("earlier", "d768-trunk512-ladder-s1", None, {0: 10.0, 256: 4.0, 512: 2.0})
    trunk("runs", "d768-trunk512-ladder-s1", "NVIDIA H100", {0: 9.0, 256: 4.04, 512: 2.06})
    # pair 2: −2% at 256 only (the shorter trunk bounds the common evals): mean −2%
    trunk("runs", "d768-trunk256-spd-s1", None, {256: 5.0})
    trunk("runs", "d768-trunk512-spd-s1", None, {256: 4.9, 512: 3.0})
    text = rerun_check(str(tmp_path))
    assert "| ladder | 1 | earlier/d768-trunk512-ladder-s1 (not logged) | runs/d768-trunk512-ladder-s1 (NVIDIA H100) " \
           "| 256-512 (2) | +2.000% | +1.00% to +3.00% |" in text
    assert "| spd | 1 | runs/d768-trunk256-spd-s1 (not logged) | runs/d768-trunk512-spd-s1 (not logged) | 256-256 (1) " \
           "| -2.000% |" in text
    # mean 0, sample std sqrt(8) = 2.828, t(0.975, 1 df) = 12.706: half-width 12.706 * 2.828 / sqrt(2) = 25.41
    assert "- all: +0.00 ± 25.41% (mean ± 95% t half-width over 2 pairs, 1 df)" in text
    assert "H100 against another" not in text  # one such pair gives no interval


def test_cosine_plan_is_one_run_per_budget():
    """docs_study run --schedule cosine: per (seed, policy) one cosine run per budget, decayed over all of it,
    with the branches' data order, no trunk and no checkpoint to branch from; logs under the sweep's cosine/."""
    from experiments.docs_study.run import cosine_runs
    runs = cosine_runs("config/docs_124m.py", [1280, 320], ["ladder"], [1337], "sweep/cosine")
    assert [r.name for r in runs] == ["d768-b320-ladder-s1337", "d768-b1280-ladder-s1337"]
    for run, b in zip(runs, (320, 1280)):
        assert {"--lr_schedule=cosine", "--data_order=passes", f"--max_iters={b}", f"--lr_decay_iters={b}",
                "--sync_policy=ladder", "--seed=1337"} <= set(run.args)
        assert not any(a.startswith(("--init_from", "--save_iters")) for a in run.args) and not run.needs
        assert run.final_dir(".") == os.path.join(".", "sweep", "cosine", run.name)


def test_cosine_check_pairs_each_budget_with_its_cosine_run(tmp_path):
    """docs_study budgets: with runs under cosine/, cosine_check.md sets each branch's paired gap against the
    cosine run of the same budget and seed. Here the cosine runs are part 3's stored 640-iteration ones, so the
    table must repeat wsd_check.md's row for the same seeds."""
    import shutil
    from experiments.docs_study.run import budget_report
    stored = os.path.join("experiments", "docs_study")
    for seed in (1337, 1338):
        for tag in ("baseline", "ladder"):
            shutil.copytree(os.path.join(stored, "budgets", "runs", f"d768-b640-{tag}-s{seed}"),
                            tmp_path / "runs" / f"d768-b640-{tag}-s{seed}")
            shutil.copytree(os.path.join(stored, "one_budget", "runs", f"d768-{tag}-s{seed}"),
                            tmp_path / "cosine" / f"d768-b640-{tag}-s{seed}")
    versus_glob = str(tmp_path / "cosine" / "d768-*")
    assert budget_report(str(tmp_path), versus_glob) == 0
    wsd_rows = [line for line in (tmp_path / "wsd_check.md").read_text().splitlines() if "| ladder |" in line]
    check = (tmp_path / "cosine_check.md").read_text()
    cosine_rows = [line for line in check.splitlines() if line.startswith("| 768 |") and "| ladder |" in line]
    assert len(cosine_rows) == 1 and "| 768 | 640 | ladder | 1337,1338 |" in cosine_rows[0]
    assert cosine_rows[0].split("|")[5:] == wsd_rows[0].split("|")[5:]
    # the cosine runs' own trend: the runs of --versus are the same runs here, so none is counted twice
    [trend_row] = [line for line in check.splitlines() if line.startswith("| w768 n4 | ladder |")]
    assert "(cosine/ alone)" in check and trend_row.split("|")[4].strip().endswith("(2) better")


def test_cosine_trend_adds_part3_runs_only_at_the_budgets_cosine_lacks(tmp_path):
    """cosine_check.md's second table: the cosine runs' own paired gaps, with part 3's cosine runs of the same
    policies and seeds at the budgets cosine/ lacks; the 640 cell must be part 3's gap for those seeds, the 2560
    cell the stored cosine runs', each seed's numbers recomputed here from the logs' final val loss."""
    import glob
    from analysis.compare import budget_table
    from experiments.docs_study.run import cosine_budgets, load_run
    stored = os.path.join("experiments", "docs_study")
    cosine = [load_run(d) for d in sorted(glob.glob(os.path.join(stored, "budgets", "cosine", "d768-b2560-*-s133[78]")))]
    part3_glob = os.path.join(stored, "one_budget", "runs", "d768-*")
    part3 = [load_run(d) for d in sorted(glob.glob(part3_glob))]
    trend, added = cosine_budgets(cosine, part3)
    table = budget_table(trend, 1.0)
    # baseline, ladder, spd and grouped:12 of seeds 1337-1338 at 640 iterations; part 3's other policies left out
    assert added == 8
    [row] = [line for line in table.splitlines() if "| ladder |" in line]

    def mean_gap(runs, budget):
        final = {(r["policy"], r["seed"]): r["final_val"] for r in runs if r["setting"][-1] == budget}
        gaps = [100 * (final["ladder", s] / final["baseline", s] - 1) for s in (1337, 1338)]
        return sum(gaps) / 2
    cells = row.split("|")
    assert f"{mean_gap(part3, 640):+.2f}%" in cells[4] and "(2)" in cells[4]
    assert f"{mean_gap(cosine, 2560):+.2f}%" in cells[5] and "(2)" in cells[5]


def test_budgets_refuses_a_glob_that_matches_nothing(tmp_path, capsys):
    """Issue 53: `budgets --versus '/nonexistent/*'` exited 0 and rewrote the stored wsd_check.md,
    cosine_check.md and budget.png from fewer runs. A glob or sweep that matches nothing now stops in one
    line and leaves every stored file as it was."""
    import hashlib
    import pytest
    from experiments.docs_study.run import main
    sweep = os.path.join("experiments", "docs_study", "budgets")
    stored = {name: hashlib.sha256(open(os.path.join(sweep, name), "rb").read()).hexdigest()
              for name in ("wsd_check.md", "cosine_check.md", "budget.png")}
    for argv, named in ((["budgets", "--versus", str(tmp_path / "nonexistent" / "*")], "--versus"),
                        (["budgets", "--sweep", str(tmp_path / "nonexistent")], "--sweep")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert str(stop.value).startswith(f"error: {named} ") and "nothing written" in str(stop.value)
    assert stored == {name: hashlib.sha256(open(os.path.join(sweep, name), "rb").read()).hexdigest()
                      for name in stored}
