"""gpu.sh branchcheck's report: a WSD branch trained by its trunk's process (the trainer's branches=) against the same
branch trained in a process of its own, both from the trunk's checkpoint at the branch point.

    python -m experiments.large_budgets.branch_check DIR T0 T1 T2

DIR holds the two branches' out_dirs, inline/ and own/; T0, T1, T2 are the launch time of the trunk's process (which
trains the inline branch after the trunk), the end of that process (the launch of the own branch's) and the end of
the own branch's process, in seconds since the epoch. Printed: each logged train loss of the two branches and the
largest difference, their final val losses, and the seconds: the own process from launch to exit and its loop (its
summary's 'seconds', which hold the compile: the first eval and iteration wait for it), the inline branch's loop
(compiled already). What a branch in the trunk's process spares is the own process's wall time less the inline
loop's (the inline branch's own setup, reading the checkpoint and claiming its out_dir, is left in: about a second
at width 768).
"""
import os
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run it from the repository root as: python -m experiments.large_budgets.branch_check " + " ".join(sys.argv[1:]))

from experiments.runner import read_records  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser  # noqa: E402


def branch_record(run_dir):
    """(train losses {iter: loss}, final val loss, loop seconds, device name) of a branch's metrics.jsonl."""
    records = read_records(os.path.join(run_dir, "metrics.jsonl"))
    losses = {r["iter"]: r["loss"] for r in records if r.get("type") == "train"}
    summary = next((r for r in records if r.get("type") == "summary"), {})
    device = next((r.get("device_name") for r in records if r.get("type") == "layout"), None)
    return losses, summary.get("final_val"), summary.get("seconds"), device


def report(folder, t0, t1, t2):
    """The lines of the report (see the module's docstring)."""
    inline, own = (branch_record(os.path.join(folder, name)) for name in ("inline", "own"))
    common = sorted(set(inline[0]) & set(own[0]))
    lines = [f"device: {own[3] or inline[3] or 'not logged'}",
             "iter  inline loss  own loss  difference"]
    lines += [f"{it:>4}  {inline[0][it]:.6f}  {own[0][it]:.6f}  {inline[0][it] - own[0][it]:+.2e}" for it in common]
    largest = max((abs(inline[0][it] - own[0][it]) for it in common), default=None)
    lines.append(f"largest train-loss difference over {len(common)} logged iterations: "
                 + ("none logged in both" if largest is None else f"{largest:.2e}"))
    if inline[1] is not None and own[1] is not None:
        lines.append(f"final val loss: inline {inline[1]:.6f}, own {own[1]:.6f} ({inline[1] - own[1]:+.2e})")
    own_wall = t2 - t1
    lines.append(f"trunk's process, with the inline branch: {t1 - t0:.1f} s from launch to exit")
    if own[2] is not None and inline[2] is not None:
        lines.append(f"own branch's process: {own_wall:.1f} s from launch to exit, its loop {own[2]:.1f} s with the "
                     f"compile; the inline branch's loop {inline[2]:.1f} s, compiled already: a branch trained in its "
                     f"trunk's process spares {own_wall - inline[2]:.1f} s")
    return lines


def main(argv=None):
    parser = OneLineArgumentParser(prog="python -m experiments.large_budgets.branch_check", formatter_class=HelpFormatter,
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the folder that holds inline/ and own/")
    for name in ("t0", "t1", "t2"):
        parser.add_argument(name, type=float, help="seconds since the epoch (see the module's docstring)")
    args = parser.parse_args(argv)
    if not args.t0 <= args.t1 <= args.t2:
        parser.error(f"times {args.t0:g}, {args.t1:g}, {args.t2:g}: T0 <= T1 <= T2 (launch, end of the trunk's process, "
                     f"end of the own branch's)")
    missing = [name for name in ("inline", "own") if not os.path.isfile(os.path.join(args.folder, name, "metrics.jsonl"))]
    if missing:
        parser.error(f"{args.folder!r} lacks {' and '.join(f'{m}/metrics.jsonl' for m in missing)}: give the folder "
                     f"that gpu.sh branchcheck trained both branches in")
    print("\n".join(report(args.folder, args.t0, args.t1, args.t2)))
    return 0


if __name__ == "__main__":
    from cli_guard import guarded
    sys.exit(guarded(main))
