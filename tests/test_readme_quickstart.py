"""The README's quick start block runs as pasted on a fresh offline machine (issue 52): every command it
names exists, none needs an activated environment, and every config it launches trains on a corpus that
builds offline. (The block itself is run from a fresh clone before each release; its times are in the
closing notes. Here: the static checks, in a second.)"""
import os
import re
import shlex

from tests.conftest import REPO

OFFLINE_DATASETS = {"shakespeare", "shakespeare_char", "debian_docs"}  # their prepare scripts need no network


def quickstart_commands():
    text = open(os.path.join(REPO, "README.md")).read()
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", text, re.S).group(1)
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        code = line.split("#", 1)[0].strip()
        if code:
            commands.append(shlex.split(code))
    return commands


def test_readme_quickstart_commands_exist_and_need_no_activation():
    commands = quickstart_commands()
    assert len(commands) >= 4
    for argv in commands:
        assert argv[0] in ("bash", "tail"), f"{argv[0]} needs an activated environment or is not installed: {argv}"
        if argv[0] == "bash":
            assert os.path.isfile(os.path.join(REPO, argv[1])), argv
        if "-m" in argv:
            module = argv[argv.index("-m") + 1]
            assert os.path.isfile(os.path.join(REPO, *module.split(".")) + ".py"), module


def test_readme_quickstart_launches_train_offline():
    launches = [argv for argv in quickstart_commands() if "train_reduced_sync.py" in argv]
    assert launches, "the quick start launches no training"
    for argv in launches:
        configs = [a for a in argv if a.startswith("config/")]
        assert configs, argv
        for config in configs:
            text = open(os.path.join(REPO, config)).read()
            dataset = re.search(r"^dataset\s*=\s*['\"](\w+)['\"]", text, re.M).group(1)
            assert dataset in OFFLINE_DATASETS, f"{config} trains on {dataset}, which needs the network"
            out_dir = re.search(r"^out_dir\s*=\s*['\"]([^'\"]+)['\"]", text, re.M).group(1)
            tails = [a for c in quickstart_commands() if c[0] == "tail" for a in c[1:]]
            assert any(t.startswith(out_dir + "/") for t in tails), f"the block never shows {out_dir}'s log"
