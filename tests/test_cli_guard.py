"""cli_guard.py (re-exported by training/cli.py): the guards the bench command lines share (issue 53).

A bad value is one line naming it and what is allowed, before any work (argparse's exit 2); Ctrl-C,
SIGTERM and a closed stdout end without a traceback, with 130, 143 and 0. The bench mains run in
process (fast); one case runs as a real process, to see what a user sees."""
import importlib
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_env
from cli_guard import guarded

BAD_VALUES = [  # (module, argv, the value the error line must name)
    ("bench.tp_latency", ["--repeats", "0"], "'0'"),
    ("bench.tp_latency", ["--rounds", "-1"], "'-1'"),
    ("bench.tp_latency", ["--policies", "grouped:0"], "grouped:0"),
    ("bench.tp_latency", ["--policies", "grouped:5", "--sizes", "124m"], "grouped:5"),
    ("bench.tp_latency", ["--n_tracks", "0"], "--n_tracks"),
    ("bench.tp_latency", ["--warmup", "x"], "'x'"),
    ("bench.profile_policy", ["--calls", "0"], "'0'"),
    ("bench.profile_policy", ["--policies", "spd;grouped:7"], "grouped:7"),
    ("bench.sample_decode", ["--max_new_tokens", "-5"], "'-5'"),
    ("bench.sample_decode", ["--nprocs", "0"], "--nprocs"),
    ("bench.sample_decode", ["--policies", "fastest"], "fastest"),
    ("bench.compile_check", ["--steps", "0"], "'0'"),
    ("bench.compile_check", ["--policies", "grouped:4"], "grouped:4"),  # 6 layers: G must divide 6
    ("bench.train_throughput", ["--iters", "0"], "'0'"),
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
