"""configurator.parse: defaults, config files, --key=value overrides and the error messages (in-process, fast)."""
import json

import pytest

from configurator import (VALID_KEYS, ConfigError, TrainConfig, micro_steps_per_replica, parse,
                          save_config)


def test_defaults_are_nanogpt_defaults():
    cfg = parse([])
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.batch_size) == (12, 12, 768, 1024, 12)
    assert (cfg.learning_rate, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters) == (6e-4, 6e-5, 2000, 600000)
    assert cfg.gradient_accumulation_steps == 40 and cfg.init_from == "scratch" and cfg.wandb_log is False
    assert (cfg.device, cfg.dtype, cfg.tp, cfg.sync_policy) == ("auto", "auto", 1, "baseline")


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


def test_unknown_override_lists_valid_keys_and_suggests():
    with pytest.raises(ConfigError) as e:
        parse(["--n_layr=2"])
    msg = str(e.value)
    assert "unknown config key 'n_layr'" in msg and "Did you mean n_layer" in msg
    assert all(key in msg for key in VALID_KEYS)


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


def test_malformed_argument():
    with pytest.raises(ConfigError, match="expected a config file path or --key=value"):
        parse(["--n_layer"])


def test_gradient_accumulation_is_split_over_replicas():
    cfg = TrainConfig(gradient_accumulation_steps=8)
    assert [micro_steps_per_replica(cfg, dp) for dp in (1, 2, 4, 8)] == [8, 4, 2, 1]
    with pytest.raises(ConfigError, match="gradient_accumulation_steps=8 .* not divisible by dp=3"):
        micro_steps_per_replica(cfg, 3)


def test_save_config_is_json_with_extras(tmp_path):
    path = tmp_path / "config.json"
    save_config(parse(["--n_layer=3"]), str(path), extra={"derived": {"dp": 2}})
    saved = json.loads(path.read_text())
    assert saved["n_layer"] == 3 and saved["derived"] == {"dp": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temp file left behind
