"""Every policy's saving against three baselines, from bench.train_throughput's JSON files: plain TP, TP with sequence
parallelism (SP), and TP with overlapped communication (SP with chunked, chunked:K or async_tp, or plain TP with the
async input-gradient all-reduce, --tp_async_grad on: the fastest that ran).

    python -m bench.comm_table bench/results/tp4_comm_h200/invocation4_four_policies_graphs.json ...
    python -m bench.comm_table FILES... --out table.md     # also writes the table (never over a file: --force)

Each file is one invocation: its rows were timed side by side on the same GPUs, so a ratio is only ever taken
inside one file. Per file, n_tracks and mode, from the tp rows (no floors, no failed rows; an async-grad row under
SP is the SP row again, since the model turns async_grad off there, and is left out):

    ms(p, c)    the policy p's median ms per iteration with communication c (off, sp, sp+chunked, sp+async_tp,
                async_grad: plain TP with --tp_async_grad on)
    best(p)     min over c of ms(p, c): the policy's fastest exact mode
    saving(p, B) = 1 - best(p) / B, for B each baseline row: ms(baseline, off), ms(baseline, sp),
                 the fastest of its rows with an overlap (sp+chunked, sp+chunked:K, sp+async_tp, async_grad), and
                 best(baseline), the strongest baseline measured in that file

A cell is blank where the file has no such row (not run, or failed: the file's markdown keeps the error). With
--floors rows in a file (bench.train_throughput --floors), the last column is the policy's fastest row minus its
no-sync floor: what the communication it keeps still costs, in ms.
"""
import json
import os
import sys

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.comm_table " + " ".join(sys.argv[1:]))

from bench.throughput.report import FLOOR_TAG, comm_mode, fastest_rows, timed_ms  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser, write_text  # noqa: E402

PLAIN = ("off", "sp")  # every other mode overlaps (SP with chunked, chunked:K, async_tp; plain TP with async_grad)


def read_invocation(path):
    """(meta, rows) of one bench.train_throughput JSON; ValueError, one line, for a file that is not one."""
    try:
        with open(path) as f:
            data = json.load(f)
        meta, rows = data["meta"], data["rows"]
        if not isinstance(rows, list):
            raise TypeError
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror})") from None
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path}: not a bench.train_throughput JSON (no meta and rows)") from None
    return meta, rows


def invocation_rows(path):
    """The table's rows of one file: one per (n_tracks, mode, policy) with its ms per communication mode."""
    meta, rows = read_invocation(path)
    floors = {r["name"]: timed_ms(r) for r in rows if r.get("floor")}
    fastest = fastest_rows(rows, with_async=True)
    cells = {}
    for r in rows:
        comm = comm_mode(r)
        if r.get("group") != "tp2" or r.get("floor") or comm is None:
            continue
        key = (r["n_tracks"], r["mode"], r["policy"])
        cell = cells.setdefault(key, {"syncs": r.get("syncs_per_forward"), "ms": {}, "floor": {}})
        cell["ms"][comm] = timed_ms(r)
        cell["floor"][comm] = floors.get(r["name"] + FLOOR_TAG)
    out = []
    for (n_tracks, mode, policy), cell in cells.items():
        base = cells.get((n_tracks, mode, "baseline"))
        best_row, strongest = fastest.get((n_tracks, policy, mode)), fastest.get((n_tracks, "baseline", mode))
        best = comm_mode(best_row) if best_row else None
        row = {"file": path, "size": meta.get("size"), "tp": meta.get("world_size"), "device": meta.get("device"),
               "commit": meta.get("commit"), "n_tracks": n_tracks, "mode": mode, "policy": policy,
               "syncs": cell["syncs"], "ms": cell["ms"], "best": best, "best_ms": best_row and best_row["ms"],
               "comm_ms": None, "savings": {}}
        if best is not None and cell["floor"].get(best) is not None:
            row["comm_ms"] = best_row["ms"] - cell["floor"][best]
        if base is not None and best is not None:
            b = {c: ms for c, ms in base["ms"].items() if ms is not None}
            overlapped = [ms for c, ms in b.items() if c not in PLAIN]
            for name, ms in (("plain TP", b.get("off")), ("TP + SP", b.get("sp")),
                             ("overlap", min(overlapped) if overlapped else None),
                             ("strongest", strongest and strongest["ms"])):
                if ms is not None:
                    row["savings"][name] = 1 - best_row["ms"] / ms
        out.append(row)
    return out


def render(rows):
    lines = ["| size | tp | file | mode | policy | syncs/fwd | ms: plain TP / + SP / fastest overlap | fastest | saving "
             "against plain TP | against TP + SP | against the fastest overlap | against the strongest | communication "
             "ms (fastest - floor) |", "|---|---:|---|---|---|---:|---|---|---:|---:|---:|---:|---:|"]

    def timed(r, comm):  # '-' not run, 'error' failed (the file's markdown has the error)
        return "-" if comm not in r["ms"] else "error" if r["ms"][comm] is None else f"{r['ms'][comm]:.3f}"

    def pct(value):
        return "" if value is None else f"{100 * value:.1f}%"
    for r in rows:
        ran = [c for c, ms in r["ms"].items() if c not in PLAIN and ms is not None]
        overlap = min(ran, key=lambda c: r["ms"][c]) if ran else None
        over = f"{r['ms'][overlap]:.3f} ({overlap})" if overlap else (
            "error" if any(c not in PLAIN for c in r["ms"]) else "-")
        fastest = {None: "", "off": "plain TP", "sp": "TP + SP", "async_grad": "plain TP + async_grad"}.get(
            r["best"], f"TP + SP + {r['best']}")
        savings = [pct(r["savings"].get(k)) for k in ("plain TP", "TP + SP", "overlap", "strongest")]
        comm = "" if r["comm_ms"] is None else f"{r['comm_ms']:.3f}"
        lines.append(f"| {r['size']} | {r['tp']} | {os.path.basename(r['file'])} | {r['mode']} | {r['policy']} | "
                     f"{r['syncs']} | {timed(r, 'off')} / {timed(r, 'sp')} / {over} | {fastest} | "
                     f"{' | '.join(savings)} | {comm} |")
    devices = sorted({f"{r['device']} x {r['tp']}" for r in rows})
    commits = sorted({str(r["commit"]) for r in rows})
    lines += ["", f"Devices: {', '.join(devices)}; code: {', '.join(commits)}. Each saving is 1 - the policy's "
              "fastest row / the baseline's row of the same file, n_tracks and mode (the baseline's own row: what its "
              "fastest mode gains over each); blank where that row was not run or failed (`python -m bench.comm_table`)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = OneLineArgumentParser(prog="python -m bench.comm_table", formatter_class=HelpFormatter,
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="bench.train_throughput JSON files, one invocation each")
    parser.add_argument("--out", default=None, help="also write the table to this markdown file")
    parser.add_argument("--force", action="store_true", help="let --out replace an existing file")
    args = parser.parse_args(argv)
    if args.out and os.path.exists(args.out) and not args.force:
        parser.error(f"--out {args.out!r} exists; give a new path, or --force to replace it")
    rows = []
    for path in args.files:
        try:
            rows += invocation_rows(path)
        except ValueError as e:
            parser.error(str(e))
    if not rows:
        parser.error(f"no tp rows in {', '.join(args.files)}: give bench.train_throughput JSONs of a tp run")
    text = render(rows)
    print(text, end="")
    if args.out:
        write_text(args.out, text)
    return 0


if __name__ == "__main__":
    from cli_guard import guarded
    sys.exit(guarded(main))
