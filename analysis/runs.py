"""Reading training runs for analysis/compare.py: the run directories a glob names, each run's config.json and
metrics.jsonl (or log.txt), checked line by line, and the conditions (device, layout, load) its timings ran under."""
import glob
import json
import math
import os
import re
import statistics

from model.sync_policy import parse_sync_policy
from training.config import ConfigError, coerce


# [0-9], not \d: digits are ASCII only (\d would also match e.g. Arabic-Indic digits)
EVAL_LINE = re.compile(r"^step ([0-9]+): train loss ([0-9.eE+-]+|nan|inf), val loss ([0-9.eE+-]+|nan|inf), "
                       r"syncs/fwd (\S+)")
TRAIN_LINE = re.compile(r"^iter ([0-9]+): loss ([0-9.eE+-]+|nan|inf), time ([0-9.]+)ms, tok/s ([0-9,]+)")
# config.json keys that make a setting; runs of one setting that differ in sync_policy are compared
SETTING_KEYS = ("dataset", "n_layer", "n_embd", "n_tracks", "max_iters")


class RunError(Exception):
    pass


def expand(patterns, skipped=None):
    """Dirs from arguments that may be globs (quoted, so the shell left them alone); order kept, no
    repeats. Plain files are skipped, so `compare_runs.py sweep/*` works beside a sweep's other
    outputs (plots, tables), and appended to `skipped` (a list) for the caller to name (issue 53:
    never dropped without a word)."""
    dirs = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise RunError(f"no run directory matches {pattern!r}")
        for path in matches:
            if os.path.isfile(path):
                if skipped is not None and path not in skipped:
                    skipped.append(path)
                continue
            if path not in dirs:
                dirs.append(path)
    if not dirs:
        raise RunError(f"no run directory among {' '.join(patterns)}")
    return dirs


def skipped_note(skipped):
    """The one line naming the plain files expand() skipped ('' when none)."""
    if not skipped:
        return ""
    return (f"note: skipped {len(skipped)} plain file{'s' if len(skipped) > 1 else ''}, not run director"
            f"{'ies' if len(skipped) > 1 else 'y'}: {name_list(skipped)}")


def num(x, spec=".4f", big=1e6):
    """x formatted with `spec`, or with 4 significant digits (scientific notation where needed: 1e+308,
    inf, nan) when it is not finite or its size reaches `big`, where `spec` would print hundreds of digits
    (a loss of 1e308 with .4f; issue 53)."""
    if isinstance(x, (int, float)) and math.isfinite(x) and abs(x) < big:
        return format(x, spec)
    return format(x, ("+" if spec.startswith("+") else "") + ".4g")


def records_from_log(path):
    """metrics.jsonl-like records parsed from a log.txt (for runs without metrics.jsonl)."""
    records = []
    for line in read_lines(path):
        try:
            if m := EVAL_LINE.match(line):
                syncs = int(m[4]) if re.fullmatch(r"[0-9]+", m[4]) else None
                records.append({"type": "eval", "iter": int(m[1]), "train_loss": float(m[2]),
                                "val_loss": float(m[3]), "syncs_per_fwd": syncs})
            elif m := TRAIN_LINE.match(line):
                records.append({"type": "train", "iter": int(m[1]), "loss": float(m[2]),
                                "time_ms": float(m[3]), "tok_per_s": float(m[4].replace(",", ""))})
        except ValueError:
            continue  # a line that only looks like one of ours (e.g. '1.2.3'): not a record
    return records


def read_lines(path):
    """The lines of a text file, or RunError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError as e:
        raise RunError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise RunError(f"{path} is not UTF-8 text (byte {e.start}: {e.reason})") from None


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


MAX_LOSS = 1e3  # nats: ln of any vocabulary is below 25, and a diverged run logs no eval (it stops)


def check_record(record, path, lineno):
    """RunError unless a metrics.jsonl record has what load_run reads from it."""
    def bad(why):
        return RunError(f"{path}, line {lineno}: {why} (is it a metrics.jsonl of train_reduced_sync.py?)")
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise bad("not a JSON object with a 'type'")
    if record["type"] not in ("eval", "train"):
        return
    it = record.get("iter")
    if not isinstance(it, int) or isinstance(it, bool) or it < 0:
        raise bad(f"'iter' is {it!r}, not an int >= 0")
    if record["type"] == "eval":
        if not _number(record.get("val_loss")) or not 0 <= record["val_loss"] < MAX_LOSS:  # also nan and inf
            raise bad(f"'val_loss' is {record.get('val_loss')!r}, not a cross-entropy in [0, {MAX_LOSS:g})")
        syncs = record.get("syncs_per_fwd")
        if syncs is not None and (not isinstance(syncs, int) or isinstance(syncs, bool)):
            raise bad(f"'syncs_per_fwd' is {syncs!r}, not an int")
    elif record.get("tok_per_s") is not None and not _number(record["tok_per_s"]):
        raise bad(f"'tok_per_s' is {record['tok_per_s']!r}, not a number")


def load_run(run_dir):
    """Summary dict of one run dir. Raises RunError naming what is missing."""
    if not os.path.isdir(run_dir):
        raise RunError(f"{run_dir}: not a directory")
    config_path = os.path.join(run_dir, "config.json")
    metrics_path, log_path = os.path.join(run_dir, "metrics.jsonl"), os.path.join(run_dir, "log.txt")
    if not os.path.exists(config_path):
        raise RunError(f"{run_dir}: no config.json (is it an out_dir of train_reduced_sync.py?)")
    try:
        config = json.loads("\n".join(read_lines(config_path)))
    except json.JSONDecodeError as e:
        raise RunError(f"{config_path} is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(config, dict):
        raise RunError(f"{config_path} holds a JSON {type(config).__name__}, not an object")
    for key in (*SETTING_KEYS, "seed", "sync_policy"):  # what the tables group by: of the trainer's type, or no setting at all
        if config.get(key) is not None:
            try:
                coerce(key, config[key])
            except ConfigError as e:
                raise RunError(f"{config_path}: {e}") from None
    if isinstance(config.get("sync_policy"), str) and isinstance(config.get("n_layer"), int):
        try:  # a policy this depth cannot have (grouped:7 at n_layer 2) is not a run of the trainer
            parse_sync_policy(config["sync_policy"], config["n_layer"])
        except ValueError as e:
            raise RunError(f"{config_path}: {e} (at its n_layer={config['n_layer']})") from None
    unreadable = 0
    if os.path.exists(metrics_path):
        records = []
        for lineno, line in enumerate(read_lines(metrics_path), 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                unreadable += bool(line.strip())  # blank, or cut short by a killed run
                continue
            check_record(record, metrics_path, lineno)
            records.append(record)
    elif os.path.exists(log_path):
        records = records_from_log(log_path)
    else:
        raise RunError(f"{run_dir}: no metrics.jsonl or log.txt (has the run started?)")
    evals = {r["iter"]: r for r in records if r["type"] == "eval"}  # the later line of a resumed run wins
    train = {r["iter"]: r for r in records if r["type"] == "train"}
    if not evals:
        skipped = f" ({metrics_path}: {unreadable} line(s) not JSON, skipped)" if unreadable else ""
        raise RunError(f"{run_dir}: no evaluation logged yet{skipped}")
    iters = sorted(evals)
    syncs = [evals[i].get("syncs_per_fwd") for i in iters if evals[i].get("syncs_per_fwd") is not None]
    tok_per_s = [r["tok_per_s"] for r in train.values() if r.get("tok_per_s")]
    max_iters = config.get("max_iters")
    ends = [r for r in records if r["type"] in ("summary", "done")]  # 'done': the last record before issue 42
    per_iter = [config.get(k) for k in ("batch_size", "block_size", "gradient_accumulation_steps")]
    return {
        "name": os.path.basename(os.path.normpath(run_dir)),
        "dir": run_dir,
        "policy": str(config.get("sync_policy", "?")),
        "seed": config.get("seed"),
        "setting": tuple(config.get(k) for k in SETTING_KEYS),
        "complete": not isinstance(max_iters, int) or iters[-1] >= max_iters,
        "diverged": any(r["type"] == "error" for r in records),
        "syncs": syncs[-1] if syncs else None,
        "final_iter": iters[-1],
        "final_val": evals[iters[-1]]["val_loss"],
        "best_val": min(evals[i]["val_loss"] for i in iters),
        "curve": [(i, evals[i]["val_loss"]) for i in iters],
        # (seconds since the first eval, val loss), point by point as "curve", if every eval has its wall-clock
        # time (log.txt has none)
        "time_curve": [(evals[i]["time"] - evals[iters[0]]["time"], evals[i]["val_loss"]) for i in iters]
        if all(_number(evals[i].get("time")) for i in iters) else [],
        "tok_per_s": statistics.median(tok_per_s) if tok_per_s else None,
        # tokens per iteration and the training budget in tokens (None without the keys that give them)
        "tokens_per_iter": math.prod(per_iter) if all(isinstance(v, int) for v in per_iter) else None,
        "tokens": max_iters * math.prod(per_iter) if all(isinstance(v, int) for v in [max_iters, *per_iter]) else None,
        # how the run ended: True finished, False stopped by a signal, None no end record (running, killed, old log)
        "finished": (ends[-1].get("finished", True) is not False) if ends else None,
        **run_conditions(records, ends[-1] if ends else None),
    }


def run_conditions(records, end):
    """What the run's timings depend on besides the policy, from its layout records (one per start or resume)
    and its end record: {"device": device name or None (unknown: logged before issue 42, or log.txt only, or
    the starts differ), "device_type", "layout": (world, dp, tp) or None, "cores": CPU cores or None, "load":
    the highest 1-minute load average at a start or at the end, or None}."""
    starts = [r for r in records if r["type"] == "layout"]
    names = {(r.get("device_type"), r.get("device_name")) for r in starts}
    layouts = {(r.get("world_size"), r.get("dp"), r.get("tp")) for r in starts}
    cores = {r.get("cpu_cores") for r in starts}
    loads = [r["load_avg_start"][0] for r in starts if isinstance(r.get("load_avg_start"), list)]
    if end and isinstance(end.get("load_avg_end"), list):
        loads.append(end["load_avg_end"][0])
    known = len(names) == 1 and None not in next(iter(names))
    return {"device": next(iter(names))[1] if known else None,
            "device_type": next(iter(names))[0] if known else None,
            "layout": next(iter(layouts)) if len(layouts) == 1 and None not in next(iter(layouts)) else None,
            "cores": next(iter(cores)) if len(cores) == 1 and _number(next(iter(cores))) else None,
            "load": max(loads) if loads else None}


def name_list(names, most=4):
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
