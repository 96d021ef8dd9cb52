"""Compare training runs: a table of loss vs synchronization, and a trade-off plot.

    python compare_runs.py out-shakespeare-*                  # dirs or quoted globs
    python compare_runs.py 'out-*' --markdown --out plots/tradeoff.png

Each run dir needs config.json and metrics.jsonl (written by train_reduced_sync.py); log.txt is
read when metrics.jsonl is missing. For every run the table shows: the sync policy, syncs/fwd as
MEASURED in the run (parallel.comm's count of forward all-reduces, logged at each eval), final
and best val loss, both relative to the baseline in %, whether the best val loss is a tie
with the baseline within its seed noise (2 std), and the median of the logged tokens/s. The baseline is the mean over runs whose sync_policy is 'baseline' (several
seeds: their standard deviation is printed as the noise level); with none, the first run.
A resumed run logs some iterations twice: the later line wins.

The PNG (matplotlib, no display needed): left, best val loss against syncs per forward (the
trade-off curve, one labelled point per run); right, the val-loss curves of all runs.
"""
import argparse
import glob
import io
import json
import os
import re
import statistics
import sys

from configurator import OneLineArgumentParser, atomic_write

# [0-9], not \d: digits are ASCII only (\d would also match e.g. Arabic-Indic digits)
EVAL_LINE = re.compile(r"^step ([0-9]+): train loss ([0-9.eE+-]+|nan|inf), val loss ([0-9.eE+-]+|nan|inf), "
                       r"syncs/fwd (\S+)")
TRAIN_LINE = re.compile(r"^iter ([0-9]+): loss ([0-9.eE+-]+|nan|inf), time ([0-9.]+)ms, tok/s ([0-9,]+)")
PLOT_FORMATS = ("png", "pdf", "svg")


class RunError(Exception):
    pass


def expand(patterns):
    """Dirs from arguments that may be globs (quoted, so the shell left them alone); order kept, no
    repeats. Plain files are skipped, so `compare_runs.py sweep/*` works beside a sweep's other
    outputs (plots, tables)."""
    dirs = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise RunError(f"no run directory matches {pattern!r}")
        for path in matches:
            if os.path.isfile(path):
                continue
            if path not in dirs:
                dirs.append(path)
    if not dirs:
        raise RunError(f"no run directory among {' '.join(patterns)}")
    return dirs


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
        if not _number(record.get("val_loss")):
            raise bad(f"'val_loss' is {record.get('val_loss')!r}, not a number")
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
    if os.path.exists(metrics_path):
        records = []
        for lineno, line in enumerate(read_lines(metrics_path), 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # blank, or cut short by a killed run
            check_record(record, metrics_path, lineno)
            records.append(record)
    elif os.path.exists(log_path):
        records = records_from_log(log_path)
    else:
        raise RunError(f"{run_dir}: no metrics.jsonl or log.txt (has the run started?)")
    evals = {r["iter"]: r for r in records if r["type"] == "eval"}  # the later line of a resumed run wins
    train = {r["iter"]: r for r in records if r["type"] == "train"}
    if not evals:
        raise RunError(f"{run_dir}: no evaluation logged yet")
    iters = sorted(evals)
    syncs = [evals[i].get("syncs_per_fwd") for i in iters if evals[i].get("syncs_per_fwd") is not None]
    tok_per_s = [r["tok_per_s"] for r in train.values() if r.get("tok_per_s")]
    return {
        "name": os.path.basename(os.path.normpath(run_dir)),
        "dir": run_dir,
        "policy": str(config.get("sync_policy", "?")),
        "seed": config.get("seed"),
        "syncs": syncs[-1] if syncs else None,
        "final_iter": iters[-1],
        "final_val": evals[iters[-1]]["val_loss"],
        "best_val": min(evals[i]["val_loss"] for i in iters),
        "curve": [(i, evals[i]["val_loss"]) for i in iters],
        "tok_per_s": statistics.median(tok_per_s) if tok_per_s else None,
    }


def baseline_stats(runs, key="final_val"):
    """(mean of `key` over the baseline runs, std or None, description), or the first run's value."""
    base = [r for r in runs if r["policy"] == "baseline"]
    if not base:
        return runs[0][key], None, f"first run ({runs[0]['name']}; no 'baseline' policy among the runs)"
    values = [r[key] for r in base]
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None
    noise = f", std {std:.4f} = {100 * std / mean:.2f}% (run-to-run noise)" if std is not None else ""
    return mean, std, f"{key.replace('_', ' ')}: mean of {len(values)} baseline run(s): {mean:.4f}{noise}"


def table_rows(runs, final_base, best_base, best_std=None):
    """Δ columns are relative to the baseline mean; with a seed std, |Δ best| <= 2 std is a tie."""
    header = ["run", "policy", "syncs/fwd", "final iter", "final val", "best val", "Δ final vs base",
              "Δ best vs base", "vs noise", "tok/s"]
    rows = []
    for r in runs:
        delta = 100 * (r["final_val"] - final_base) / final_base
        delta_best = 100 * (r["best_val"] - best_base) / best_base
        verdict = ("" if not best_std else
                   "tie" if abs(r["best_val"] - best_base) <= 2 * best_std else
                   "better" if r["best_val"] < best_base else "worse")
        rows.append([r["name"], r["policy"], "?" if r["syncs"] is None else str(r["syncs"]), str(r["final_iter"]),
                     f"{r['final_val']:.4f}", f"{r['best_val']:.4f}", f"{delta:+.2f}%", f"{delta_best:+.2f}%",
                     verdict, "?" if r["tok_per_s"] is None else f"{r['tok_per_s']:,.0f}"])
    return header, rows


def format_table(header, rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows])


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    points = [r for r in runs if r["syncs"] is not None]
    for r in points:
        left.scatter(r["syncs"], r["best_val"], color="tab:red" if r["policy"] == "baseline" else "tab:blue")
        left.annotate(r["name"], (r["syncs"], r["best_val"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    # The trade-off curve: the best loss reached at each sync count.
    best = {}
    for r in points:
        best[r["syncs"]] = min(best.get(r["syncs"], float("inf")), r["best_val"])
    if len(best) > 1:
        xs = sorted(best)
        left.plot(xs, [best[x] for x in xs], color="gray", linestyle="--", linewidth=1)
    base = [r["best_val"] for r in runs if r["policy"] == "baseline"]
    if len(base) > 1:  # the seed-to-seed noise of the baseline, as a band
        mean, std = statistics.fmean(base), statistics.stdev(base)
        left.axhspan(mean - std, mean + std, color="tab:red", alpha=0.1, label="baseline mean ± std")
        left.legend(fontsize=7)
    left.set_xlabel("all-reduces per forward pass (measured)")
    left.set_ylabel("best val loss")
    left.set_title("loss vs synchronization (red: baseline)")
    left.grid(alpha=0.3)
    for r in runs:
        iters, losses = zip(*r["curve"])
        right.plot(iters, losses, marker=".", label=f"{r['name']} ({r['syncs']} syncs)")
    right.set_xlabel("iteration")
    right.set_ylabel("val loss")
    right.set_title("validation loss")
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=120, format=os.path.splitext(path)[1][1:].lower())
    plt.close(fig)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))  # no half-written PNG if interrupted


def check_out(path):
    """RunError unless `path` can take the plot: a known format, not a directory, under no file."""
    ext = os.path.splitext(path)[1][1:].lower()
    if ext not in PLOT_FORMATS:
        raise RunError(f"--out={path!r}: the file name must end in {', '.join('.' + e for e in PLOT_FORMATS)}")
    if os.path.isdir(path):
        raise RunError(f"--out={path!r} is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise RunError(f"--out={path!r}: {parent} is a file, not a directory")


def main(argv=None):
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (out_dir of train_reduced_sync.py) or globs")
    parser.add_argument("--out", default="compare_runs.png", help="path of the PNG (default: compare_runs.png)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = parser.parse_args(argv)
    try:
        check_out(args.out)
        runs = [load_run(d) for d in expand(args.runs)]
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    final_base, _, final_desc = baseline_stats(runs, "final_val")
    best_base, best_std, best_desc = baseline_stats(runs, "best_val")
    header, rows = table_rows(runs, final_base, best_base, best_std)
    print(format_table(header, rows, args.markdown))
    print(f"\nbaseline {final_desc}\nbaseline {best_desc}")
    if best_std:
        print("vs noise: 'tie' when |best val - baseline mean| <= 2 x the baseline seeds' std")
    if len({r["final_iter"] for r in runs}) > 1:
        print("note: the runs end at different iterations; compare final losses with care")
    plot(runs, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
