"""cli_guard.py (re-exported by training/cli.py): the guards the bench command lines share (issue 53).

A bad value is one line naming it and what is allowed, before any work (argparse's exit 2); Ctrl-C,
SIGTERM and a stdout whose reader left or that was closed end without a traceback, with 130, 143 and 0; a full or
unwritable stdout is one line, exit 1; a stop raised inside a finalizer or a C library's callback still ends the
process. The bench mains run in process (fast); one case runs as a real process in the default tier, the stdout and
finalizer cases in the slow tier, to see what a user sees."""
import errno
import importlib
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tests.conftest import REPO, run_env
import cli_guard
from cli_guard import guarded

BAD_VALUES = [  # (module, argv, the value the error line must name)
    ("bench.tp_latency", ["--repeats", "0"], "'0'"),
    ("bench.tp_latency", ["--rounds", "-1"], "'-1'"),
    ("bench.tp_latency", ["--policies", "grouped:0"], "grouped:0"),
    ("bench.tp_latency", ["--policies", "grouped:5", "--sizes", "124m"], "grouped:5"),
    ("bench.tp_latency", ["--n_tracks", "0"], "--n_tracks"),
    ("bench.tp_latency", ["--warmup", "x"], "'x'"),
    ("bench.tp_latency", ["--tp_comm", "off,chunky"], "'chunky'"),
    ("bench.profile_policy", ["--calls", "0"], "'0'"),
    ("bench.profile_policy", ["--policies", "spd;grouped:7"], "grouped:7"),
    ("bench.sample_decode", ["--max_new_tokens", "-5"], "'-5'"),
    ("bench.sample_decode", ["--nprocs", "0"], "--nprocs"),
    ("bench.sample_decode", ["--policies", "fastest"], "fastest"),
    ("bench.compile_check", ["--steps", "0"], "'0'"),
    ("bench.compile_check", ["--policies", "grouped:4"], "grouped:4"),  # 6 layers: G must divide 6
    ("bench.train_throughput", ["--iters", "0"], "'0'"),
    ("bench.train_throughput", ["--tp_comm", "sp,chunked:0"], "'chunked:0'"),
    ("bench.train_throughput", ["--baseline_tp_comm", "fast"], "'fast'"),
    ("bench.train_throughput", ["--peak_memory_reorder", "maybe"], "'maybe'"),
    ("analysis.loss_vs_time", ["--stats", "s.json", "--times", "t.json", "--out", "o", "--schedule", "step"], "'step'"),
    ("bench.comm_table", ["/nonexistent/inv.json"], "/nonexistent/inv.json"),
    ("experiments.unpack_logs", ["/nonexistent/scratch-logs.tgz"], "/nonexistent/scratch-logs.tgz"),
    ("experiments.large_budgets.curves", ["--width", "300"], "--width 300"),
    ("experiments.large_budgets.branch_check", ["/nonexistent/check", "0", "1", "2"], "/nonexistent/check"),
    ("experiments.large_budgets.branch_check", [".", "3", "2", "1"], "T0 <= T1"),
    ("experiments.large_budgets.curves", ["--folder", "/nonexistent/cosine", "--out", "x.png"], "/nonexistent/cosine"),
    ("bench.sync_frequency", ["--repeats", "0"], "'0'"),
    ("bench.decode_gemm", ["--repeats", "0"], "'0'"),
    ("bench.hbm_bandwidth", ["--iters", "0"], "'0'"),
    ("bench.ddp_buckets", ["--steps", "0"], "'0'"),
    ("bench.allreduce_sweep", ["--calls", "0"], "'0'"),
    ("bench.allreduce_sweep", ["--sizes", "3k,7"], "'7'"),
    ("bench.allreduce_sweep", ["--between", "-1"], "'-1'"),
    ("bench.allreduce_sweep", ["--producer", "conv"], "'conv'"),
    ("bench.step_model", ["--tp", "3"], "tp=3"),
    ("bench.step_model", ["--tp", "0"], "'0'"),
    ("bench.step_model", ["--device", "A100"], "'A100'"),
]


@pytest.mark.parametrize("module, argv, named", BAD_VALUES, ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_bench_bad_value_is_one_line_before_any_work(module, argv, named, monkeypatch, capsys):
    main = importlib.import_module(module).main
    monkeypatch.setattr(sys, "argv", [module] + argv)  # the mains that read sys.argv
    with pytest.raises(SystemExit) as stop:
        main(argv) if main.__code__.co_argcount else main()
    assert stop.value.code not in (0, None)
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    assert named in err[-1] and "error" in err[-1], err[-1]


def test_guard_turns_stops_into_one_line_and_their_exit_codes(capsys):
    def interrupted():
        raise KeyboardInterrupt

    def terminated():
        os.kill(os.getpid(), signal.SIGTERM)

    def finished():
        print("done")
        return 0

    assert guarded(interrupted) == 130
    assert guarded(terminated) == 143
    assert capsys.readouterr().err.splitlines() == ["stopped (Ctrl-C)", "stopped (SIGTERM)"]
    assert guarded(finished) == 0
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handler is back


def test_bench_process_bad_value_exit_code_and_one_line():
    proc = subprocess.run([sys.executable, "-m", "bench.tp_latency", "--policies", "grouped:0"], cwd=REPO,
                          env=run_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and "grouped:0" in lines[-1]


def test_guard_names_a_stdout_it_cannot_write_in_one_line(monkeypatch, capsys):
    """stdout on /dev/full (ENOSPC) or opened read-only (EBADF): one line on stderr, exit 1; its reader gone
    (EPIPE): quiet, exit 0. The guard's own fd juggling is stubbed: pytest's capture owns fd 1 here."""
    monkeypatch.setattr("cli_guard._discard_stdout", lambda: None)

    for errno_, code in [(errno.ENOSPC, 1), (errno.EBADF, 1), (errno.EPIPE, 0)]:
        stream = sys.stdout
        monkeypatch.setattr(sys, "stdout", None)  # fd 1 closed: the guard puts /dev/null's file there
        monkeypatch.setattr("os.fdopen", lambda *a, **k: _FailingStream(errno_))
        assert guarded(lambda: print("x" * 100) or 0) == code
        sys.stdout = stream
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("error: cannot write to stdout: ") for line in err), err
    assert "No space left" in err[0] and "Bad file descriptor" in err[1]


class _FailingStream:
    def __init__(self, errno_):
        self.errno = errno_

    def write(self, text):
        raise OSError(self.errno, os.strerror(self.errno))

    def flush(self):
        pass


PRINTS_A_LOT = "import sys; from cli_guard import guarded; sys.exit(guarded(lambda: print('x' * 100_000) or 0))"


@pytest.mark.slow
@pytest.mark.parametrize("redirect, code, line", [
    (">&-", 0, None),  # closed: the output discarded, as the user asked
    (">/dev/full", 1, "error: cannot write to stdout: No space left on device"),
    ("1</dev/null", 1, "error: cannot write to stdout: Bad file descriptor"),
    ("| head -c 10 >/dev/null", 0, None),  # the reader took what it wanted
])
def test_guard_process_with_a_closed_or_full_stdout(redirect, code, line):
    """A closed stdout (`>&-`) crashed every tool under the guard (AttributeError: sys.stdout is None)."""
    proc = subprocess.run(["bash", "-c", f'"$0" -c "$1" {redirect}; exit ${{PIPESTATUS[0]}}', sys.executable,
                           PRINTS_A_LOT], cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    if line is None:
        assert proc.stderr == ""
    else:
        assert proc.stderr.splitlines()[0].startswith(line) and len(proc.stderr.splitlines()) == 1, proc.stderr


SLOW_FINALIZER = """import sys, time
import cli_guard
from cli_guard import guarded
class Slow:
    def __del__(self):
        time.sleep(30)  # a finalizer (or a C library's callback) the signal lands in
def main():
    print("ready", flush=True)
    Slow()
    print("went on", flush=True)
    return 0
sys.exit(guarded(main))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_stop_inside_a_finalizer_ends_the_process(sig, code, name):
    """A SIGTERM that landed in a callback Python cannot raise out of (bench.compile_check, inside torch.compile)
    printed "Exception ignored ... Stopped" and the process went on; the same happens in a __del__."""
    # SIGINT as a terminal's Ctrl-C finds it: a shell's background job (`pytest ... &`) ignores SIGINT, and a Python
    # started with it ignored installs no KeyboardInterrupt handler
    proc = subprocess.Popen([sys.executable, "-c", SLOW_FINALIZER], cwd=REPO, env=run_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.5)  # inside the finalizer's sleep
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert (proc.returncode, out, err) == (code, "", f"stopped ({name})\n")


def test_stop_where_swallowed_exits_with_the_stop_code(monkeypatch, capsys):
    exits = []
    monkeypatch.setattr(os, "_exit", exits.append)
    for stop in (cli_guard.Stopped("SIGTERM", 143), KeyboardInterrupt()):
        cli_guard._stop_where_swallowed(SimpleNamespace(exc_value=stop))
    assert exits == [143, 130]
    assert capsys.readouterr().err.splitlines() == ["stopped (SIGTERM)", "stopped (Ctrl-C)"]


EXITS_NOW = """import atexit, os, sys, threading, time
from cli_guard import exit_now
out, code = sys.argv[1], sys.argv[2]
class Kept:
    def __del__(self, open=open, path=os.path.join(out, "finalized")):  # builtins may be gone by then
        open(path, "w").close()  # runs in the interpreter's finalization (the module's globals cleared), only there
kept = Kept()
atexit.register(lambda: open(os.path.join(out, "atexit"), "w").close())
def late():
    time.sleep(0.3)
    open(os.path.join(out, "thread"), "w").close()
threading.Thread(target=late).start()  # not a daemon: any exit waits for it
sys.stdout.write("buffered, no newline")
exit_now(None if code == "none" else int(code) if code.lstrip("-").isdigit() else code)
"""


def exits_now(tmp_path, code, mode=None, stdout=subprocess.PIPE):
    env = {k: v for k, v in run_env().items() if k not in ("PYTHONUNBUFFERED", cli_guard.EXIT_ENV)}
    if mode is not None:
        env[cli_guard.EXIT_ENV] = mode
    proc = subprocess.run([sys.executable, "-c", EXITS_NOW, str(tmp_path), code], cwd=REPO, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    return proc, sorted(os.listdir(tmp_path))


@pytest.mark.parametrize("code, status", [("3", 3), ("none", 0), ("0", 0), ("256", 0), ("-1", 255)])
def test_exit_now_runs_what_an_exit_runs_but_not_the_finalization(tmp_path, code, status):
    """The trainer, sample.py and training.launch end through it: on a 2-core CPU a torchrun launch of 2 ranks
    ended 0.7 s after its summary instead of 1.5 s (experiments/gpu_stop/README.md)."""
    proc, made = exits_now(tmp_path, code)
    assert (proc.returncode, proc.stdout, proc.stderr) == (status, "buffered, no newline", "")
    assert made == ["atexit", "thread"]  # the thread waited for, the atexit handler run; no finalization


def test_exit_now_is_sys_exit_for_a_message_or_when_asked(tmp_path):
    (tmp_path / "message").mkdir()
    proc, made = exits_now(tmp_path / "message", "bye")
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "buffered, no newline", "bye\n")
    assert made == ["atexit", "finalized", "thread"]
    (tmp_path / "normal").mkdir()
    proc, made = exits_now(tmp_path / "normal", "3", mode="normal")
    assert (proc.returncode, proc.stderr, made) == (3, "", ["atexit", "finalized", "thread"])


def test_exit_now_names_a_mode_it_does_not_know_in_one_line(tmp_path):
    proc, made = exits_now(tmp_path, "3", mode="quick")
    assert proc.returncode == 3 and made == ["atexit", "thread"]
    assert proc.stderr == (f"note: {cli_guard.EXIT_ENV}='quick' is not a mode; allowed: fast (the default) or normal; "
                           f"exiting fast\n")


def test_exit_now_leaves_a_stdout_it_cannot_flush_to_the_normal_exit(tmp_path):
    """/dev/full: the normal exit's report and status, whichever it is."""
    with open("/dev/full", "w") as full:
        (tmp_path / "fast").mkdir()
        (tmp_path / "normal").mkdir()
        fast, _ = exits_now(tmp_path / "fast", "3", stdout=full)
        normal, _ = exits_now(tmp_path / "normal", "3", mode="normal", stdout=full)
    assert fast.returncode == normal.returncode != 3
    assert fast.stderr == normal.stderr and "No space left on device" in fast.stderr
