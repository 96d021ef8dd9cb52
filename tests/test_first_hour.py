"""Issue 52, items 5-7: the messages a newcomer's first typos meet, each one line with the fix."""
import os

import pytest

from training.checkpoint import CheckpointError, read_for_resume
from training.config import ConfigError, parse


def test_unknown_key_with_a_suggestion_is_short():
    with pytest.raises(ConfigError) as e:
        parse(["--max_iter=10"])
    msg = str(e.value)
    assert "Did you mean max_iters" in msg and len(msg) < 200 and "\n" not in msg


def test_unknown_key_without_a_suggestion_lists_the_keys():
    with pytest.raises(ConfigError) as e:
        parse(["--zzqqxx=1"])
    assert "Valid keys" in str(e.value) and "max_iters" in str(e.value)


def test_misspelled_config_file_gets_a_suggestion():
    with pytest.raises(ConfigError) as e:
        parse(["config/shakespeare_baseline_24snc.py"])
    assert "config file not found: config/shakespeare_baseline_24snc.py" in str(e.value)
    assert "did you mean config/shakespeare_baseline_24sync.py" in str(e.value)


def test_resume_without_a_run_says_what_to_do(tmp_path, monkeypatch):
    (tmp_path / "out-a").mkdir()
    (tmp_path / "out-b").mkdir()
    (tmp_path / "out-b" / "ckpt.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as e:
        read_for_resume("out-a")
    msg = str(e.value)
    assert "--init_from=scratch" in msg and "out-b" in msg and os.path.join("out-a", "") not in msg.split(":")[-1]


def test_launch_refuses_zero_processes_in_one_line():
    import subprocess
    import sys
    from tests.conftest import REPO, run_env
    proc = subprocess.run([sys.executable, "-m", "training.launch", "--nproc_per_node=0", "train_reduced_sync.py"],
                          cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [line for line in proc.stderr.strip().splitlines()
                                                if "--nproc_per_node=0 must be >= 1" in line]


def test_launcher_sigterm_before_training_is_not_read_as_the_cause(monkeypatch):
    """Issue 52 item 4: under torchrun, a healthy rank that the launcher stops names where the SIGTERM came from."""
    import signal
    from training import stop
    said, exits = [], []
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setattr(stop, "_say", said.append)
    monkeypatch.setattr(stop.os, "_exit", exits.append)
    monkeypatch.setitem(stop._signal, "training", False)
    monkeypatch.setitem(stop._signal, "waiting", None)
    stop._handle(signal.SIGTERM, None)
    assert exits == [143] and said == ["error: SIGTERM before training began (from the launcher: another rank "
                                       "failed, or the launch was stopped): stopped, nothing to save"]


# issue 53's silent cases of the trainer's command line: each refused in one line, before any work
def test_override_before_a_config_file_that_sets_it_is_refused(tmp_path):
    config = tmp_path / "x.py"
    config.write_text("n_layer = 4\n")
    with pytest.raises(ConfigError, match=r"--n_layer=3 comes before .*x\.py, which sets n_layer too"):
        parse(["--n_layer=3", str(config)])
    assert parse([str(config), "--n_layer=3"]).n_layer == 3  # after it: applied
    assert parse(["--n_head=4", str(config)]).n_head == 4     # a key the file leaves alone: applied


def test_config_file_that_exits_is_an_error(tmp_path):
    config = tmp_path / "x.py"
    config.write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(ConfigError, match=r"calls sys.exit\(0\)"):
        parse([str(config)])


def test_cosine_schedule_without_a_decay_is_refused():
    for argv in (["--lr_decay_iters=0"], ["--warmup_iters=100", "--lr_decay_iters=50"]):
        with pytest.raises(ConfigError, match="lr_schedule='cosine'.*no decay"):
            parse(argv)
    assert parse(["--lr_decay_iters=0", "--decay_lr=False"]).lr_decay_iters == 0  # a constant rate needs none


def test_out_dir_with_a_tilde_names_the_expanded_path():
    with pytest.raises(ConfigError, match="--out_dir=" + os.path.expanduser("~/x")):
        parse(["--out_dir=~/x"])
