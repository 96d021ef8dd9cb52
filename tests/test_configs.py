"""
Checks of the config/ files, fast and dependency-free (no torch):
  - each file is flat assignments of known TrainConfig keys only;
  - within a family (config/train_*.py, config/shakespeare_*.py) the files differ
    only in sync_policy and out_dir;
  - the sync count in each file's name matches its sync_policy, and out_dir
    matches the name;
  - the character-level family (config/shakespeare_char_<width>.py, one base file per
    width; experiments/char_sweep/run.py sets n_tracks, sync_policy and seed on the command
    line) is nanoGPT's shakespeare_char recipe, its widths differ only in n_embd, n_head
    and out_dir, and every (n_tracks, policy) of the sweep is valid for it;
  - where the project's own parsers are importable (configurator.TrainConfig,
    model.sync_policy.parse_sync_policy), they agree with these checks.
"""
import ast
import glob
import os
import re

import pytest

from tests.conftest import REPO

CONFIG_DIR = os.path.join(REPO, "config")

TRAIN_CONFIG_KEYS = {
    "out_dir", "eval_interval", "log_interval", "eval_iters", "eval_only", "always_save_checkpoint",
    "init_from", "wandb_log", "wandb_project", "wandb_run_name", "dataset", "data_order", "gradient_accumulation_steps",
    "batch_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "n_tracks", "sync_policy",
    "tp", "learning_rate", "max_iters", "weight_decay", "beta1", "beta2", "grad_clip", "decay_lr",
    "warmup_iters", "lr_decay_iters", "min_lr", "device", "dtype", "compile", "compile_backend", "compile_mode",
    "seed",
    "bucket_cap_mb", "eval_batch_size",
}
VARYING = {"sync_policy", "out_dir"}
POLICY_NAMES = ("baseline", "spd", "parallel", "selective", "grouped")
# family -> (file prefix, out_dir prefix, expected dataset)
FAMILIES = {"train": ("train", "out", "openwebtext"), "shakespeare": ("shakespeare", "out-shakespeare", "shakespeare")}
NAME_RE = re.compile(r"^(?P<prefix>[a-z]+)_(?P<policy>[a-z]+)_(?P<n>\d+)sync\.py$")


def count_syncs(spec, n_layer):
    """Number of all-reduces per forward pass of a sync_policy spec (syntax: see README.md)."""
    name, _, arg = spec.partition(":")
    if name in ("baseline", "ladder") and not arg:
        return 2 * n_layer
    if name in ("spd", "parallel") and not arg:
        return n_layer
    if name == "grouped":
        assert arg.isdigit() and n_layer % int(arg) == 0, f"bad grouped spec {spec!r}"
        return n_layer // int(arg)
    if name == "selective":
        points = set()
        for token in arg.split(","):
            m = re.fullmatch(r"([am]?)(\d+)(?:-(\d+))?", token.strip())
            assert m, f"bad selective token {token!r} in {spec!r}"
            lo = int(m.group(2))
            hi = int(m.group(3)) if m.group(3) else lo
            assert lo <= hi < n_layer, f"layers {lo}-{hi} out of range in {spec!r}"
            kinds = m.group(1) or "am"
            points |= {(kind, layer) for kind in kinds for layer in range(lo, hi + 1)}
        assert ("m", n_layer - 1) in points, f"{spec!r} lacks the required last MLP point m{n_layer - 1}"
        return len(points)
    raise AssertionError(f"unknown sync_policy {spec!r}")


def load_config(path):
    """The file's assignments as a dict, exec()'d as the trainer's configurator does."""
    with open(path) as f:
        source = f.read()
    for node in ast.parse(source).body:  # flat: only `name = value` statements
        assert isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name), \
            f"{path}:{node.lineno}: only flat `key = value` assignments are allowed"
    scope = {}
    exec(compile(source, path, "exec"), {}, scope)
    return scope


def family_files(family):
    """config/<prefix>_<policy>_<N>sync.py (config/shakespeare_char_*.py is another family, below)."""
    prefix = FAMILIES[family][0]
    return sorted(glob.glob(os.path.join(CONFIG_DIR, f"{prefix}_*sync.py")))


def test_count_syncs_examples():
    assert count_syncs("baseline", 12) == count_syncs("ladder", 12) == 24
    assert count_syncs("spd", 12) == count_syncs("parallel", 12) == 12
    assert [count_syncs(f"grouped:{g}", 12) for g in (2, 3, 4, 6)] == [6, 4, 3, 2]
    assert count_syncs("selective:m0-3,m5,m7,m9-11", 12) == 9
    assert count_syncs("selective:0-10,m11", 12) == 23
    assert count_syncs("selective:a3,m11", 12) == 2
    with pytest.raises(AssertionError):
        count_syncs("selective:m0-3", 12)  # the last MLP point is required


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family(family):
    prefix, out_prefix, dataset = FAMILIES[family]
    paths = family_files(family)
    assert len(paths) == 8, f"expected 8 config/{prefix}_*.py files, found {[os.path.basename(p) for p in paths]}"
    configs = {os.path.basename(p): load_config(p) for p in paths}

    seen_policies = set()
    for fname, cfg in configs.items():
        unknown = set(cfg) - TRAIN_CONFIG_KEYS
        assert not unknown, f"{fname} assigns unknown keys {sorted(unknown)}; allowed: {sorted(TRAIN_CONFIG_KEYS)}"
        m = NAME_RE.match(fname)
        assert m and m.group("prefix") == prefix and m.group("policy") in POLICY_NAMES, \
            f"{fname}: expected {prefix}_<policy>_<N>sync.py with policy one of {POLICY_NAMES}"
        assert cfg["sync_policy"].split(":")[0] == m.group("policy"), f"{fname}: sync_policy {cfg['sync_policy']!r}"
        n = count_syncs(cfg["sync_policy"], cfg["n_layer"])
        assert n == int(m.group("n")), f"{fname}: sync_policy {cfg['sync_policy']!r} has {n} syncs, name says {m.group('n')}"
        assert cfg["out_dir"] == f"{out_prefix}-{m.group('policy')}-{n}sync", f"{fname}: out_dir {cfg['out_dir']!r}"
        assert cfg["dataset"] == dataset, f"{fname}: dataset {cfg['dataset']!r}"
        assert cfg["n_head"] % cfg["n_tracks"] == 0 and cfg["tp"] == "auto", fname
        seen_policies.add(cfg["sync_policy"])
    assert len(seen_policies) == 8, f"sync policies repeat: {sorted(seen_policies)}"

    # identical apart from sync_policy and out_dir
    ref_name, ref = next(iter(configs.items()))
    shared = {k: v for k, v in ref.items() if k not in VARYING}
    for fname, cfg in configs.items():
        other = {k: v for k, v in cfg.items() if k not in VARYING}
        diff = sorted(k for k in set(shared) | set(other) if shared.get(k, "<unset>") != other.get(k, "<unset>"))
        assert not diff, f"{fname} differs from {ref_name} in {diff} (only {sorted(VARYING)} may differ)"


# nanoGPT's config/train_shakespeare_char.py, with the train.py defaults it relies on (bias, weight_decay,
# beta1, grad_clip, decay_lr); log_interval (10 there) only changes how often the log is written.
NANOGPT_SHAKESPEARE_CHAR = {
    "eval_interval": 250, "eval_iters": 200, "always_save_checkpoint": False, "dataset": "shakespeare_char",
    "gradient_accumulation_steps": 1, "batch_size": 64, "block_size": 256, "n_layer": 6, "n_head": 6,
    "n_embd": 384, "dropout": 0.2, "learning_rate": 1e-3, "max_iters": 5000, "lr_decay_iters": 5000,
    "min_lr": 1e-4, "beta2": 0.99, "warmup_iters": 100, "bias": False, "weight_decay": 1e-1, "beta1": 0.9,
    "grad_clip": 1.0, "decay_lr": True,
}
CHAR_WIDTHS = {192: 6, 384: 6, 768: 12}  # n_embd -> n_head (head dim 32 at 192: 6 heads for 6 tracks; else 64)
CHAR_TRACKS = (2, 6)
# the sweep's policies and their syncs per forward at 6 layers (grouped:6 = one sync, before ln_f)
CHAR_POLICY_SYNCS = {"baseline": 12, "spd": 6, "parallel": 6, "ladder": 12, "grouped:2": 3, "grouped:3": 2,
                     "grouped:6": 1}


def test_every_config_file_belongs_to_a_family():
    """Nothing in config/ escapes the checks: each file is in a family above or the char family."""
    checked = {p for family in FAMILIES for p in family_files(family)}
    checked |= set(glob.glob(os.path.join(CONFIG_DIR, "shakespeare_char_*.py")))
    checked |= {os.path.join(CONFIG_DIR, name) for name in DOCS_CONFIGS}
    checked |= set(glob.glob(os.path.join(CONFIG_DIR, "size_w*.py")))
    checked |= {os.path.join(CONFIG_DIR, name) for name in LARGE_CONFIGS}
    stray = sorted(os.path.basename(p) for p in set(glob.glob(os.path.join(CONFIG_DIR, "*.py"))) - checked)
    assert not stray, f"config files in no checked family: {stray}"


def test_char_family():
    paths = sorted(glob.glob(os.path.join(CONFIG_DIR, "shakespeare_char_*.py")))
    assert sorted(os.path.basename(p) for p in paths) == sorted(f"shakespeare_char_{w}.py" for w in CHAR_WIDTHS)
    configs = {w: load_config(os.path.join(CONFIG_DIR, f"shakespeare_char_{w}.py")) for w in CHAR_WIDTHS}
    for width, cfg in configs.items():
        unknown = set(cfg) - TRAIN_CONFIG_KEYS
        assert not unknown, f"shakespeare_char_{width}.py assigns unknown keys {sorted(unknown)}"
        assert cfg["n_embd"] == width and cfg["n_head"] == CHAR_WIDTHS[width]
        assert cfg["out_dir"] == f"out-shakespeare-char-{width}" and cfg["tp"] == "auto"
        for tracks in CHAR_TRACKS:  # every track holds whole heads
            assert cfg["n_head"] % tracks == 0 and cfg["n_embd"] % cfg["n_head"] == 0
        for policy, syncs in CHAR_POLICY_SYNCS.items():
            assert count_syncs(policy, cfg["n_layer"]) == syncs, policy
    recipe = {k: configs[384][k] for k in NANOGPT_SHAKESPEARE_CHAR}
    assert recipe == NANOGPT_SHAKESPEARE_CHAR
    # each variant is the recipe with another width: nothing else may drift
    for width, differing in ((768, ["n_embd", "n_head", "out_dir"]), (192, ["n_embd", "out_dir"])):
        base, variant = configs[384], configs[width]
        diff = sorted(k for k in set(base) | set(variant) if base.get(k, "<unset>") != variant.get(k, "<unset>"))
        assert diff == differing, width


# the study's part 3 (issue 26): GPT-2 124M and its half-width variant on data/debian_docs
DOCS_CONFIGS = {"docs_124m.py": 768, "docs_w384.py": 384}


def test_docs_family():
    configs = {name: load_config(os.path.join(CONFIG_DIR, name)) for name in DOCS_CONFIGS}
    for name, cfg in configs.items():
        unknown = set(cfg) - TRAIN_CONFIG_KEYS
        assert not unknown, f"{name} assigns unknown keys {sorted(unknown)}"
        assert (cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["block_size"], cfg["n_tracks"], cfg["tp"]) == \
            (12, 12, DOCS_CONFIGS[name], 1024, 4, "auto")
        assert cfg["dataset"] == "debian_docs" and cfg["data_order"] == "one_pass" and cfg["compile"] is True
        tokens = cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"] * cfg["max_iters"]
        assert tokens >= 20_000_000 and cfg["lr_decay_iters"] == cfg["max_iters"]
    a, b = configs["docs_124m.py"], configs["docs_w384.py"]
    assert sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) == ["n_embd", "out_dir"]


def test_size_family_scales_tokens_with_parameters():
    """config/size_w<width>.py: docs_124m.py's recipe at another width, its sequences per iteration
    32 N / N_124M to the nearest integer (width 384's 10.50 taken as 10) for the trainer's count N (every parameter
    but the position embedding, vocabulary 50304),
    so that a budget in iterations is the same tokens per parameter at every width; the same val windows
    (eval_batch_size 16 x eval_iters 20, docs_124m's batch); head size 32 to 64 and n_head divisible by 4 tracks."""
    base = load_config(os.path.join(CONFIG_DIR, "docs_124m.py"))
    count = lambda c: c["n_layer"] * (12 * c["n_embd"] ** 2 + 2 * c["n_embd"]) + c["n_embd"] + 50304 * c["n_embd"]
    paths = sorted(glob.glob(os.path.join(CONFIG_DIR, "size_w*.py")))
    assert len(paths) >= 3
    for path in paths:
        cfg, name = load_config(path), os.path.basename(path)
        assert not set(cfg) - TRAIN_CONFIG_KEYS, name
        assert name == f"size_w{cfg['n_embd']}.py" and cfg["out_dir"] == f"out-size-w{cfg['n_embd']}"
        assert cfg["n_head"] % cfg["n_tracks"] == 0 and 32 <= cfg["n_embd"] // cfg["n_head"] <= 64, name
        sequences = cfg["batch_size"] * cfg["gradient_accumulation_steps"]
        assert abs(sequences - 32 * count(cfg) / count(base)) <= 0.51, name
        assert cfg["eval_batch_size"] * cfg["eval_iters"] == base["batch_size"] * base["eval_iters"], name
        same = {k for k in base if k not in ("out_dir", "n_embd", "n_head", "batch_size", "gradient_accumulation_steps",
                                             "compile")}
        assert {k: cfg[k] for k in same} == {k: base[k] for k in same}, name


# the budget study on data/debian_large (issue 68): width -> (budget in iterations, corpus chunks it reads)
LARGE_CONFIGS = {"large_w256.py": (256, 7168, 15), "large_w384.py": (384, 12544, 25), "large_124m.py": (768, 9216, 19)}


def test_large_family_reads_each_window_once():
    """config/large_*.py: the same recipe at three widths, 32,768 tokens an iteration, compiled with CUDA graphs
    ('auto'), one_pass over data/debian_large; each config's largest budget fits in the corpus prefix its header
    names (chunks of 2^24 tokens, as data/debian_large/stage.py stages them), and 32 evals divide it."""
    configs = {name: load_config(os.path.join(CONFIG_DIR, name)) for name in LARGE_CONFIGS}
    for name, cfg in configs.items():
        width, budget, chunks = LARGE_CONFIGS[name]
        assert not set(cfg) - TRAIN_CONFIG_KEYS, name
        assert (cfg["n_embd"], cfg["max_iters"], cfg["lr_decay_iters"]) == (width, budget, budget), name
        assert cfg["dataset"] == "debian_large" and cfg["data_order"] == "one_pass" and cfg["compile"] == "auto"
        assert cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"] == 32768, name
        assert cfg["n_head"] % cfg["n_tracks"] == 0 and cfg["n_embd"] // cfg["n_head"] in (32, 64), name
        windows = (chunks * (1 << 24) - 1) // cfg["block_size"]
        assert budget * cfg["batch_size"] * cfg["gradient_accumulation_steps"] <= windows, name
        assert budget == 32 * cfg["eval_interval"], name
        with open(os.path.join(CONFIG_DIR, name)) as f:
            assert f"first {chunks} chunks" in f.read(), name
    a, b = configs["large_w256.py"], configs["large_124m.py"]
    assert sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) == \
        ["eval_interval", "lr_decay_iters", "max_iters", "n_embd", "n_head", "out_dir"]


def test_char_policies_match_model_parser():
    try:
        from model.sync_policy import parse_sync_policy
    except Exception as e:
        pytest.skip(f"model.sync_policy not available: {e!r}")
    for policy, syncs in CHAR_POLICY_SYNCS.items():
        assert parse_sync_policy(policy, 6).n_syncs == syncs, policy
    # spd is the grouped family's first member: the same sync points as grouped:1
    assert parse_sync_policy("spd", 6).sync == parse_sync_policy("grouped:1", 6).sync


def test_owt_tokens_per_iter():
    cfg = load_config(os.path.join(CONFIG_DIR, "train_grouped_6sync.py"))
    assert cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"] == 491_520
    assert cfg["max_iters"] == cfg["lr_decay_iters"] == 20000


def test_keys_match_trainconfig():
    """config keys are fields of configurator.TrainConfig, once that exists and imports without torch."""
    try:
        import dataclasses
        from training.config import TrainConfig
        fields = {f.name for f in dataclasses.fields(TrainConfig)}
    except Exception as e:  # not written yet, or not a dataclass
        pytest.skip(f"configurator.TrainConfig not available: {e!r}")
    char = sorted(glob.glob(os.path.join(CONFIG_DIR, "shakespeare_char_*.py")))
    for path in [p for family in FAMILIES for p in family_files(family)] + char:
        unknown = set(load_config(path)) - fields
        assert not unknown, f"{os.path.basename(path)} assigns keys TrainConfig lacks: {sorted(unknown)}"


def test_sync_counts_match_model_parser():
    """count_syncs agrees with the model's parser, once model/sync_policy.py exists."""
    try:
        from model.sync_policy import parse_sync_policy
    except Exception as e:
        pytest.skip(f"model.sync_policy not available: {e!r}")
    for family in FAMILIES:
        for path in family_files(family):
            cfg = load_config(path)
            assert parse_sync_policy(cfg["sync_policy"], cfg["n_layer"]).n_syncs == \
                count_syncs(cfg["sync_policy"], cfg["n_layer"]), os.path.basename(path)


def test_each_sync_named_config_explains_its_name_in_its_header():
    """Users read the digit in grouped_3sync as G; the header says it counts syncs, and names the policy."""
    for path in sorted(glob.glob(os.path.join(CONFIG_DIR, "*_*sync.py"))):
        n = re.search(r"_(\d+)sync\.py$", path).group(1)
        text = open(path).read()
        policy = re.search(r"^sync_policy = '([^']+)'", text, re.M).group(1)
        header = text.split("\n\n", 1)[0]
        assert f"{n}sync = {n} all-reduces per forward pass, here sync_policy = '{policy}'" in header, path


COMPILE_AUTO_LINE = re.compile(r"^compile = 'auto'\s*#\s*(?P<comment>.*)$", re.M)


def compile_auto_sentence():
    """What compile='auto' does, in the words of the configs' comments, read off training.config.resolve_compile
    at every device and at tp 1, 2 and 4 (it must not depend on tp for this sentence to hold)."""
    from training.config import TrainConfig, resolve_compile
    names = {device: {resolve_compile(TrainConfig(compile="auto", tp=tp), device).name for tp in (1, 2, 4)}
             for device in ("cuda", "cpu")}
    assert all(len(n) == 1 for n in names.values()), \
        f"compile='auto' now depends on tp ({names}): say how in the configs' compile comments and here"
    return f"on CUDA {names['cuda'].pop()} at every tp, on CPU {names['cpu'].pop()}"


def test_compile_comments_match_resolve_compile():
    """A config's comment on compile='auto' says what training.config.resolve_compile does (it once said eager at
    tp > 1, where the code compiles with CUDA graphs)."""
    sentence = compile_auto_sentence()
    comments = {}
    for path in sorted(glob.glob(os.path.join(CONFIG_DIR, "*.py"))):
        with open(path) as f:
            comments.update((os.path.basename(path), m["comment"]) for m in COMPILE_AUTO_LINE.finditer(f.read()))
    assert len(comments) >= 8, comments  # the train_* family
    wrong = {name: comment for name, comment in comments.items() if not comment.startswith(sentence)}
    assert not wrong, f"these configs' compile comments should start with {sentence!r}: {wrong}"
