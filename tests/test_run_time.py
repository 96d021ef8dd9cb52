"""experiments/run_time.py, the runner's --hold: a run's expected seconds from the stored runs like it (its
policy at its width; another policy's ratio where both ran at another width; none of its width: no estimate), and
a sweep that starts only the runs expected to end before the machine goes back."""
import json
import os
import types

import pytest

from training.config import parse
from experiments import runner
from experiments.hold import HOLD_MARGIN_S, hold_check, hold_plan
from experiments.runner import Run, SweepError, check_args
from experiments.run_time import START_S, UNSEEN_POLICY_FACTOR, expected_seconds, stored_rates, study_folders

TINY_MODEL = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2", "--n_tracks=2"]


def stored(folder, name, policy, n_embd, seconds, iters, first_ms):
    run = folder / name
    run.mkdir(parents=True)
    config = parse(plan(policy, n_embd).args).to_dict()  # as the trainer records it
    (run / "config.json").write_text(json.dumps(config))
    records = [{"type": "train", "iter": 0, "time_ms": first_ms}, {"type": "train", "iter": 10, "time_ms": 5.0},
               {"type": "summary", "seconds": seconds, "trained_iters": iters}]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")


@pytest.fixture
def study(tmp_path):
    # width 32: baseline 0.01 s an iteration (after a 20-s first one), spd twice as slow as it at width 64
    stored(tmp_path / "w32" / "cosine", "a", "baseline", 32, 20 + 4000 * 0.01, 4000, 20_000)
    stored(tmp_path / "w32" / "cosine", "b", "baseline", 32, 20 + 4000 * 0.03, 4000, 20_000)
    stored(tmp_path / "w32" / "runs", "c", "baseline", 32, 20 + 100 * 0.05, 100, 20_000)  # too short to count
    stored(tmp_path / "w64" / "cosine", "d", "baseline", 64, 10 + 2000 * 0.1, 2000, 10_000)
    stored(tmp_path / "w64" / "cosine", "e", "spd", 64, 10 + 2000 * 0.2, 2000, 10_000)
    return tmp_path


def plan(policy, n_embd=32, extra=()):
    return Run("r", "w32/runs", [*TINY_MODEL[:2], f"--n_embd={n_embd}", *TINY_MODEL[3:], f"--sync_policy={policy}",
                                 "--max_iters=1000", *extra], policy, 1, "g")


def test_expected_seconds_from_the_runs_like_it(study):
    base = plan("baseline")
    rates = stored_rates(study_folders(base, str(study)))
    # the median of the two 4000-iteration runs' rates (0.01, 0.03), their first iteration, the process's start
    assert expected_seconds(base, base.argv("s"), str(study), rates) == pytest.approx(START_S + 20 + 1000 * 0.02)
    spd = plan("spd")  # not run at width 32: the baseline's rate here times spd's ratio at width 64 (2)
    assert expected_seconds(spd, spd.argv("s"), str(study), rates) == pytest.approx(START_S + 20 + 1000 * 0.04)
    ladder = plan("ladder")  # run at no width: the slowest policy here, times the unseen policy's factor
    assert expected_seconds(ladder, ladder.argv("s"), str(study), rates) == \
        pytest.approx(START_S + 20 + 1000 * 0.02 * UNSEEN_POLICY_FACTOR)
    wide = plan("baseline", n_embd=48)  # no stored run of the model: no estimate
    assert expected_seconds(wide, wide.argv("s"), str(study), rates) is None
    # a WSD trunk whose process trains its branches: 800 + (600 - 480) + (1000 - 800) iterations; a branch from
    # its trunk's checkpoint at 480 to 600
    wsd = ["--lr_schedule=wsd", "--lr_decay_iters=1000", "--warmup_iters=10"]
    trunk = plan("baseline", extra=[*wsd, "--max_iters=800", "--save_iters=480,800",
                                    f"--branches=600:{study}/b600,1000:{study}/b1000"])
    assert expected_seconds(trunk, trunk.argv("s"), str(study), rates) == pytest.approx(START_S + 20 + 1120 * 0.02)
    branch = plan("baseline", extra=[*wsd, "--max_iters=600", "--lr_decay_iters=600", "--init_from=branch",
                                     f"--branch_from={study}/trunk/ckpt_480.pt"])
    assert expected_seconds(branch, branch.argv("s"), str(study), rates) == pytest.approx(START_S + 20 + 120 * 0.02)


def test_a_run_past_the_hold_is_not_started_nor_are_its_branches(study, tmp_path, capsys):
    base = plan("baseline")
    expected = START_S + 20 + 1000 * 0.02
    assert hold_check(base, base.argv("s"), str(study), expected + HOLD_MARGIN_S, {}) is None
    assert hold_check(base, base.argv("s"), str(study), expected, {}) == \
        f"not started: expected {expected:.0f} s, {expected:.0f} s of the hold left"
    # a sweep held for 60 s: the trunk (expected 70 s) is not started, and the branch waiting for its checkpoint
    # says why instead of 'blocked'; nothing was launched, and the same command goes on later (exit 3)
    trunk = plan("baseline")
    trunk.name = "trunk"
    branch = Run("branch", "w32/runs", trunk.args, "baseline", 1, "g",
                 needs=str(tmp_path / "scratch" / "w32_runs" / "trunk" / "ckpt_800.pt"))
    args = types.SimpleNamespace(root=str(study), scratch=str(tmp_path / "scratch"), jobs=1, dry_run=False,
                                 smoke=True, allow_cpu=False, deadline=None, poll=0.1, status_every=60.0, hold=60.0)
    assert runner.sweep([trunk, branch], args) == 3
    out = capsys.readouterr().out
    assert "trunk not started: expected 70 s, 60 s of the hold left" in out, out
    assert "branch not started: its trunk trunk is past the hold" in out and "blocked" not in out
    assert not (tmp_path / "scratch" / "w32_runs" / "trunk.out").exists()
    args.dry_run = True  # --dry-run --hold: each run that would start, with its estimate
    assert runner.sweep([trunk, branch], args) == 0
    assert "start   trunk (expected 70 s): python " in capsys.readouterr().out


@pytest.mark.parametrize("hold", [0.0, -1.0, float("nan"), float("inf")])
def test_a_hold_that_no_machine_has_is_refused(tmp_path, hold):
    args = types.SimpleNamespace(jobs=1, deadline=None, status_every=60.0, root=str(tmp_path),
                                 scratch=str(tmp_path / "s"), pack=None, hold=hold)
    with pytest.raises(SweepError, match=r"--hold=.*: must be the seconds > 0"):
        check_args(args)


def test_the_hold_plan_fills_one_gpu_best_and_keeps_a_chain_whole(study, tmp_path, capsys):
    # at width 32 a run of n iterations is expected START_S + 20 + 0.02 n s: 1000 iterations 70 s, 500 60 s
    def chain(name, iters):
        r = plan("baseline", extra=[f"--max_iters={iters}"])
        r.name = name
        return r
    first, second, third = chain("first", 1000), chain("second", 500), chain("third", 500)
    states = {r.name: "start" for r in (first, second, third)}
    scratch = str(tmp_path / "scratch")
    # 150 s held: first-fit in the grid's order would start first (70 s) and then neither 60-s run (70 + 60 + the
    # 30-s margin > 150); the plan starts second and third, 120 of 120 s
    assert hold_plan([first, second, third], states, scratch, str(study), 150.0, {}) == \
        ({"first": "not started: left out of the hold's plan, expected 70 s; the 2 chains it starts fill 120 of 120 s"},
         {})
    # a hold that all of them fit leaves none out
    assert hold_plan([first, second, third], states, scratch, str(study), 220.0, {}) == ({}, {})
    # equally full plans: the earlier chain is kept
    assert list(hold_plan([second, third], states, scratch, str(study), 100.0, {})[0]) == ["third"]
    # a branch whose process starts from the trunk's checkpoint is in the trunk's chain: 70 + 60 s, more than the
    # 100 s held, so the chain is left to hold_check (which names the trunk's own estimate), and second runs
    branch = chain("branch", 500)
    branch.needs = str(tmp_path / "scratch" / "w32_runs" / "first" / "ckpt_800.pt")
    states["branch"] = "start"
    assert hold_plan([first, branch, second], states, scratch, str(study), 130.0, {}) == ({}, {})
    # 160 s held: the chain's 130 s fill the 130 better than second and third's 120
    assert set(hold_plan([first, branch, second, third], states, scratch, str(study), 160.0, {})[0]) == \
        {"second", "third"}
    # the dry run marks what the plan leaves out
    args = types.SimpleNamespace(root=str(study), scratch=scratch, jobs=1, dry_run=True, smoke=True, allow_cpu=False,
                                 deadline=None, poll=0.1, status_every=60.0, hold=150.0)
    assert runner.sweep([first, second, third], args) == 0
    out = capsys.readouterr().out
    assert "== the hold's plan leaves out 1 chains: first" in out
    assert "start   first (expected 70 s; left out of the hold's plan): python " in out
    assert "start   second (expected 60 s): python " in out and "start   third (expected 60 s): python " in out
    # the sweep does not start what the plan leaves out, though it could start first (second and third wait for a
    # checkpoint of a stored trunk that no run writes, so nothing trains here), and says why
    for r in (second, third):
        r.needs = str(tmp_path / "scratch" / "w32_runs" / "stored_trunk" / "ckpt_100.pt")
    args.dry_run = False
    assert runner.sweep([first, second, third], args) == 1  # 1: the two blocked runs
    out = capsys.readouterr().out
    assert "first not started: left out of the hold's plan, expected 70 s; the 2 chains it starts fill 120 of 120 s" \
        in out, out
    assert not (tmp_path / "scratch" / "w32_runs" / "first.out").exists()


def test_the_plan_keeps_the_grids_first_chain_for_a_little_fill(study, tmp_path):
    """The fullest packing of a 1,005-s hold is a + b (about 1,002 s) and leaves out base, the first chain of the grid
    (a seed's baseline, which every gap of the seed needs); base + b fill about 982 s, within FILL_SLACK (5%) of it,
    so the plan keeps base and leaves a out. A chain that would cost more than the slack is not kept (the test
    above: first, 70 s, against second and third's 120)."""
    def chain(name, iters):
        r = plan("baseline", extra=[f"--max_iters={iters}"])
        r.name = name
        return r
    runs = [chain("base", 20000), chain("a", 21000), chain("b", 24000)]  # about 450, 470 and 530 s
    states = {r.name: "start" for r in runs}
    out, gpu = hold_plan(runs, states, str(tmp_path / "scratch"), str(study), 1035.0, {})
    assert list(out) == ["a"] and gpu == {}, out
    from experiments import hold
    weights = [451, 471, 531]
    assert hold.fullest(weights, 1005, [0, 1, 2]) == 1002 and hold.pack_one_gpu(weights, 1005, [0, 1, 2]) == [0, 2]
    assert hold.pack_one_gpu(weights, 1005, [1, 2]) == [1, 2]  # without base: the fullest


def test_on_two_gpus_the_plan_packs_each_and_a_chain_starts_on_its_own(study, tmp_path, capsys, monkeypatch):
    """--jobs 2 under --hold: the plan fills GPU 0, then GPU 1 from the chains left, and each kept chain's runs
    start on their GPU only, one at a time there (without that rule b started beside a on GPU 0, where c's GPU was
    free)."""
    def chain(name, iters):
        r = plan("baseline", extra=[f"--max_iters={iters}"])
        r.name = name
        return r
    runs = [chain("a", 1000), chain("b", 500), chain("c", 500), chain("d", 1000), chain("e", 500)]  # 70, 60, 60, 70, 60 s
    states = {r.name: "start" for r in runs}
    scratch = str(tmp_path / "scratch")
    # 160 s held, 130 a GPU: a + b fill GPU 0 (of the 130-s pairs, the earliest), c + d GPU 1; e fits neither
    out, gpu = hold_plan(runs, states, scratch, str(study), 160.0, {}, gpus=2)
    assert gpu == {"a": 0, "b": 0, "c": 1, "d": 1}
    assert out == {"e": "not started: left out of the hold's plan, expected 60 s; the 4 chains it starts fill 260 of "
                        "260 s"}

    launched = []  # (run, CUDA_VISIBLE_DEVICES), in the order started

    class Finished:  # a process that ends at its second poll, having trained nothing
        returncode = 0

        def __init__(self, argv, env, stdout, stderr):
            out_dir = next(a for a in argv if a.startswith("--out_dir="))
            launched.append((os.path.basename(out_dir), env.get("CUDA_VISIBLE_DEVICES")))
            self.polls = 0

        def poll(self):
            self.polls += 1
            return 0 if self.polls > 1 else None
    monkeypatch.setattr(runner.subprocess, "Popen", Finished)
    monkeypatch.setattr(runner, "cuda_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    args = types.SimpleNamespace(root=str(study), scratch=scratch, jobs=2, dry_run=True, smoke=False, allow_cpu=False,
                                 deadline=None, poll=0.01, status_every=60.0, hold=160.0)
    assert runner.sweep(runs, args) == 0
    text = capsys.readouterr().out
    assert "start   b (expected 60 s, GPU 0): python " in text and "start   d (expected 70 s, GPU 1): python " in text
    assert "start   e (expected 60 s; left out of the hold's plan): python " in text
    args.dry_run = False
    runner.sweep(runs, args)  # every run "fails" (nothing trained): only the order and the GPUs matter here
    assert launched == [("a", "0"), ("c", "1"), ("b", "0"), ("d", "1")], launched
    assert "e not started: left out of the hold's plan" in capsys.readouterr().out


def test_the_plan_keeps_no_chain_of_a_seed_without_its_waiting_baseline(study, tmp_path):
    """Seed 2's baseline (b2) and spd chain (x2) both wait to start. In a 125-s hold (plus the margin) the fullest
    plan in the grid's order is b1 + x2 (70 + 55 s), whose x2 gives no gap without b2: the plan is redone without
    x2 and keeps b1 alone, naming b2 as the reason. With b2 stored (not waiting) x2 is kept beside b1."""
    def chain(name, policy, seed, iters):  # the estimates of baseline runs of width 32: 50 s + 0.02 s an iteration
        return Run(name, "w32/runs", plan("baseline", extra=[f"--max_iters={iters}"]).args, policy, seed, "g")
    runs = [chain("b1", "baseline", 1, 1000), chain("x1", "spd", 1, 500), chain("b2", "baseline", 2, 1000),
            chain("x2", "spd", 2, 250)]  # 70, 60, 70, 55 s
    states = {r.name: "start" for r in runs}
    scratch = str(tmp_path / "scratch")
    out, _ = hold_plan(runs, states, scratch, str(study), 155.0, {})
    assert set(out) == {"x1", "b2", "x2"}, out
    assert out["x2"] == ("not started: left out of the hold's plan, expected 55 s; its seed's baseline b2 is not in "
                         "it; the 1 chains it starts fill 70 of 125 s")
    from experiments import hold
    assert hold.pack_one_gpu([70, 60, 70, 55], 125, [0, 1, 2, 3]) == [0, 3]  # what the fill alone would keep
    states["b2"] = "done"
    out, _ = hold_plan(runs, states, scratch, str(study), 155.0, {})
    assert set(out) == {"x1"}, out


def test_on_two_gpus_the_kept_chains_are_spread_when_all_fit(study, tmp_path):
    """Every chain fits: packing GPU 0 first would put a, b and c there (190 of 200 s) and d on GPU 1 alone; spread
    longest first to the emptier GPU the sweep ends by 120 s, so a start queued behind it (gpu.sh's AFTER=1) gets the
    rest of the hold. Where spreading ends no sooner, the packing stays (the test above)."""
    def chain(name, iters):
        r = plan("baseline", extra=[f"--max_iters={iters}"])
        r.name = name
        return r
    runs = [chain("a", 1000), chain("b", 500), chain("c", 500), chain("d", 500)]  # 70, 60, 60, 60 s
    states = {r.name: "start" for r in runs}
    from experiments import hold
    assert hold.pack_one_gpu([70, 60, 60, 60], 200, [0, 1, 2, 3]) == [0, 1, 2]  # GPU 0 alone: a, b, c
    out, gpu = hold_plan(runs, states, str(tmp_path / "scratch"), str(study), 230.0, {}, gpus=2)
    assert out == {} and gpu == {"a": 0, "b": 1, "c": 1, "d": 0}
    assert hold.balanced({0: 0, 1: 0, 2: 1}, [70, 60, 60], 2, 200) == {0: 0, 1: 1, 2: 1}  # 130 | 60 -> 70 | 120
    assert hold.balanced({0: 0, 1: 1}, [70, 60], 2, 200) == {0: 0, 1: 1}  # spread already
