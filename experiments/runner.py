"""The resumable runner of the studies' sweeps: a list of training runs, several at once on one machine's
GPUs, each in its own process of train_reduced_sync.py. experiments/char_sweep/run.py (the grids of parts)
and experiments/docs_study/run.py (the budget chains: a trunk, then its branches) build the runs.

Resumable. A run is done when <sweep dir>/<name>/metrics.jsonl has the eval at max_iters (or the
trainer stopped it as diverged) and its config.json equals the planned config (out_dir, init_from,
always_save_checkpoint and wandb keys aside); done runs are skipped, and a done run with another config
is an error (this keeps every run of a sweep directory on one schedule). A run trains in a scratch
out_dir (--scratch, default out-sweep/, git-ignored) with a checkpoint at every eval; a run whose
scratch holds ckpt.pt resumes from it (the trainer's data order is stateless), so on a machine that
stays up, repeating a command cut by its deadline continues where it stopped. When a run finishes, its config.json, log.txt
and metrics.jsonl are copied to the sweep directory and its checkpoints are deleted: no checkpoint ever
lands under experiments/. The three logs stay in scratch, so a later command on the same machine whose
working tree lacks them (the device tool sends a fresh tree with every command) collects them instead
of training the run again.

--hold SECONDS: the machine is given back that long after the sweep starts; a run is started only when it is expected
to end before then (experiments/run_time.py, from the stored runs like it), since a run cut there loses its
checkpoints with the machine. Runs without an estimate start as they would without it. The sweep first picks, for
each of its --jobs GPUs, the chains that fill its hold nearly best, the grid's earlier ones first (experiments/hold.py's
hold_plan: a run of a kept chain starts on its GPU only, one at a time there), and leaves the others out.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

from tqdm import tqdm

from atomic_files import folder_problem, replace_problem, replace_target
from experiments.hold import hold_check, hold_plan, run_estimate, trunk_of
from training.config import REPO, ConfigError, TrainConfig, branch_list, parse, write_text  # (no torch import)

TRAIN_SCRIPT = os.path.join(REPO, "train_reduced_sync.py")
# config.json keys that may differ between a done run and the plan (they do not change what is computed)
IGNORED_KEYS = {"out_dir", "data_dir", "init_from", "branch_from", "overwrite", "always_save_checkpoint", "keep_best",
                "checkpoint_every", "save_iters", "wandb_log", "wandb_project", "wandb_run_name",
                "stall_timeout", "log_layer_grad_norms", "branches"}  # how a run is kept, logged and launched
PACK_NAME = "sweep-logs.tgz"


class SweepError(Exception):
    """Reported in one line; exit code 1."""


class Run:
    """One training run of the grid: where its logs go, and the trainer's arguments but the out_dir."""

    def __init__(self, name, sweep_dir, args, policy, seed, group, tag=None, needs=None, keep=(), after=None):
        """needs: a file that must exist before the run starts (a branch's trunk checkpoint), removed once the
        run is collected; keep: names in its scratch dir that collecting it leaves there (a trunk's branch
        points, until their branches have run); after: the name of a run that must have ended first (a trunk
        that trains this branch itself, the trainer's branches=: then it is only collected). branch_items: a
        trunk's {branch point name: the trainer's branches= item} for the branches its process trains, set by
        the sweep that makes it (experiments/docs_study/run.py)."""
        self.name, self.sweep_dir, self.args = name, sweep_dir, list(args)
        self.policy, self.seed, self.group, self.tag = policy, seed, group, tag
        self.needs, self.keep, self.after = needs, set(keep), after
        self.branch_items = {}

    def final_dir(self, root):
        return os.path.join(root, self.sweep_dir, self.name)

    def scratch_dir(self, scratch):
        return os.path.join(scratch, self.sweep_dir.replace(os.sep, "_"), self.name)

    def argv(self, scratch, extra=()):
        # data_dir: the trainers' cwd is WORKDIR (chdir'd), whose data/ holds the datasets, unless the sweep names
        # a root of its own (--set data_dir=...: a width's corpus prefix beside another's on the same machine)
        own = any(a.startswith("--data_dir=") for a in self.args)
        return [*self.args, *extra, f"--out_dir={self.scratch_dir(scratch)}", *([] if own else ["--data_dir=data"])]


# ---------------------------------------------------------------- the state of a run
def planned_config(run, scratch):
    """The TrainConfig dict the trainer will record for this run (config file + overrides)."""
    try:
        return parse(run.argv(scratch)).to_dict()
    except ConfigError as e:
        raise SweepError(f"{run.name}: {e}") from None


def read_records(path):
    try:
        with open(path, encoding="utf-8") as f:
            return parse_records(f)
    except OSError:
        return []


def parse_records(lines):
    """The JSON objects of a metrics.jsonl's lines; a line cut short by a killed run is skipped."""
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def finished(run_dir, max_iters):
    """'complete' (eval at max_iters logged, or an end record that finished there: 'summary' with finished true,
    or a 'done' of a run logged before issue 42), 'diverged' (the trainer stopped it), or None. A run stopped by a
    signal ends with a 'summary' record too (finished false, iter < max_iters): not complete, it is resumed."""
    return finished_records(read_records(os.path.join(run_dir, "metrics.jsonl")), max_iters)


def finished_records(records, max_iters):
    """finished() of a run's metrics records."""
    if any(r.get("type") == "eval" and r.get("iter") == max_iters for r in records):
        return "complete"
    if any(r.get("type") in ("summary", "done") and r.get("finished", True) is True and r.get("iter") == max_iters
           for r in records):
        return "complete"
    if any(r.get("type") == "error" for r in records):
        return "diverged"
    return None


def config_mismatch(run_dir, planned):
    """Keys whose value in run_dir/config.json differs from the plan (IGNORED_KEYS aside)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return ["config.json (missing or unreadable)"]
    # a key the trainer gained after a run was stored counts as its default (the only behaviour there was)
    defaults = TrainConfig().to_dict()
    return sorted(k for k in planned if k not in IGNORED_KEYS and stored.get(k, defaults.get(k)) != planned[k])


def run_state(run, root, scratch):
    """'done', 'collect' (finished in scratch, logs not copied yet), 'resume' (scratch has ckpt.pt) or
    'start'. SweepError if the sweep directory holds this run with another config."""
    planned = planned_config(run, scratch)
    final, tmp = run.final_dir(root), run.scratch_dir(scratch)
    if run.keep and not all(os.path.exists(os.path.join(tmp, name)) for name in run.keep):
        # a trunk whose branch points are gone (another machine) is trained again for the branches that need them
        if finished(final, planned["max_iters"]) or finished(tmp, planned["max_iters"]):
            return "start"
    if finished(final, planned["max_iters"]):
        diff = config_mismatch(final, planned)
        if diff:
            raise SweepError(f"{final} holds a finished run whose config differs from the plan in {diff}: "
                             f"move it away, or use another --root or --set")
        return "done"
    if finished(tmp, planned["max_iters"]) and not config_mismatch(tmp, planned):
        return "collect"
    if os.path.exists(os.path.join(tmp, "ckpt.pt")) and not config_mismatch(tmp, planned):
        return "resume"
    return "start"


RUN_LOGS = ("config.json", "log.txt", "metrics.jsonl")
SWEEP_MARK = "SWEEP_DIR"  # in each scratch folder: the sweep dir (repository-relative) its runs belong to


def mark_sweep_dir(run, scratch):
    """Make the run's scratch folder and name in it the sweep dir its runs belong to, for a pack of scratch's logs
    unpacked elsewhere (experiments/unpack_logs.py): the folder's name flattens the path's separators."""
    folder = os.path.dirname(run.scratch_dir(scratch))
    os.makedirs(folder, exist_ok=True)
    mark = os.path.join(folder, SWEEP_MARK)
    if not os.path.exists(mark):
        write_text(mark, run.sweep_dir + "\n")


def collect(run, root, scratch):
    """Copy the logs of a finished run from scratch into the sweep dir and delete everything else in its
    scratch dir (the checkpoints). The logs stay in scratch: the device tool sends a fresh working tree
    with every command, and a later command on the same machine collects them again, not retrains."""
    tmp, final = run.scratch_dir(scratch), run.final_dir(root)
    os.makedirs(final, exist_ok=True)
    for name in RUN_LOGS:
        src = os.path.join(tmp, name)
        if os.path.exists(src):
            target = replace_target(os.path.join(final, name))  # a regular file or nothing: never a FIFO or device
            shutil.copyfile(src, target + ".tmp")
            os.replace(target + ".tmp", target)
    for name in os.listdir(tmp):
        if name not in RUN_LOGS and name not in run.keep:
            path = os.path.join(tmp, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    if run.needs and os.path.exists(run.needs):  # a branch point serves one branch
        os.remove(run.needs)


def progress(run, scratch):
    """(last logged iteration, median ms/iter of the logged train records) of a running run."""
    records = read_records(os.path.join(run.scratch_dir(scratch), "metrics.jsonl"))
    train = [r for r in records if r.get("type") == "train" and isinstance(r.get("time_ms"), (int, float))]
    if not train:
        return None, None
    times = sorted(r["time_ms"] for r in train)
    return train[-1].get("iter"), times[len(times) // 2]


def in_trunk_branch(run, scratch, max_iters):
    """(budget, last logged iteration) of the branch a trunk's own process trains now (the trainer's branches=),
    once the trunk has reached max_iters; None otherwise."""
    if not any(a.startswith("--branches=") for a in run.args) or not finished(run.scratch_dir(scratch), max_iters):
        return None
    under_way = None
    for budget, out_dir in branch_list(parse(run.argv(scratch))):  # in budget order, as the trainer trains them
        train = [r for r in read_records(os.path.join(out_dir, "metrics.jsonl")) if r.get("type") == "train"]
        if train:
            under_way = (budget, train[-1].get("iter"))
    return under_way


# ---------------------------------------------------------------- running
def cuda_count():
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def visible_gpu_ids(n_gpus):
    """The ids to put in a child's CUDA_VISIBLE_DEVICES for GPUs 0 .. n_gpus-1 as this process counts them: the
    parent's own list when it was narrowed (CUDA_VISIBLE_DEVICES=2,3 makes GPU 0 here physical GPU 2)."""
    narrowed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return narrowed[:n_gpus] if len(narrowed) >= n_gpus else [str(i) for i in range(n_gpus)]


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def table_row(name, state, ms, concurrent):
    """The sweep's closing table line of one run: its state, seconds and median ms an iteration, which are marked
    as measured beside other runs when the sweep ran more than one at a time."""
    return (f"   {name:40} {state[0]:22} " + (f"{state[1]:6.0f} s" if state[1] else "        ")
            + (f"  median {ms:.1f} ms/iter" + (" (concurrent runs)" if concurrent else "") if ms else ""))


def sweep(runs, args):
    root, scratch = args.root, args.scratch
    t0 = time.time()
    states = {r.name: run_state(r, root, scratch) for r in runs}
    collected = [r for r in runs if states[r.name] == "collect"]
    for r in collected:
        collect(r, root, scratch)
        states[r.name] = "done"
        print(f"   collected {r.name} from {r.scratch_dir(scratch)} (to train it again, delete that dir too)")
    pending = [r for r in runs if states[r.name] != "done"]
    print(f"== {len(runs)} runs: {len(runs) - len(pending)} done ({len(collected)} collected from scratch), "
          f"{len(pending)} to run ({sum(states[r.name] == 'resume' for r in pending)} resume from scratch "
          f"checkpoints); jobs {args.jobs}", flush=True)
    hold, rates = getattr(args, "hold", None), {}
    left_out, slot_of = hold_plan(runs, states, scratch, root, hold, rates, gpus=args.jobs) if hold else ({}, {})
    if left_out:
        print(f"== the hold's plan leaves out {len(left_out)} chains: {', '.join(left_out)}", flush=True)
    if args.dry_run:
        for r in runs:
            extra = ["--init_from=resume"] if states[r.name] == "resume" else []
            expected = ""
            if hold and states[r.name] in ("start", "resume") and not r.after:
                seconds = run_estimate(r, r.argv(scratch), root, rates)
                plan = "; left out of the hold's plan" if r.name in left_out else ""
                plan += f", GPU {slot_of[r.name]}" if r.name in slot_of else ""
                expected = " (no estimate)" if seconds is None else f" (expected {seconds:.0f} s{plan})"
            print(f"{states[r.name]:7} {r.name}{expected}: python {os.path.relpath(TRAIN_SCRIPT)} "
                  f"{' '.join(os.path.relpath(a) if os.path.isabs(a) else a for a in r.argv(scratch, extra))}")
        return 0
    if not pending:
        return 0

    n_gpus = 0 if args.smoke else cuda_count()
    if n_gpus == 0 and not (args.smoke or args.allow_cpu):
        raise SweepError("no CUDA device: these runs are sized for a GPU (use --smoke for a CPU check, "
                         "or --allow-cpu to train on CPU anyway)")
    threads = max(1, (os.cpu_count() or 1) // max(1, min(args.jobs, len(pending))))
    running, results, launched, gpu_of = {}, {}, 0, {}
    # runs take minutes each: a bar of finished runs (stderr, on a terminal only: a log keeps the event
    # lines, which print above the bar)
    bar = tqdm(total=len(pending), desc="runs finished", unit="run", disable=None)
    say = lambda text: bar.write(text, file=sys.stdout)
    last_status = time.time()
    deadline = t0 + args.deadline if args.deadline else None
    hold_end, past_hold = (t0 + hold if hold else None), set()
    try:
        while pending or running:
            while len(running) < args.jobs and (deadline is None or time.time() < deadline):
                # the first pending run that can start: a branch waits for its trunk's checkpoint, or for the end
                # of the trunk that trains it
                # and a run of the hold's plan, for its GPU to be free
                waiting = {q.name for q in pending} | set(running)
                busy = {slot_of[n] for n in running if n in slot_of}
                r = next((r for r in pending if (r.needs is None or os.path.exists(r.needs)) and r.after not in waiting
                          and slot_of.get(r.name, -1) not in busy), None)
                if r is None:
                    break
                pending.remove(r)
                state = run_state(r, root, scratch)
                if state in ("collect", "done"):  # trained by its trunk's process
                    collect(r, root, scratch)
                    results[r.name] = ("complete (in its trunk)", 0)
                    say(f"   {time.strftime('%H:%M:%S')} complete {r.name} (trained by its trunk's process)")
                    bar.update(1)
                    continue
                why = left_out.get(r.name) or (
                    hold_end is not None and hold_check(r, r.argv(scratch), root, hold_end - time.time(), rates))
                if why:  # it would not end before the machine goes back: later runs may (time only runs out)
                    past_hold.add(r.name)
                    results[r.name] = ("not started", 0)
                    say(f"   {time.strftime('%H:%M:%S')} {r.name} {why}")
                    continue
                tmp = r.scratch_dir(scratch)
                mark_sweep_dir(r, scratch)
                if state == "resume":
                    extra = ["--init_from=resume"]
                else:  # a fresh start: no stale checkpoint of an earlier attempt may be resumed later
                    extra = []
                    shutil.rmtree(tmp, ignore_errors=True)
                it0 = progress(r, scratch)[0] or 0
                env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads))
                if n_gpus > 1:  # its plan's GPU, else the one with the fewest runs now (runs end out of order)
                    load = [sum(1 for g in gpu_of.values() if g == gpu) for gpu in range(n_gpus)]
                    gpu_of[r.name] = slot_of[r.name] % n_gpus if r.name in slot_of else load.index(min(load))
                    env["CUDA_VISIBLE_DEVICES"] = visible_gpu_ids(n_gpus)[gpu_of[r.name]]
                log = open(tmp + ".out", "a")
                proc = subprocess.Popen([sys.executable, TRAIN_SCRIPT, *r.argv(scratch, extra)],
                                        env=env, stdout=log, stderr=subprocess.STDOUT)
                running[r.name] = (r, proc, log, time.time(), it0)
                launched += 1
                say(f"   {time.strftime('%H:%M:%S')} start {r.name}" + (" (resume)" if extra else ""))
            if not running:
                if deadline is None or time.time() < deadline:
                    for r in pending:  # nothing runs that could write what they wait for
                        trunk = trunk_of(r)
                        if trunk in past_hold:
                            results[r.name] = ("not started", 0)
                            say(f"   {r.name} not started: its trunk {trunk} is past the hold")
                            continue
                        results[r.name] = (f"blocked: no {os.path.basename(r.needs)}", 0)
                        say(f"!! {r.name} cannot start: {r.needs} does not exist and no running trunk writes it")
                break
            time.sleep(args.poll)
            for name, (r, proc, log, started, it0) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[name]
                gpu_of.pop(name, None)
                max_iters = planned_config(r, scratch)["max_iters"]
                state = finished(r.scratch_dir(scratch), max_iters)
                if state:
                    collect(r, root, scratch)
                    results[name] = (state + ("" if proc.returncode in (0, 2) else f" (rc {proc.returncode})"),
                                     time.time() - started)
                else:
                    results[name] = (f"failed (rc {proc.returncode})", time.time() - started)
                    say(f"!! {name} failed (rc {proc.returncode}); the end of {r.scratch_dir(scratch)}.out:\n"
                        f"{tail(r.scratch_dir(scratch) + '.out')}")
                say(f"   {time.strftime('%H:%M:%S')} {results[name][0]} {name} ({results[name][1]:.0f} s)")
                bar.update(1)
            now = time.time()
            if running and now - last_status >= args.status_every:
                last_status = now
                for name, (r, proc, log, started, it0) in running.items():
                    it, ms = progress(r, scratch)
                    max_iters = planned_config(r, scratch)["max_iters"]
                    branch = in_trunk_branch(r, scratch, max_iters)
                    if branch:  # its process trains its branches now: the one under way
                        say(f"   .. {name}: trunk done; branch {branch[0]} at iter {branch[1]}")
                        continue
                    # wall-clock rate since launch (evals included)
                    eta = f", ETA {(now - started) / (it - it0) * (max_iters - it):.0f} s" if it and it > it0 else ""
                    say(f"   .. {name}: " + (f"iter {it}/{max_iters}, median {ms:.1f} ms/iter" if it is not None
                                             else "starting") + eta)
            if deadline is not None and now >= deadline:  # also when runs are left that never started
                say(f"== deadline ({args.deadline} s) reached: stopping {len(running)} runs; the same command "
                    f"resumes them from their last eval on this machine")
                for r, proc, log, started, it0 in running.values():
                    proc.terminate()
                stop = time.time() + 20
                for name, (r, proc, log, started, it0) in running.items():
                    try:
                        proc.wait(timeout=max(0.1, stop - time.time()))
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                    log.close()
                    results[name] = ("stopped at deadline", time.time() - started)
                running = {}
                break
    finally:
        bar.close()
        for r, proc, log, started, it0 in running.values():  # an exception: do not leave our runs behind
            proc.kill()
            proc.wait()
            log.close()

    left = unfinished(runs, root, scratch)  # first: it collects again what a fresh tree dropped, for the table
    print(f"== {time.strftime('%H:%M:%S')}, {time.time() - t0:.0f} s:")
    for r in runs:
        state = results.get(r.name, ("done" if states[r.name] == "done" else "not started", 0))
        _, ms = progress_final(r, root)
        print(table_row(r.name, state, ms, concurrent=args.jobs > 1))
    if any(s.startswith(("failed", "blocked")) for s, _ in results.values()):
        return 1
    return 3 if left else 0


def unfinished(runs, root, scratch):
    """The names of runs not finished in their sweep dir, after collecting again each one that finished in scratch:
    a command that ends while a sweep still runs on the lent machine sends a fresh working tree, which drops the
    sweep dirs of the runs that had finished by then (their logs stay in scratch)."""
    left = []
    for r in runs:
        planned = planned_config(r, scratch)
        if finished(r.final_dir(root), planned["max_iters"]) is None:
            tmp = r.scratch_dir(scratch)
            if finished(tmp, planned["max_iters"]) and not config_mismatch(tmp, planned):
                collect(r, root, scratch)
            else:
                left.append(r.name)
    return left


def progress_final(run, root):
    records = read_records(os.path.join(run.final_dir(root), "metrics.jsonl"))
    times = sorted(r["time_ms"] for r in records
                   if r.get("type") == "train" and isinstance(r.get("time_ms"), (int, float)))
    return None, (times[len(times) // 2] if times else None)


def pack(runs, args):
    """args.pack/sweep-logs.tgz: the logs of the part's finished runs (paths relative to root), and the
    stdout of its unfinished ones under out-sweep-logs/. Unpack in the repository root:
    tar xzf .../sweep-logs.tgz. A run finished in scratch whose logs are gone from the sweep dir (a lent machine
    that copies a fresh working tree with each command removes them while the sweep runs) is collected again."""
    os.makedirs(args.pack, exist_ok=True)
    path = replace_target(os.path.join(args.pack, PACK_NAME))
    n = 0
    with tarfile.open(path + ".tmp", "w:gz") as tar:
        for r in runs:
            final, tmp = r.final_dir(args.root), r.scratch_dir(args.scratch)
            planned = planned_config(r, args.scratch)
            if (not finished(final, planned["max_iters"]) and finished(tmp, planned["max_iters"])
                    and not config_mismatch(tmp, planned)):
                collect(r, args.root, args.scratch)
            if os.path.isdir(final):
                for name in RUN_LOGS:
                    if os.path.exists(os.path.join(final, name)):
                        tar.add(os.path.join(final, name), arcname=os.path.join(r.sweep_dir, r.name, name))
                n += 1
            if os.path.exists(tmp + ".out") and not finished(final, planned["max_iters"]):
                tar.add(tmp + ".out", arcname=os.path.join("out-sweep-logs", r.name + ".out"))
    os.replace(path + ".tmp", path)
    print(f"packed {n} run dirs into {path} ({os.path.getsize(path):,} bytes); unpack in the repository root "
          f"with: tar xzf {PACK_NAME}")


def check_args(args):
    """SweepError for a --jobs, --deadline or --status-every that no sweep can use, or a --root, --scratch or
    --pack that cannot be a folder, before any run is planned."""
    if args.jobs < 1:
        raise SweepError(f"--jobs={args.jobs}: must be >= 1")
    if args.deadline is not None and not args.deadline > 0:
        raise SweepError(f"--deadline={args.deadline:g}: must be > 0 seconds")
    hold = getattr(args, "hold", None)
    if hold is not None and not 0 < hold < float("inf"):
        raise SweepError(f"--hold={hold:g}: must be the seconds > 0 the machine is held for after the sweep starts")
    if not 0 < args.status_every < float("inf"):  # 0 or nan: a status line at every poll, or never
        raise SweepError(f"--status-every={args.status_every:g}: must be a number of seconds > 0")
    for flag, folder in (("--root", args.root), ("--scratch", args.scratch), ("--pack", args.pack)):
        problem = folder and folder_problem(folder, flag)
        if problem:
            raise SweepError(problem)
    if args.pack and replace_problem(os.path.join(args.pack, PACK_NAME)):
        raise SweepError(f"--pack {args.pack}: {replace_problem(os.path.join(args.pack, PACK_NAME))}")


def run_and_pack(runs, args):
    """sweep(), then the pack of the runs' logs (--pack); exit code 3 when runs are left for another command."""
    code = sweep(runs, args)
    if args.pack and not args.dry_run:
        pack(runs, args)
        if code == 3 and all(finished(r.final_dir(args.root), planned_config(r, args.scratch)["max_iters"])
                             for r in runs):
            code = 0  # the pack collected the runs whose logs had left the sweep dir
    if code == 3:
        print("incomplete: run the same command again to go on (finished runs are skipped)")
    return code
