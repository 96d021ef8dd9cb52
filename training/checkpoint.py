"""The checkpoint format of train_reduced_sync.py: writing, reading (safely), converting old files.

A checkpoint holds only tensors, plain containers (dict, list, tuple) and primitives (str, int,
float, bool, None), so it loads with torch.load(weights_only=True). That unpickler refuses every
other pickled object: reading a checkpoint never runs code the file carries. Every reader goes
through read_checkpoint() (train_reduced_sync.py's resume and init_from=path, sample.py,
spd_sensitivity.py); every writer through write_checkpoint().

Keys (training.save_checkpoint builds them):
    format         FORMAT_VERSION (absent in files written before it)
    model          full unsharded state_dict {nanoGPT name: tensor}, loadable at any tp
    optimizer      {'state': {param_name: {'step', 'exp_avg', 'exp_avg_sq'}}, 'param_groups': [...]}
    model_args     GPTConfig fields (a dict);  config: the TrainConfig (a dict)
    layout         {'tp', 'dp', 'world_size'} of the writer
    iter_num       iterations done (an iteration boundary);  best_val_loss
    data           the sampler's description and position
    rng            {'torch_cpu': uint8 tensor, 'torch_cuda': uint8 tensor (CUDA runs only),
                    'numpy':  {'bit_generator', 'key': int64 tensor [624], 'pos', 'has_gauss', 'cached_gaussian'},
                    'python': {'version', 'state': int64 tensor [625], 'gauss_next'}}
    scaler         GradScaler state (empty unless float16)

Every problem raises CheckpointError, a ValueError whose message is one line that names the file.

Old checkpoints. Files written before this format pickled numpy's RNG state (a numpy array),
which weights_only refuses; reading one says how to convert it, once:

    python -m training.checkpoint --convert out-x/ckpt.pt          # in place; the original is kept as out-x/ckpt.pt.old
    python -m training.checkpoint --convert old.pt --out new.pt

Conversion loads the old file with weights_only=True and numpy's array reconstruction allowed
(still no code can run). Only a file that holds other pickled objects needs --trust, which
unpickles it with weights_only=False: the one place in the project that does so, and only on
the user's explicit request, for a file they trust.
"""
import glob
import os
import random
import re
import resource
import shlex
import shutil
import sys
import warnings
import zipfile

import numpy as np
import torch

from atomic_files import TEMP_SUFFIX, NotReplaceable, atomic_write, kind, replace_target
from training.config import HelpFormatter, OneLineArgumentParser

FORMAT_VERSION = 2
# What each reader needs. RESUME_KEYS is everything save_checkpoint writes.
MODEL_KEYS = ("model", "model_args")
RESUME_KEYS = ("model", "optimizer", "model_args", "config", "layout", "iter_num", "best_val_loss", "data",
               "rng", "scaler")
_TYPES = {"model": dict, "optimizer": dict, "model_args": dict, "config": dict, "layout": dict, "iter_num": int,
          "best_val_loss": (int, float), "data": dict, "rng": dict, "scaler": dict}
_NESTED = {"layout": ("tp", "dp"), "data": ("seed", "batch_size", "block_size", "gradient_accumulation_steps"),
           "optimizer": ("state", "param_groups"), "rng": ("torch_cpu", "numpy", "python")}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used. str(e) is one line: '<path>: <problem>'.
    kind: 'missing', 'unreadable', 'corrupt', 'refused' (pickled objects), 'old_format', 'nonfinite' or 'invalid'."""

    def __init__(self, path, problem, kind="invalid"):
        self.path, self.problem, self.kind = path, problem, kind
        super().__init__(f"{path}: {problem}")


def _first_line(text, limit=240):
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text)).strip()
    line = text.splitlines()[0].strip() if text else ""
    return line if len(line) <= limit else line[:limit] + "..."


# ----------------------------------------------------------------------------- RNG states as tensors
def rng_states(device):
    """torch/cuda/numpy/python RNG states of this process, as tensors and primitives."""
    _, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    version, py_state, gauss_next = random.getstate()
    states = {
        "torch_cpu": torch.get_rng_state(),
        "numpy": {"bit_generator": "MT19937", "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
        "python": {"version": int(version), "state": torch.tensor(py_state, dtype=torch.int64),
                   "gauss_next": gauss_next},
    }
    if device.startswith("cuda"):
        states["torch_cuda"] = torch.cuda.get_rng_state(device)
    return states


def restore_rng_states(states, device):
    torch.set_rng_state(states["torch_cpu"])
    n = states["numpy"]
    np.random.set_state((n["bit_generator"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = states["python"]
    random.setstate((p["version"], tuple(p["state"].tolist()), p["gauss_next"]))
    if device.startswith("cuda") and "torch_cuda" in states:
        torch.cuda.set_rng_state(states["torch_cuda"], device)


def _check_rng(rng):
    """The problem with an 'rng' entry, or None."""
    if not (torch.is_tensor(rng.get("torch_cpu")) and rng["torch_cpu"].dtype == torch.uint8):
        return "rng['torch_cpu'] is not a uint8 tensor"
    n, p = rng.get("numpy"), rng.get("python")
    if not (isinstance(n, dict) and torch.is_tensor(n.get("key")) and tuple(n["key"].shape) == (624,)
            and n.get("bit_generator") == "MT19937"
            and all(isinstance(n.get(k), int) for k in ("pos", "has_gauss"))
            and isinstance(n.get("cached_gaussian"), float)):
        return "rng['numpy'] is not a numpy MT19937 state"
    if not (isinstance(p, dict) and torch.is_tensor(p.get("state")) and p["state"].dim() == 1
            and isinstance(p.get("version"), int) and (p.get("gauss_next") is None or isinstance(p["gauss_next"], float))):
        return "rng['python'] is not a Python random state"
    return None


# ----------------------------------------------------------------------------- writing
def _check_plain(obj, where="checkpoint"):
    """Raise TypeError unless obj holds only tensors, dict/list/tuple and primitives (the format's rule)."""
    if torch.is_tensor(obj) or obj is None or isinstance(obj, (str, int, float, bool)):
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where} has a key of type {type(key).__name__}; only str and int keys may be saved")
            _check_plain(value, f"{where}[{key!r}]")
        return
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _check_plain(value, f"{where}[{i}]")
        return
    raise TypeError(f"{where} is a {type(obj).__module__}.{type(obj).__name__}: a checkpoint holds only tensors, "
                    f"dicts, lists, tuples, str, int, float, bool and None")


def write_checkpoint(paths, checkpoint, links=()):
    """Write `checkpoint` (a dict in this format) to every path, each atomically: a reader, or a run
    killed midway, sees the old file or the new one. Each of `links` becomes a hard link of paths[0] (no
    second write: a trunk's kept branch points), or a written copy where the file system cannot link.
    ckpt_best.pt stays a copy of its own: it is the fallback for a damaged ckpt.pt."""
    checkpoint = {"format": FORMAT_VERSION, **checkpoint}
    _check_plain(checkpoint)
    for path in [*paths, *links]:
        try:
            if path not in links or not _link_atomically(paths[0], path):
                atomic_write(path, lambda f: torch.save(checkpoint, f))
        except NotReplaceable as e:  # a FIFO, a device, a directory where the checkpoint goes
            raise CheckpointError(path, f"cannot be written: it is {e.what}, not a regular file, and is left as it "
                                  f"was", "unwritable") from None
        except (OSError, RuntimeError) as e:  # RuntimeError: torch.save's writer on a full disk ("unexpected pos")
            raise CheckpointError(path, _write_problem(path, e), "unwritable") from None


def _link_atomically(source, path):
    """Make path a hard link of source (the same bytes, no second write or copy on disk; replacing either
    name later leaves the other as it was), atomically. False where the file system cannot link."""
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".tmp-link-{os.getpid()}-{os.path.basename(path)}{TEMP_SUFFIX}")
    try:
        replace_target(path)  # NotReplaceable (an OSError) for a FIFO or a device there: atomic_write says so
        os.link(source, tmp)
        os.replace(tmp, path)
        return True
    except OSError:
        if os.path.lexists(tmp):
            os.remove(tmp)
        return False


def _write_problem(path, error):
    """Why a checkpoint write failed, with the free space left: a full disk is the usual cause."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else f"the write failed ({_first_line(error, 120)})"
    try:
        free = f"{shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free / 2**20:,.1f} MiB free"
    except OSError:
        free = "free space unknown"
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:  # torch's writer hides the EFBIG that a file size limit gives
        free += f" on its file system, and this process may write files of at most {limit:,} bytes (ulimit -f)"
    else:
        free += " on its file system"
    return (f"cannot be written: {reason}; {free}. A failed write replaces nothing: the "
            f"file there before, if any, is intact")


# ----------------------------------------------------------------------------- reading
def _is_old_format_global(name):
    """Globals that checkpoints of the previous format pickle: numpy arrays (numpy's RNG state)."""
    return name in ("numpy.ndarray", "numpy.dtype", "numpy.core.multiarray._reconstruct",
                    "numpy._core.multiarray._reconstruct") or re.fullmatch(r"numpy\.dtypes\.\w+DType", name) is not None


def _pickled_globals(path):
    """Names of the non-allowlisted globals the file's pickle refers to (read without unpickling)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:
        return []


def _load_error(path, error):
    """The CheckpointError for a file that torch.load(weights_only=True) refused or could not read."""
    names = _pickled_globals(path)
    if names and all(_is_old_format_global(n) for n in names):
        return CheckpointError(path, "is in the old checkpoint format (it pickles numpy's RNG state, which safe "
                                     "loading refuses); convert it once with "
                                     f"`python -m training.checkpoint --convert {shlex.quote(path)}`", "old_format")
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    unsupported = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    if names or unsupported:
        bad = [n for n in names if not _is_old_format_global(n)] or [unsupported.group(1)]
        return CheckpointError(path, f"refused: it holds pickled Python objects ({', '.join(bad[:4])}) that a checkpoint "
                                     "must not contain; nothing in it was run (loading it could run code)", "refused")
    if isinstance(error, EOFError) or os.path.getsize(path) == 0:
        return CheckpointError(path, "is empty or truncated: not a checkpoint", "corrupt")
    if _truncated_zip(path):
        return CheckpointError(path, "is truncated: a torch.save zip archive without its end (a write or copy cut "
                                     "short)", "corrupt")
    match = re.search(r"WeightsUnpickler error:\s*(\S.*)", text)
    reason = _first_line(match.group(1) if match else text).split(". ")[0] or type(error).__name__
    return CheckpointError(path, f"is not a readable checkpoint (truncated, corrupt or not written by torch.save: "
                                 f"{reason})", "corrupt")


def _truncated_zip(path):
    """Whether the file starts like a zip archive (torch.save's format) but has no end of archive."""
    try:
        with open(path, "rb") as f:
            starts_as_zip = f.read(4) == b"PK\x03\x04"
        return starts_as_zip and not zipfile.is_zipfile(path)
    except OSError:
        return False


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def validate(path, checkpoint, need=MODEL_KEYS):
    """Raise CheckpointError unless `checkpoint` has the keys in `need`, of the right types and shapes."""
    from model.gpt import GPT, GPTConfig  # here: importing the model is not needed to convert a file

    if not isinstance(checkpoint, dict):
        raise CheckpointError(path, f"is not a checkpoint of train_reduced_sync.py: it holds a "
                                    f"{type(checkpoint).__name__}, not a dict")
    fmt = checkpoint.get("format", FORMAT_VERSION)
    if not _is_int(fmt) or fmt > FORMAT_VERSION:
        raise CheckpointError(path, f"has checkpoint format {fmt!r}; this version reads formats up to {FORMAT_VERSION}")
    missing = [k for k in need if k not in checkpoint]
    if missing:
        raise CheckpointError(path, f"is not a complete checkpoint of train_reduced_sync.py: it lacks "
                                    f"{', '.join(repr(k) for k in missing)}")
    for key in need:
        value, want = checkpoint[key], _TYPES[key]
        if not isinstance(value, want) or isinstance(value, bool):
            raise CheckpointError(path, f"its {key!r} is a {type(value).__name__}, not a "
                                        f"{want.__name__ if isinstance(want, type) else 'number'}")
        lacking = [k for k in _NESTED.get(key, ()) if k not in value]
        if lacking:
            raise CheckpointError(path, f"its {key!r} lacks {', '.join(repr(k) for k in lacking)}")
    model = checkpoint["model"] if "model" in need else {}
    for name, tensor in model.items():
        if not isinstance(name, str) or not torch.is_tensor(tensor):
            raise CheckpointError(path, f"its 'model' entry {name!r} is not a named tensor")
    if "model_args" in need:
        try:
            GPTConfig(**checkpoint["model_args"])
        except (TypeError, ValueError) as e:
            raise CheckpointError(path, f"bad model_args: {_first_line(e)}") from None
    if "model" in need and "model_args" in need:
        # the weights against the model of its model_args, built without memory on the meta device: a
        # mismatch makes this file unusable here, so that a resume falls back to ckpt_best.pt
        with torch.device("meta"):
            want = {k: tuple(v.shape) for k, v in GPT(GPTConfig(**checkpoint["model_args"])).state_dict().items()}
        have = {k: tuple(v.shape) for k, v in model.items()}
        wrong = sorted(k for k in want.keys() & have.keys() if want[k] != have[k])
        missing, extra = sorted(want.keys() - have.keys()), sorted(have.keys() - want.keys())
        if wrong or missing or extra:
            problem = (f"{wrong[0]} has shape {have[wrong[0]]}, the model {want[wrong[0]]}" if wrong else
                       f"missing {', '.join(missing[:3])}" if missing else f"unexpected {', '.join(extra[:3])}")
            raise CheckpointError(path, f"its weights do not fit the model of its model_args: {problem}")
    if "iter_num" in need and checkpoint["iter_num"] < 0:
        raise CheckpointError(path, f"iter_num={checkpoint['iter_num']} is negative")
    if "rng" in need and (problem := _check_rng(checkpoint["rng"])):
        raise CheckpointError(path, problem)
    if "optimizer" in need:
        state = checkpoint["optimizer"]["state"]
        if not isinstance(state, dict) or not isinstance(checkpoint["optimizer"]["param_groups"], list):
            raise CheckpointError(path, "its optimizer state is not {'state': dict, 'param_groups': list}")
        for name, entry in state.items():
            if name not in model or not isinstance(entry, dict):
                raise CheckpointError(path, f"its optimizer state names {name!r}, which is not a model parameter")
            for key, value in entry.items():
                if torch.is_tensor(value) and value.dim() > 0 and value.shape != model[name].shape:
                    raise CheckpointError(path, f"optimizer state {name}.{key} has shape {tuple(value.shape)}, "
                                                f"the parameter {tuple(model[name].shape)}")


def read_checkpoint(path, need=MODEL_KEYS):
    """Load a checkpoint safely (weights_only=True, onto the CPU) and check that it has `need`.
    Raises CheckpointError (one line naming the file) for a missing, unreadable, truncated, corrupt,
    old-format or incomplete file, and for one holding pickled objects (which are never run)."""
    if not os.path.exists(path):
        raise CheckpointError(path, "no such file", "missing")
    if not os.path.isfile(path):  # a directory; a FIFO, whose open would wait for a writer for ever; a device
        raise CheckpointError(path, f"is {kind(os.stat(path).st_mode)}, not a checkpoint file", "unreadable")
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise CheckpointError(path, f"cannot be read: {e.strerror or e}", "unreadable") from None
    try:
        with warnings.catch_warnings():  # e.g. a protocol-4 pickle warns before it is refused
            warnings.simplefilter("ignore")
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # whatever the bytes are, the user gets one line
        raise _load_error(path, e) from None
    validate(path, checkpoint, need)
    return checkpoint


def resumable_elsewhere(out_dir, limit=3):
    """'; or resume one of: a, b' naming sibling out_dirs (beside out_dir, and out-* in the working directory)
    that hold a ckpt.pt, or '' where none does."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    found = {os.path.relpath(os.path.dirname(p)) for pattern in (os.path.join(parent, "*", "ckpt.pt"), "out-*/ckpt.pt",
                                                                 "out-*/*/ckpt.pt") for p in glob.glob(pattern)}
    found.discard(os.path.relpath(out_dir))
    if not found:
        return ""
    names = sorted(found)
    more = f" (and {len(names) - limit} more)" if len(names) > limit else ""
    return f"; or resume one of the out_dirs that hold a ckpt.pt: {', '.join(names[:limit])}{more}"


def finite_weights(path, checkpoint):
    """checkpoint, or CheckpointError (kind 'nonfinite') if a model weight holds NaN or inf: a run that diverged
    saved it, and resuming it would only say "training diverged" again (read_for_resume then takes ckpt_best.pt)."""
    bad = [name for name, t in checkpoint["model"].items()
           if torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise CheckpointError(path, f"its model weights hold NaN or inf ({len(bad)} tensor(s), e.g. {bad[0]}): the "
                                    f"run diverged before it was saved", "nonfinite")
    return checkpoint


def read_for_resume(out_dir):
    """(checkpoint, path, note) to resume from: out_dir/ckpt.pt, or, when that one is missing or
    unusable, out_dir/ckpt_best.pt if it is valid (note then says so; else None). Nothing is written.
    An old-format ckpt.pt is an error (convert it) rather than a reason to go back to an older file."""
    last, best = os.path.join(out_dir, "ckpt.pt"), os.path.join(out_dir, "ckpt_best.pt")
    try:
        return finite_weights(last, read_checkpoint(last, RESUME_KEYS)), last, None
    except CheckpointError as e:
        if e.kind == "old_format" or not os.path.exists(best):
            if e.kind == "missing":
                from training.run_dir import last_eval_iter, lock_holder
                logs = [n for n in ("log.txt", "metrics.jsonl") if os.path.exists(os.path.join(out_dir, n))]
                evaluated_to = last_eval_iter(out_dir)
                holder = lock_holder(out_dir)
                why = (f"the run there is still running (pid {holder} holds its lock) and has written no checkpoint "
                       f"yet; wait for it to end, or train into another --out_dir" if holder else
                       "there is no run to resume in this out_dir; to start one, --init_from=scratch"
                       + resumable_elsewhere(out_dir) if not logs else
                       f"the run there was evaluated up to iter {evaluated_to}, but its checkpoints are "
                       f"gone (a record); train into another --out_dir" if evaluated_to else
                       "the run there stopped before its first checkpoint; start it again with the same command "
                       "without --init_from=resume (its logs are moved aside into replaced-<time>/)")
                raise CheckpointError(last, f"does not exist: {why}", "missing") from None
            raise
        try:
            checkpoint = finite_weights(best, read_checkpoint(best, RESUME_KEYS))
        except CheckpointError as e_best:
            raise CheckpointError(last, f"{e.problem}; and the fallback {best} is not usable either: "
                                        f"{e_best.problem}", e.kind) from None
        note = (f"{last} is not usable ({e.problem}); resuming from {best} at iter {checkpoint['iter_num']} "
                f"instead")
        return checkpoint, best, note


def set_aside(path):
    """Rename an unusable file to path.invalid (or .invalid.N) so that nothing overwrites it; returns the
    new name, or None if path does not exist."""
    if not os.path.exists(path):
        return None
    target, n = path + ".invalid", 1
    while os.path.exists(target):
        target, n = f"{path}.invalid.{n}", n + 1
    os.rename(path, target)
    return target


def load_weights(model, checkpoint, path):
    """model.load_state_dict(checkpoint['model']), any mismatch as a CheckpointError naming the file."""
    try:
        model.load_state_dict(checkpoint["model"])
    except (KeyError, ValueError, RuntimeError, TypeError, AttributeError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise CheckpointError(path, f"its weights do not fit the model of its model_args: {_first_line(message)}") from None


# ----------------------------------------------------------------------------- plain-data pickles
# ----------------------------------------------------------------------------- converting old files
def _numpy_safe_globals():
    core = getattr(np, "_core", None) or np.core
    names = [np.ndarray, np.dtype, core.multiarray._reconstruct]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        names += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType")]
    return names


def _to_plain(obj):
    """numpy arrays and scalars -> tensors and Python numbers, recursively."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.astype(np.int64) if obj.dtype.kind == "u" else obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_plain(v) for v in obj)
    return obj


def convert(path, out=None, trust=False):
    """Rewrite an old-format checkpoint in this format. Returns the path written."""
    if not os.path.exists(path):
        raise CheckpointError(path, "no such file", "missing")
    if not os.path.isfile(path):
        raise CheckpointError(path, "is not a file", "unreadable")
    try:
        names = list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception as e:
        raise _load_error(path, e) from None
    if not names:
        read_checkpoint(path)  # already safe to load: say so (or why it is unusable)
        print(f"{path} is already in the current format; nothing to convert")
        return path
    foreign = [n for n in names if not _is_old_format_global(n)]
    if foreign and not trust:
        raise CheckpointError(path, f"holds pickled objects other than numpy arrays ({', '.join(foreign[:4])}); "
                                    "convert it only if you trust its source, with --trust (that unpickles it with "
                                    "weights_only=False, which can run code)", "refused")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if foreign:
            print(f"warning: --trust: unpickling {path} with weights_only=False: this runs any code the file carries",
                  file=sys.stderr)
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        else:  # numpy arrays only: still the safe unpickler, with numpy's reconstruction allowed
            with torch.serialization.safe_globals(_numpy_safe_globals()):
                checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(path, f"holds a {type(checkpoint).__name__}, not a checkpoint dict")
    rng = checkpoint.get("rng")
    if isinstance(rng, dict):
        if isinstance(rng.get("numpy"), tuple):
            name, key, pos, has_gauss, cached = rng["numpy"]
            rng["numpy"] = {"bit_generator": str(name), "key": key, "pos": int(pos), "has_gauss": int(has_gauss),
                            "cached_gaussian": float(cached)}
        if isinstance(rng.get("python"), tuple):
            version, state, gauss_next = rng["python"]
            rng["python"] = {"version": int(version), "state": torch.tensor(state, dtype=torch.int64),
                             "gauss_next": gauss_next}
    checkpoint = _to_plain(checkpoint)
    try:
        _check_plain(checkpoint)
    except TypeError as e:
        raise CheckpointError(path, f"cannot be converted: {e}") from None
    validate(path, checkpoint, [k for k in RESUME_KEYS if k in checkpoint] or MODEL_KEYS)
    out = out or path
    if os.path.abspath(out) == os.path.abspath(path):
        backup = path + ".old"
        if os.path.exists(backup):
            raise CheckpointError(path, f"{backup} exists already; move it away or write elsewhere with --out")
        shutil.copy2(path, backup)
        print(f"kept the original as {backup}")
    write_checkpoint([out], checkpoint)
    print(f"wrote {out} (checkpoint format {FORMAT_VERSION}: loads with weights_only=True)")
    return out


def main(argv=None):
    parser = OneLineArgumentParser(formatter_class=HelpFormatter, prog="python -m training.checkpoint",
                                   description="Convert an old checkpoint (pickled numpy RNG state) to the "
                                               "current format, which loads with weights_only=True.")
    parser.add_argument("--convert", metavar="PATH", required=True, help="checkpoint to convert")
    parser.add_argument("--out", default=None, help="write here (default: PATH itself, keeping PATH.old)")
    parser.add_argument("--trust", action="store_true",
                        help="the file holds other pickled objects: unpickle it with weights_only=False (runs any "
                             "code it carries: only for a file you trust)")
    args = parser.parse_args(argv)
    try:
        convert(args.convert, args.out, args.trust)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot write the converted checkpoint: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from training.cli import guarded
    sys.exit(guarded(main))
