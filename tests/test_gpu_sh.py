"""experiments/large_budgets/gpu.sh's start verb on CPU, with stand-ins for nvidia-smi and the sweep's python3: HOLD
writes the machine's deadline, AFTER=1 queues a start behind the running sweep, and HOLD=rest hands it what is left."""
import os
import shutil
import stat
import subprocess
import time

import pytest

from tests.conftest import REPO

GPU_SH = os.path.join("experiments", "large_budgets", "gpu.sh")
FAKE_SMI = '#!/bin/bash\n[ "$1" = -L ] && echo "GPU 0: Fake" || echo "Fake GPU"\n'
# the sweep: records when it began and its arguments, then runs for a while
FAKE_PYTHON = '#!/bin/bash\necho "$(date +%s) $*" >> "$STUDY_DIR/started.txt"\nsleep 3\n'


@pytest.fixture
def machine(tmp_path):
    if shutil.which("setsid") is None:
        pytest.skip("gpu.sh starts its sweeps with setsid (util-linux), not installed here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("python3", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IXUSR)
    study = tmp_path / "study"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "STUDY_DIR": str(study),
           "START_WAIT": "0"}

    def gpu_sh(*args, **extra):
        return subprocess.run(["bash", GPU_SH, *args], cwd=REPO, env={**env, **extra}, capture_output=True,
                              text=True, timeout=60)
    yield gpu_sh, study
    for pid in (study / "sweeps.pid").read_text().split() if (study / "sweeps.pid").exists() else []:
        subprocess.run(["kill", "--", f"-{pid}"], capture_output=True)


def started(study):
    return [line.split(" ", 1) for line in (study / "started.txt").read_text().splitlines()]


def hold_of(argv):
    words = argv.split()
    return int(words[words.index("--hold") + 1])


def test_a_queued_start_begins_when_the_sweep_ends_with_the_rest_of_the_hold(machine):
    gpu_sh, study = machine
    t0 = time.time()
    first = gpu_sh("start", "768", "--policies", "baseline", HOLD="100")
    assert first.returncode == 0, first.stderr
    deadline = int((study / "deadline").read_text())
    assert abs(deadline - (t0 + 100)) <= 2
    queued = gpu_sh("start", "256", "--policies", "spd", AFTER="1", HOLD="rest", PREFIX="15")
    assert queued.returncode == 0 and "queued behind sweeps" in queued.stdout, queued.stdout + queued.stderr
    assert time.time() - t0 < 3 and len(started(study)) == 1  # it returned while the first sweep ran
    while len(started(study)) < 2 and time.time() - t0 < 30:  # the queued one polls every 5 s
        time.sleep(0.5)
    (t_first, argv_first), (t_second, argv_second) = started(study)
    assert "large_124m.py" in argv_first and hold_of(argv_first) == 100
    assert "large_w256.py" in argv_second and "data15" in argv_second
    assert int(t_second) >= int(t_first) + 2  # not before the first sweep ended
    assert hold_of(argv_second) == pytest.approx(deadline - int(t_second), abs=1)


def test_hold_values_it_cannot_use(machine):
    gpu_sh, study = machine
    bad = gpu_sh("start", "256", HOLD="rest")
    assert bad.returncode == 2 and "HOLD=rest: no earlier start set a deadline" in bad.stderr.strip().splitlines()[-1]
    bad = gpu_sh("start", "256", HOLD="20m")
    assert bad.returncode == 2 and "HOLD=20m: give whole seconds > 0, or rest" in bad.stderr
    bad = gpu_sh("start", "256", HOLD="300", AFTER="1")
    assert bad.returncode == 2 and "a queued start takes HOLD=rest" in bad.stderr
    assert not (study / "sweeps.pid").exists()  # nothing was queued
    (study / "deadline").write_text(str(int(time.time()) + 30))
    spent = gpu_sh("start", "256", HOLD="rest")
    assert spent.returncode == 0 and "not started:" in spent.stdout and not (study / "started.txt").exists()
