"""scripts/env.sh, the environment setup of quickstart.sh and test.sh (issue 42), on a PEP 668 Python:
outside a virtual environment it creates the project's .venv/ and installs into it, never calling pip on
the externally managed interpreter; inside one it uses that one.

The managed interpreter is a copy of this Python's executable under a temporary prefix whose stdlib folder
holds links to the real stdlib entries plus an EXTERNALLY-MANAGED marker (pip on it fails with
"externally-managed-environment", as on Debian). requirements.txt is a local wheel built here, so that the
install is real, offline and fast; the real requirements.txt's torch pin is not installed."""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from tests.conftest import REPO

VER = f"python{sys.version_info.major}.{sys.version_info.minor}"
PROBE = "qs_env_probe"


def managed_python(root):
    """bin/python3 of a non-venv interpreter under root whose stdlib is marked EXTERNALLY-MANAGED."""
    base = sys.base_prefix
    lib = os.path.join(root, "lib", VER)
    os.makedirs(lib)
    os.makedirs(os.path.join(root, "bin"))
    stdlib = sysconfig.get_paths(vars={"installed_base": base, "base": base})["stdlib"]
    for name in os.listdir(stdlib):
        if name != "EXTERNALLY-MANAGED":  # a real one is written below, never through a link into the system's
            os.symlink(os.path.join(stdlib, name), os.path.join(lib, name))
    for name in os.listdir(os.path.join(base, "lib")):  # libpython, for an executable that finds it relative to itself
        if name.startswith("libpython"):
            os.symlink(os.path.join(base, "lib", name), os.path.join(root, "lib", name))
    with open(os.path.join(lib, "EXTERNALLY-MANAGED"), "w") as f:
        f.write("[externally-managed]\nError=managed by tests/test_env.py\n")
    exe = os.path.join(root, "bin", "python3")
    if not os.path.isfile(os.path.join(base, "bin", VER)):
        pytest.skip(f"no {VER} executable in {base}/bin to relocate")
    shutil.copy(os.path.realpath(os.path.join(base, "bin", VER)), exe)  # a copy: a link would resolve to base
    os.symlink("python3", os.path.join(root, "bin", "python"))
    try:
        prefix = subprocess.run([exe, "-c", "import sys; print(sys.prefix, sys.base_prefix)"], capture_output=True,
                                text=True, timeout=60).stdout.split()
    except OSError:
        prefix = []
    if prefix != [root, root]:
        pytest.skip(f"this Python ({sys.executable}) cannot be relocated to a fake prefix")
    # Debian's python3 keeps pip outside its stdlib (python3-pip's dist-packages), which the relocated copy lacks
    if subprocess.run([exe, "-c", "import pip"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip(f"this Python ({sys.executable}) has no pip under its own prefix to relocate")
    return exe


def probe_wheel(dst):
    """A minimal pure-Python wheel of one module, so pip installs something without a network."""
    name = f"{PROBE}-1.0-py3-none-any.whl"
    info = f"{PROBE}-1.0.dist-info"
    files = {f"{PROBE}.py": "OK = True\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests/test_env.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(os.path.join(dst, name), "w") as z:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(path, text)
    return name


@pytest.fixture
def project(tmp_path):
    """A project dir with scripts/env.sh and a requirements.txt of the probe wheel; a PATH whose python3 is managed."""
    root = tmp_path / "project"
    os.makedirs(root / "scripts")
    shutil.copy(os.path.join(REPO, "scripts", "env.sh"), root / "scripts")
    (root / "requirements.txt").write_text(f"./{probe_wheel(str(root))}\n")
    exe = managed_python(str(tmp_path / "managed"))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    # no venv of the caller's on PATH (pytest itself may run inside .venv), the managed Python first
    path = [p for p in env["PATH"].split(os.pathsep) if not os.path.isfile(os.path.join(os.path.dirname(p), "pyvenv.cfg"))]
    env.update(PATH=os.pathsep.join([os.path.dirname(exe), *path]), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return root, exe, env


def source_env(root, env):
    """Source scripts/env.sh as the scripts do; returns (CompletedProcess, sys.prefix of `python` afterwards)."""
    proc = subprocess.run(["bash", "-c", "set -euo pipefail; source scripts/env.sh; "
                           f"python -c 'import sys, {PROBE}; print(sys.prefix)'"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"STDOUT:\n{proc.stdout}\nSTDERR:\n{proc.stderr}"
    assert "externally-managed" not in proc.stderr
    return proc, proc.stdout.splitlines()[-1]


def test_pep668_python_gets_the_project_venv(project):
    root, exe, env = project
    check = subprocess.run([exe, "-m", "pip", "install", "-r", "requirements.txt"], cwd=root, env=env,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode != 0 and "externally-managed-environment" in check.stderr  # the simulation holds

    proc, prefix = source_env(root, env)
    # said before the venv is made (seconds to minutes without a word otherwise), in one line
    assert proc.stdout.splitlines()[0] == ("using the project environment .venv/ (creating it now, then installing "
                                           "requirements.txt into it); activate it later with: source .venv/bin/activate")
    assert prefix == str(root / ".venv")
    assert os.path.isfile(root / ".venv" / "lib" / VER / "site-packages" / f"{PROBE}.py")
    cfg = (root / ".venv" / "pyvenv.cfg").read_text()
    assert f"home = {os.path.dirname(exe)}" in cfg and "include-system-site-packages = true" in cfg
    assert not os.path.exists(os.path.join(os.path.dirname(exe), "..", "lib", VER, "site-packages", f"{PROBE}.py"))

    proc, prefix = source_env(root, env)  # a second run reuses it
    assert "using the project environment .venv/ (already there)" in proc.stdout and prefix == str(root / ".venv")


def test_an_active_venv_is_used_as_before(project):
    root, exe, env = project
    own = root.parent / "own-venv"
    subprocess.run([exe, "-m", "venv", "--without-pip", "--system-site-packages", str(own)], check=True, timeout=120)
    env = dict(env, VIRTUAL_ENV=str(own), PATH=str(own / "bin") + os.pathsep + env["PATH"])
    proc, prefix = source_env(root, env)
    assert f"using the active virtual environment {own}" in proc.stdout and prefix == str(own)
    assert not os.path.exists(root / ".venv")
    assert os.path.isfile(own / "lib" / VER / "site-packages" / f"{PROBE}.py")
