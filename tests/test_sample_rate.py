"""sample.py's rate lines: each sample's time split into its setup (the prefill and the first decode step, which
compiles and captures) and the steady tokens/s after it, the tokens unchanged by the timing; and on a CPU without
OMP_NUM_THREADS, one decode thread, named in the line; and the progress of a long sample (tokens so far, tokens/s),
a few lines in a log, one line rewritten on a terminal."""
import io
import os
import re
import time

import pytest
import torch

import model.generate as generation
import sample
from model.gpt import GPT, GPTConfig
from tests.checkpoint_cases import TINY_MODEL_ARGS, write_valid

LINE = re.compile(r"sample (\d)/2: 20 tokens in ([0-9.]+) s, [0-9.]+ tokens/s \(decode=eager, cpu, tp=1\) = setup "
                  r"([0-9.]+) s \(prefill \+ first decode step\) \+ 18 tokens at ([0-9.]+) tokens/s; "
                  r"1 CPU thread \(sample.py's choice for 2 cores at load 0.5; OMP_NUM_THREADS sets it\)$", re.M)


@pytest.fixture
def threads_restored(monkeypatch):
    """A 2-core machine at load 0.5 as far as sample.py can tell, and torch's thread count put back after."""
    monkeypatch.setattr(sample, "usable_cores", lambda: 2)
    monkeypatch.setattr(sample, "load_average", lambda: 0.5)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def run_sample(workdir, tmp_path, capsys, *extra):
    out = tmp_path / "run"
    out.mkdir()
    write_valid(out / "ckpt.pt", data_dir=os.path.join(workdir, "data"))
    assert sample.main([f"--out_dir={out}", "--prompt=the ", "--num_samples=2", "--seed=7", "--device=cpu", *extra]) == 0
    return capsys.readouterr()


def test_rate_lines_split_setup_from_steady_tokens(workdir, tmp_path, capsys, monkeypatch, threads_restored):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    got = run_sample(workdir, tmp_path, capsys, "--max_new_tokens=20")
    lines = LINE.findall(got.err)
    assert [n for n, *_ in lines] == ["1", "2"], got.err
    assert torch.get_num_threads() == 1
    for _, total, setup, rate in lines:  # the two parts add up to the sample's time (to the printed rounding)
        assert float(setup) < float(total)
        assert float(setup) + 18 / float(rate) == pytest.approx(float(total), abs=0.01, rel=0.01)
    assert re.search(r"^decode: median [0-9.]+ tokens/s over samples 2-2, [0-9.]+ s per sample of 20 tokens "
                     r"\(sample 1: [0-9.]+ tokens/s, [0-9.]+ s\); steady after each "
                     r"sample's setup: median [0-9.]+ tokens/s over samples 1-2 \(setup: median [0-9.]+ s\)$",
                     got.err, re.M), got.err
    # the timed run draws the tokens of an untimed generate() from the same seed
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY_MODEL_ARGS)).eval()
    torch.manual_seed(7)
    x = torch.tensor([[19, 7, 4, 26]])  # "the " in the synthetic dataset's characters
    texts = ["".join("abcdefghijklmnopqrstuvwxyz .,;!\n"[i] for i in model.generate(x, 20, 0.8, 200)[0].tolist())
             for _ in range(2)]
    assert got.out == "".join(f"{t}\n---------------\n" for t in texts)


def test_too_few_tokens_have_no_steady_rate(workdir, tmp_path, capsys, monkeypatch, threads_restored):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    got = run_sample(workdir, tmp_path, capsys, "--max_new_tokens=2")
    assert re.search(r"sample 1/2: 2 tokens in [0-9.]+ s, [0-9.]+ tokens/s \(decode=eager, cpu, tp=1\) \(no steady "
                     r"rate: it needs 3 or more tokens\); 1 CPU thread", got.err), got.err


def test_clock_ends_the_setup_after_the_first_decode_step():
    """The setup runs to the second token's draw: a slow first decode step (0.2 s here) is setup, not steady."""
    def fake_generate(n):
        for i in range(n):
            if i == 1:
                time.sleep(0.2)  # the first decode step: compiling and capturing
            generation.sample_one(torch.tensor([[0.0, 1.0]]))

    clock = sample.TokenClock("cpu")
    original = generation.sample_one
    start = time.perf_counter()
    with clock.timing():
        fake_generate(10)
    end = time.perf_counter()
    assert generation.sample_one is original
    setup, steady_tokens, rate = sample.rate_parts(start, end, clock.setup_done, 10)
    assert setup >= 0.2 and steady_tokens == 8 and end - clock.setup_done < 0.1


def test_omp_num_threads_is_kept(monkeypatch, threads_restored):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    before = torch.get_num_threads()
    assert sample.pick_threads("cpu") == (before, "OMP_NUM_THREADS=3")
    assert torch.get_num_threads() == before
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(sample, "usable_cores", lambda: 8)
    assert sample.pick_threads("cpu") == (3, "sample.py's choice for 8 cores at load 0.5; OMP_NUM_THREADS sets it")
    assert torch.get_num_threads() == 3


@pytest.mark.parametrize("cores, load, threads", [(1, 0.0, 1), (2, 0.0, 1), (2, 3.6, 1), (4, 0.0, 2), (8, 0.0, 4),
                                                  (32, 0.0, 4), (8, 6.0, 1), (16, 9.5, 3), (16, 40.0, 1)])
def test_default_threads_leave_the_load_its_cores(cores, load, threads):
    assert sample.default_threads(cores, load) == threads


class Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def draw(progress, clock, tokens, per_second):
    for drawn in range(1, tokens + 1):
        clock[0] = drawn / per_second
        progress.token(drawn)
    progress.end()


def test_progress_of_a_long_sample_in_a_log_is_a_few_lines(monkeypatch):
    """500 tokens at 2 tokens/s (250 s, as the quickstart's default on a loaded CPU): a line after 10 s, then one
    each time the wait doubles."""
    clock = [0.0]
    monkeypatch.setattr(sample.time, "perf_counter", lambda: clock[0])
    stream = Stream(tty=False)
    draw(sample.Progress("sample 1/2", 500, stream), clock, 500, 2.0)
    lines = stream.getvalue().splitlines()
    shown = [re.fullmatch(r"sample 1/2: (\d+)/500 tokens in ([0-9.]+) s, 2\.0 tokens/s so far", line) for line in lines]
    assert all(shown), lines
    assert [float(m[2]) for m in shown] == [10, 20, 40, 80, 160]
    assert [int(m[1]) for m in shown] == [2 * float(m[2]) for m in shown]


def test_progress_on_a_terminal_is_one_line_rewritten_then_erased(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(sample.time, "perf_counter", lambda: clock[0])
    stream = Stream(tty=True)
    draw(sample.Progress("sample 2/2", 30, stream), clock, 30, 10.0)  # 3 s
    text = stream.getvalue()
    assert "\n" not in text and text.endswith("\r\033[K")
    updates = text.split("\r")[1:-1]
    assert len(updates) == 6 and updates[-1] == "sample 2/2: 30/30 tokens in 3.0 s, 10.0 tokens/s so far\033[K"


def test_a_short_sample_shows_no_progress(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(sample.time, "perf_counter", lambda: clock[0])
    for tty in (False, True):
        stream = Stream(tty)
        draw(sample.Progress("sample 1/1", 40, stream), clock, 4, 10.0)  # 0.4 s
        assert stream.getvalue() == ""
