"""What a training run writes about itself, besides its checkpoints: the conditions its timings depend on (the
layout record), the eval and train lines of log.txt and metrics.jsonl (and wandb's, when asked), and the summary
block that ends the run. train_reduced_sync.py calls these; the records' fields are what analysis/runs.py reads."""
import json
import os
import platform
import signal
import subprocess
import time

import torch

from parallel import comm
from parallel.mesh import record_error_for_torchrun
from training.config import REPO
from training.step import get_lr


def cpu_model():
    """The CPU's model name (/proc/cpuinfo on Linux), else what platform knows, else 'unknown CPU'."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def load_average():
    """os.getloadavg() (1, 5, 15 minutes), rounded; None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def source_commit():
    """The code a run or benchmark ran: $BENCH_COMMIT when set, else the checkout's short commit, with '+changes'
    when its tracked files differ from that commit (a device machine gets the working tree, whose git metadata
    may be older than the files), else 'unknown'."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=REPO).stdout.strip()
        if not head:
            return "unknown"
        # no index lock: every rank of a launch asks at once
        status = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, cwd=REPO)
        if status.returncode:
            return head + "+changes unknown"
        return head + ("+changes" if status.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_conditions(device):
    """What a timing depends on besides the policy (rank 0's view, in the layout record): the device's name,
    the CPU cores this process may run on, the load average when the run starts, and the code (source_commit)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count()
    cuda = device.startswith("cuda")
    return {"device_type": device.split(":")[0],
            "device_name": torch.cuda.get_device_name(torch.device(device)) if cuda else cpu_model(),
            "cpu_cores": cores, "load_avg_start": load_average(), "code": source_commit()}


def best_eval_iter(metrics_path, best_val, up_to):
    """The first iteration whose logged val loss is best_val (a resumed run's later lines win), or None:
    a resumed run's best may come from before the resume, which only the log remembers."""
    evals = {}
    try:
        with open(metrics_path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and r.get("type") == "eval" and isinstance(r.get("iter"), int):
                    evals[r["iter"]] = r.get("val_loss")
    except OSError:
        return None
    return min((i for i, v in evals.items() if v == best_val and i <= up_to), default=None)


# the summary's suggested sample.py options: a look at the model in well under a minute on a CPU (sample.py's
# default, 10 samples of 500 tokens, ran over 6 minutes on a loaded 2-core machine)
QUICK_SAMPLE = "--num_samples=2 --max_new_tokens=200"


def say_summary(log, cfg, mesh, *, trained, iter_num, tokens_per_iter, passes, seconds, final, best_val, best_iter,
                syncs, ckpt_path, stopped):
    """The run's last block (at most 4 lines, rank 0) and metrics.jsonl's last record (type 'summary'): what
    was trained, the losses, the measured syncs per forward, the checkpoint and what to run next.
    final: (iteration, val loss) of this process's last eval, or None; stopped: the signal's name or None."""
    saved = os.path.exists(ckpt_path) if mesh.is_master else False
    took = f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    tokens = iter_num * tokens_per_iter
    final_iter, final_val = final if final else (None, None)
    best_val = best_val if best_val < 1e9 else None
    load_end = load_average()
    how = f"stopped by {stopped}" if stopped else "finished"
    lines = [
        f"summary: {how} at iter {iter_num} ({trained} iterations in this process, {took} wall time), "
        f"{tokens:,} tokens seen ({passes:.2f} passes)",
        "val loss: " + ("no eval in this process" if final_val is None else f"final {final_val:.4f} (iter {final_iter})")
        + ("" if best_val is None else f", best {best_val:.4f} (iter {'?' if best_iter is None else best_iter})"),
        f"syncs per forward (measured): {'?' if syncs is None else syncs}",
        (f"checkpoint {ckpt_path}; next: python sample.py --out_dir={cfg.out_dir} {QUICK_SAMPLE}; " if saved else
         "no checkpoint written; next: ") + f"python compare_runs.py {cfg.out_dir} <other out_dirs>",
    ]
    for line in lines[:-1]:
        log.write(line)
    log.write(lines[-1], {"type": "summary", "finished": not stopped, "stopped_by": stopped, "iter": iter_num,
                          "trained_iters": trained, "seconds": seconds, "tokens": tokens, "passes": passes,
                          "final_val": final_val, "final_iter": final_iter, "best_val": best_val,
                          "best_iter": best_iter, "syncs_per_fwd": syncs, "ckpt": ckpt_path if saved else None,
                          "load_avg_end": load_end})


def start_wandb(cfg, mesh, derived):
    if not (cfg.wandb_log and mesh.is_master):
        return None
    import wandb  # optional dependency; WANDB_MODE=offline runs without network
    wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name, config={**cfg.to_dict(), **derived})
    return wandb


def log_eval(log, wandb, cfg, iter_num, losses, syncs, passes, checkpoint):
    """The eval line and record; checkpoint: whether this eval writes ckpt.pt (checkpoint_every)."""
    # a dataset of several domains adds its val_<domain> losses at the end of the line, after what parsers read
    parts = {split: loss for split, loss in losses.items() if split not in ("train", "val")}
    log.write(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
              f"syncs/fwd {syncs}, passes {passes:.2f}" + "".join(f", {k} loss {v:.4f}" for k, v in parts.items()),
              {"type": "eval", "iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"],
               **{f"{k}_loss": v for k, v in parts.items()},
               "syncs_per_fwd": syncs, "lr": get_lr(iter_num, cfg), "passes": passes, "checkpoint": checkpoint,
               "time": time.time()})
    if wandb is not None:
        wandb.log({"iter": iter_num, "train/loss": losses["train"], "val/loss": losses["val"],
                   "syncs_per_fwd": syncs, "lr": get_lr(iter_num, cfg)})


def log_train(log, wandb, mesh, iter_num, lr, train_loss, grad_norm, nonfinite, on_nonfinite, seconds_per_iter,
              mfu, tokens_per_iter, layer_norms=None):
    """The log_interval line: the only host-device sync of a normal step. A replica that saw a non-finite
    step calls on_nonfinite (which stops the run) before anything is logged. layer_norms: (names, the
    gradient norms of those layers, a device tensor), written to metrics.jsonl as 'grad_norm_layers'."""
    names, norms = layer_norms or ((), None)
    metrics = torch.stack([train_loss, grad_norm, nonfinite.count])
    if norms is not None:
        metrics = torch.cat([metrics, norms.to(metrics.dtype)])
    comm.all_reduce(metrics, mesh.dp_group, kind="train_metrics")  # the replicas' grads, and norms, are equal
    loss_value, norm_value, n_bad, *layer_values = (metrics / mesh.dp).tolist()
    if n_bad > 0:
        on_nonfinite(iter_num)
    dt, tok_per_s = seconds_per_iter, tokens_per_iter / seconds_per_iter
    record = {"type": "train", "iter": iter_num, "loss": loss_value, "grad_norm": norm_value, "lr": lr,
              "time_ms": dt * 1000, "tok_per_s": tok_per_s, "mfu": mfu}
    if norms is not None:  # 4 significant digits: 14 numbers a log line at 12 layers
        record["grad_norm_layers"] = {k: float(f"{v:.4g}") for k, v in zip(names, layer_values)}
    log.write(f"iter {iter_num}: loss {loss_value:.4f}, time {dt * 1000:.2f}ms, tok/s {tok_per_s:.0f}, "
              + (f"mfu {mfu * 100:.2f}%" if mfu is not None else "mfu n/a"), record)
    if wandb is not None:
        wandb.log({"iter": iter_num, "train/step_loss": loss_value, "grad_norm": norm_value, "lr": lr,
                   "tok_per_s": tok_per_s, "mfu": mfu})


def say_stopped(log, signum, iter_num, ckpt_path, saved=None):
    """The stop line; `saved` (save_checkpoint's seconds and size, rank 0's) says what the checkpoint took."""
    name = signal.Signals(signum).name
    took = "" if not saved else (f" ({saved['bytes'] / 1e9:.2f} GB in {saved['gather_s'] + saved['write_s']:.1f} s: "
                                 f"{saved['gather_s']:.1f} s gathering, {saved['write_s']:.1f} s writing)")
    stopped = f"stopped by {name} at iter {iter_num}: saved {ckpt_path}{took}; continue with --init_from=resume"
    log.write(stopped, {"type": "stop", "iter": iter_num, "signal": name, **({"checkpoint": saved} if saved else {})})
    record_error_for_torchrun(stopped)  # torchrun's summary of the exit code 128+signum names it
