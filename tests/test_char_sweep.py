"""experiments/char_sweep/run.py and the runner it drives (experiments/runner.py): the grid, the BPE extra seeds' configs, paired initialization, and a CPU smoke
run of the machinery (tiny model, synthetic data): logs copied, checkpoints gone, finished runs skipped,
a stopped run resumed from its scratch checkpoint to the losses of an uninterrupted one, the pack."""
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO, run_env

from experiments import runner
from experiments.char_sweep import run as char_sweep

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests

SMOKE_RUNS = ["w384-n6-baseline-s1337", "w384-n6-grouped6-s1337"]
SMOKE_ARGS = ["w384-n6-s1337", "--smoke", "--policies", "baseline,grouped6", "--set", "dataset=syn", "--poll", "0.2"]


def sweep(workdir, *args, check=True):
    proc = subprocess.run([sys.executable, "-m", "experiments.char_sweep.run", *args, "--workdir", workdir], cwd=REPO,
                          env=run_env(), capture_output=True, text=True, timeout=180)
    if check and proc.returncode != 0:
        raise AssertionError(f"experiments.char_sweep.run failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def evals(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return {r["iter"]: r["val_loss"] for r in records if r["type"] == "eval"}


# ---------------------------------------------------------------- the grid
def test_grid():
    runs = char_sweep.runs_of("char")
    names = [r.name for r in runs]
    assert len(names) == len(set(names)) == 3 * 2 * 7 * 3
    assert names[:7] == [f"w384-n2-{p}-s1337" for p in
                         ("baseline", "spd", "parallel", "ladder", "grouped2", "grouped3", "grouped6")]
    # the sub-parts of each width x n_tracks part cover it exactly, seed by seed
    for part in ("w384-n2", "w384-n6", "w192-n2", "w192-n6", "w768-n2", "w768-n6"):
        whole = [r.name for r in char_sweep.runs_of(part)]
        assert whole == [n for s in (1337, 1338, 1339) for n in (r.name for r in char_sweep.runs_of(f"{part}-s{s}"))]
    syncs = {"baseline": 12, "spd": 6, "parallel": 6, "ladder": 12, "grouped:2": 3, "grouped:3": 2, "grouped:6": 1}
    from model.sync_policy import parse_sync_policy
    for r in runs:
        cfg = runner.planned_config(r, "scratch")
        width, tracks = int(r.name.split("-")[0][1:]), int(r.name.split("-")[1][1:])
        assert (cfg["n_embd"], cfg["n_tracks"], cfg["seed"], cfg["sync_policy"]) == (width, tracks, r.seed, r.policy)
        assert cfg["n_head"] % cfg["n_tracks"] == 0 and cfg["tp"] == 1 and cfg["max_iters"] == 5000
        assert parse_sync_policy(cfg["sync_policy"], cfg["n_layer"]).n_syncs == syncs[r.policy]
        assert cfg["out_dir"] == os.path.join("scratch", "experiments_char_sweep_runs", r.name)  # never experiments/
    assert [r.name for r in char_sweep.runs_of("w768-n6", policies={"grouped6"}, seeds={1338})] == \
        ["w768-n6-grouped6-s1338"]
    # several parts at once: in the order given, each run once
    both = [r.name for r in char_sweep.runs_of("w384-n6,w384-n2-s1339,w384-n6-s1338")]
    assert both == [r.name for r in char_sweep.runs_of("w384-n6")] + [r.name for r in char_sweep.runs_of("w384-n2-s1339")]
    with pytest.raises(runner.SweepError, match="unknown part 'w999'"):
        char_sweep.runs_of("w384-n6,w999")


@pytest.mark.parametrize("part", ["bpe1", "bpe2", "bpe3"])
def test_bpe_extra_seeds_repeat_the_stored_runs(part):
    """Each new seed of the BPE sweep has the stored seed-1337 run's config but for seed and out_dir."""
    runs = char_sweep.runs_of(part)
    assert len(runs) == 6 and {r.seed for r in runs} == {1338, 1339}
    for r in runs:
        base, seed = r.name.split("_seed")
        with open(os.path.join(REPO, "experiments", "shakespeare_sweep", "runs", base, "config.json")) as f:
            stored = json.load(f)
        planned = runner.planned_config(r, "scratch")
        assert stored["seed"] == 1337 and planned["seed"] == int(seed)
        diff = sorted(k for k in stored if k not in ("seed", "out_dir", "derived") and planned.get(k) != stored[k])
        assert not diff, f"{r.name} differs from the stored {base} in {diff}"
        # keys the trainer gained after the stored runs: torch.compile settings, unused by these eager runs,
        # data_order, whose default is the only order there was, issue 28's out_dir/launch settings (where
        # the data and the run live, not what is computed), tp_async_grad (off: how tp>1 communicates), and
        # issue 37's WSD and branch keys (off by default: cosine, no branch, no kept checkpoints), and
        # eval_batch_size (0: batch_size, the only eval batch there was), issue 70's stall_timeout (when a stopped
        # peer ends the run: nothing computed), issue 71's sequence_parallel and tp_comm_overlap (off: how tp>1
        # communicates), checkpoint_every (1: a checkpoint at every eval, as there was), log_layer_grad_norms
        # (what a log line holds, not what is computed) and branches (none: a trunk's branches in its process)
        assert set(planned) - set(stored) <= {"compile_backend", "compile_mode", "data_order", "overwrite",
                                              "data_dir", "rendezvous_timeout", "stall_timeout", "tp_async_grad",
                                              "sequence_parallel", "tp_comm_overlap",
                                              "lr_schedule",
                                              "cooldown_frac", "branch_from", "save_iters", "keep_best",
                                              "eval_batch_size", "checkpoint_every", "log_layer_grad_norms",
                                              "branches"}
        assert planned["checkpoint_every"] == 1
        assert planned["eval_batch_size"] == 0
        assert planned["lr_schedule"] == "cosine" and planned["save_iters"] == planned["branch_from"] == "" \
            == planned["branches"]
        assert planned["compile"] is False and planned["data_order"] == "random"
    assert sorted(r.name.split("_seed")[0] for p in ("bpe1", "bpe2", "bpe3") for r in char_sweep.runs_of(p)) == \
        sorted(2 * ["grouped_2sync", "grouped_3sync", "grouped_4sync", "grouped_6sync", "spd_12sync", "parallel_12sync",
                    "selective_9sync", "datadriven_9sync", "datadriven_6sync"])


def test_a_seed_gives_every_policy_and_n_tracks_the_same_init():
    """The trainer's init: torch.manual_seed(seed), then GPT(...) draws the full weights. The parameters do not
    depend on the policy (nor on n_tracks), so a seed pairs every run of a width; another seed differs."""
    import torch
    from model.gpt import GPT, GPTConfig

    def init(policy, tracks, seed):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(block_size=32, vocab_size=76, n_layer=6, n_head=6, n_embd=48, dropout=0.2,
                              bias=False, n_tracks=tracks, sync_policy=policy))
        return model.state_dict()

    ref = init("baseline", 2, 1337)
    for policy in char_sweep.CHAR_POLICIES:
        for tracks in char_sweep.CHAR_TRACKS:
            sd = init(policy, tracks, 1337)
            assert sd.keys() == ref.keys()
            assert all(torch.equal(sd[k], ref[k]) for k in ref), (policy, tracks)
    other = init("baseline", 2, 1338)
    assert not torch.equal(other["transformer.h.0.attn.c_attn.weight"], ref["transformer.h.0.attn.c_attn.weight"])


# ---------------------------------------------------------------- the machinery, on CPU
@pytest.fixture(scope="module")
def smoke(workdir):
    """Two smoke runs of one part, with a pack; the sweep dirs land under workdir/out-sweep-smoke."""
    pack_dir = os.path.join(workdir, "pack")
    proc = sweep(workdir, *SMOKE_ARGS, "--pack", pack_dir)
    return workdir, pack_dir, proc.stdout


def test_smoke_runs_keep_logs_only(smoke):
    workdir, pack_dir, out = smoke
    root = os.path.join(workdir, "out-sweep-smoke")
    for name in SMOKE_RUNS:
        run = os.path.join(root, "experiments", "char_sweep", "runs", name)
        assert sorted(os.listdir(run)) == ["config.json", "log.txt", "metrics.jsonl"]
        assert sorted(evals(run)) == [0, 2, 4]  # the eval at max_iters: finished
        with open(os.path.join(run, "config.json")) as f:
            cfg = json.load(f)
        assert (cfg["seed"], cfg["n_tracks"], cfg["dataset"]) == (1337, 6, "syn")
    scratch = os.path.join(root, "scratch", "experiments_char_sweep_runs")
    assert sorted(os.listdir(scratch)) == sorted([*SMOKE_RUNS, *(f"{n}.out" for n in SMOKE_RUNS), runner.SWEEP_MARK])
    with open(os.path.join(scratch, runner.SWEEP_MARK)) as f:  # where a pack of scratch's logs unpacks them
        assert f.read() == os.path.join("experiments", "char_sweep", "runs") + "\n"
    for name in SMOKE_RUNS:  # the checkpoints are gone; the logs stay, for a command that gets a fresh tree
        assert sorted(os.listdir(os.path.join(scratch, name))) == ["config.json", "log.txt", "metrics.jsonl"]
    # the sweep's own folders (the session's workdir also holds other tests' training runs)
    assert not [f for top in (root, pack_dir) for _, _, files in os.walk(top) for f in files if f.endswith(".pt")]
    with tarfile.open(os.path.join(pack_dir, runner.PACK_NAME)) as tar:
        assert sorted(tar.getnames()) == sorted(f"experiments/char_sweep/runs/{n}/{f}" for n in SMOKE_RUNS
                                                for f in ("config.json", "log.txt", "metrics.jsonl"))
    assert "2 runs: 0 done (0 collected from scratch), 2 to run" in out


def test_pack_collects_runs_whose_logs_left_the_sweep_dir(smoke):
    """A lent machine copies a fresh working tree with each command, which removed the sweep dirs of runs that had
    finished under an earlier command while the sweep still ran (the size sweep of the session of 8e7c63c lost 37
    of 79 runs so). The pack collects them again from scratch, where their logs stay."""
    import shutil
    from types import SimpleNamespace
    workdir, pack_dir, _ = smoke
    root = os.path.join(workdir, "out-sweep-smoke")
    runs = char_sweep.runs_of("w384-n6-s1337", sets=["--dataset=syn"], smoke=True, policies={"baseline", "grouped6"})
    gone = runs[0].final_dir(root)
    shutil.rmtree(gone)
    again = os.path.join(workdir, "pack-again")
    runner.pack(runs, SimpleNamespace(pack=again, root=root, scratch=os.path.join(root, "scratch")))
    assert sorted(os.listdir(gone)) == ["config.json", "log.txt", "metrics.jsonl"] and sorted(evals(gone)) == [0, 2, 4]
    with tarfile.open(os.path.join(again, runner.PACK_NAME)) as tar, \
            tarfile.open(os.path.join(pack_dir, runner.PACK_NAME)) as first:
        assert sorted(tar.getnames()) == sorted(first.getnames())


def test_the_sweeps_end_collects_runs_whose_logs_left_the_sweep_dir(smoke):
    """The sweep's last check, unfinished(), counts a run whose sweep dir a fresh working tree removed while the
    sweep ran as finished once it has collected it again from scratch (a 4-run sweep on 4x H200 ended 'incomplete'
    with all four runs complete so); a run that did not finish anywhere stays unfinished."""
    import shutil
    workdir, _, _ = smoke
    root = os.path.join(workdir, "out-sweep-smoke")
    runs = char_sweep.runs_of("w384-n6-s1337", sets=["--dataset=syn"], smoke=True, policies={"baseline", "grouped6"})
    gone = runs[1].final_dir(root)
    shutil.rmtree(gone)
    assert runner.unfinished(runs, root, os.path.join(root, "scratch")) == []
    assert sorted(os.listdir(gone)) == ["config.json", "log.txt", "metrics.jsonl"] and sorted(evals(gone)) == [0, 2, 4]
    elsewhere = os.path.join(workdir, "nowhere")
    assert runner.unfinished(runs, elsewhere, os.path.join(elsewhere, "scratch")) == [r.name for r in runs]


def test_finished_runs_are_skipped_and_a_changed_plan_is_refused(smoke):
    workdir, _, _ = smoke
    run = os.path.join(workdir, "out-sweep-smoke", "experiments", "char_sweep", "runs", SMOKE_RUNS[0], "metrics.jsonl")
    mtime = os.path.getmtime(run)
    out = sweep(workdir, *SMOKE_ARGS).stdout
    assert "2 runs: 2 done (0 collected from scratch), 0 to run" in out and os.path.getmtime(run) == mtime
    proc = sweep(workdir, *SMOKE_ARGS, "--set", "eval_iters=3", check=False)
    assert proc.returncode == 1 and "differs from the plan in ['eval_iters']" in proc.stderr


def test_stopped_run_resumes_from_scratch_checkpoint(smoke):
    """A run stopped after its iteration-2 checkpoint (made here by the trainer with max_iters=2, then its
    config.json given the planned max_iters, as a killed run leaves it) is resumed by the sweep and ends
    with the losses of the uninterrupted smoke run."""
    workdir, _, _ = smoke
    root = os.path.join(workdir, "resumed")
    (run,) = char_sweep.runs_of("w384-n6-s1337", sets=["--dataset=syn"], smoke=True, policies={"grouped6"})
    scratch = os.path.join(root, "scratch")
    partial = subprocess.run([sys.executable, runner.TRAIN_SCRIPT, *run.argv(scratch, ["--max_iters=2"])],
                             cwd=workdir, env=run_env(), capture_output=True, text=True, timeout=120)
    assert partial.returncode == 0, partial.stderr[-2000:]
    tmp = run.scratch_dir(scratch)
    with open(os.path.join(tmp, "config.json")) as f:
        cfg = json.load(f)
    cfg["max_iters"] = 4
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    assert runner.run_state(run, root, scratch) == "resume"
    out = sweep(workdir, *SMOKE_ARGS, "--policies", "grouped6", "--jobs", "1", "--root", root,
                "--scratch", scratch).stdout
    assert "1 resume from scratch checkpoints" in out
    final = run.final_dir(root)
    with open(os.path.join(final, "log.txt")) as f:
        assert "resumed from" in f.read()
    reference = evals(os.path.join(workdir, "out-sweep-smoke", "experiments", "char_sweep", "runs", SMOKE_RUNS[1]))
    assert evals(final) == pytest.approx(reference, abs=1e-5)
    assert sorted(os.listdir(tmp)) == ["config.json", "log.txt", "metrics.jsonl"]  # no checkpoint left


def test_a_fresh_tree_collects_finished_runs_from_scratch(smoke):
    """The device tool sends a fresh working tree with every command: runs finished by an earlier command
    on the same machine are not in it. The sweep takes their logs from scratch and trains nothing."""
    workdir, _, _ = smoke
    old_root = os.path.join(workdir, "out-sweep-smoke")
    fresh_root = os.path.join(workdir, "fresh-tree")
    out = sweep(workdir, *SMOKE_ARGS, "--root", fresh_root, "--scratch", os.path.join(old_root, "scratch")).stdout
    assert "2 runs: 2 done (2 collected from scratch), 0 to run" in out and "start" not in out
    for name in SMOKE_RUNS:
        new, old = (os.path.join(r, "experiments", "char_sweep", "runs", name) for r in (fresh_root, old_root))
        for log in ("config.json", "log.txt", "metrics.jsonl"):
            with open(os.path.join(new, log)) as a, open(os.path.join(old, log)) as b:
                assert a.read() == b.read(), (name, log)


def test_collect_finished_scratch_run_and_deadline(smoke):
    workdir, _, _ = smoke
    root, scratch = os.path.join(workdir, "collect"), os.path.join(workdir, "collect-scratch")
    (run,) = char_sweep.runs_of("w384-n6-s1337", sets=["--dataset=syn"], smoke=True, policies={"baseline"})
    # a run that finished in scratch but whose logs were not copied yet (the sweep was killed in between)
    shutil.copytree(os.path.join(workdir, "out-sweep-smoke", "experiments", "char_sweep", "runs", SMOKE_RUNS[0]),
                    run.scratch_dir(scratch))
    assert runner.run_state(run, root, scratch) == "collect"
    out = sweep(workdir, *SMOKE_ARGS, "--policies", "baseline", "--root", root, "--scratch", scratch).stdout
    assert "1 runs: 1 done (1 collected from scratch), 0 to run" in out
    assert os.path.exists(os.path.join(run.final_dir(root), "log.txt"))
    # a deadline before any run can finish: the run is stopped, the exit code says 'incomplete'
    proc = sweep(workdir, *SMOKE_ARGS, "--policies", "grouped6", "--root", root, "--scratch", scratch,
                 "--deadline", "0.3", check=False)
    assert proc.returncode == 3 and ("stopped at deadline" in proc.stdout or "not started" in proc.stdout)
    assert not os.path.exists(os.path.join(root, "experiments", "char_sweep", "runs", SMOKE_RUNS[1]))


def test_docs_parts_plan_the_124m_study():
    """Part 3 (issue 26): 10 policies from 24 syncs per forward down to 1, 3 seeds, one pass of >= 20M tokens."""
    from model.sync_policy import parse_sync_policy
    runs = char_sweep.runs_of("d768")
    assert len(runs) == len({r.name for r in runs}) == 30
    syncs = {}
    for r in runs:
        cfg = runner.planned_config(r, "scratch")
        assert (cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["block_size"], cfg["n_tracks"]) == (12, 12, 768, 1024, 4)
        assert cfg["dataset"] == "debian_docs" and cfg["data_order"] == "one_pass" and cfg["compile"] and cfg["tp"] == 1
        tokens = cfg["max_iters"] * cfg["gradient_accumulation_steps"] * cfg["batch_size"] * cfg["block_size"]
        assert tokens >= 20_000_000 and cfg["lr_decay_iters"] == cfg["max_iters"] and cfg["seed"] == r.seed
        syncs[r.policy] = parse_sync_policy(cfg["sync_policy"], cfg["n_layer"]).n_syncs
    assert sorted(syncs.values()) == [1, 2, 3, 4, 6, 9, 12, 12, 24, 24]
    # the second width differs from the first in n_embd alone
    for a, b in zip(char_sweep.runs_of("d768-s1338"), char_sweep.runs_of("d384-s1338")):
        ca, cb = runner.planned_config(a, "s"), runner.planned_config(b, "s")
        assert {k for k in ca if ca[k] != cb[k]} == {"n_embd", "out_dir"}
    assert [r.name for r in char_sweep.runs_of("d768", policies={"selective9"}, seeds={1339})] == \
        ["d768-selective9-s1339"]
