"""Compare training runs: a table of loss vs synchronization, and a trade-off plot.

    python compare_runs.py out-shakespeare-*                  # dirs or quoted globs
    python compare_runs.py 'out-*' --markdown --out plots/tradeoff.png

Each run dir needs config.json and metrics.jsonl (written by train_reduced_sync.py); log.txt is
read when metrics.jsonl is missing. For every run the table shows: the sync policy, syncs/fwd as
MEASURED in the run (parallel.comm's count of forward all-reduces, logged at each eval), final
and best val loss, both relative to the baseline in %, and the median of the logged tokens/s. One run
gets no verdict: verdicts come only from the paired statistics over seeds below. The baseline is
the mean over the runs of the same setting (below) whose sync_policy is 'baseline'; a setting without
one shows — in the Δ columns, and a line says why (another setting's baseline is no reference).
A resumed run logs some iterations twice: the later line wins.

Timings (tok/s) depend on the machine as much as on the policy. Each run's layout record says its device
(name), processes (world, dp, tp), CPU cores and load average at the start; its end record the load at the
end. A speed ratio (each policy's median tok/s over its seeds against the baseline's) is printed only
between runs of one setting on the same device at the same layout; where runs differ, or their conditions
are unknown (runs logged before these fields, or log.txt only), one line says so instead. Where any run
was on CPU, or its load average exceeded its CPU cores, one line says that the timing measures the machine,
not the policy, and the PNG's wall-clock panel says so too.

The PNG (matplotlib, no display needed): one colour per policy and one line style per seed in every panel,
a legend naming both (and each setting's marker when there are several). Left: final val loss against
syncs per forward, each seed a point and each policy's mean a short line (no line joins policies; a
±--margin band around the baseline keeps single seeds from filling the y-axis); middle and right, the
val-loss curves against iterations and against wall-clock seconds, without the iteration-0 eval. With
--stats, each policy's 95% t-interval over its seeds is drawn as a band: of the final val loss (left, a box
around the mean line) and of the val loss at every iteration all its seeds logged (middle, around the
bold mean curve).

Statistics over seeds (--stats, --trend PNG, --stats-json FILE). Runs are grouped into settings
(dataset, n_layer, n_embd, n_tracks, max_iters, from config.json) and, within a setting, cells of one
sync_policy; only finished runs count (final eval at max_iters). Per cell: mean ± std over seeds of the
final val loss (the last eval) and of the best val loss (the lowest eval). Per non-baseline cell: the
paired difference to the baseline of the same setting, seed by seed (a seed gives both the same init
and data order), as a relative gap 100 * (policy / baseline - 1) %, with its mean and 95% Student-t
interval over the n paired seeds (n - 1 degrees of freedom). Two tests per cell, each Holm-corrected
across the family of the non-baseline policies of that setting (family-wise α = 0.05):
  - difference: two-sided paired t-test of 'mean gap = 0';
  - equivalence (TOST) against a margin stated up front (--margin, default ±1% of the baseline's val
    loss): two one-sided t-tests of 'gap <= -margin' and 'gap >= +margin'; its p is the larger of the two.
    Unadjusted, it rejects exactly when the 90% t-interval lies inside (-margin, +margin); Holm makes
    it stricter.
Verdict (from the final val loss; best val is shown beside it): 'keeps the loss' when the equivalence
test rejects; otherwise 'worse' / 'better' when the difference test rejects; otherwise 'inconclusive'
(an interval that includes 0 but reaches past the margin says nothing either way). One seed gets no test.
Beside the verdict: non-inferiority, TOST's upper one-sided test alone (Holm-adjusted), which says a
policy is not worse by the margin or more, whether or not it is better.
The trend PNG plots these gaps against the measured syncs per forward, one curve per setting (width x
n_tracks), with the 95% intervals as error bars and the margin as a grey band. The trend sentence
('Verdict (...)') is computed from the same numbers, each interval a single 95% test: for the grouped
family (spd = a sync every layer, grouped:G = every G layers), the per-seed least-squares
slope of the gap against the layers between syncs, averaged over seeds with a 95% interval, and,
where a setting exists at two widths, the gap at the largest common interval compared across widths
(Welch interval), and where it exists at two n_tracks, the slopes compared across them (Welch). The
verdict uses the final val loss unless --metric best: the final loss compares every policy after the
same schedule, while the best loss is the minimum over all evals, which picks each run's luckiest
eval (biased low, more so for noisier runs) and hides a policy that overfits sooner.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
import tempfile
from types import SimpleNamespace

from model.sync_policy import parse_sync_policy
from training.atomic import replace_problem
from training.config import (ConfigError, HelpFormatter, OneLineArgumentParser, ascii_float, coerce, save_figure,
                             write_text)

# [0-9], not \d: digits are ASCII only (\d would also match e.g. Arabic-Indic digits)
EVAL_LINE = re.compile(r"^step ([0-9]+): train loss ([0-9.eE+-]+|nan|inf), val loss ([0-9.eE+-]+|nan|inf), "
                       r"syncs/fwd (\S+)")
TRAIN_LINE = re.compile(r"^iter ([0-9]+): loss ([0-9.eE+-]+|nan|inf), time ([0-9.]+)ms, tok/s ([0-9,]+)")
PLOT_FORMATS = ("png", "pdf", "svg")
# config.json keys that make a setting; runs of one setting that differ in sync_policy are compared
SETTING_KEYS = ("dataset", "n_layer", "n_embd", "n_tracks", "max_iters")
MAX_LABELLED = 20  # the trade-off PNG labels each run up to this many runs


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
            f"{'ies' if len(skipped) > 1 else 'y'}: {_names(skipped)}")


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


def timing_lines(runs):
    """What compare_runs.py may say about speed. A tok/s ratio only between runs of one setting on the same
    device (by name) at the same layout (world, dp, tp), each policy's median tok/s over its seeds against the
    baseline's; where runs differ, or their conditions are unknown, one line says so instead. One line warns
    that the timings measure the machine, not the policy, where any run was on CPU or had a load average above
    its CPU cores (other processes shared them)."""
    timed = [r for r in runs if r["tok_per_s"] is not None]
    if not timed:
        return []
    lines = []
    unknown = [r["name"] for r in timed if r["device"] is None or r["layout"] is None]
    if unknown:
        lines.append(f"timing: conditions unknown (no device or layout logged: older runs, or "
                     f"log.txt only) for {_names(unknown)}: no speed ratio involving them")
    known = [r for r in timed if r["device"] is not None and r["layout"] is not None]
    on_cpu = [r["name"] for r in known if r["device_type"] == "cpu"]
    loaded = [f"{r['name']} ({r['load']:g} > {r['cores']})" for r in known
              if r["load"] is not None and r["cores"] is not None and r["load"] > r["cores"]]
    if on_cpu or loaded:
        why = "; ".join(x for x in (f"on CPU: {_names(on_cpu)}" if on_cpu else "",
                                    f"load average above the CPU cores: {_names(loaded)}" if loaded else "") if x)
        lines.append(f"timing: the timing measures the machine, not the policy ({why})")
    groups = {}
    for r in known:
        groups.setdefault((r["device"], r["layout"]), []).append(r)
    if len(groups) > 1:
        parts = [f"{device}, world {w} = dp {dp} x tp {tp}: {_names([r['name'] for r in own])}"
                 for (device, (w, dp, tp)), own in groups.items()]
        lines.append(f"timing: the runs differ in device or layout, so no speed ratio between them ({'; '.join(parts)})")
    for (device, (w, dp, tp)), own in groups.items():
        for setting in sorted_settings(r["setting"] for r in own):
            cell = [r for r in own if r["setting"] == setting]
            base = [r["tok_per_s"] for r in cell if r["policy"] == "baseline"]
            others = sorted({r["policy"] for r in cell} - {"baseline"})
            if not base or not others:
                continue
            ref = statistics.median(base)
            ratios = []
            for policy in others:
                ratio = statistics.median(r["tok_per_s"] for r in cell if r["policy"] == policy) / ref
                ratios.append(f"{policy} x{ratio:.2f} tok/s (time per token x{1 / ratio:.2f})")
            lines.append(f"speed vs baseline ({device}, world {w} = dp {dp} x tp {tp}, median tok/s over seeds): "
                         + ", ".join(ratios))
    return lines


def _names(names, most=4):
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def baseline_stats(runs, key="final_val"):
    """(mean of `key` over the baseline runs, std or None, description); there must be one."""
    base = [r for r in runs if r["policy"] == "baseline"]
    values = [r[key] for r in base]
    mean = fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None
    noise = (f", std {num(std)} = {num(100 * std / mean, '.2f')}% (run-to-run noise)" if std is not None
             else "")
    return mean, std, f"{key.replace('_', ' ')}: mean of {len(values)} baseline run(s): {num(mean)}{noise}"


def baseline_references(runs):
    """The reference of each run's Δ columns: the mean of the baseline runs of its own setting. A setting
    without one gets no reference (None: its Δ columns show —): another setting's baseline (another width,
    n_tracks, dataset or run length) is no reference, and neither is another policy's run.
    Returns ({setting: (final mean, best mean, best std) or None}, description lines)."""
    settings = sorted_settings(r["setting"] for r in runs)
    labels = setting_labels(settings)
    refs, lines = {}, []
    for s in settings:
        own = [r for r in runs if r["setting"] == s]
        prefix = f"baseline ({labels[s]})" if len(settings) > 1 else "baseline"
        if not any(r["policy"] == "baseline" for r in own):
            refs[s] = None
            lines.append(f"{prefix}: no 'baseline' run in this setting, so its Δ columns show — (another setting's "
                         f"baseline, or another policy, is no reference)")
            continue
        final, _, final_desc = baseline_stats(own, "final_val")
        best, best_std, best_desc = baseline_stats(own, "best_val")
        refs[s] = (final, best, best_std)
        lines += [f"{prefix} {final_desc}", f"{prefix} {best_desc}"]
    return refs, lines


def table_rows(runs, refs):
    """Δ columns are relative to the run's reference (baseline_references). One run carries no verdict:
    verdicts come from the paired statistics over seeds (--stats)."""
    header = ["run", "policy", "syncs/fwd", "final iter", "final val", "best val", "Δ final vs base",
              "Δ best vs base", "tok/s"]
    rows = []
    for r in runs:
        delta = delta_best = "—"  # no baseline run in this run's setting (baseline_references says so)
        if refs[r["setting"]] is not None:
            final_base, best_base, _ = refs[r["setting"]]
            delta = f"{num(100 * (r['final_val'] - final_base) / final_base, '+.2f')}%"
            delta_best = f"{num(100 * (r['best_val'] - best_base) / best_base, '+.2f')}%"
        rows.append([r["name"], r["policy"], "?" if r["syncs"] is None else str(r["syncs"]), str(r["final_iter"]),
                     num(r["final_val"]), num(r["best_val"]), delta, delta_best,
                     "?" if r["tok_per_s"] is None else f"{r['tok_per_s']:,.0f}"])
    return header, rows


def format_table(header, rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows])


SEED_STYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)), (0, (3, 1, 1, 1))]
SETTING_MARKERS = ["o", "s", "^", "v", "P", "X", "D", "*"]


def wall_clock_caveat(runs):
    """The wall-clock panel's warning: '' when every timed run's conditions are known, alike and fair."""
    timed = [r for r in runs if r["time_curve"]]
    if any(r["device"] is None or r["layout"] is None for r in timed):
        return "run conditions unknown (device, layout, load not logged)"
    if any(r["device_type"] == "cpu" or (r["load"] is not None and r["cores"] is not None and r["load"] > r["cores"])
           for r in timed):
        return "CPU or loaded machine: the timing measures the machine, not the policy"
    if len({(r["device"], r["layout"]) for r in timed}) > 1:
        return "runs on different devices or layouts: not comparable"
    return ""


def plot_look(runs, plt):
    """What stays the same in every panel: one colour per policy (baseline first, then by sync interval),
    one line style per seed, one marker per setting."""
    settings = sorted_settings(r["setting"] for r in runs)
    policies = sorted({r["policy"] for r in runs}, key=lambda p: (p != "baseline", sync_interval(p) or 0, p))
    palette = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20").colors
    if len(policies) <= 10:  # tab10's grey last: the margin band is grey
        palette = [c for k, c in enumerate(palette) if k != 7] + [palette[7]]
    seeds = sorted({r["seed"] for r in runs}, key=natural)
    return SimpleNamespace(settings=settings, labels=setting_labels(settings), policies=policies, seeds=seeds,
                           color={p: palette[k % len(palette)] for k, p in enumerate(policies)},
                           style={sd: SEED_STYLES[k % len(SEED_STYLES)] for k, sd in enumerate(seeds)},
                           marker={st: SETTING_MARKERS[k % len(SETTING_MARKERS)] for k, st in enumerate(settings)})


def plot_final_vals(ax, runs, k, setting, look, margin, bands):
    """Left panel, the k-th setting: the ±margin % band around its baseline mean, each run's final val loss a
    point at its measured syncs per forward, each policy's mean a short line (bands: its 95% t-interval a box);
    policies that share a sync count sit side by side."""
    own = [r for r in runs if r["setting"] == setting and r["syncs"] is not None]
    here_policies = [p for p in look.policies if any(r["policy"] == p for r in own)]
    base = [r["final_val"] for r in own if r["policy"] == "baseline"]
    if base:
        mean = fmean(base)
        ax.axhspan(mean * (1 - margin / 100), mean * (1 + margin / 100), color="0.5", alpha=0.12, lw=0)
    n_settings = len(look.settings)
    for syncs in sorted({r["syncs"] for r in own}):
        here = [p for p in here_policies if any(r["policy"] == p and r["syncs"] == syncs for r in own)]
        for j, policy in enumerate(here):
            x = syncs * 2 ** (0.06 * (j - (len(here) - 1) / 2) + 0.02 * (k - (n_settings - 1) / 2))
            values = [r["final_val"] for r in own if r["policy"] == policy and r["syncs"] == syncs]
            ax.scatter([x] * len(values), values, color=look.color[policy], marker=look.marker[setting], s=18,
                       alpha=0.8)
            if len(values) > 1:
                mean, half, _ = mean_ci(values)
                ax.hlines(mean, x / 1.04, x * 1.04, color=look.color[policy], linewidth=2)
                if bands and half is not None:
                    ax.fill_between([x / 1.04, x * 1.04], mean - half, mean + half, color=look.color[policy],
                                    alpha=0.2, lw=0)
    return here_policies


def plot_curves(middle, right, runs, look, bands):
    """Middle and right panels: each run's val-loss curve against iterations and against wall-clock seconds,
    from the first eval after iteration 0 (whose loss, ~ln(vocab), would squash the rest)."""
    for r in runs:
        after_0 = [n for n, (i, _) in enumerate(r["curve"]) if i > 0] or [0]
        for ax, curve in ((middle, r["curve"]), (right, r["time_curve"])):
            if curve:
                xs, losses = zip(*(curve[n] for n in after_0))
                ax.plot(xs, losses, color=look.color[r["policy"]], linestyle=look.style[r["seed"]],
                        linewidth=0.8 if bands else 1.2, alpha=0.6 if bands else 0.85,
                        marker="." if len(xs) < 10 else None, markersize=4)


def plot_mean_curves(ax, runs, policies, look):
    """Middle panel with bands: each policy's mean curve over its seeds, and its 95% t-interval as a band,
    at every iteration after 0 that all its seeds logged."""
    for policy in policies:
        cell = [r for r in runs if r["policy"] == policy]
        common = sorted(set.intersection(*({i for i, _ in r["curve"] if i > 0} for r in cell)))
        if len(cell) < 2 or not common:
            continue
        stats = [mean_ci([dict(r["curve"])[i] for r in cell]) for i in common]
        low = [m - (h or 0) for m, h, _ in stats]
        high = [m + (h or 0) for m, h, _ in stats]
        ax.fill_between(common, low, high, color=look.color[policy], alpha=0.2, lw=0)
        ax.plot(common, [m for m, _, _ in stats], color=look.color[policy], linewidth=2)


def label_panels(left, middle, right, runs, bands):
    """Axes, ticks and titles; the left title says when one seed per policy shows no spread, the right one
    when the timings measure the machine rather than the policy (wall_clock_caveat)."""
    left.set_xscale("log", base=2)
    ticks = sorted({r["syncs"] for r in runs if r["syncs"]})
    left.set_xticks(ticks)
    left.set_xticklabels([str(t) for t in ticks])
    left.minorticks_off()
    left.set_xlabel("all-reduces per forward pass (measured)")
    left.set_ylabel("final val loss")
    per_cell = [sum(r["policy"] == p and r["setting"] == s for r in runs) for s, p in {(r["setting"], r["policy"])
                                                                                    for r in runs}]
    left.set_title(("final val per run (points) and per policy (mean of seeds: line"
                    + ("; 95% t-interval: box)" if bands else ")")) if max(per_cell) > 1 else
                   "final val, ONE seed per policy: no spread measured,\nso no difference here is shown to be real",
                   fontsize=10)
    left.grid(alpha=0.3)
    middle.set_xlabel("iteration")
    middle.set_ylabel("val loss")
    middle.set_title("val loss from the first eval after iteration 0" +
                     (";\nbold: mean of a policy's seeds, band: its 95% t-interval" if bands else ""), fontsize=10)
    middle.grid(alpha=0.3)
    right.set_xlabel("wall-clock seconds since the iteration-0 eval (evals included)")
    right.set_ylabel("val loss")
    caveat = wall_clock_caveat(runs)
    right.set_title("val loss against time" + ("" if any(r["time_curve"] for r in runs) else
                                               ": no eval times logged (log.txt only)")
                    + (f"\n{caveat}" if caveat else ""),
                    fontsize=10, color="firebrick" if caveat else "black")
    right.grid(alpha=0.3)


def plot_legend(fig, runs, look, margin):
    """One legend for the three panels: the policies' colours, the seeds' line styles, the settings' markers
    when there are several, and the margin band when there is a baseline."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=look.color[p], linewidth=2.5, label=p) for p in look.policies]
    handles += [Line2D([], [], color="0.3", linestyle=look.style[sd], linewidth=1.5, label=f"seed {sd}")
                for sd in look.seeds]
    if len(look.settings) > 1:
        handles += [Line2D([], [], color="0.3", marker=look.marker[st], linestyle="None", label=look.labels[st])
                    for st in look.settings]
    if any(r["policy"] == "baseline" for r in runs):
        handles.append(Patch(color="0.5", alpha=0.2,
                             label=f"±{margin:g}% of the baseline mean\n(the --margin of --stats)"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(0.86, 0.5), fontsize=8,
               title="colour: policy; line: seed" + ("; marker: setting" if len(look.settings) > 1 else ""),
               title_fontsize=8)


def plot(runs, path, margin=None, bands=False):
    """One colour per policy, one line style per seed, the same in every panel; a legend names both (and the
    settings' markers when there are several). Left: final val loss against measured syncs per forward, each
    run (seed) a point, each policy's mean over its seeds a short horizontal line; policies that share a sync
    count sit side by side. The band (the baseline's colour) is ±margin % around each setting's baseline mean,
    so the y-range is never narrower than the margin: two single-seed points 0.3% apart do not fill the axis.
    Middle and right: every run's val-loss curve against iterations and against wall-clock seconds, from the
    first eval after iteration 0 (whose loss, ~ln(vocab), would squash the rest); the wall-clock panel says
    when its timings measure the machine rather than the policy (wall_clock_caveat). bands (--stats): each
    policy's 95% t-interval over its seeds, of the final val loss (left, a box) and of the val loss at every
    iteration that all its seeds logged (middle, a band around the mean curve)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    margin = MARGIN if margin is None else margin
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(21, 5.5))
    look = plot_look(runs, plt)
    for k, setting in enumerate(look.settings):
        here_policies = plot_final_vals(left, runs, k, setting, look, margin, bands)
        setting_runs = [r for r in runs if r["setting"] == setting]
        plot_curves(middle, right, setting_runs, look, bands)
        if bands:
            plot_mean_curves(middle, setting_runs, here_policies, look)
    label_panels(left, middle, right, runs, bands)
    plot_legend(fig, runs, look, margin)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    save_figure(fig, path)


# ----------------------------------------------------------------------------- statistics over seeds
def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (Numerical Recipes, betacf)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom (df > 0, not necessarily an integer)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p, df):
    """The p-quantile of Student's t with df degrees of freedom (bisection on t_cdf; 1e-10 precise)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


def fmean(values):
    """statistics.fmean; for values near the float limit (a loss of 1e308 in a broken run's log), whose sum
    overflows, the sum of v / n: their mean, not an OverflowError."""
    values = list(values)
    try:
        return statistics.fmean(values)
    except OverflowError:
        return math.fsum(v / len(values) for v in values)


def mean_ci(values, level=0.95):
    """(mean, half-width of the Student-t interval at `level`, sample std): None for what n = 1 cannot give."""
    n = len(values)
    mean = fmean(values)
    if n < 2:
        return mean, None, None
    std = statistics.stdev(values)
    return mean, t_quantile(0.5 + level / 2, n - 1) * std / math.sqrt(n), std


def welch_ci(a, b, level=0.95):
    """(mean(b) - mean(a), half-width of Welch's t interval) for two independent samples; half None if
    either has one value or both have zero spread."""
    diff = fmean(b) - fmean(a)
    if len(a) < 2 or len(b) < 2:
        return diff, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, None
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    return diff, t_quantile(0.5 + level / 2, df) * math.sqrt(va + vb)


def sync_interval(policy):
    """Layers between syncs for the grouped family (spd: a sync after every MLP = 1, grouped:G = G),
    None for any other policy."""
    if policy == "spd":
        return 1
    m = re.fullmatch(r"grouped:([0-9]+)", policy)
    return int(m[1]) if m else None


def natural(value):
    """Sort key that puts numbers in numeric order (w192 before w1024) and anything else after them."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def sorted_settings(settings):
    """Distinct settings, their numbers in numeric order."""
    return sorted(set(settings), key=lambda s: [natural(x) for x in s])


def setting_labels(settings):
    """A short label per setting, naming only the keys that vary between them (always width and tracks)."""
    varying = [i for i, k in enumerate(SETTING_KEYS) if len({s[i] for s in settings}) > 1]
    short = {"dataset": "{}", "n_layer": "L{}", "n_embd": "w{}", "n_tracks": "n{}", "max_iters": "{} it"}
    labels = {}
    for s in settings:
        keys = [i for i, k in enumerate(SETTING_KEYS) if i in varying or k in ("n_embd", "n_tracks")]
        labels[s] = " ".join(short[SETTING_KEYS[i]].format("?" if s[i] is None else s[i]) for i in keys)
    return labels


ALPHA = 0.05  # family-wise error rate of the verdicts
MARGIN = 1.0  # equivalence margin, % of the baseline's val loss, stated before the part-3 runs (issue 26)


def paired_tests(gaps, margin):
    """Tests of one cell's paired gaps (%, one per seed; n >= 2): the two-sided t-test of 'mean gap = 0'
    and TOST of 'the mean gap lies outside (-margin, +margin)', both with n - 1 degrees of freedom.
    Returns (p of the difference test, p of TOST = the larger of its two one-sided p's, p of its upper
    one-sided test alone = non-inferiority, 90% interval)."""
    n = len(gaps)
    mean, std = fmean(gaps), statistics.stdev(gaps)
    if std == 0:  # identical gaps on every seed: no spread to test against
        return float(mean == 0), float(abs(mean) >= margin), float(mean >= margin), (mean, mean)
    se = std / math.sqrt(n)
    p_diff = 2.0 * (1.0 - t_cdf(abs(mean) / se, n - 1))
    p_above_lower = 1.0 - t_cdf((mean + margin) / se, n - 1)  # H0: gap <= -margin
    p_below_upper = t_cdf((mean - margin) / se, n - 1)  # H0: gap >= +margin
    half90 = t_quantile(1.0 - ALPHA, n - 1) * se
    return p_diff, max(p_above_lower, p_below_upper), p_below_upper, (mean - half90, mean + half90)


def holm(p_values):
    """Holm's step-down adjusted p-values (family-wise error control), in the order given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def decide(m):
    """The verdict of a cell from its Holm-adjusted p's: 'keeps the loss' when TOST rejects (its whole 90%
    interval lies inside the margin), else 'worse' / 'better' when the difference test rejects, else
    'inconclusive'. None with one seed (no test)."""
    if m.get("p_diff_holm") is None:
        return None
    if m["p_tost_holm"] < ALPHA:
        return "keeps the loss"
    if m["p_diff_holm"] < ALPHA:
        return "worse" if m["gap"] > 0 else "better"
    return "inconclusive"


def seed_statistics(runs, level=0.95, margin=MARGIN):
    """Statistics over seeds (see the module docstring). Returns a dict: 'cells' (one per setting and
    policy: values per seed, mean/std, paired gaps to the baseline), 'excluded' (unfinished runs) and
    'notes' (duplicate seeds)."""
    excluded = [r["name"] + (" (diverged)" if r["diverged"] else "") for r in runs if not r["complete"]]
    notes = []
    cells = {}
    for r in runs:
        if not r["complete"]:
            continue
        cell = cells.setdefault((r["setting"], r["policy"]), {"setting": r["setting"], "policy": r["policy"],
                                                             "runs": {}, "syncs": set()})
        if r["seed"] in cell["runs"]:
            notes.append(f"{r['name']}: seed {r['seed']} repeats {cell['runs'][r['seed']]['name']} in its "
                         f"setting and policy; only the first is used")
            continue
        cell["runs"][r["seed"]] = r
        if r["syncs"] is not None:
            cell["syncs"].add(r["syncs"])
    labels = setting_labels(sorted_settings(c["setting"] for c in cells.values()))
    out = []
    for (setting, policy), cell in cells.items():
        seeds = sorted(cell["runs"], key=lambda x: (x is None, str(x)))
        row = {"setting": list(setting), "label": labels[setting], "policy": policy,
               "syncs": max(cell["syncs"]) if cell["syncs"] else None, "interval": sync_interval(policy),
               "seeds": seeds, "runs": [cell["runs"][x]["name"] for x in seeds],
               "tokens": cell["runs"][seeds[0]]["tokens"]}
        if len(cell["syncs"]) > 1:
            notes.append(f"{labels[setting]} {policy}: the runs logged different syncs/fwd {sorted(cell['syncs'])}")
        base = cells.get((setting, "baseline"))
        for metric in ("final_val", "best_val"):
            values = [cell["runs"][x][metric] for x in seeds]
            mean, _, std = mean_ci(values, level)
            row[metric] = {"values": values, "mean": mean, "std": std}
            if policy == "baseline" or base is None:
                continue
            paired = [x for x in seeds if x in base["runs"]]
            gaps = [100.0 * (cell["runs"][x][metric] / base["runs"][x][metric] - 1.0) for x in paired]
            diffs = [cell["runs"][x][metric] - base["runs"][x][metric] for x in paired]
            if not paired:
                continue
            gap, gap_half, gap_std = mean_ci(gaps, level)
            diff, diff_half, _ = mean_ci(diffs, level)
            row[metric].update(paired_seeds=paired, gaps=gaps, gap=gap, gap_ci=gap_half, gap_std=gap_std,
                               diffs=diffs, diff=diff, diff_ci=diff_half, p_diff=None, p_tost=None, p_noninf=None,
                               ci90=None)
            if len(paired) > 1:
                p_diff, p_tost, p_noninf, ci90 = paired_tests(gaps, margin)
                row[metric].update(p_diff=p_diff, p_tost=p_tost, p_noninf=p_noninf, ci90=ci90)
        out.append(row)
    # Holm within each family: the non-baseline policies of one setting, per metric and per test
    for setting in {tuple(c["setting"]) for c in out}:
        for metric in ("final_val", "best_val"):
            family = [c[metric] for c in out if tuple(c["setting"]) == setting and c[metric].get("p_diff") is not None]
            for key in ("p_diff", "p_tost", "p_noninf"):
                for m, adjusted in zip(family, holm([m[key] for m in family])):
                    m[f"{key}_holm"] = adjusted
            for m in family:
                m["family_size"] = len(family)
    for c in out:
        for metric in ("final_val", "best_val"):
            if "gap" in c[metric]:
                c[metric]["verdict"] = decide(c[metric])
    out.sort(key=lambda c: ([str(x) for x in c["setting"]], c["policy"] != "baseline", -(c["syncs"] or 0), c["policy"]))
    return {"level": level, "margin": margin, "alpha": ALPHA, "cells": out, "excluded": excluded, "notes": notes}


def _slope(xs, ys):
    mx, my = fmean(xs), fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def trend_analysis(stats, metric="final_val"):
    """The numbers behind the verdict: per setting, the per-seed slope of the gap (%) against the sync
    interval over the grouped family, its mean and interval; then compare_across for width and for
    n_tracks."""
    level = stats["level"]
    by_setting = {}
    for c in stats["cells"]:
        if c["interval"] is not None and "gaps" in c[metric]:
            by_setting.setdefault(tuple(c["setting"]), []).append(c)
    settings = []
    for setting, cells in sorted(by_setting.items(), key=lambda kv: [str(x) for x in kv[0]]):
        per_seed = {}
        for c in cells:
            for seed, gap in zip(c[metric]["paired_seeds"], c[metric]["gaps"]):
                per_seed.setdefault(seed, []).append((c["interval"], gap))
        slopes = [_slope(*zip(*pts)) for pts in per_seed.values() if len({d for d, _ in pts}) >= 2]
        entry = {"setting": list(setting), "label": cells[0]["label"],
                 "gaps": {c["interval"]: (c[metric]["gap"], c[metric]["gap_ci"], c[metric]["gaps"]) for c in cells}}
        if slopes:
            mean, half, _ = mean_ci(slopes, level)
            entry.update(slopes=slopes, slope=mean, slope_ci=half,
                         trend=None if half is None else "grows" if mean - half > 0 else
                         "shrinks" if mean + half < 0 else "flat")
        settings.append(entry)
    return {"metric": metric, "settings": settings, "widths": compare_across(settings, "n_embd", level),
            "tracks": compare_across(settings, "n_tracks", level)}


def compare_across(settings, key, level):
    """For each group of trend settings equal but in `key` (a SETTING_KEYS name): each value against the next
    larger one (192 vs 384, 384 vs 768), so adding a third width never changes the first comparison.
    Compared: the gap at the largest sync interval common to both, and the per-seed slope, each with Welch's
    interval (the two settings' runs are independent samples). `diff` is large minus small."""
    i = SETTING_KEYS.index(key)
    groups = {}
    for e in settings:
        if e["setting"][i] is not None:
            groups.setdefault(tuple(x for j, x in enumerate(e["setting"]) if j != i), []).append(e)
    rows = []
    pairs = []
    for entries in groups.values():
        entries = sorted(entries, key=lambda e: e["setting"][i])
        pairs += zip(entries, entries[1:])
    for small, large in pairs:
        common = set(small["gaps"]) & set(large["gaps"])
        if not common:
            continue
        d = max(common)
        diff, half = welch_ci(small["gaps"][d][2], large["gaps"][d][2], level)
        row = {"small": small["label"], "large": large["label"], "v_small": small["setting"][i],
               "v_large": large["setting"][i], "interval": d, "gap_small": small["gaps"][d][0],
               "gap_large": large["gaps"][d][0], "diff": diff, "diff_ci": half,
               "significant": half is not None and abs(diff) > half}
        if "slopes" in small and "slopes" in large:
            sdiff, shalf = welch_ci(small["slopes"], large["slopes"], level)
            row.update(slope_diff=sdiff, slope_diff_ci=shalf,
                       slope_significant=shalf is not None and abs(sdiff) > shalf)
        rows.append(row)
    return rows


def verdict_sentence(analysis, n_seeds_text):
    """One sentence from trend_analysis's numbers."""
    metric = analysis["metric"].replace("_val", " val")
    with_slope = [e for e in analysis["settings"] if "slope" in e]
    if not with_slope:
        return (f"Verdict ({metric}): too few grouped-family policies (spd, grouped:G) with seeds paired with a "
                f"baseline to tell whether the gap grows with the sync interval.")
    n = len(with_slope)
    grows = sum(e.get("trend") == "grows" for e in with_slope)
    shrinks = sum(e.get("trend") == "shrinks" for e in with_slope)
    tested = sum(e.get("trend") is not None for e in with_slope)
    slope = fmean(e["slope"] for e in with_slope)
    lo_d = min(min(e["gaps"]) for e in with_slope)
    hi_d = max(max(e["gaps"]) for e in with_slope)
    at = lambda d: [e["gaps"][d][0] for e in with_slope if d in e["gaps"]]
    text = (f"Verdict ({metric} loss, {n_seeds_text}): the gap to the baseline grows with the sync interval in "
            f"{grows} of {n} settings and shrinks in {shrinks} (95% interval of the per-seed slope above or below 0"
            + ("" if tested == n else f"; {n - tested} with one seed, untested") +
            f"), by {slope:+.3f} percentage points per layer between syncs on average "
            f"({fmean(at(lo_d)):+.2f}% at a sync every {'layer' if lo_d == 1 else f'{lo_d} layers'} vs "
            f"{fmean(at(hi_d)):+.2f}% every {hi_d} layers, mean over settings)")
    widths = analysis["widths"]
    if not widths:
        text += "; with one width per setting, the data say nothing about width"
    else:
        smaller = sum(w["diff"] < 0 for w in widths)
        sig = sum(w["significant"] for w in widths)
        w = widths[0]
        slopes = [x for x in widths if "slope_diff" in x]
        slope_text = "" if not slopes else (
            f"; slope wide minus narrow {fmean(x['slope_diff'] for x in slopes):+.3f} points per layer, "
            f"excluding 0 in {sum(x['slope_significant'] for x in slopes)} of {len(slopes)}")
        text += (f"; at the largest common interval the gap is smaller at the wider model in {smaller} of "
                 f"{len(widths)} comparisons (width {w['v_small']} vs {w['v_large']}"
                 + (f" and others" if len({(x['v_small'], x['v_large']) for x in widths}) > 1 else "") +
                 f"; wide minus narrow {fmean(x['diff'] for x in widths):+.2f} points on average, "
                 f"95% Welch interval excluding 0 in {sig} of {len(widths)}{slope_text})")
    tracks = [t for t in analysis.get("tracks", []) if "slope_diff" in t]
    if tracks:
        t = tracks[0]
        sig = sum(x["slope_significant"] for x in tracks)
        text += (f"; with more tracks the slope is {fmean(x['slope_diff'] for x in tracks):+.3f} points "
                 f"per layer higher on average ({len(tracks)} comparison{'s' if len(tracks) > 1 else ''}, "
                 f"n_tracks {t['v_small']} vs {t['v_large']}"
                 + (" and others" if len({(x['v_small'], x['v_large']) for x in tracks}) > 1 else "") +
                 (f", {t['slope_diff']:+.3f} ± {t['slope_diff_ci']:.3f}" if len(tracks) == 1 and
                  t["slope_diff_ci"] is not None else "") +
                 f"; 95% Welch interval excluding 0 in {sig} of {len(tracks)})")
    return text + "."


def _fmt_ci(mean, half, unit=""):
    return f"{num(mean, '+.2f')}{unit}" + ("" if half is None else f" ± {num(half, '.2f')}")


def _fmt_p(p):
    return "" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def stats_table(stats):
    header = ["setting", "policy", "syncs/fwd", "seeds", "final val (mean ± std)", "best val (mean ± std)",
              "Δ final % (95% CI)", "90% CI", "p Holm", "TOST p Holm", "verdict (final)", "not worse by ≥ margin",
              "Δ best % (95% CI)",
              "verdict (best)"]
    rows = []
    for c in stats["cells"]:
        row = [c["label"], c["policy"], "?" if c["syncs"] is None else str(c["syncs"]), str(len(c["seeds"]))]
        for metric in ("final_val", "best_val"):
            m = c[metric]
            row.append(num(m["mean"]) + ("" if m["std"] is None else f" ± {num(m['std'])}"))
        for metric in ("final_val", "best_val"):
            m = c[metric]
            tests = metric == "final_val"  # the verdicts use final val; best val is shown beside it
            if c["policy"] == "baseline":
                row += ["0 (reference)", "", "", "", "", ""] if tests else ["0 (reference)", ""]
                continue
            if "gap" not in m:
                row += ["no paired baseline", "", "", "", "", ""] if tests else ["no paired baseline", ""]
                continue
            n = len(m["paired_seeds"])
            row.append(_fmt_ci(m["gap"], m["gap_ci"]) + ("" if n == len(c["seeds"]) else f" ({n} paired)"))
            if tests:
                ci90 = "" if m["ci90"] is None else f"[{num(m['ci90'][0], '+.2f')}, {num(m['ci90'][1], '+.2f')}]"
                row += [ci90, _fmt_p(m.get("p_diff_holm")), _fmt_p(m.get("p_tost_holm"))]
            row.append(m["verdict"] or "inconclusive (1 seed)")
            if tests:
                p = m.get("p_noninf_holm")
                row.append("" if p is None else f"{'yes' if p < ALPHA else 'not shown'} (p Holm {_fmt_p(p)})")
        rows.append(row)
    return header, rows


def plot_trend(stats, path):
    """Gap to baseline (%) vs measured syncs per forward: one curve per setting, 95% intervals as error
    bars; left final val, right best val. Lines join the baseline and the grouped family (spd,
    grouped:G) where every cell has two seeds or more; other policies are unjoined markers. Colour: width; line style and filled or open
    markers: n_tracks; the grey band: the equivalence margin."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted_settings(tuple(c["setting"]) for c in stats["cells"])
    width_i, tracks_i = SETTING_KEYS.index("n_embd"), SETTING_KEYS.index("n_tracks")
    widths = sorted({s[width_i] for s in settings}, key=natural)
    tracks = sorted({s[tracks_i] for s in settings}, key=natural)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    markers = {"parallel": "s", "ladder": "^", "baseline": "o"}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=False)
    for ax, metric in zip(axes, ("final_val", "best_val")):
        seen_markers, plotted, intervals, gaps = set(), set(), 0, 0
        for k, setting in enumerate(settings):
            cells = [c for c in stats["cells"] if tuple(c["setting"]) == setting and c["syncs"] is not None
                     and (c["policy"] == "baseline" or "gap" in c[metric])]
            if not cells:
                continue
            plotted |= {c["syncs"] for c in cells}
            intervals += sum(c[metric].get("gap_ci") is not None for c in cells)
            gaps += sum(c["policy"] != "baseline" for c in cells)
            color = colors[widths.index(setting[width_i]) % len(colors)]
            style = styles[tracks.index(setting[tracks_i]) % len(styles)]
            face = color if tracks.index(setting[tracks_i]) == 0 else "white"  # open markers: more tracks
            jitter = 2 ** (0.04 * (k - (len(settings) - 1) / 2))  # keeps error bars apart
            point = lambda c: (c["syncs"] * jitter, 0.0 if c["policy"] == "baseline" else c[metric]["gap"],
                               (c[metric].get("gap_ci") or 0.0) if c["policy"] != "baseline" else 0.0)
            line = sorted((c for c in cells if c["policy"] == "baseline" or c["interval"] is not None),
                          key=lambda c: c["syncs"])
            if line:
                xs, ys, es = zip(*(point(c) for c in line))
                joined = all(len(c["seeds"]) > 1 for c in line)  # a line through single seeds is no trend
                ax.errorbar(xs, ys, yerr=es, color=color, linestyle=style if joined else "none", marker="o", capsize=3,
                            markerfacecolor=face, label=cells[0]["label"])
            for c in cells:
                if c["policy"] == "baseline" or c["interval"] is not None:
                    continue
                x, y, e = point(c)
                marker = markers.get(c["policy"].split(":")[0], "x")
                ax.errorbar([x], [y], yerr=[e], color=color, marker=marker, linestyle="none", capsize=3,
                            markerfacecolor=face,
                            label=c["policy"].split(":")[0] if marker not in seen_markers else None)
                seen_markers.add(marker)
        ax.axhline(0.0, color="gray", linewidth=1)
        ax.axhspan(-stats["margin"], stats["margin"], color="gray", alpha=0.12, lw=0,
                   label=f"equivalence margin ±{stats['margin']:g}%")
        ax.set_xscale("log", base=2)
        ticks = sorted(plotted)  # only where a point is
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("all-reduces per forward pass (measured); lines: baseline, spd, grouped:G")
        ax.set_ylabel(f"{metric.replace('_', ' ')}: gap to baseline, % (paired over seeds)")
        bars = (f"error bars: {stats['level']:.0%} t-interval" + (", none for one seed" if intervals < gaps else "")
                if intervals else "one seed per cell: no interval, no error bars")
        ax.set_title(f"{metric.replace('_', ' ')} gap vs syncs ({bars})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


# ----------------------------------------------------------------------------- the gap against the budget
# The seed's experiment (config/train_*.py): 20,000 iterations of 491,520 tokens on OpenWebText, where the only
# expectation on record is a reduced-sync val loss <= 3.35 against the baseline's 3.28 (+2.1%).
SEED_TOKENS, SEED_GAP = 20_000 * 491_520, 100 * (3.35 / 3.28 - 1)


def line_fit(xs, ys):
    """Least-squares (intercept, slope) of y = a + b x."""
    b = _slope(xs, ys)
    return fmean(ys) - b * fmean(xs), b


def bend_fit(xs, ys):
    """Least-squares c of y = a + b x + c x^2: how far the gap bends away from a line in log2(tokens)
    (x^2 is first made orthogonal to 1 and x, so c is the multiple-regression coefficient)."""
    mx = fmean(xs)
    u = [x - mx for x in xs]
    mq = fmean(v * v for v in u)
    q = [v * v - mq for v in u]
    beta = sum(a * b for a, b in zip(q, u)) / sum(v * v for v in u)
    r = [a - beta * b for a, b in zip(q, u)]
    return sum(a * y for a, y in zip(r, ys)) / sum(a * a for a in r)


def fieller(fits, level=0.95):
    """Where the mean over seeds of a_s + b_s x is 0, with its interval: the x at which the t-interval
    (n - 1 df) of that mean contains 0 (Fieller's interval for -mean(a) / mean(b), from the seeds'
    spread of (a, b)). Returns (x0 or None, (lo, hi) or None, 'bounded'/'unbounded')."""
    n = len(fits)
    a = fmean(f[0] for f in fits)
    b = fmean(f[1] for f in fits)
    x0 = -a / b if b != 0 else None
    if n < 2:
        return x0, None, "unbounded"
    saa = statistics.variance([f[0] for f in fits])
    sbb = statistics.variance([f[1] for f in fits])
    sab = sum((f[0] - a) * (f[1] - b) for f in fits) / (n - 1)
    c = t_quantile(0.5 + level / 2, n - 1) ** 2 / n
    qa, qb, qc = b * b - c * sbb, 2 * (a * b - c * sab), a * a - c * saa  # (a + b x)^2 <= c Var(a + b x)
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:  # the slope is not told from 0 at this level: no finite interval
        return x0, None, "unbounded"
    root = math.sqrt(disc)
    return x0, ((-qb - root) / (2 * qa), (-qb + root) / (2 * qa)), "bounded"


def budget_analysis(stats, metric="final_val", target_tokens=SEED_TOKENS):
    """The gap against the training budget, per (setting but its budget, policy). The stated model:
    gap_s(T) = a_s + b_s log2(T) in % (T: training tokens), fitted by least squares for each seed s that has
    two budgets or more; b (percentage points per doubling of tokens) is the mean over seeds with its
    t-interval (n - 1 df); the crossover is where the mean line is 0 (Fieller's interval); the gap at
    target_tokens (default the seed's 9.8B) is an extrapolation with a prediction interval for one seed,
    mean +- t * sd * sqrt(1 + 1/n). Returns a list of dicts, one per (group, policy)."""
    level = stats["level"]
    max_i = SETTING_KEYS.index("max_iters")
    groups = {}
    for c in stats["cells"]:
        if c["policy"] == "baseline" or "gaps" not in c[metric] or not c.get("tokens"):
            continue
        key = (tuple(x for i, x in enumerate(c["setting"]) if i != max_i), c["policy"])
        groups.setdefault(key, []).append(c)
    # the budgets every policy of a setting has: slopes over them compare policies measured to different budgets
    all_budgets = {key: {c["tokens"] for c in cells} for key, cells in groups.items()}
    common = {}
    for (setting, _), have in all_budgets.items():
        common[setting] = have if setting not in common else common[setting] & have
    out = []
    for (setting, policy), cells in groups.items():
        cells.sort(key=lambda c: c["tokens"])
        entry = {"setting": list(setting), "label": re.sub(r" [0-9]+ it$", "", cells[0]["label"]), "policy": policy,
                 "syncs": cells[0]["syncs"], "budgets": [
                     {"tokens": c["tokens"], "iters": c["setting"][max_i], "n": len(c[metric]["gaps"]),
                      "gap": c[metric]["gap"], "gap_ci": c[metric]["gap_ci"], "verdict": c[metric].get("verdict"),
                      "p_diff_holm": c[metric].get("p_diff_holm"), "p_noninf_holm": c[metric].get("p_noninf_holm"),
                      "p_tost_holm": c[metric].get("p_tost_holm"), "gaps": dict(zip(c[metric]["paired_seeds"],
                                                                                    c[metric]["gaps"]))}
                     for c in cells]}
        per_seed = {}
        for bud in entry["budgets"]:
            for seed, gap in bud["gaps"].items():
                per_seed.setdefault(seed, []).append((math.log2(bud["tokens"]), gap))
        fits = {seed: line_fit(*zip(*pts)) for seed, pts in sorted(per_seed.items(), key=lambda kv: str(kv[0]))
                if len({x for x, _ in pts}) >= 2}
        entry["fits"] = {str(seed): {"a": a, "b": b, "budgets": len(per_seed[seed])} for seed, (a, b) in fits.items()}
        bends = [bend_fit(*zip(*pts)) for pts in per_seed.values() if len({x for x, _ in pts}) >= 3]
        if len(bends) >= 2:  # the seeds are the replicates: their bends' t-interval, as for the slope
            entry["bend"], entry["bend_ci"], _ = mean_ci(bends, level)
            entry["bend_seeds"] = len(bends)
        if any(have != common[setting] for (st, _), have in all_budgets.items() if st == setting):
            in_common = {}
            for bud in entry["budgets"]:
                if bud["tokens"] in common[setting]:
                    for seed, gap in bud["gaps"].items():
                        in_common.setdefault(seed, []).append((math.log2(bud["tokens"]), gap))
            slopes = [line_fit(*zip(*pts))[1] for pts in in_common.values() if len(pts) >= 2]
            if len(slopes) >= 2:
                entry["common_tokens"] = [min(common[setting]), max(common[setting])]
                entry["common_slope"], entry["common_slope_ci"], _ = mean_ci(slopes, level)
                entry["common_seeds"] = len(slopes)
        if fits:
            slope, slope_half, _ = mean_ci([b for _, b in fits.values()], level)
            x0, interval, kind = fieller(list(fits.values()), level)
            xs = [math.log2(b["tokens"]) for b in entry["budgets"]]
            at_target = [a + b * math.log2(target_tokens) for a, b in fits.values()]
            pred, _, pred_sd = mean_ci(at_target, level)
            n = len(fits)
            entry.update(
                seeds_fitted=n, slope=slope, slope_ci=slope_half,
                trend=None if slope_half is None else "grows" if slope - slope_half > 0 else
                "shrinks" if slope + slope_half < 0 else "flat",
                crossover_tokens=None if x0 is None else 2 ** x0,
                crossover_interval=None if interval is None else [2 ** interval[0], 2 ** interval[1]],
                crossover_kind=kind,
                crossover_in_range=x0 is not None and min(xs) <= x0 <= max(xs),
                target_tokens=target_tokens, target_gap=pred,
                target_pi=None if pred_sd is None else t_quantile(0.5 + level / 2, n - 1) * pred_sd * math.sqrt(1 + 1 / n))
        out.append(entry)
    out.sort(key=lambda e: ([str(x) for x in e["setting"]], -(e["syncs"] or 0), e["policy"]))
    return out


def _tokens(t):
    if t >= 1e15:
        return f"10^{math.log10(t):.0f}"
    return f"{t / 1e9:.2f}B" if t >= 1e9 else f"{t / 1e6:.1f}M"


def crossover_text(e):
    """The crossover of one budget_analysis entry in words."""
    if "slope" not in e:
        return "one budget: no trend"
    if e["slope_ci"] is None:
        return "one seed: no interval"
    if e["crossover_tokens"] is None:
        return "flat line: no crossover"
    if e.get("trend") == "flat":  # a line whose slope's interval holds 0 places its zero anywhere
        return "none located: the slope is not told from 0"
    where = _tokens(e["crossover_tokens"])
    interval = e["crossover_interval"]
    span = f" [{_tokens(interval[0])}, {_tokens(interval[1])}]" if interval else " (interval unbounded: slope not told from 0)"
    if e["crossover_in_range"]:
        return f"crosses 0 at {where}{span}, within the range"
    return f"not crossed within the range (the line reaches 0 at {where}{span}, an extrapolation)"


def budget_table(analysis, margin):
    """Markdown: policy x budget (gap, interval, verdict), then slope, crossover and the extrapolation."""
    budgets = sorted({(b["iters"], b["tokens"]) for e in analysis for b in e["budgets"]})
    header = ["width", "policy", "syncs/fwd"] + [f"{it} it ({_tokens(t)})" for it, t in budgets] + [
        "slope, points per doubling (95% CI)", "bend, points per doubling² (95% CI)", "crossover (gap = 0)", f"at {_tokens(SEED_TOKENS)} (extrapolated, 95% PI)"]
    spans = {tuple(e["common_tokens"]) for e in analysis if "common_tokens" in e}
    if spans:  # policies measured to different budgets: their slopes over the budgets all of them have
        header.insert(len(header) - 3, "slope over " + "; ".join(f"{_tokens(a)}-{_tokens(b)}" for a, b in sorted(spans))
                      + " (the budgets every policy has)")
    rows = []
    for e in analysis:
        by = {(b["iters"], b["tokens"]): b for b in e["budgets"]}
        cells = []
        for key in budgets:
            b = by.get(key)
            cells.append("—" if b is None else f"{_fmt_ci(b['gap'], b['gap_ci'], '%')} ({b['n']}) "
                         + (b["verdict"] or "1 seed"))
        slope = "—" if "slope" not in e else _fmt_ci(e["slope"], e["slope_ci"]) + f" ({e['seeds_fitted']} seeds)"
        bend = "—" if "bend" not in e else _fmt_ci(e["bend"], e["bend_ci"]) + f" ({e['bend_seeds']} seeds)"
        target = "—" if "target_gap" not in e else _fmt_ci(e["target_gap"], e["target_pi"], "%")
        common_slope = ([_fmt_ci(e["common_slope"], e["common_slope_ci"]) + f" ({e['common_seeds']} seeds)"
                         if "common_slope" in e else "—"] if spans else [])
        rows.append([e["label"], e["policy"], str(e["syncs"]), *cells, slope, *common_slope, bend, crossover_text(e),
                     target])
    note = (f"Each budget cell: paired gap to the baseline, mean ± 95% t half-width (n seeds), verdict at that budget "
            f"(Holm over the policies of the budget; 'keeps the loss' needs TOST within ±{margin:g}%). Slope: "
            f"gap_s = a_s + b_s·log2(tokens) fitted per seed, b averaged over seeds with its t-interval. Bend: c_s of "
            f"a_s + b_s·x + c_s·x² (x = log2 tokens) per seed with 3 budgets or more, averaged likewise; an interval "
            f"that holds 0 means the budgets do not show the line bending. Crossover: "
            f"Fieller's 95% interval for the budget where the mean line is 0. The last column extrapolates the line to "
            f"the seed's {_tokens(SEED_TOKENS)} tokens (its expectation on record: {SEED_GAP:+.1f}%), with a 95% "
            f"prediction interval for one seed: an extrapolation, not a measurement.")
    return format_table(header, rows, True) + "\n\n" + note


def _policy_order(analysis):
    """The policies by syncs per forward, most first (ties by name, last first): the color order of the budget
    figures, the same from run to run (a set's order of strings is not)."""
    names = sorted({e["policy"] for e in analysis}, reverse=True)
    return sorted(names, key=lambda p: -max(e["syncs"] or 0 for e in analysis if e["policy"] == p))


def plot_budgets(analysis, path, margin, trunk_curves=None, other_schedule=()):
    """Gap to baseline (%) against training tokens (log2 axis), one panel per width: each policy's mean over
    seeds with its 95% t band and the seeds as points, the fitted mean line dashed, 0 and the margin.
    trunk_curves: {width label: {policy: [(tokens, mean gap, n seeds)]}}, drawn thin and dotted: the gap
    along the constant-rate trunk, which is not an end-of-schedule gap. other_schedule: budget_analysis entries
    of runs with a cosine schedule over each whole budget, drawn as hollow diamonds with their 95% t bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({e["label"] for e in analysis})
    fig, axes = plt.subplots(1, len(labels), figsize=(8 * len(labels), 5.5), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    policies = _policy_order(analysis)
    for ax, label in zip(axes[0], labels):
        for e in (e for e in analysis if e["label"] == label):
            color = colors[policies.index(e["policy"]) % len(colors)]
            tok = [b["tokens"] for b in e["budgets"]]
            gap = [b["gap"] for b in e["budgets"]]
            half = [b["gap_ci"] or 0.0 for b in e["budgets"]]
            ns = "/".join(str(b["n"]) for b in e["budgets"])
            ax.plot(tok, gap, "o-", color=color, lw=1.8, label=f"{e['policy']} ({e['syncs']} syncs; seeds {ns})")
            ax.fill_between(tok, [g - h for g, h in zip(gap, half)], [g + h for g, h in zip(gap, half)],
                            color=color, alpha=0.12, lw=0)
            for b in e["budgets"]:
                ax.scatter([b["tokens"]] * len(b["gaps"]), list(b["gaps"].values()), color=color, s=10, alpha=0.6)
            if "slope" in e:
                a = fmean(f["a"] for f in e["fits"].values())
                xs = [min(tok), max(tok)]
                ax.plot(xs, [a + e["slope"] * math.log2(x) for x in xs], "--", color=color, lw=1, alpha=0.8)
            curve = (trunk_curves or {}).get(label, {}).get(e["policy"])
            if curve:
                ax.plot([t for t, _, _ in curve], [g for _, g, _ in curve], ":", color=color, lw=1, alpha=0.7)
        for e in (e for e in other_schedule if e["label"] == label):
            color = colors[policies.index(e["policy"]) % len(colors)] if e["policy"] in policies else "black"
            ax.errorbar([b["tokens"] * 1.05 for b in e["budgets"]], [b["gap"] for b in e["budgets"]],
                        yerr=[b["gap_ci"] or 0.0 for b in e["budgets"]], fmt="D", mfc="none", color=color, ms=7,
                        capsize=3, lw=1, label=f"{e['policy']}: a cosine run of the whole budget")
        ax.axhline(0.0, color="black", lw=1)
        ax.axhspan(-margin, margin, color="gray", alpha=0.12, lw=0, label=f"±{margin:g}% margin")
        ax.set_xscale("log", base=2)
        ticks = sorted({b["tokens"] for e in analysis for b in e["budgets"]})
        ax.set_xticks(ticks)
        ax.set_xticklabels([_tokens(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("training budget, tokens (log scale)")
        ax.set_ylabel("final val loss: gap to baseline, % (paired over seeds)")
        title = f"{label}: gap at the end of each budget's schedule; band 95% t, dashed: fitted a + b·log2(tokens)"
        if trunk_curves and trunk_curves.get(label):
            title += "\ndotted: gap along the constant-lr trunk (not an end-of-schedule gap)"
        if any(e["label"] == label for e in other_schedule):
            title += "; hollow diamonds: cosine over the whole budget"
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


OVERLAPPED = {"ladder"}  # policies whose syncs are overlapped with compute rather than fewer


def _syncs_text(policy, syncs):
    """'1 sync', '12 syncs', '24 syncs, overlapped': a policy's all-reduces per forward pass in words."""
    text = "? syncs" if syncs is None else f"{syncs} sync{'' if syncs == 1 else 's'}"
    return text + (", overlapped" if policy in OVERLAPPED else "")


def plot_budget_headline(analysis, path, n_params=None, title=None, baseline_syncs=24):
    """The one-panel summary of plot_budgets: each policy's mean paired gap to the baseline (%) at the end of
    each budget with its 95% t band, against training tokens (log axis, ticked at the budgets, with tokens per
    parameter when n_params is given); labels say each policy's syncs per forward. No seeds, fits or trunks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    policies = _policy_order(analysis)
    ticks = sorted({b["tokens"] for e in analysis for b in e["budgets"]})
    ax.axhline(0.0, color="black", lw=1.2, zorder=1)
    lines = []
    short = lambda t: f"{t / 1e6:.1f}M" if t < 2e7 else _tokens(t) if t >= 1e9 else f"{t / 1e6:.0f}M"
    for e in analysis:
        color = colors[policies.index(e["policy"]) % len(colors)]
        tok = [b["tokens"] for b in e["budgets"]]
        gap = [b["gap"] for b in e["budgets"]]
        half = [b["gap_ci"] or 0.0 for b in e["budgets"]]
        line, = ax.plot(tok, gap, "o-", color=color, lw=2.2, ms=6, zorder=3,
                        label=f"{e['policy']} ({_syncs_text(e['policy'], e['syncs'])}"
                              + (f"; run to {short(tok[-1])})" if tok[-1] < ticks[-1] else ")"))
        ax.fill_between(tok, [g - h for g, h in zip(gap, half)], [g + h for g, h in zip(gap, half)],
                        color=color, alpha=0.11, lw=0, zorder=2)
        lines.append((gap[-1], line))
    ax.set_xscale("log", base=2)
    ax.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
    ax.set_xticks(ticks)
    ax.set_xticklabels([short(t) + (f"\n{t / n_params:.2g} per param" if n_params else "") for t in ticks],
                       fontsize=10)
    ax.minorticks_off()
    ax.text(ticks[0] / 1.25, 0.0, f"baseline ({_syncs_text('baseline', baseline_syncs)})", va="bottom",
            ha="left", fontsize=9, zorder=4)
    ax.set_xlabel("training tokens (log scale)" + (" and tokens per parameter" if n_params else ""))
    ax.set_ylabel("val loss gap to baseline, %\n(below 0: lower loss, better)")
    ns = sorted({b["n"] for e in analysis for b in e["budgets"]})
    seeds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    ax.set_title((title or "Loss cost of fewer syncs against the training budget")
                 + f"\ngap at the end of each budget's run, mean of {seeds} paired seeds; shaded: 95% interval",
                 fontsize=11)
    ax.grid(alpha=0.3)
    ordered = [line for _, line in sorted(lines, key=lambda x: -x[0])]  # the legend in the lines' order at the right
    ax.legend(handles=ordered, title="policy (syncs per forward pass)", fontsize=9, title_fontsize=9,
              loc="upper left")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def versus(runs, other_runs, metric="final_val", level=0.95, margin=MARGIN):
    """Per policy and budget present in both sets: the paired gap in `runs` minus the paired gap in
    `other_runs`, seed by seed (e.g. WSD against cosine), its mean and t-interval (n - 1 df)."""
    mine, theirs = seed_statistics(runs, level, margin), seed_statistics(other_runs, level, margin)
    key = lambda c: (c["setting"][SETTING_KEYS.index("n_embd")], c["setting"][SETTING_KEYS.index("max_iters")],
                     c["policy"])
    other = {key(c): c for c in theirs["cells"] if "gaps" in c[metric]}
    rows = []
    for c in mine["cells"]:
        o = other.get(key(c))
        if o is None or "gaps" not in c[metric]:
            continue
        a, b = dict(zip(c[metric]["paired_seeds"], c[metric]["gaps"])), dict(zip(o[metric]["paired_seeds"],
                                                                                  o[metric]["gaps"]))
        seeds = sorted(set(a) & set(b), key=str)
        if not seeds:
            continue
        diffs = [a[s] - b[s] for s in seeds]
        mean, half, _ = mean_ci(diffs, level)
        rows.append({"policy": c["policy"], "n_embd": key(c)[0], "iters": key(c)[1], "seeds": seeds,
                     "gap": fmean(a[s] for s in seeds), "other_gap": fmean(b[s] for s in seeds),
                     "diff": mean, "diff_ci": half, "diffs": diffs,
                     "differ": half is not None and abs(mean) > half})
    return rows


def versus_table(rows, other):
    header = ["width", "budget (iters)", "policy", "seeds", "gap here", f"gap in {other}", "here minus there (95% CI)",
              "differ?"]
    body = [[str(r["n_embd"]), str(r["iters"]), r["policy"], ",".join(map(str, r["seeds"])), f"{r['gap']:+.2f}%",
             f"{r['other_gap']:+.2f}%", _fmt_ci(r["diff"], r["diff_ci"], " points"),
             "n/a (1 seed)" if r["diff_ci"] is None else "yes" if r["differ"] else "no: within the seeds' noise"]
            for r in rows]
    return (format_table(header, body, True) + "\n\nEach seed's paired gap (policy vs the baseline of the same seed and "
            "set) here minus the same seed's gap there; 95% t-interval over seeds (n - 1 df). 'differ' when it "
            "excludes 0.")


def stats_report(runs, metric, markdown, margin=MARGIN):
    """(text, stats dict, analysis dict): the seed-statistics table, exclusions, notes and the verdict."""
    stats = seed_statistics(runs, margin=margin)
    analysis = trend_analysis(stats, metric)
    seeds = sorted({len(c["seeds"]) for c in stats["cells"]})
    n_seeds_text = (f"{seeds[0]} seed{'s' if seeds[0] > 1 else ''} per cell" if len(seeds) == 1 else
                    f"{seeds[0]}-{seeds[-1]} seeds per cell") if seeds else "no seeds"
    lines = ["", f"statistics over seeds. Δ: paired relative gap to the baseline of the same setting (seed by seed), "
                 f"mean ± half-width of the {stats['level']:.0%} t-interval (n - 1 df). Family: the policies of one "
                 f"setting; p Holm: two-sided paired t-test of Δ = 0, Holm-adjusted; TOST p Holm: equivalence within "
                 f"±{stats['margin']:g}% (the margin), Holm-adjusted. Verdict at α = {stats['alpha']:g}: 'keeps the "
                 f"loss' when TOST rejects (the 90% interval lies inside ±{stats['margin']:g}%), else 'worse'/'better' "
                 f"when the difference test rejects, else 'inconclusive'. 'not worse by ≥ margin': the upper one-sided "
                 f"test of TOST alone (non-inferiority), Holm-adjusted."]
    header, rows = stats_table(stats)
    lines.append(format_table(header, rows, markdown))
    if stats["excluded"]:
        lines.append(f"not finished (no eval at max_iters), left out of the statistics: {', '.join(stats['excluded'])}")
    lines += [f"note: {n}" for n in stats["notes"]]
    verdict = verdict_sentence(analysis, n_seeds_text)
    lines += ["", verdict]
    return "\n".join(lines), stats, analysis, verdict


def check_out(path, flag="--out", formats=PLOT_FORMATS):
    """RunError unless `path` can take the plot (or, formats=None, any file): a known format, not a directory,
    under no file."""
    ext = os.path.splitext(path)[1][1:].lower()
    if formats and ext not in formats:
        raise RunError(f"{flag}={path!r}: the file name must end in {', '.join('.' + e for e in formats)}")
    if os.path.isdir(path):
        raise RunError(f"{flag}={path!r} is a directory; give a file name")
    if replace_problem(path):  # a device (/dev/full), a FIFO, our own stdout: never replaced by a file
        raise RunError(f"{flag}: {replace_problem(path)}; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise RunError(f"{flag}={path!r}: {parent} is a file, not a directory")
    try:  # a real write: access() says yes to root on a read-only file system or /proc
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as e:
        raise RunError(f"{flag}={path!r}: cannot write in the directory {parent}: {e.strerror or e}") from None


def main(argv=None):
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=HelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (out_dir of train_reduced_sync.py) or globs")
    parser.add_argument("--out", default="compare_runs.png", help="path of the PNG (default: compare_runs.png)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--stats", action="store_true",
                        help="also print statistics over seeds per (setting, policy) and the verdict sentence")
    parser.add_argument("--trend", default=None, metavar="PNG",
                        help="write the trend plot (gap to baseline vs syncs per forward) here; implies --stats")
    parser.add_argument("--stats-json", default=None, metavar="FILE",
                        help="write the statistics and the verdict's numbers as JSON; implies --stats")
    parser.add_argument("--margin", type=ascii_float, default=MARGIN, metavar="PCT",
                        help=f"equivalence margin in %% of the baseline's val loss (default {MARGIN:g}); state it "
                             f"before looking at the runs")
    parser.add_argument("--metric", choices=("final", "best"), default="final",
                        help="the val loss the verdict sentence uses (default final; see the module docstring)")
    parser.add_argument("--budgets", default=None, metavar="PNG",
                        help="runs of several budgets (max_iters): the gap against training tokens per policy, its "
                             "fitted slope, crossover and extrapolation (a table), and this plot; implies --stats")
    parser.add_argument("--versus", default=None, metavar="GLOB",
                        help="other runs of the same policies, seeds and budgets (e.g. another schedule): each "
                             "policy's paired gap here minus its gap there, seed by seed, with a 95%% t-interval")
    args = parser.parse_args(argv)
    try:
        check_out(args.out)
        for flag, path in (("--trend", args.trend), ("--budgets", args.budgets)):
            if path:
                check_out(path, flag)
        if args.stats_json:
            check_out(args.stats_json, "--stats-json", formats=None)
        if not args.margin > 0:  # before any work (--margin is only used with the statistics)
            raise RunError(f"--margin={args.margin}: must be > 0 (a percentage of the baseline's val loss)")
        skipped = []
        runs = [load_run(d) for d in expand(args.runs, skipped)]
        other_runs = [load_run(d) for d in expand([args.versus], skipped)] if args.versus else None
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if skipped:  # stderr: stdout may be a markdown table (experiments/shakespeare_sweep/run.sh tees it)
        print(skipped_note(skipped), file=sys.stderr)
    refs, reference_lines = baseline_references(runs)
    header, rows = table_rows(runs, refs)
    print(format_table(header, rows, args.markdown))
    print("\n" + "\n".join(reference_lines))
    print("one run per row: no verdict here; --stats gives the paired tests over seeds")
    if len({r["final_iter"] for r in runs}) > 1:
        print("note: the runs end at different iterations; compare final losses with care")
    timing = timing_lines(runs)
    if timing:
        print("\n".join(timing))
    plot(runs, args.out, args.margin, bands=bool(args.stats or args.trend or args.stats_json or args.budgets))
    print(f"wrote {args.out}")
    if args.stats or args.trend or args.stats_json or args.budgets:
        text, stats, analysis, verdict = stats_report(runs, f"{args.metric}_val", args.markdown, args.margin)
        print(text)
        if args.trend:
            plot_trend(stats, args.trend)
            print(f"wrote {args.trend}")
        budgets = None
        if args.budgets:
            budgets = budget_analysis(stats, f"{args.metric}_val")
            if not budgets:
                print(f"error: --budgets={args.budgets!r}: no policy here has runs paired with a baseline's (same "
                      f"setting and seed) to draw against the budget; nothing written there", file=sys.stderr)
                return 1
            print("\ngap against the training budget (final val loss):\n" + budget_table(budgets, args.margin))
            plot_budgets(budgets, args.budgets, args.margin)
            print(f"wrote {args.budgets}")
        if other_runs is not None:
            print("\n" + versus_table(versus(runs, other_runs, f"{args.metric}_val", margin=args.margin), args.versus))
        if args.stats_json:
            payload = json.dumps({"stats": stats, "trend": analysis, "verdict": verdict, "budgets": budgets}, indent=1)
            write_text(args.stats_json, payload)
            print(f"wrote {args.stats_json}")
    return 0


if __name__ == "__main__":
    from training.atomic import one_line_write_errors
    from training.cli import guarded
    sys.exit(guarded(one_line_write_errors(main)))
