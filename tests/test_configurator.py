"""configurator.parse: defaults, config files, --key=value overrides and the error messages (in-process, fast)."""
import dataclasses
import glob
import json
import os
import re

import pytest

from training.config import (VALID_KEYS, ConfigError, TrainConfig, micro_steps_per_replica, parse, resolve_layout,
                          save_config)
from training.help import help_text
from tests.conftest import REPO


def test_defaults_are_nanogpt_defaults():
    cfg = parse([])
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.batch_size) == (12, 12, 768, 1024, 12)
    assert (cfg.learning_rate, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters) == (6e-4, 6e-5, 2000, 600000)
    assert cfg.gradient_accumulation_steps == 40 and cfg.init_from == "scratch" and cfg.wandb_log is False
    assert (cfg.device, cfg.dtype, cfg.tp, cfg.sync_policy) == ("auto", "auto", "auto", "baseline")


def test_config_file_then_overrides(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("import math\n_helper = 3\nn_layer = 2 * _helper\nout_dir = 'out-a'\n"
                    "learning_rate = 1e-3\nsync_policy = 'grouped:2'\n")
    cfg = parse([str(path), "--n_layer=4", "--out_dir=out-b", "--learning_rate=1", "--bias=True"])
    assert cfg.n_layer == 4  # the override wins
    assert cfg.out_dir == "out-b"  # not a Python literal: kept as a string
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)  # int accepted for float
    assert cfg.bias is True and cfg.sync_policy == "grouped:2"
    assert parse([str(path)]).n_layer == 6  # private helpers and imports are allowed in files


def test_string_keys_keep_numeric_looking_text():
    assert parse(["--wandb_run_name=2024"]).wandb_run_name == "2024"


def test_unknown_override_suggests_or_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        parse(["--n_layr=2"])
    msg = str(e.value)
    assert "unknown config key 'n_layr'" in msg and "Did you mean n_layer" in msg
    assert "--help lists every key" in msg  # the suggestion alone: the whole list buried it (issue 52)
    with pytest.raises(ConfigError) as e:
        parse(["--zzqqxx=2"])
    assert all(key in str(e.value) for key in VALID_KEYS)


def test_config_file_may_only_assign_known_keys(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("n_layer = 2\nlearning_rat = 1e-3\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'learning_rat' \(assigned in .*bad.py\)"):
        parse([str(path)])


def test_missing_and_broken_config_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: nope.py"):
        parse(["nope.py"])
    path = tmp_path / "broken.py"
    path.write_text("n_layer = 1 / 0\n")
    with pytest.raises(ConfigError, match="error in config file .*broken.py: ZeroDivisionError"):
        parse([str(path)])


@pytest.mark.parametrize("arg, message", [
    ("--n_layer=abc", "config key 'n_layer' expects int, got 'abc'"),
    ("--n_layer=2.5", "config key 'n_layer' expects int, got 2.5"),
    ("--n_layer=True", "config key 'n_layer' expects int, got True"),
    ("--bias=3", "config key 'bias' expects bool, got 3"),
    ("--dropout=x", "config key 'dropout' expects float, got 'x'"),
])
def test_type_mismatch_names_key_type_and_value(arg, message):
    with pytest.raises(ConfigError) as e:
        parse([arg])
    assert message in str(e.value)


@pytest.mark.parametrize("arg, message", [
    ("--dtype=fp8", "invalid dtype='fp8'; allowed: auto, float32, bfloat16, float16"),
    ("--device=tpu", "invalid device='tpu'; allowed: auto, cpu, cuda"),
    ("--init_from=gpt2", "invalid init_from='gpt2'; allowed: scratch, resume"),
    ("--tp=0", "invalid tp=0; must be >= 1"),
    ("--batch_size=-1", "invalid batch_size=-1; must be >= 1"),
    ("--learning_rate=-1e-3", "invalid learning_rate=-0.001; must be >= 0"),
    ("--dropout=1.0", "invalid dropout=1.0; must be in [0, 1)"),
    ("--n_embd=100", "n_embd=100 must be divisible by n_head=12"),
])
def test_invalid_values_name_what_is_allowed(arg, message):
    with pytest.raises(ConfigError) as e:
        parse([arg])
    assert message in str(e.value)


def test_sequence_parallel_needs_block_size_divisible_by_tp():
    with pytest.raises(ConfigError) as e:
        parse(["--sequence_parallel=True", "--tp=2", "--block_size=33"])
    assert str(e.value) == "sequence_parallel=True needs block_size divisible by tp; block_size=33 is not divisible by tp=2"
    assert parse(["--sequence_parallel=True", "--tp=2", "--block_size=32"]).sequence_parallel is True


def test_malformed_argument():
    with pytest.raises(ConfigError, match="expected a config file path or --key=value"):
        parse(["--n_layer"])


def test_gradient_accumulation_is_split_over_replicas():
    cfg = TrainConfig(gradient_accumulation_steps=8)
    assert [micro_steps_per_replica(cfg, dp) for dp in (1, 2, 4, 8)] == [8, 4, 2, 1]
    with pytest.raises(ConfigError, match="gradient_accumulation_steps=8 .* cannot be split over dp=3"):
        micro_steps_per_replica(cfg, 3)


def test_tp_auto_is_the_largest_divisor_of_n_tracks_that_divides_the_world():
    cfg = parse(["--n_tracks=4", "--n_head=12", "--gradient_accumulation_steps=24"])
    layouts = {world: resolve_layout(cfg, world) for world in (1, 2, 3, 4, 6, 8, 12)}
    assert {w: (l.tp, l.dp) for w, l in layouts.items()} == \
        {1: (1, 1), 2: (2, 1), 3: (1, 3), 4: (4, 1), 6: (2, 3), 8: (4, 2), 12: (4, 3)}
    assert layouts[8].micro_steps == 12 and "largest divisor of n_tracks=4" in layouts[8].why
    assert parse(["--tp=4"]).tp == 4 and parse(["--tp=auto"]).tp == "auto"


@pytest.mark.parametrize("args, world, message", [
    (["--n_tracks=4", "--gradient_accumulation_steps=1", "--batch_size=8"], 8,
     "world 8 = dp 2 x tp 4 (tp='auto': the largest divisor of n_tracks=4 that divides world size 8): "
     "gradient_accumulation_steps=1 (the total over the data-parallel replicas) cannot be split over dp=2 "
     "replicas; use --gradient_accumulation_steps=2 --batch_size=4 (the same 8 sequences per iteration)"),
    (["--n_tracks=4", "--tp=4"], 6, "tp=4 does not divide the world size 6 (processes); use --tp=auto or one of "
                                    "[1, 2, 3, 6]"),
    (["--n_tracks=2", "--tp=4"], 4, "tp=4 does not divide n_tracks=2; use --tp=auto or one of [1, 2]"),
    (["--tp=2"], 1, "tp=2 does not divide the world size 1"),
])
def test_impossible_layout_is_one_line_naming_the_fix(args, world, message):
    with pytest.raises(ConfigError) as e:
        resolve_layout(parse(args), world)
    assert message in str(e.value) and "\n" not in str(e.value)


def header_flags(path):
    """The --flags of the torchrun command in a config file's header comment (none: it needs none)."""
    with open(path) as f:
        header = "".join(line for line in f if line.startswith("#")).replace("\\\n#", " ")  # join continued lines
    m = re.search(r"torchrun [^\n]*", header)
    return re.findall(r"--[a-z_]+=\S+", m[0].split("train_reduced_sync.py")[1]) if m else []


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "config", "*.py"))),
                         ids=lambda p: os.path.basename(p))
def test_every_config_launches_on_1_2_4_8_processes(path):
    """torchrun --nproc_per_node=N train_reduced_sync.py config/X.py works for N = 1, 2, 4 and 8 with no flags
    beyond those its header comment names, at every n_tracks the file's n_head allows."""
    base = parse([path, *header_flags(path)])
    for n_tracks in [d for d in range(1, base.n_head + 1) if base.n_head % d == 0]:
        cfg = dataclasses.replace(base, n_tracks=n_tracks)
        if n_tracks != base.n_tracks and "--n_tracks" not in open(path).read():
            continue  # only the n_tracks of the file, unless its comment invites changing it
        for world in (1, 2, 4, 8):
            layout = resolve_layout(cfg, world)
            assert layout.tp * layout.dp == world and layout.micro_steps * layout.dp == cfg.gradient_accumulation_steps


def test_help_lists_every_key_with_type_default_and_meaning(tmp_path):
    text = help_text()
    for f in dataclasses.fields(TrainConfig):
        line = next(l for l in text.splitlines() if l.split()[:1] == [f.name])
        assert repr(f.default) in line and f.metadata["meaning"] in line, line
        assert f.metadata["group"] in text.splitlines()
    assert [l for l in text.splitlines() if l and not l.startswith(" ")][-8:] == [
        "I/O", "wandb logging", "data", "model", "parallelism (world = dp x tp)", "AdamW optimizer",
        "learning rate decay", "system"]
    path = tmp_path / "c.py"
    path.write_text("n_layer = 3\n")
    text = help_text([str(path), "--n_embd=64", "--help"])
    values = {l.split()[0]: l.split()[1:3] for l in text.splitlines() if l[:2] == "  " and l[2] != " "}
    assert values["n_layer"] == ["int", "3"] and values["n_embd"] == ["int", "64"]  # after the file and override
    assert values["tp"] == ["int|auto", "'auto'"]


def test_save_config_is_json_with_extras(tmp_path):
    path = tmp_path / "config.json"
    save_config(parse(["--n_layer=3"]), str(path), extra={"derived": {"dp": 2}})
    saved = json.loads(path.read_text())
    assert saved["n_layer"] == 3 and saved["derived"] == {"dp": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temp file left behind


def test_help_shows_each_options_default_once():
    import argparse

    from training.config import HelpFormatter
    p = argparse.ArgumentParser(prog="x", formatter_class=HelpFormatter)
    p.add_argument("--jobs", type=int, default=3, help="runs at once")
    p.add_argument("--margin", type=float, default=1.0, help="in %% (default 1)")
    p.add_argument("--out", default=None, help="where")
    p.add_argument("--smoke", action="store_true", help="tiny")
    text = " ".join(p.format_help().split())
    assert "runs at once (default: 3)" in text and "in % (default 1)" in text and "(default 1) (default" not in text
    assert "where (default" not in text and "tiny (default" not in text


def test_every_command_line_parser_shows_defaults():
    """Each script's parser uses HelpFormatter (the prepare scripts, which cannot import it, write their
    defaults into their help texts)."""
    import glob
    import re
    missing = []
    for path in glob.glob(os.path.join(REPO, "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, REPO)
        # the prepare scripts cannot import it; the compiler repros and the bisection are records, not tools
        records = (os.path.join("experiments", "compiler_repros"),)
        if rel.startswith(("tests", ".venv", *records)) or rel.endswith("prepare.py"):
            continue
        source = open(path, encoding="utf-8").read()
        for m in re.finditer(r"(?:argparse\.ArgumentParser|OneLineArgumentParser)\((?!argparse)", source):
            if "formatter_class=HelpFormatter" not in source[m.end():m.end() + 300].split("\n\n")[0]:
                missing.append(f"{rel}:{source[:m.start()].count(chr(10)) + 1}")
    assert not missing, missing
