"""Typed training configuration: defaults, config files, `--key=value` overrides, validation.

    cfg = parse(sys.argv[1:])      # e.g. ['config/train_grouped_6sync.py', '--tp=2', '--max_iters=100']

Positional arguments are config files: plain Python that assigns known keys (as in nanoGPT's
config/*.py). Then `--key=value` overrides, parsed with ast.literal_eval and kept as a string when
that fails (so `--out_dir=out-x` needs no quotes). Every value is checked against the type of
the key's default and against the allowed values; any problem raises ConfigError with a message
that names the key, the value and what is allowed. Nothing here touches the filesystem except
reading the config files.
"""
import argparse
import ast
import dataclasses
import difflib
import json
import math
import os
import re
import tempfile
import types
from dataclasses import dataclass, fields

from model.sync_policy import parse_sync_policy


class ConfigError(ValueError):
    """A bad config file, key or value. The message is meant to be shown to the user as is."""


@dataclass
class TrainConfig:
    # I/O
    out_dir: str = "out"
    eval_interval: int = 2000
    log_interval: int = 1
    eval_iters: int = 200
    eval_only: bool = False  # if True, run one evaluation and exit
    always_save_checkpoint: bool = True  # if False, ckpt.pt is only written when val loss improves
    init_from: str = "scratch"  # 'scratch', 'resume' (out_dir/ckpt.pt), or path/to/ckpt.pt: fine-tune its weights
    # a fresh run refuses an out_dir that holds a run; True moves that run into out_dir/replaced-<time>/ first
    overwrite: bool = False
    # wandb logging (imported only when enabled; WANDB_MODE=offline works without network)
    wandb_log: bool = False
    wandb_project: str = "reduced-sync"
    wandb_run_name: str = "run"
    # data
    dataset: str = "openwebtext"  # reads <data_dir>/<dataset>/{train,val}.bin
    data_dir: str = ""  # '' = the repository's data/ (whatever the cwd); a path given here is taken as is
    # 'random': each sequence starts at a uniform random offset (nanoGPT); 'one_pass': the train split is cut
    # into block_size windows, read in a seeded random order, none twice (the run must fit in one pass)
    data_order: str = "random"
    gradient_accumulation_steps: int = 5 * 8  # TOTAL over data-parallel replicas, split across them
    batch_size: int = 12  # micro-batch size per replica per micro-step
    block_size: int = 1024
    # model
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = False
    n_tracks: int = 1
    sync_policy: str = "baseline"  # validated by the model (model/gpt.py)
    # parallelism: world = dp * tp, dp is derived
    tp: int = 1
    bucket_cap_mb: float = 25.0  # data-parallel gradient bucket size
    rendezvous_timeout: float = 300.0  # seconds to find the other ranks when launched without torchrun
    # AdamW optimizer
    learning_rate: float = 6e-4
    max_iters: int = 600000
    weight_decay: float = 1e-1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # clip gradients at this global norm, or disable if 0.0
    # learning rate decay: linear warmup, then cosine down to min_lr
    decay_lr: bool = True
    warmup_iters: int = 2000
    lr_decay_iters: int = 600000
    min_lr: float = 6e-5
    # system
    device: str = "auto"  # 'auto' (cuda if available), 'cpu' or 'cuda'
    dtype: str = "auto"  # 'auto' = bfloat16 autocast on CUDA, float32 on CPU
    compile: bool = False  # torch.compile(model, fullgraph=True): a graph break is an error, not a silent fallback
    compile_backend: str = "inductor"  # 'aot_eager' traces without code generation (fast on CPU, for checks)
    # 'reduce-overhead': forward and backward replayed as CUDA graphs. At tp=2 on H200s it took a 124M step
    # from 30.2 to 21.4 ms (bench/results/train_throughput_graphs.md); at tp=1 it changed nothing
    compile_mode: str = "default"
    seed: int = 1337

    def to_dict(self):
        return dataclasses.asdict(self)


# Allowed values of the string keys that have a fixed set of choices.
CHOICES = {
    "init_from": ("scratch", "resume"),
    "data_order": ("random", "one_pass"),
    "device": ("auto", "cpu", "cuda"),
    "dtype": ("auto", "float32", "bfloat16", "float16"),
    "compile_backend": ("inductor", "aot_eager", "eager"),
    "compile_mode": ("default", "reduce-overhead"),
}
# Integer keys that must be >= 1 and keys that must be >= 0.
AT_LEAST_ONE = ("eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps",
                "batch_size", "block_size", "n_layer", "n_head", "n_embd", "n_tracks", "tp")
NON_NEGATIVE = ("max_iters", "warmup_iters", "lr_decay_iters", "learning_rate", "min_lr",
                "weight_decay", "grad_clip", "seed")

FIELD_TYPES = {f.name: f.type if isinstance(f.type, str) else f.type.__name__
               for f in fields(TrainConfig)}
VALID_KEYS = tuple(FIELD_TYPES)


def _unknown_key_error(key, where):
    close = difflib.get_close_matches(key, VALID_KEYS, n=3)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    return ConfigError(f"unknown config key '{key}' ({where}).{hint} "
                       f"Valid keys: {', '.join(VALID_KEYS)}")


def coerce(key, value):
    """Return `value` as the type of `key`'s default, or raise ConfigError naming both."""
    if key not in FIELD_TYPES:
        raise _unknown_key_error(key, "coerce")
    want = FIELD_TYPES[key]
    ok = {
        # bool is a subclass of int: --n_layer=True must not pass as 1, nor --bias=1 as True.
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }[want]
    if not ok:
        raise ConfigError(f"config key '{key}' expects {want}, got {value!r} "
                          f"({type(value).__name__})")
    if want == "float" and not math.isfinite(value):
        raise ConfigError(f"config key '{key}' expects a finite float, got {value!r}")
    if want == "str" and "\0" in value:
        raise ConfigError(f"config key '{key}' must not contain a NUL character, got {value!r}")
    return float(value) if want == "float" else value


def validate(cfg):
    """Check values beyond their type. Raises ConfigError."""
    for key, allowed in CHOICES.items():
        value = getattr(cfg, key)
        if key == "init_from" and value.endswith(".pt"):
            continue  # a checkpoint to fine-tune from; the trainer checks that it exists
        if value not in allowed:
            also = " or a path ending in .pt" if key == "init_from" else ""
            raise ConfigError(f"invalid {key}={value!r}; allowed: {', '.join(allowed)}{also}")
    for key in AT_LEAST_ONE:
        if getattr(cfg, key) < 1:
            raise ConfigError(f"invalid {key}={getattr(cfg, key)!r}; must be >= 1")
    for key in NON_NEGATIVE:
        if getattr(cfg, key) < 0:
            raise ConfigError(f"invalid {key}={getattr(cfg, key)!r}; must be >= 0")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ConfigError(f"invalid dropout={cfg.dropout!r}; must be in [0, 1)")
    for key in ("beta1", "beta2"):
        if not 0.0 <= getattr(cfg, key) < 1.0:
            raise ConfigError(f"invalid {key}={getattr(cfg, key)!r}; must be in [0, 1)")
    if cfg.seed >= 2 ** 63:
        raise ConfigError(f"invalid seed={cfg.seed!r}; must be in [0, 2**63)")
    if not cfg.dataset:
        raise ConfigError("dataset must not be empty (it names data/<dataset>/)")
    if cfg.rendezvous_timeout <= 0:
        raise ConfigError(f"invalid rendezvous_timeout={cfg.rendezvous_timeout!r}; must be > 0 (seconds)")
    if cfg.bucket_cap_mb <= 0:
        raise ConfigError(f"invalid bucket_cap_mb={cfg.bucket_cap_mb!r}; must be > 0")
    if not cfg.out_dir:
        raise ConfigError("out_dir must not be empty")
    if cfg.decay_lr and cfg.min_lr > cfg.learning_rate:
        raise ConfigError(f"min_lr={cfg.min_lr!r} is above learning_rate={cfg.learning_rate!r}: the schedule decays "
                          f"from learning_rate down to min_lr, so min_lr must be <= learning_rate")
    if cfg.n_embd % cfg.n_head != 0:
        raise ConfigError(f"n_embd={cfg.n_embd} must be divisible by n_head={cfg.n_head}")
    if cfg.init_from == "scratch":  # else the checkpoint's architecture applies (checked when it is built)
        if cfg.n_head % cfg.n_tracks != 0:
            raise ConfigError(f"n_tracks={cfg.n_tracks} must divide n_head={cfg.n_head}; one of "
                              f"{[d for d in range(1, cfg.n_head + 1) if cfg.n_head % d == 0]}")
        try:
            parse_sync_policy(cfg.sync_policy, cfg.n_layer)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if cfg.device == "cpu" and cfg.dtype in ("bfloat16", "float16"):
        # CPU autocast in half precision is slow and not what a user comparing runs expects.
        raise ConfigError(f"dtype={cfg.dtype!r} is only supported on CUDA; use float32 or auto on CPU")


REPO = os.path.dirname(os.path.abspath(__file__))


def read_config_file(path):
    """Exec a config file and return the {key: value} it assigns. Only known keys may be assigned.
    A relative path not found from the cwd is looked up in the repository (config/x.py from anywhere).
    The file is Python that runs with the trainer's rights: only use config files you trust."""
    if not os.path.exists(path) and not os.path.isabs(path) and os.path.exists(os.path.join(REPO, path)):
        path = os.path.join(REPO, path)
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path} is not a file")
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    namespace = {}
    try:
        exec(compile(source, path, "exec"), namespace)
    except Exception as e:  # a config file is user code: report its error without our traceback
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"error in config file {path}{where}: {type(e).__name__}: {first}") from None
    assigned = {}
    for name, value in namespace.items():
        # Config files may import modules (e.g. `import time`) and use private helpers.
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if name not in FIELD_TYPES:
            raise _unknown_key_error(name, f"assigned in {path}")
        assigned[name] = value
    return assigned


def parse_override(arg):
    """'--key=value' -> (key, value); value via literal_eval, falling back to the raw string."""
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"cannot parse argument {arg!r}: expected a config file path or "
                          f"--key=value")
    key, raw = arg[2:].split("=", 1)
    if key not in FIELD_TYPES:
        raise _unknown_key_error(key, f"from {arg!r}")
    try:
        value = ast.literal_eval(raw)
    except (SyntaxError, ValueError):
        value = raw
    if FIELD_TYPES[key] == "str" and not isinstance(value, str):
        value = raw  # --wandb_run_name=2024 or --dataset=1e6 mean the text
    return key, value


def parse(argv):
    """Build a validated TrainConfig from argv (without the program name)."""
    values = {}
    for arg in argv:
        if arg.startswith("--"):
            key, value = parse_override(arg)
            values[key] = coerce(key, value)
        else:
            for key, value in read_config_file(arg).items():
                try:
                    values[key] = coerce(key, value)
                except ConfigError as e:
                    raise ConfigError(f"{e} (assigned in {arg})") from None
    cfg = TrainConfig(**values)
    validate(cfg)
    return cfg


def micro_steps_per_replica(cfg, dp):
    """gradient_accumulation_steps is the total over the dp replicas (as nanoGPT divides by the
    DDP world size): each replica runs this many micro-steps per iteration."""
    if cfg.gradient_accumulation_steps % dp != 0:
        divisible = [n for n in range(dp, 8 * dp + 1, dp)]
        raise ConfigError(f"gradient_accumulation_steps={cfg.gradient_accumulation_steps} (total over "
                          f"data-parallel replicas) is not divisible by dp={dp}; use a multiple of "
                          f"{dp}, e.g. {divisible[:4]}")
    return cfg.gradient_accumulation_steps // dp


def format_config(cfg):
    return "\n".join(f"  {k} = {v!r}" for k, v in cfg.to_dict().items())


def atomic_write(path, write):
    """Call write(f) on a binary temp file in path's directory, fsync, then os.replace it onto path:
    a reader (or a run killed midway) sees the old file or the new one, never half of one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)  # make the rename itself durable
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(path, text):
    """Write a result file (table, JSON) atomically, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def save_figure(fig, path, dpi=120):
    """fig.savefig(path) atomically (the format from the suffix), creating its folder; closes fig."""
    import io
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format=os.path.splitext(path)[1][1:].lower())
    plt.close(fig)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))


# ----------------------------------------------------------------------------- command-line helpers
# argparse's type=int and type=float accept any Unicode digit ('\u0663' is 3) and float also 'nan'
# and 'inf'; the scripts use these instead, so numbers are ASCII digits and finite.
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def ascii_int(text):
    if not _INT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (ASCII digits 0-9)")
    return int(text)


def ascii_float(text):
    if not _FLOAT.fullmatch(text) or not math.isfinite(float(text)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (ASCII digits 0-9)")
    return float(text)


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, 'error: ...' (exit code 2), without the usage."""

    def error(self, message):
        self.exit(2, f"error: {message.splitlines()[0] if message else 'bad arguments'} "
                     f"(see {self.prog} --help)\n")


def save_config(cfg, path, extra=None):
    """Save the resolved config (plus e.g. the derived layout) as JSON, atomically."""
    d = cfg.to_dict()
    if extra:
        d.update(extra)
    atomic_write(path, lambda f: f.write((json.dumps(d, indent=2) + "\n").encode()))
