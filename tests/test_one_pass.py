"""data_order='one_pass': every sequence of a run is a distinct block_size window of the train split, in an
order that depends on the seed alone (so a resumed run reads what the uninterrupted one would), and a run
that would need a window twice is refused before it starts."""
import os
import types

import numpy as np
import pytest

from data.loader import DataError, check_one_pass, train_offsets

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests


def cfg(**kw):
    base = dict(data_order="one_pass", gradient_accumulation_steps=2, batch_size=3, block_size=8, max_iters=5,
                dataset="tiny")
    return types.SimpleNamespace(**{**base, **kw})


def test_each_window_is_read_at_most_once():
    n_tokens = 8 * 40 + 1  # exactly 40 windows
    c = cfg()
    offsets = np.concatenate([train_offsets(7, it, n_tokens, c).ravel() for it in range(6)])  # 36 sequences
    assert offsets.shape == (36,) and len(set(offsets.tolist())) == 36
    assert (offsets % 8 == 0).all() and offsets.min() >= 0 and offsets.max() + 8 + 1 <= n_tokens
    assert train_offsets(7, 3, n_tokens, c).shape == (2, 3)
    # a pure function of (seed, iteration): the same again, another seed another order
    assert np.array_equal(train_offsets(7, 4, n_tokens, c), train_offsets(7, 4, n_tokens, c))
    assert not np.array_equal(train_offsets(8, 0, n_tokens, c), train_offsets(7, 0, n_tokens, c))
    with pytest.raises(DataError, match="needs more than the split's 40 windows"):
        train_offsets(7, 6, n_tokens, c)  # sequences 36..41 of 40


def test_random_order_is_unchanged():
    c = cfg(data_order="random")
    a = train_offsets(7, 0, 1000, c)
    assert a.shape == (2, 3) and not (a % 8 == 0).all()  # any offset, as nanoGPT


def test_a_run_longer_than_one_pass_is_refused(tmp_path):
    np.zeros(8 * 30 + 1, dtype=np.uint16).tofile(tmp_path / "train.bin")  # 30 windows, 6 per iteration
    check_one_pass(cfg(max_iters=5), str(tmp_path))
    with pytest.raises(DataError, match="reads 36 sequences .* holds 30 windows .* lower max_iters to 5"):
        check_one_pass(cfg(max_iters=6), str(tmp_path))
    check_one_pass(cfg(max_iters=6, data_order="random"), str(tmp_path))


def test_one_pass_run_resumes_on_the_same_windows_and_a_too_long_run_stops(workdir):
    """Trained end to end: 5 iterations then resumed to 10 give the uninterrupted run's losses (the order is
    a function of the seed), and a run longer than one pass stops before training with one line."""
    from tests.conftest import TINY, run_train, run_trains, train_losses
    args = [*TINY, "--data_order=one_pass", "--max_iters=10", "--eval_interval=5"]
    whole, split = os.path.join(workdir, "out-onepass"), os.path.join(workdir, "out-onepass-split")
    # the independent runs at once (run_trains): the whole run, the first half, and one that is too long
    # (syn's 60,000 train tokens hold 1,874 windows of 32; 200 iterations of 16 sequences need 3,200)
    *trained, proc = run_trains([[*args, f"--out_dir={whole}"], [*args, f"--out_dir={split}", "--max_iters=5"],
                           [*args, "--max_iters=200", f"--out_dir={os.path.join(workdir, 'out-onepass-long')}"]],
                          workdir, check=False)
    assert all(p.returncode == 0 for p in trained), [p.stderr[-3000:] for p in trained]
    assert proc.returncode != 0 and "holds 1,874 windows of block_size=32" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    run_train([*args, f"--out_dir={split}", "--init_from=resume"], workdir)
    assert train_losses(split) == train_losses(whole) and len(train_losses(whole)) == 10
