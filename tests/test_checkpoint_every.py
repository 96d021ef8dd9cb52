"""checkpoint_every: a run writes ckpt.pt at every Nth eval only, and always at max_iters; each eval record says
whether it wrote one; the losses are those of a run that saves at every eval; the runner treats the option as how a
run is kept (a stored run without it is not a different run)."""
import json
import os

from experiments.runner import config_mismatch
from training.checkpoint import RESUME_KEYS, read_checkpoint
from tests.conftest import TINY, read_metrics, run_trains, train_losses


def eval_checkpoints(out):
    return {r["iter"]: r["checkpoint"] for r in read_metrics(out) if r["type"] == "eval"}


def test_checkpoint_every_writes_at_every_nth_eval_and_the_last(workdir):
    args = [*TINY, "--eval_interval=1", "--max_iters=7"]
    every, third = os.path.join(workdir, "out-every-1"), os.path.join(workdir, "out-every-3")
    run_trains([[*args, f"--out_dir={every}"], [*args, "--checkpoint_every=3", f"--out_dir={third}"]], workdir)
    # iter 0 is where the run started: nothing to save there
    assert eval_checkpoints(every) == {0: False, **{i: True for i in range(1, 8)}}
    assert eval_checkpoints(third) == {0: False, 1: False, 2: False, 3: True, 4: False, 5: False, 6: True, 7: True}
    assert read_checkpoint(os.path.join(third, "ckpt.pt"), RESUME_KEYS)["iter_num"] == 7
    assert read_checkpoint(os.path.join(third, "ckpt_best.pt"), RESUME_KEYS)["iter_num"] in (3, 6, 7)
    # the option changes when the run is saved, not what it computes
    assert train_losses(every) == train_losses(third)


def test_the_runner_counts_checkpoint_every_as_how_a_run_is_kept(tmp_path):
    with open(tmp_path / "config.json", "w") as f:
        json.dump({"max_iters": 7, "eval_interval": 1}, f)  # stored before the option existed
    assert config_mismatch(str(tmp_path), {"max_iters": 7, "eval_interval": 1, "checkpoint_every": 4}) == []
    assert config_mismatch(str(tmp_path), {"max_iters": 8, "checkpoint_every": 4}) == ["max_iters"]
    # a run stored before a sweep logged each layer's gradient norm is the same run
    assert config_mismatch(str(tmp_path), {"max_iters": 7, "log_layer_grad_norms": True}) == []
