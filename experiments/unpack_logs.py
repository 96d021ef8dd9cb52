"""Unpack a pack of scratch's run logs (experiments/large_budgets/gpu.sh collect writes scratch-logs.tgz) into the
sweep dirs here, never replacing a stored file.

    python -m experiments.unpack_logs scratch-logs.tgz             # store every run it holds
    python -m experiments.unpack_logs scratch-logs.tgz --dry_run   # say what it would store, write nothing

The pack holds <flat>/<run>/{config.json, log.txt, metrics.jsonl} and <flat>/<run>.out (the run's stdout, left
out), where <flat> is a sweep dir with its separators written as '_' (runner.Run.scratch_dir) and <flat>/SWEEP_DIR
names that sweep dir (runner.mark_sweep_dir; for a pack made before it, the one folder under experiments/ whose
flattened path is <flat>). A run that finished (runner.finished: the eval at its config's max_iters, or the trainer
stopped it as diverged) goes to <sweep dir>/<run>/, one that did not to <the sweep dir's parent>/stopped/<run>/. A
file already stored with the same bytes is left as it is; a run with any file stored with other bytes is not
touched and is named (exit 1): stored results are never rewritten. Each file is written whole (a temporary name,
then a rename).
"""
import json
import os
import posixpath
import sys
import tarfile

if __name__ == "__main__" and not __package__:
    sys.exit("run it from the repository root as: python -m experiments.unpack_logs " + " ".join(sys.argv[1:]))

from atomic_files import atomic_write  # noqa: E402
from experiments.runner import RUN_LOGS, SWEEP_MARK, finished_records, parse_records  # noqa: E402
from training.config import REPO, HelpFormatter, OneLineArgumentParser  # noqa: E402


class UnpackError(Exception):
    """One line; exit 2."""


def read_pack(path):
    """{flat: {"mark": sweep dir or None, "runs": {run: {log name: bytes}}}} of the pack's members that matter."""
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as e:
        raise UnpackError(f"{path}: not a readable tar pack ({e})") from None
    folders = {}
    with tar:
        for member in tar.getmembers():
            name = posixpath.normpath(member.name)
            parts = name.split("/")
            if not member.isfile() or name.startswith("/") or ".." in parts or len(parts) not in (2, 3):
                continue  # links, folders, anything outside <flat>/...: never written
            folder = folders.setdefault(parts[0], {"mark": None, "runs": {}})
            if len(parts) == 2 and parts[1] == SWEEP_MARK:
                folder["mark"] = tar.extractfile(member).read().decode(errors="replace").strip()
            elif len(parts) == 3 and parts[2] in RUN_LOGS:
                folder["runs"].setdefault(parts[1], {})[parts[2]] = tar.extractfile(member).read()
    return {flat: f for flat, f in folders.items() if f["runs"]}


def sweep_dir_of(flat, mark, root):
    """The repository-relative sweep dir of a pack folder: its SWEEP_DIR, else the one match under experiments/."""
    if mark is not None:
        norm = posixpath.normpath(mark)
        if norm.startswith("/") or ".." in norm.split("/") or norm.replace("/", "_") != flat:
            raise UnpackError(f"{flat}/{SWEEP_MARK} says {mark!r}, which is not the folder's path")
        return norm
    matches = [os.path.relpath(d, root).replace(os.sep, "/") for d, _, _ in os.walk(os.path.join(root, "experiments"))
               if os.path.relpath(d, root).replace(os.sep, "_") == flat]
    if len(matches) != 1:
        raise UnpackError(f"{flat}: the pack has no {SWEEP_MARK} and {len(matches)} folders here match its name; "
                          f"make the sweep dir first, or unpack by hand")
    return matches[0]


def run_finished(logs):
    try:
        max_iters = json.loads(logs["config.json"])["max_iters"]
    except (KeyError, ValueError, TypeError):
        return None
    return finished_records(parse_records(logs.get("metrics.jsonl", b"").decode(errors="replace").splitlines()),
                            max_iters)


def unpack(path, root=REPO, dry_run=False, say=print):
    """Store the pack's runs under root; returns the runs left untouched because a stored file differs."""
    conflicts = []
    for flat, folder in sorted(read_pack(path).items()):
        sweep = sweep_dir_of(flat, folder["mark"], root)
        for run, logs in sorted(folder["runs"].items()):
            state = run_finished(logs)
            where = posixpath.join(sweep if state else posixpath.join(posixpath.dirname(sweep), "stopped"), run)
            target = os.path.join(root, *where.split("/"))
            stored = {n: open(os.path.join(target, n), "rb").read() for n in logs
                      if os.path.isfile(os.path.join(target, n))}
            differ = sorted(n for n, data in stored.items() if data != logs[n])
            if differ:
                conflicts.append(where)
                say(f"left as stored: {where} ({', '.join(differ)} differ from the pack's)")
                continue
            new = sorted(n for n in logs if n not in stored)
            if not new:
                say(f"already stored: {where}")
                continue
            say(f"{'would store' if dry_run else 'stored'} {where} ({state or 'not finished'}: {', '.join(new)})")
            if dry_run:
                continue
            os.makedirs(target, exist_ok=True)
            for name in new:
                atomic_write(os.path.join(target, name), lambda f, data=logs[name]: f.write(data))
    return conflicts


def main(argv=None):
    parser = OneLineArgumentParser(prog="python -m experiments.unpack_logs", formatter_class=HelpFormatter,
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("pack", help="a .tgz of scratch's logs (gpu.sh collect: scratch-logs.tgz)")
    parser.add_argument("--root", default=REPO, help="the repository to store into")
    parser.add_argument("--dry_run", action="store_true", help="say what would be stored; write nothing")
    args = parser.parse_args(argv)
    try:
        conflicts = unpack(args.pack, args.root, args.dry_run)
    except UnpackError as e:
        parser.error(str(e))
    return 1 if conflicts else 0


if __name__ == "__main__":
    from cli_guard import guarded
    sys.exit(guarded(main))
