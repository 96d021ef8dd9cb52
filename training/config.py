"""Typed training configuration: defaults, config files, `--key=value` overrides, validation.

    cfg = parse(sys.argv[1:])      # e.g. ['config/train_grouped_6sync.py', '--tp=2', '--max_iters=100']

Positional arguments are config files: plain Python that assigns known keys (as in nanoGPT's
config/*.py). Then `--key=value` overrides, parsed with ast.literal_eval and kept as a string when
that fails (so `--out_dir=out-x` needs no quotes). Every value is checked against the type of
the key's default and against the allowed values; any problem raises ConfigError with a message
that names the key, the value and what is allowed. Nothing here touches the filesystem except
reading the config files.
"""
import ast
import dataclasses
import difflib
import json
import math
import os
import signal
import types
from dataclasses import dataclass, fields

from cli_guard import HelpFormatter, OneLineArgumentParser, ascii_float, ascii_int  # noqa: F401 -- re-exported: the scripts import them from here
from model.gpt_config import GPTConfig, parse_tp_comm_overlap


class ConfigError(ValueError):
    """A bad config file, key or value. The message is meant to be shown to the user as is."""


def option(default, group, meaning):
    """One row of the table of config keys: its default, its --help group and a one-line meaning.
    The type is the field's annotation. --help prints this table and parse() validates against it."""
    return dataclasses.field(default=default, metadata={"group": group, "meaning": meaning})


IO, WANDB, DATA, MODEL, OPTIM, LR, PARALLEL, SYSTEM = (
    "I/O", "wandb logging", "data", "model", "AdamW optimizer", "learning rate decay",
    "parallelism (world = dp x tp)", "system")


@dataclass
class TrainConfig:
    out_dir: str = option("out", IO, "directory of ckpt.pt, log.txt, metrics.jsonl and config.json")
    eval_interval: int = option(2000, IO, "evaluate (and checkpoint) every this many iterations")
    log_interval: int = option(1, IO, "log the training loss every this many iterations")
    log_layer_grad_norms: bool = option(False, IO, "also log each layer's gradient norm at every log interval (the "
                                                   "embeddings, each block, the final LayerNorm): where a spike sits")
    eval_iters: int = option(200, IO, "batches per split in each evaluation")
    # the size study trains each width at its own batch size and scores every width on the same val windows
    eval_batch_size: int = option(0, IO, "sequences per eval batch; 0: batch_size (the eval windows depend on it)")
    eval_only: bool = option(False, IO, "run one evaluation and exit")
    always_save_checkpoint: bool = option(True, IO, "write ckpt.pt at every eval; False: only when val loss improves")
    checkpoint_every: int = option(1, IO, "write checkpoints at every Nth eval only, and always at max_iters and "
                                          "save_iters (a 124M checkpoint takes seconds; a resume redoes at most N evals)")
    keep_best: bool = option(True, IO, "also keep ckpt_best.pt, a copy at the best val loss and the fallback for a "
                                       "damaged ckpt.pt (False: one checkpoint less on disk, for sweeps on scratch)")
    init_from: str = option("scratch", IO, "'scratch', 'resume' (out_dir/ckpt.pt), 'branch' (continue branch_from's run "
                                           "into this out_dir) or path/to/ckpt.pt (fine-tune its weights)")
    branch_from: str = option("", IO, "init_from='branch': the checkpoint (a WSD trunk's ckpt_<iter>.pt) whose weights, "
                                      "optimizer, iteration and data position this run continues")
    save_iters: str = option("", IO, "comma-separated iterations at which the checkpoint is also kept as "
                                     "ckpt_<iter>.pt (a WSD trunk's branch points)")
    branches: str = option("", IO, "a WSD trunk's cooldown branches, trained by this process once the trunk ends: "
                                   "comma-separated BUDGET:out_dir, each from the trunk's ckpt_<its branch point>.pt "
                                   "as init_from='branch' would, without a new process's start and compile")
    overwrite: bool = option(False, IO, "a fresh run in an out_dir that holds a run: move that run into "
                                        "out_dir/replaced-<time>/ first (False: refuse)")
    # wandb is imported only when enabled; WANDB_MODE=offline works without network
    wandb_log: bool = option(False, WANDB, "log to Weights & Biases (pip install wandb)")
    wandb_project: str = option("reduced-sync", WANDB, "wandb project name")
    wandb_run_name: str = option("run", WANDB, "wandb run name")
    dataset: str = option("openwebtext", DATA, "reads <data_dir>/<dataset>/{train,val}.bin")
    data_dir: str = option("", DATA, "'' : the repository's data/, whatever the cwd; a path: taken from the cwd")
    # 'one_pass' keeps the data order a pure function of (seed, iteration), so resuming stays exact
    data_order: str = option("random", DATA, "'random': uniform random offsets (nanoGPT); "
                                          "'one_pass': block_size windows in a seeded order, none twice; "
                                          "'passes': one_pass, then pass k in its own order keyed by (seed, k)")
    gradient_accumulation_steps: int = option(5 * 8, DATA, "micro-steps per iteration, TOTAL over the dp replicas "
                                                        "(each runs this / dp)")
    batch_size: int = option(12, DATA, "sequences per micro-step per replica")
    block_size: int = option(1024, DATA, "sequence length in tokens")
    n_layer: int = option(12, MODEL, "transformer blocks")
    n_head: int = option(12, MODEL, "attention heads (divisible by n_tracks)")
    n_embd: int = option(768, MODEL, "width (divisible by n_head)")
    dropout: float = option(0.0, MODEL, "dropout probability")
    bias: bool = option(False, MODEL, "biases in Linear layers and LayerNorms")
    n_tracks: int = option(1, MODEL, "tracks (head and MLP slices with their own residual stream between syncs)")
    sync_policy: str = option("baseline", MODEL, "which sync points all-reduce: baseline, spd, parallel, ladder, "
                                              "grouped:G, selective:SPEC (README)")
    # tp does not change the function the model computes, only how it is split over processes
    tp: "int|auto" = option("auto", PARALLEL, "tensor-parallel degree (divides world size and n_tracks); 'auto': "
                                         "the largest divisor of n_tracks that divides the world size")
    bucket_cap_mb: float = option(25.0, PARALLEL, "data-parallel gradient bucket size, MB")
    rendezvous_timeout: float = option(300.0, PARALLEL, "seconds to find the other ranks when launched without torchrun")
    stall_timeout: float = option(300.0, PARALLEL, "seconds a rank waits for a peer that stopped running (SIGSTOP, "
                                                   "frozen) before the run ends naming it (training/stall.py)")
    tp_async_grad: bool = option(False, PARALLEL, "tp >= 2: launch f's backward all-reduce before the column GEMM's "
                                              "weight gradient and wait after it (Megatron's async grad all-reduce)")
    # off by default: exact (tests/test_sequence_parallel.py); faster for baseline only at tp=4 with CUDA graphs,
    # slower at tp=2 (docs/training.md), the policies' fastest without it
    sequence_parallel: bool = option(False, PARALLEL, "tp >= 2: Megatron's sequence parallelism: between syncs the "
                                                      "stream, LayerNorm and dropout act on 1/tp of the tokens; each "
                                                      "all-reduce becomes a reduce-scatter and an all-gather "
                                                      "(block_size divisible by tp; the same function)")
    tp_comm_overlap: str = option("off", PARALLEL, "sequence_parallel=True: overlap its all-gathers and reduce-scatters "
                                                  "with the GEMMs beside them (the same function): 'off', 'chunked' "
                                                  "or 'chunked:K' (K row pieces, 2 by default; parallel/overlap.py), "
                                                  "'async_tp' (torch's async TP: CUDA, compiled with inductor)")
    learning_rate: float = option(6e-4, OPTIM, "peak learning rate")
    max_iters: int = option(600000, OPTIM, "iterations to train")
    weight_decay: float = option(1e-1, OPTIM, "AdamW weight decay of matrices and embeddings")
    beta1: float = option(0.9, OPTIM, "AdamW beta1")
    beta2: float = option(0.95, OPTIM, "AdamW beta2")
    grad_clip: float = option(1.0, OPTIM, "clip gradients at this global norm; 0.0: no clipping")
    decay_lr: bool = option(True, LR, "linear warmup, then lr_schedule's decay to min_lr; False: constant learning_rate")
    # wsd: one constant-lr trunk serves many budgets, each a short cooldown branch (training.get_lr)
    lr_schedule: str = option("cosine", LR, "'cosine' (nanoGPT) or 'wsd': warmup, constant, then a 1-sqrt decay to "
                                            "min_lr over the last cooldown_frac of lr_decay_iters")
    cooldown_frac: float = option(0.2, LR, "lr_schedule='wsd': the share of lr_decay_iters spent decaying")
    warmup_iters: int = option(2000, LR, "warmup iterations")
    lr_decay_iters: int = option(600000, LR, "iteration at which the learning rate reaches min_lr")
    min_lr: float = option(6e-5, LR, "final learning rate")
    device: str = option("auto", SYSTEM, "'auto' (CUDA when every local process gets a GPU, else CPU), 'cpu', 'cuda'")
    dtype: str = option("auto", SYSTEM, "'auto': bfloat16 autocast on CUDA, float32 on CPU")
    # fullgraph=True: a graph break is an error, never a silent eager fallback. 'auto' (resolve_compile): the
    # design launch runs fast without flags on GPUs, and a CPU run stays eager (compiling there costs minutes)
    compile: "bool|auto" = option("auto", SYSTEM, "torch.compile(model, fullgraph=True); 'auto': compiled with CUDA "
                                                   "graphs on CUDA, eager on CPU (the log's 'compile:' line says which)")
    compile_backend: str = option("inductor", SYSTEM, "'inductor'; 'aot_eager' traces without code generation "
                                                   "(fast on CPU, for checks)")
    # 'reduce-overhead' (CUDA graphs) took a 124M tp=2 step on H200s from 30.2 to 21.4 ms
    # (bench/results/train_throughput_graphs.md); at tp=1 it changed nothing
    compile_mode: str = option("default", SYSTEM, "compile=True: 'default' or 'reduce-overhead' (CUDA graphs; helps at "
                                                  "tp >= 2); compile='auto' takes reduce-overhead on CUDA itself")
    seed: int = option(1337, SYSTEM, "seed of the initial weights, the data order and dropout")

    def to_dict(self):
        return dataclasses.asdict(self)


# Allowed values of the string keys that have a fixed set of choices.
CHOICES = {
    "init_from": ("scratch", "resume", "branch"),
    "data_order": ("random", "one_pass", "passes"),
    "lr_schedule": ("cosine", "wsd"),
    "device": ("auto", "cpu", "cuda"),
    "dtype": ("auto", "float32", "bfloat16", "float16"),
    "compile_backend": ("inductor", "aot_eager", "eager"),
    "compile_mode": ("default", "reduce-overhead"),
}
# Integer keys that must be >= 1 and keys that must be >= 0. The model keys are GPTConfig's to check
# (model_config); block_size is here too because the data checks read it before the model is built.
AT_LEAST_ONE = ("eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps",
                "batch_size", "block_size", "tp", "checkpoint_every")
NON_NEGATIVE = ("eval_batch_size", "max_iters", "warmup_iters", "lr_decay_iters", "learning_rate", "min_lr",
                "weight_decay", "grad_clip", "seed")

FIELD_TYPES = {f.name: f.type if isinstance(f.type, str) else f.type.__name__
               for f in fields(TrainConfig)}
VALID_KEYS = tuple(FIELD_TYPES)


def _unknown_key_error(key, where):
    close = difflib.get_close_matches(key, VALID_KEYS, n=3)
    if close:  # the suggestions alone: the whole list buried them (issue 52)
        return ConfigError(f"unknown config key '{key}' ({where}). Did you mean {' or '.join(close)}? "
                           f"(--help lists every key)")
    return ConfigError(f"unknown config key '{key}' ({where}). Valid keys (--help gives each one's type, "
                       f"default and meaning): {', '.join(VALID_KEYS)}")


def coerce(key, value):
    """Return `value` as the type of `key`'s default, or raise ConfigError naming both."""
    if key not in FIELD_TYPES:
        raise _unknown_key_error(key, "coerce")
    want = FIELD_TYPES[key]
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok = {
        # bool is a subclass of int: --n_layer=True must not pass as 1, nor --bias=1 as True.
        "int": is_int,
        "int|auto": is_int or value == "auto",
        "bool|auto": isinstance(value, bool) or value == "auto",
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }[want]
    if not ok and want == "bool|auto":
        raise ConfigError(f"invalid {key}={value!r}; allowed: True, False or 'auto'")
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
        if getattr(cfg, key) != "auto" and getattr(cfg, key) < 1:
            raise ConfigError(f"invalid {key}={getattr(cfg, key)!r}; must be >= 1")
    for key in NON_NEGATIVE:
        if getattr(cfg, key) < 0:
            raise ConfigError(f"invalid {key}={getattr(cfg, key)!r}; must be >= 0")
    for key in ("beta1", "beta2"):
        if not 0.0 <= getattr(cfg, key) < 1.0:
            raise ConfigError(f"invalid {key}={getattr(cfg, key)!r}; must be in [0, 1)")
    if cfg.seed >= 2 ** 63:
        raise ConfigError(f"invalid seed={cfg.seed!r}; must be in [0, 2**63)")
    if not cfg.dataset:
        raise ConfigError("dataset must not be empty (it names data/<dataset>/)")
    for key in ("rendezvous_timeout", "stall_timeout"):
        if not 0 < getattr(cfg, key) < math.inf:  # also refuses nan
            raise ConfigError(f"invalid {key}={getattr(cfg, key)!r}; must be > 0 (seconds)")
    if cfg.bucket_cap_mb <= 0:
        raise ConfigError(f"invalid bucket_cap_mb={cfg.bucket_cap_mb!r}; must be > 0")
    if not cfg.out_dir:
        raise ConfigError("out_dir must not be empty")
    if cfg.out_dir.startswith("~"):  # the shell expands ~ only unquoted and at a word's start: '--out_dir=~/x' is literal
        raise ConfigError(f"out_dir={cfg.out_dir!r} starts with '~', which would be a directory named '~' here; "
                          f"write the path out: --out_dir={os.path.expanduser(cfg.out_dir)}")
    if cfg.decay_lr and cfg.min_lr > cfg.learning_rate:
        raise ConfigError(f"min_lr={cfg.min_lr!r} is above learning_rate={cfg.learning_rate!r}: the schedule decays "
                          f"from learning_rate down to min_lr, so min_lr must be <= learning_rate")
    check_schedule(cfg)
    if (cfg.init_from == "branch" and not cfg.branch_from) or (cfg.branch_from and cfg.init_from not in ("branch", "resume")):
        raise ConfigError(f"init_from={cfg.init_from!r} with branch_from={cfg.branch_from!r}: a branch needs both "
                          f"--init_from=branch and --branch_from=path/to/ckpt_<iter>.pt, and branch_from needs "
                          f"init_from='branch' (or 'resume', which goes on with a branch from its own out_dir)")
    if cfg.sequence_parallel and cfg.tp != "auto" and cfg.block_size % cfg.tp:
        raise ConfigError(f"sequence_parallel=True needs block_size divisible by tp; block_size={cfg.block_size} "
                          f"is not divisible by tp={cfg.tp}")
    check_tp_comm_overlap(cfg)
    if cfg.init_from == "scratch":  # else the checkpoint's architecture applies: checked once merged (merge)
        model_config(cfg)
    if cfg.device == "cpu" and cfg.dtype in ("bfloat16", "float16"):
        # CPU autocast in half precision is slow and not what a user comparing runs expects.
        raise ConfigError(f"dtype={cfg.dtype!r} is only supported on CUDA; use float32 or auto on CPU")


# what async TP did under CUDA graphs on 4x H200 (torch 2.11): bench/results/tp4_comm_h200/README.md, invocation 4
ASYNC_TP_GRAPHS = "cudagraph trees found symmetric-memory tensors it did not track, on torch 2.11"


def check_tp_comm_overlap(cfg, device_type=None, compiled=None, graphs=None):
    """ConfigError, in one line, for a tp_comm_overlap that cannot run: a bad value; any overlap without
    sequence_parallel (nothing to overlap); 'async_tp' off CUDA (device_type once resolved, else cfg.device), not
    compiled (compile=False, or compiled=False: the resolved plan), compiled by another backend than inductor,
    whose micro-pipeline TP pass does the fusing, or with CUDA graphs (graphs=True: the resolved plan's
    reduce-overhead; compile='auto' leaves them out for async_tp)."""
    try:
        parsed = parse_tp_comm_overlap(cfg.tp_comm_overlap)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if parsed is None:
        return
    if not cfg.sequence_parallel:
        raise ConfigError(f"tp_comm_overlap={cfg.tp_comm_overlap!r} needs sequence_parallel=True: it overlaps sequence "
                          f"parallelism's all-gathers and reduce-scatters (there are none without it)")
    if parsed[0] != "async_tp":
        return
    device_type = device_type or (None if cfg.device == "auto" else cfg.device)
    if device_type not in (None, "cuda"):
        raise ConfigError(f"tp_comm_overlap='async_tp' needs CUDA (NCCL and symmetric memory), not device "
                          f"{device_type!r}; use 'chunked' or 'off' there")
    if cfg.compile is False or compiled is False or cfg.compile_backend != "inductor":
        raise ConfigError(f"tp_comm_overlap='async_tp' needs a run compiled with inductor (its micro-pipeline TP pass "
                          f"fuses the collectives); got compile={cfg.compile!r}, compile_backend={cfg.compile_backend!r}")
    if graphs or (graphs is None and cfg.compile is True and cfg.compile_mode == "reduce-overhead"):
        raise ConfigError(f"tp_comm_overlap='async_tp' cannot run under CUDA graphs ({ASYNC_TP_GRAPHS}); use "
                          f"compile='auto' (compiled without them for async_tp) or compile_mode='default', not "
                          f"compile_mode={cfg.compile_mode!r}")


def save_iter_set(cfg):
    """The iterations of cfg.save_iters as a set of ints (ConfigError naming the bad item)."""
    iters = set()
    for item in filter(None, (x.strip() for x in cfg.save_iters.split(","))):
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(f"invalid save_iters={cfg.save_iters!r}: {item!r} is not an iteration >= 1; "
                              f"give comma-separated iterations, e.g. 256,512,1024")
        iters.add(int(item))
    return iters


def branch_list(cfg):
    """[(budget, out_dir)] of cfg.branches, in budget order, each branch point kept (save_iters) and reached
    (max_iters); ConfigError naming the bad item otherwise."""
    items = [x.strip() for x in cfg.branches.split(",") if x.strip()]
    if items and cfg.lr_schedule != "wsd":
        raise ConfigError(f"branches={cfg.branches!r} needs lr_schedule='wsd' (a trunk at constant rate), not "
                          f"{cfg.lr_schedule!r}")
    branches, points = [], save_iter_set(cfg)
    for item in items:
        budget, _, out_dir = item.partition(":")
        start = budget.isdigit() and wsd_decay_start(cfg, int(budget))
        if out_dir and os.path.abspath(out_dir) in [os.path.abspath(d) for d in (cfg.out_dir, *dict(branches).values())]:
            raise ConfigError(f"invalid branches item {item!r}: its out_dir is the trunk's or another branch's; give "
                              f"each branch an out_dir of its own")
        if not start or not out_dir or start not in points or start > cfg.max_iters:
            raise ConfigError(f"invalid branches item {item!r}: give BUDGET:out_dir, whose branch point (BUDGET less "
                              f"cooldown_frac of it) is in save_iters={cfg.save_iters!r} and <= max_iters={cfg.max_iters}")
        branches.append((int(budget), out_dir))
    if cfg.wandb_log and branches:
        raise ConfigError("branches with wandb_log=True: the branches would log into the trunk's wandb run; "
                          "train them in processes of their own (init_from='branch') or set wandb_log=False")
    return sorted(branches)


def wsd_decay_start(cfg, budget=None):
    """The first iteration of lr_schedule='wsd''s decay: the budget (lr_decay_iters) less its cooldown_frac
    (rounded). A trunk's checkpoint at this iteration is where a branch to that budget starts."""
    budget = cfg.lr_decay_iters if budget is None else budget
    return budget - round(cfg.cooldown_frac * budget)


def check_schedule(cfg):
    """ConfigError for a learning-rate schedule or save_iters that cannot be what the user meant."""
    branch_list(cfg)
    if cfg.lr_schedule != "wsd":
        if cfg.decay_lr and cfg.lr_decay_iters <= cfg.warmup_iters:  # as wsd refuses a decay inside the warmup
            raise ConfigError(f"lr_schedule='cosine': lr_decay_iters={cfg.lr_decay_iters} is not after the warmup of "
                              f"warmup_iters={cfg.warmup_iters}, so there is no decay; raise lr_decay_iters or lower "
                              f"warmup_iters (or --decay_lr=False for a constant learning rate)")
        return
    if not 0.0 < cfg.cooldown_frac <= 1.0:
        raise ConfigError(f"invalid cooldown_frac={cfg.cooldown_frac!r}; must be in (0, 1] (the share of "
                          f"lr_decay_iters spent decaying, e.g. 0.2)")
    if cfg.decay_lr and wsd_decay_start(cfg) < cfg.warmup_iters:
        raise ConfigError(f"lr_schedule='wsd': the decay would start at iteration {wsd_decay_start(cfg)}, inside the "
                          f"warmup of warmup_iters={cfg.warmup_iters}; lower warmup_iters or cooldown_frac, or raise "
                          f"lr_decay_iters={cfg.lr_decay_iters}")


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root


def read_config_file(path):
    """Exec a config file and return the {key: value} it assigns. Only known keys may be assigned.
    A relative path not found from the cwd is looked up in the repository (config/x.py from anywhere).
    The file is Python that runs with the trainer's rights: only use config files you trust."""
    if not os.path.exists(path) and not os.path.isabs(path) and os.path.exists(os.path.join(REPO, path)):
        path = os.path.join(REPO, path)
    if not os.path.exists(path):
        folder = os.path.dirname(path) or "."
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py")) if os.path.isdir(folder) else []
        close = difflib.get_close_matches(os.path.basename(path), names, n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(os.path.join(os.path.dirname(path), n) for n in close)}?" if close else ""
        raise ConfigError(f"config file not found: {path}{hint}")
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path} is not a file")
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        tree = ast.parse(source, path)
    except SyntaxError:
        tree = None  # compile() below reports it
    for node in tree.body if tree else ():
        if isinstance(node, ast.AnnAssign) and node.value is None and isinstance(node.target, ast.Name):
            # `n_layer: 2` (YAML habit) is a Python annotation: it would assign nothing, silently
            raise ConfigError(f"config file {path} (line {node.lineno}): '{ast.unparse(node)}' assigns nothing; "
                              f"config files are flat Python: write {node.target.id} = "
                              f"{ast.unparse(node.annotation)}")
        if isinstance(node, ast.Expr) and not isinstance(node.value, (ast.Call, ast.Constant)):
            # `{"n_layer": 2}` (a JSON habit) or `n_layer == 2` computes a value and drops it: nothing is set
            pairs = zip(node.value.keys, node.value.values) if isinstance(node.value, ast.Dict) else ()
            hint = ", ".join(f"{k.value} = {ast.unparse(v)}" for k, v in pairs
                             if isinstance(k, ast.Constant) and isinstance(k.value, str)) or "key = value"
            raise ConfigError(f"config file {path} (line {node.lineno}): '{ast.unparse(node)[:60]}' assigns nothing; "
                              f"config files are flat Python: write {hint[:120]}")
    namespace = {}
    try:
        exec(compile(source, path, "exec"), namespace)
    except SystemExit as e:  # exit(0) in a config would end the trainer with success, having trained nothing
        raise ConfigError(f"config file {path} calls sys.exit({e.code!r}): a config file only assigns keys") from None
    except KeyboardInterrupt:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            raise  # Ctrl-C itself: the caller's stop
        # the trainer takes SIGINT with its own handler, so this one is the config's own `raise KeyboardInterrupt`
        raise ConfigError(f"error in config file {path}: it raised KeyboardInterrupt") from None
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
    values, overridden = {}, {}  # overridden: key -> the --key=value that set it
    for arg in argv:
        if arg.startswith("--"):
            key, value = parse_override(arg)
            values[key] = coerce(key, value)
            overridden[key] = arg
        else:
            for key, value in read_config_file(arg).items():
                if key in overridden:  # nanoGPT's rule, which --help states: overrides come after config files
                    raise ConfigError(f"{overridden[key]} comes before {arg}, which sets {key} too and would "
                                      f"replace it: put --key=value overrides after the config files")
                try:
                    values[key] = coerce(key, value)
                except ConfigError as e:
                    raise ConfigError(f"{e} (assigned in {arg})") from None
    cfg = TrainConfig(**values)
    validate(cfg)
    return cfg


def merge(cfg, changes):
    """A new TrainConfig: cfg with `changes` (the tp that runs, a checkpoint's architecture), validated
    as a whole, model keys included. cfg itself is never rewritten once validated."""
    merged = dataclasses.replace(cfg, **changes)
    validate(merged)
    if merged.init_from != "scratch":
        model_config(merged)
    return merged


def model_config(cfg, vocab_size=None):
    """The GPTConfig of the config's model keys (vocab_size from the dataset): GPTConfig itself checks
    them, so the model keys have one validator and the sync policy one parser. ConfigError in one line."""
    args = {f.name: getattr(cfg, f.name) for f in fields(GPTConfig) if f.name != "vocab_size"}
    try:
        return GPTConfig(**args, vocab_size=GPTConfig.vocab_size if vocab_size is None else vocab_size)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def micro_steps_per_replica(cfg, dp):
    """gradient_accumulation_steps is the total over the dp replicas (as nanoGPT divides by the
    DDP world size): each replica runs this many micro-steps per iteration."""
    gas = cfg.gradient_accumulation_steps
    if gas % dp != 0:
        # the same sequences per iteration with an accumulation that dp divides, where one exists
        same = [(g, gas * cfg.batch_size // g) for g in range(dp, gas * cfg.batch_size + 1, dp)
                if gas * cfg.batch_size % g == 0]
        fix = (f"--gradient_accumulation_steps={same[0][0]} --batch_size={same[0][1]} (the same "
               f"{gas * cfg.batch_size} sequences per iteration)" if same else
               f"a gradient_accumulation_steps that is a multiple of {dp}")
        raise ConfigError(f"gradient_accumulation_steps={gas} (the total over the data-parallel replicas) "
                          f"cannot be split over dp={dp} replicas; use {fix}")
    return gas // dp


@dataclass
class Layout:
    tp: int
    dp: int
    micro_steps: int  # per replica per iteration
    why: str  # how tp was chosen, for the log's first line
    requested: object = "auto"  # the tp asked for: 'auto' or a number


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def resolve_layout(cfg, world_size):
    """The dp x tp layout of `world_size` processes for cfg, or ConfigError in one line.

    tp='auto' takes the largest divisor of n_tracks that divides the world size, gcd(n_tracks, world):
    the most tensor parallelism the model allows, so also the smallest dp. Any other valid tp gives a
    multiple of that dp, so if gradient_accumulation_steps cannot be split over it, no tp can help."""
    if cfg.tp == "auto":
        tp = math.gcd(cfg.n_tracks, world_size)
        why = f"tp='auto': the largest divisor of n_tracks={cfg.n_tracks} that divides world size {world_size}"
    else:
        tp, why = cfg.tp, f"tp={cfg.tp} as configured"
        if world_size % tp != 0:
            raise ConfigError(f"tp={tp} does not divide the world size {world_size} (processes); use --tp=auto or "
                              f"one of {divisors(world_size)}, or launch a multiple of {tp} processes "
                              f"(torchrun --nproc_per_node=N)")
        # after a resume or fine-tune n_tracks comes from the checkpoint; the model checks it then
        if cfg.init_from == "scratch" and cfg.n_tracks % tp != 0:
            raise ConfigError(f"tp={tp} does not divide n_tracks={cfg.n_tracks}; use --tp=auto or one of "
                              f"{[d for d in divisors(cfg.n_tracks) if world_size % d == 0]}")
    dp = world_size // tp
    try:
        micro_steps = micro_steps_per_replica(cfg, dp)
    except ConfigError as e:
        raise ConfigError(f"world {world_size} = dp {dp} x tp {tp} ({why}): {e}") from None
    return Layout(tp=tp, dp=dp, micro_steps=micro_steps, why=why, requested=cfg.tp)


@dataclass
class CompilePlan:
    compiled: bool
    mode: str  # torch.compile's mode: 'default' or 'reduce-overhead' (CUDA graphs)
    line: str  # the log's 'compile:' line: what was asked, what runs and why

    @property
    def name(self):
        return "eager" if not self.compiled else "compiled + CUDA graphs" if self.mode == "reduce-overhead" else "compiled"


def resolve_compile(cfg, device_type):
    """How the model runs on device_type ('cuda' or 'cpu'): a CompilePlan. compile=True/False as before 'auto'
    existed (True: compile_mode as given). compile='auto': on CUDA compiled with CUDA graphs (compile_mode
    'reduce-overhead', whatever compile_mode says: --compile=True compiles without them) at every tp, or without
    them where the backend is not inductor, whose mode it is; on CPU eager, where compiling costs minutes and a
    run's results stay those of the eager tests. At tp > 1 a compiled run turns inductor's mix-order reduction off
    (model/compile_modes.py): with it on, the regions' LayerNorm weights got wrong gradients; with it off every
    policy's compiled gradients equal eager's (bench/results/issue49/README.md, "Compiled at tp=2"). compile_mode
    keeps its default, so a stored run's config.json still equals its plan (experiments/runner.py)."""
    if cfg.compile is False:
        return CompilePlan(False, "default", "compile: False -> eager")
    if cfg.compile is True:
        plan = CompilePlan(True, cfg.compile_mode, "")
        plan.line = (f"compile: True -> {plan.name} (compile_mode={cfg.compile_mode!r}, backend "
                     f"{cfg.compile_backend!r}, {device_type})")
        return plan
    if device_type != "cuda":
        return CompilePlan(False, "default", f"compile: auto -> eager ({device_type})")
    if cfg.compile_backend != "inductor":
        return CompilePlan(True, "default", f"compile: auto -> compiled, no CUDA graphs (cuda; compile_backend="
                                            f"{cfg.compile_backend!r}: CUDA graphs are inductor's)")
    if cfg.tp_comm_overlap == "async_tp":
        return CompilePlan(True, "default", "compile: auto -> compiled, no CUDA graphs (cuda; tp_comm_overlap="
                                            "'async_tp' fails under them: " + ASYNC_TP_GRAPHS + ")")
    return CompilePlan(True, "reduce-overhead", "compile: auto -> compiled + CUDA graphs (cuda)")


# What a resumed run (and a branch) keeps from its checkpoint's run: the data it reads and their order.
SAME_DATA_KEYS = ("dataset", "seed", "batch_size", "block_size", "gradient_accumulation_steps", "data_order")


def format_config(cfg):
    return "\n".join(f"  {k} = {v!r}" for k, v in cfg.to_dict().items())


# Atomic writes live in atomic_files.py; imported here too, where the scripts have always found them.
from atomic_files import TEMP_SUFFIX, atomic_write, save_figure, write_text  # noqa: E402,F401


def save_config(cfg, path, extra=None):
    """Save the resolved config (plus e.g. the derived layout) as JSON, atomically."""
    d = cfg.to_dict()
    if extra:
        d.update(extra)
    atomic_write(path, lambda f: f.write((json.dumps(d, indent=2) + "\n").encode()))
