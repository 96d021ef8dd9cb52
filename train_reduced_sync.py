"""Train a GPT with reduced-synchronization tensor parallelism (dp x tp), in nanoGPT's spirit.

    python train_reduced_sync.py config/shakespeare_grouped_6sync.py              # one process
    torchrun --standalone --nproc_per_node=8 train_reduced_sync.py config/train_grouped_6sync.py
    python train_reduced_sync.py config/shakespeare_grouped_6sync.py --init_from=resume   # continue
    python train_reduced_sync.py --help                                           # every key

world = dp * tp processes (tp='auto': the largest divisor of n_tracks that divides the world). The tp
ranks of one data-parallel replica hold shards of one model and read the same batch; replicas average
gradients with parallel/ddp.py's BucketedDDP. Progress goes to out_dir/log.txt (human) and
out_dir/metrics.jsonl (compare_runs.py). Everything that can be wrong about a request is checked
before out_dir is touched, and what training/config.py can check (config files, keys, values, the layout)
before torch is imported.

Where things are: the data order (stateless, resumable, the same at every layout) in data/loader.py;
the step, evaluation and the checkpoint's contents in training.py; the checkpoint format and its safe
loading in checkpoint.py; out_dir's one-run lock in run_dir.py; SIGINT/SIGTERM (every rank stops after
the same step with a checkpoint and exits 130/143) in stop.py.

On CPU a resumed run at the same layout prints exactly the losses of an uninterrupted one; across a
change of tp they agree to float32 rounding (tests/test_train.py allows rel 1e-4; the sums of the
sharded matmuls are taken in another order). If ckpt.pt is unusable (truncated, corrupt), resume
falls back to a valid ckpt_best.pt, says so, and keeps the bad file as ckpt.pt.invalid.
"""
import dataclasses
import importlib.util
import math
import os
import signal
import sys
import time
from types import SimpleNamespace


_config_running = None  # the config files while _answer_before_torch runs them (Python: one may loop or sleep)


def _stop_while_importing(signum, frame):
    """SIGINT/SIGTERM while the imports below run (seconds): stop at once with stop.py's line, not a
    KeyboardInterrupt traceback. main() installs stop.py's handlers first thing."""
    if os.environ.get("RANK", "0") in ("0", ""):
        when = f"while running the config file {_config_running}" if _config_running else "before training began"
        print(f"error: {signal.Signals(signum).name} {when}: stopped, nothing to save", file=sys.stderr, flush=True)
    os._exit(128 + signum)


def _answer_before_torch(argv):
    """--help, and a request that training/config.py refuses (a config file not found, an unknown key, a bad
    value or layout), answered before torch's import, which takes seconds (tens on a loaded machine). Under
    torchrun a refusal is left to read_request after the import: it also writes torchrun's error file."""
    global _config_running
    from training.config import ConfigError, parse, resolve_layout  # no torch
    from training.help import help_text
    first_rank = os.environ.get("RANK", "0") in ("0", "")
    try:
        if "-h" in argv or "--help" in argv:
            text = help_text(argv)
            if first_rank:
                print(text)
            sys.exit(0)
        _config_running = ", ".join(a for a in argv if not a.startswith("--")) or None  # as read_request says
        cfg = parse(argv)
        _config_running = None
        world = os.environ.get("WORLD_SIZE", "1")
        if world.isdigit() and int(world) > 0:  # a bad WORLD_SIZE: read_request says so
            resolve_layout(cfg, int(world))
    except ConfigError as e:
        if os.environ.get("TORCHELASTIC_ERROR_FILE"):
            return
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    for _s in (signal.SIGINT, signal.SIGTERM):
        # an inherited SIG_IGN too (a shell's background job ignores SIGINT): stop.py's handlers replace it after
        # the imports, so a signal sent on purpose stops the run in every phase, these seconds included
        signal.signal(_s, _stop_while_importing)
    _answer_before_torch(sys.argv[1:])

import torch
from cli_guard import exit_now, exits_fast

from training.checkpoint import (MODEL_KEYS, RESUME_KEYS, CheckpointError, load_weights, read_checkpoint, read_for_resume,
                        restore_rng_states, set_aside)
from training.config import (SAME_DATA_KEYS, VALID_KEYS, ConfigError, TrainConfig, branch_list, check_tp_comm_overlap,
                          format_config, merge, model_config, parse, resolve_compile, resolve_layout, save_config,
                          save_iter_set, wsd_decay_start)
from training.help import help_text
from data.loader import DataError, check_data, check_one_pass, dropout_seed, get_train_batch, passes_read
from training.memory_check import check_memory
from model.compile_modes import apply_exact_training_settings
from model.gpt import GPT
from parallel import comm
from parallel.ddp import BucketedDDP
from parallel.overlap import enable_async_tp
from parallel.mesh import (RendezvousError, close_process_groups, end_process, env_int, init_mesh, leave_on_exit,
                           record_error_for_torchrun)
from training.records import best_eval_iter, log_eval, log_train, run_conditions, say_stopped, say_summary, start_wandb
from training.run_dir import OutDirError, check_out_dir, claim, refuse_existing_run
from training.stop import Control, install_signal_handlers, report_fatal, waiting, watch_parent
from training.step import (NonFiniteTracker, RunLog, checkpoint_paths, configure_optimizer, estimate_loss, estimate_mfu,
                      get_lr, layer_groups, load_full_optimizer_state, peak_flops_total, precision, save_checkpoint,
                      set_lr, train_step)


def check_vocab(ckpt_vocab, data_vocab, ckpt_path, data_dir, mesh):
    """The checkpoint's vocabulary must be the dataset's (whose token ids were checked against it)."""
    if ckpt_vocab != data_vocab:
        fail(f"{ckpt_path} has a vocabulary of {ckpt_vocab} ids but the dataset {data_dir} has {data_vocab}: it was "
             f"trained on another dataset or tokenizer; choose its dataset with --dataset", mesh)


def fail(message, mesh=None, code=1, every_rank=False):
    """Print one clear message (once, not per rank) and exit without a traceback. every_rank: an error
    that only this rank may have seen (its rendezvous), printed by each rank with its rank."""
    env_rank = os.environ.get("RANK", "0")
    rank = mesh.rank if mesh is not None else int(env_rank) if env_rank.isdigit() else 0
    if every_rank and rank > 0:
        print(f"error: rank {rank}: {message}", file=sys.stderr, flush=True)
    elif rank <= 0:
        print(f"error: {message}", file=sys.stderr, flush=True)
    record_error_for_torchrun(f"error: {message}")  # torchrun's summary, printed last, then names it
    sys.exit(end_process(code, close_process_groups(barrier=False)))


# ----------------------------------------------------------------------------- setup
def read_request(argv):
    """The validated config and its dp x tp layout, or --help (then None). Touches nothing."""
    if "-h" in argv or "--help" in argv:
        try:
            text = help_text(argv)
        except ConfigError as e:
            fail(str(e))
        if int(os.environ.get("RANK", "0")) == 0:  # once under torchrun
            print(text)
        return None, None
    files = [a for a in argv if not a.startswith("--")]
    if files:  # configs are Python: a stop while one loops or sleeps names it, not "before training began"
        waiting(f"running the config file {', '.join(files)}")
    try:
        cfg = parse(argv)
        waiting(None)
        layout = resolve_layout(cfg, env_int("WORLD_SIZE", 1))
        # --data_dir as typed, from the cwd, stored absolute so that sample.py finds meta.pkl from anywhere;
        # config.json and checkpoints record the tp that ran
        cfg = merge(cfg, {"data_dir": os.path.abspath(cfg.data_dir) if cfg.data_dir else "", "tp": layout.tp})
    except (ConfigError, ValueError) as e:
        fail(str(e), every_rank=isinstance(e, RendezvousError))
    if cfg.device == "cuda" and not torch.cuda.is_available():
        fail("device='cuda' but CUDA is not available; use --device=cpu or --device=auto")
    return cfg, layout


def start_processes(cfg, layout):
    """The process group (NCCL on CUDA, gloo on CPU) and this rank's place in the dp x tp mesh."""
    try:
        # 'auto' takes CUDA only when every local process gets its own GPU (NCCL needs one each)
        local_procs = env_int("LOCAL_WORLD_SIZE", 1)  # checked also where there is no GPU to share
        cuda_fits = torch.cuda.is_available() and torch.cuda.device_count() >= local_procs
        device_type = "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and cuda_fits) else "cpu"
        return init_mesh(layout.tp, device_type, cfg.rendezvous_timeout, on_wait=waiting)
    except ValueError as e:  # RendezvousError: only this rank may know, so every rank says it
        fail(str(e), every_rank=isinstance(e, RendezvousError))


def check_request(cfg, layout, mesh):
    """(data_dir, vocab_size, dtype) once the data, out_dir, memory, dtype and wandb are usable."""
    try:
        data_dir, vocab_size = check_data(cfg.dataset, cfg.block_size, cfg.data_dir)
        check_one_pass(cfg, data_dir)
        check_out_dir(cfg.out_dir)
        refuse_existing_run(cfg.out_dir, cfg.init_from != "resume", cfg.overwrite)
        check_memory(cfg, vocab_size, layout.micro_steps, cfg.tp, mesh.device)
    except (ConfigError, DataError, OutDirError, ValueError) as e:
        fail(str(e), mesh)
    cuda = mesh.device.startswith("cuda")
    dtype = cfg.dtype
    if dtype == "auto":
        dtype = ("bfloat16" if torch.cuda.is_bf16_supported() else "float16") if cuda else "float32"
    if not cuda and dtype != "float32":
        fail(f"dtype={dtype!r} is only supported on CUDA; use float32 or auto on CPU", mesh)
    if cfg.wandb_log and importlib.util.find_spec("wandb") is None:
        fail("wandb_log=True but wandb is not installed: pip install wandb (or --wandb_log=False)", mesh)
    return data_dir, vocab_size, dtype


def read_init(cfg, vocab_size, data_dir, mesh):
    """What the run starts from: (cfg, init). For a resume or a fine-tune, the checkpoint's architecture
    is merged into the config (as nanoGPT; a note for each key the request set otherwise) and the merged
    config is validated once. init holds the checkpoint (resume), the weights (fine-tune) and notes."""
    init = SimpleNamespace(checkpoint=None, weights=None, path=None, fallback_note=None,
                           branch=cfg.init_from == "branch")  # a resumed branch is a resume
    if cfg.init_from == "scratch":
        return cfg, init
    if cfg.init_from == "resume":
        try:  # checkpoint.py: weights_only=True, and a one-line error for any bad file
            init.checkpoint, init.path, init.fallback_note = read_for_resume(cfg.out_dir)
        except CheckpointError as e:
            fail(f"init_from='resume': {e}", mesh)
        if init.fallback_note and mesh.is_master:
            print(f"note: {init.fallback_note}", flush=True)
        saved, verb = init.checkpoint["model_args"], "resuming"
        keys = [k for k in saved if k not in ("dropout", "vocab_size")]
        check_same_data(cfg, init.checkpoint.get("config", {}), init.path, mesh)
    elif cfg.init_from == "branch":  # a WSD trunk's run, continued into this out_dir under this schedule
        try:
            init.checkpoint = read_checkpoint(cfg.branch_from, RESUME_KEYS)
        except CheckpointError as e:
            fail(f"branch_from: {e}", mesh)
        init.path, saved, verb = cfg.branch_from, init.checkpoint["model_args"], "branching"
        keys = [k for k in saved if k not in ("dropout", "vocab_size")]
        check_branch(cfg, init.checkpoint, init.path, mesh)
    else:  # fine-tune: the weights (so the architecture) of a checkpoint; policy, dropout, optimizer are ours
        try:
            source = read_checkpoint(cfg.init_from, MODEL_KEYS)
        except CheckpointError as e:
            fail(f"init_from: {e}", mesh)
        init.path, init.weights, saved, verb = cfg.init_from, source["model"], source["model_args"], "fine-tuning"
        keys = ["n_layer", "n_head", "n_embd", "block_size", "bias", "n_tracks"]
    check_vocab(saved["vocab_size"], vocab_size, init.path, data_dir, mesh)
    if cfg.tp > 1 and saved["n_tracks"] % cfg.tp != 0:
        check_tracks_fit(cfg, saved["n_tracks"], init.path, verb, mesh)
    changes = {k: saved[k] for k in keys if getattr(cfg, k) != saved[k]}
    for key, value in changes.items():
        if mesh.is_master:
            print(f"note: {verb} with {key}={value!r} from the checkpoint (requested {getattr(cfg, key)!r})")
    try:
        cfg = merge(cfg, changes)
    except ConfigError as e:
        fail(f"{init.path}: {e}", mesh)
    return cfg, init


def check_tracks_fit(cfg, n_tracks, path, verb, mesh):
    """The checkpoint's n_tracks (which a resume or fine-tune keeps) against the launch's tp: name both,
    and the layouts of this many processes that would work."""
    world, gas = mesh.world_size, cfg.gradient_accumulation_steps
    fits = [t for t in range(1, world + 1) if world % t == 0 and n_tracks % t == 0 and gas % (world // t) == 0]
    fix = (f"layouts of {world} processes that fit it: " + ", ".join(f"tp={t} (dp={world // t})" for t in fits)
           + f"; relaunch with --tp={max(fits)}, or --tp=auto --n_tracks={n_tracks}" if fits else
           f"no layout of {world} processes fits it with gradient_accumulation_steps={gas}")
    fail(f"{path} has n_tracks={n_tracks} (the checkpoint's architecture, kept when {verb}; requested "
         f"n_tracks={cfg.n_tracks}), but this launch splits the model over tp={cfg.tp} (world size {world}), which "
         f"does not divide n_tracks={n_tracks}: {fix}", mesh)


# What a branch must share with its trunk, and a resumed run with its checkpoint: the data it read and the
# order it goes on reading them in (--help states the rule).
BRANCH_SAME = SAME_DATA_KEYS


def check_same_data(cfg, saved_config, path, mesh):
    """A resume goes on reading what the checkpoint's run would have read next: refuse any data key changed."""
    for key in SAME_DATA_KEYS:
        if key in saved_config and saved_config[key] != getattr(cfg, key):
            fail(f"{path} was trained with {key}={saved_config[key]!r}, this resume has {key}={getattr(cfg, key)!r}: "
                 f"a resumed run keeps the data it reads and their order ({', '.join(SAME_DATA_KEYS)}), so set "
                 f"--{key}={saved_config[key]!r}, or start a new run in another out_dir", mesh)



def check_branch(cfg, checkpoint, path, mesh):
    """A branch goes on with its trunk's run: the same data order, and the learning rate the trunk used
    at every iteration it trained (a WSD branch point lies at or before the branch's decay start)."""
    trunk = checkpoint["config"]
    for key in BRANCH_SAME:
        if key in trunk and trunk[key] != getattr(cfg, key):
            fail(f"{path} was trained with {key}={trunk[key]!r}, this branch has {key}={getattr(cfg, key)!r}: a branch "
                 f"continues its trunk's data order, so set --{key}={trunk[key]!r}", mesh)
    try:
        trunk_cfg = merge(TrainConfig(), {k: v for k, v in trunk.items() if k in VALID_KEYS and k != "data_dir"}
                          | {"init_from": "scratch", "branch_from": "", "out_dir": cfg.out_dir, "branches": ""})
    except ConfigError as e:
        fail(f"{path}: its config is not usable: {e}", mesh)
    for it in range(checkpoint["iter_num"]):
        if get_lr(it, trunk_cfg) != get_lr(it, cfg):
            fail(f"{path} is at iteration {checkpoint['iter_num']}, but this branch's learning rate differs from the "
                 f"trunk's before it (iteration {it}: {get_lr(it, cfg):.4g}, the trunk had {get_lr(it, trunk_cfg):.4g}): "
                 f"a branch must share the trunk's warmup and constant rate; for lr_schedule='wsd' the branch point is "
                 f"lr_decay_iters less cooldown_frac of it", mesh)


def build_model(cfg, vocab_size, init, mesh):
    """The model of cfg's model keys (GPTConfig validates them), with the initial or loaded weights."""
    try:
        torch.manual_seed(cfg.seed)  # identical on every rank: GPT draws the full weights from it
        raw_model = GPT(model_config(cfg, vocab_size), tp_group=mesh.tp_group,
                        async_grad_allreduce=cfg.tp_async_grad, sequence_parallel=cfg.sequence_parallel,
                        tp_comm_overlap=cfg.tp_comm_overlap)
        if init.checkpoint is not None:
            load_weights(raw_model, init.checkpoint, init.path)
        elif init.weights is not None:
            load_weights(raw_model, {"model": init.weights}, init.path)
            init.weights = None
    except (ValueError, CheckpointError) as e:
        fail(str(e), mesh)
    return raw_model.to(mesh.device)


def open_run(cfg, layout, mesh, control, raw_model, dtype, plan):
    """Claim out_dir (rank 0 creates and locks it, removes orphan temp files and, with --overwrite=True,
    moves an old run aside; all ranks agree), write config.json and open the log, whose first lines state the
    layout and how the model runs (plan: resolve_compile's). Returns (log, derived)."""
    fresh = cfg.init_from != "resume"
    claim_error, claim_notes = None, []
    if mesh.is_master:
        try:
            claim_notes = claim(cfg.out_dir, fresh, cfg.overwrite)
        except OutDirError as e:
            claim_error = str(e)
    if control.any_error(claim_error is not None):
        fail(claim_error or "rank 0 could not claim out_dir", mesh)
    tokens_per_iter = cfg.gradient_accumulation_steps * cfg.batch_size * cfg.block_size
    where = run_conditions(mesh.device)  # device name, CPU cores, load average: what a timing depends on
    derived = {"world_size": mesh.world_size, "dp": mesh.dp, "micro_steps_per_replica": layout.micro_steps,
               "tokens_per_iter": tokens_per_iter, "device": mesh.device, "resolved_dtype": dtype,
               "vocab_size": raw_model.config.vocab_size, "n_params": raw_model.get_num_params(),
               "declared_syncs_per_forward": raw_model.syncs_per_forward, "tp_requested": layout.requested,
               "compile_resolved": plan.name, "compile_mode_resolved": plan.mode, **where}
    if mesh.is_master:
        save_config(cfg, os.path.join(cfg.out_dir, "config.json"), extra={"derived": derived})
    log = RunLog(cfg.out_dir, mesh.is_master, fresh=fresh)
    for note in claim_notes:
        log.write(f"note: {note}", {"type": "note", "note": note})
    if cfg.tp_async_grad and mesh.tp == 1:
        note = "tp_async_grad=True does nothing at tp=1: there is no tensor-parallel all-reduce to overlap"
        log.write(f"note: {note}", {"type": "note", "note": note})
    if cfg.tp_async_grad and cfg.sequence_parallel and mesh.tp > 1:
        note = ("tp_async_grad=True does nothing with sequence_parallel=True: a region is entered through an "
                "all-gather, not an all-reduce to overlap")
        log.write(f"note: {note}", {"type": "note", "note": note})
    if cfg.lr_schedule != "wsd" and cfg.cooldown_frac != TrainConfig().cooldown_frac:
        note = f"cooldown_frac={cfg.cooldown_frac} does nothing with lr_schedule={cfg.lr_schedule!r}: only 'wsd' uses it"
        log.write(f"note: {note}", {"type": "note", "note": note})
    beyond = sorted(i for i in save_iter_set(cfg) if i > cfg.max_iters)
    if beyond:
        note = (f"save_iters {','.join(map(str, beyond))} > max_iters={cfg.max_iters}: this run ends before "
                f"{'it' if len(beyond) == 1 else 'them'}, so no ckpt_<iter>.pt is kept there")
        log.write(f"note: {note}", {"type": "note", "note": note})
    steps = layout.micro_steps
    load = "unknown" if where["load_avg_start"] is None else f"{where['load_avg_start'][0]:.2f}"
    log.write(f"layout: world {mesh.world_size} = dp {mesh.dp} x tp {mesh.tp} ({layout.why}), {steps} "
              f"micro-step{'s' if steps > 1 else ''} per replica, {tokens_per_iter:,} tokens per iteration, "
              f"{derived['n_params'] / 1e6:.2f}M parameters, {dtype} on {mesh.device.split(':')[0]} "
              f"({where['device_name']}; {where['cpu_cores']} CPU cores for rank 0, load average {load})",
              {"type": "layout", "world_size": mesh.world_size, "dp": mesh.dp, "tp": mesh.tp,
               "tp_requested": layout.requested, "compile": plan.name, "compile_requested": cfg.compile, **where})
    log.write(plan.line)
    if mesh.is_master:
        print(f"config:\n{format_config(cfg)}", flush=True)
    comm.barrier()  # out_dir exists before any rank goes on
    return log, derived


def restore(init, optimizer, scaler, raw_model, dtype, mesh, log, ckpt_path, cfg):
    """Optimizer, scaler and RNG state of a resumed run: (iter_num, best_val_loss); (0, 1e9) otherwise."""
    checkpoint = init.checkpoint
    if checkpoint is None:
        return 0, 1e9
    load_full_optimizer_state(optimizer, raw_model, checkpoint["optimizer"])
    if dtype == "float16" and checkpoint.get("scaler"):
        scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_states(checkpoint["rng"], mesh.device)
    iter_num = checkpoint["iter_num"]
    if init.branch:
        log.write(f"branched from {init.path} at iter {iter_num}; this run's learning rate from here: "
                  f"{get_lr(iter_num, cfg):.4g}, reaching {cfg.min_lr:.4g} at lr_decay_iters={cfg.lr_decay_iters}",
                  {"type": "branch", "iter": iter_num, "from": os.path.abspath(init.path)})
        init.checkpoint = None
        return iter_num, 1e9  # this out_dir's own best
    if init.fallback_note:  # keep the unusable ckpt.pt: the next checkpoint would overwrite it
        kept = set_aside(ckpt_path) if mesh.is_master else None
        log.write(f"note: {init.fallback_note}" + (f"; the unusable file is kept as {kept}" if kept else ""),
                  {"type": "resume_fallback", "iter": iter_num, "from": init.path, "kept": kept})
    log.write(f"resumed from {init.path} at iter {iter_num} (saved at tp={checkpoint['layout']['tp']} "
              f"dp={checkpoint['layout']['dp']}; now tp={mesh.tp} dp={mesh.dp})",
              {"type": "resume", "iter": iter_num, "tp": mesh.tp, "dp": mesh.dp})
    if iter_num >= cfg.max_iters:
        note = (f"the checkpoint is at iter {iter_num}, max_iters={cfg.max_iters}: nothing to train; "
                f"raise --max_iters to go on")
        log.write(f"note: {note}", {"type": "note", "note": note})
    init.checkpoint = None  # free the memory
    return iter_num, checkpoint["best_val_loss"]


def wrap(raw_model, cfg, mesh, plan):
    """torch.compile as plan says (resolve_compile; fullgraph: a graph break is an error, never a silent eager
    fallback; the model is built to trace whole, tests/test_compile.py), then our data-parallel wrapper."""
    model = raw_model
    if plan.compiled:
        if cfg.tp_async_grad and mesh.tp > 1:
            # with it on, inductor (torch 2.13, CPU) ran the weight-gradient GEMM before the all-reduce's
            # start instead of between start and wait: nothing overlapped (tests/test_async_grad.py)
            import torch._inductor.config as inductor_config
            inductor_config.reorder_for_peak_memory = False
        if cfg.tp_comm_overlap == "async_tp" and cfg.sequence_parallel and mesh.tp > 1:
            enable_async_tp(mesh.tp_group)  # before compiling: the pass runs at compile time
        exact = apply_exact_training_settings(mesh.tp)  # the regions' LayerNorm gradients (model/compile_modes.py)
        if mesh.is_master:  # compiling happens at the first call, silently otherwise
            graphs = ", then CUDA graphs" if plan.mode == "reduce-overhead" else ""
            if exact:
                print(f"inductor settings for tp={mesh.tp} (model/compile_modes.py): "
                      + ", ".join(f"{k}={v}" for k, v in exact.items()), flush=True)
            print(f"compiling the model (torch.compile, fullgraph=True{graphs}): the first eval and the first iteration "
                  "wait for it, from under a minute to several minutes (longer on CPU)", flush=True)
        model = torch.compile(raw_model, fullgraph=True, backend=cfg.compile_backend,
                              mode=None if plan.mode == "default" else plan.mode)
    # a dp group of one replica is fine too: then no communication
    return BucketedDDP(model, process_group=mesh.dp_group, bucket_cap_mb=cfg.bucket_cap_mb)


# ----------------------------------------------------------------------------- the loop's steps
def stop_if_eval_nonfinite(log, mesh, iter_num, losses):
    if not all(math.isfinite(v) for v in losses.values()):
        log.write(f"step {iter_num}: non-finite eval loss {losses}: stopping without saving",
                  {"type": "error", "iter": iter_num, "error": "non-finite eval loss"})
        fail(f"training diverged: non-finite eval loss at iter {iter_num}", mesh, code=2)


def shut_down(control, wandb):
    control.finish()
    if wandb is not None:
        wandb.finish()
    return close_process_groups()  # None, or the teardown stage that hung (end_process says so)


# ----------------------------------------------------------------------------- the loop
def train(run, cfg, log, wandb, iter_num, best_val_loss):
    """Train cfg's run from iter_num to max_iters (or one eval, eval_only) with the process's model and optimizer
    (run: main's), evaluating, checkpointing and logging into cfg.out_dir; its summary at the end. Returns the
    signal that stopped it (after a step, with a checkpoint), or 0."""
    mesh, control, model, raw_model, optimizer, scaler = (run.mesh, run.control, run.model, run.raw_model,
                                                          run.optimizer, run.scaler)
    ckpt_path, start_iter = os.path.join(cfg.out_dir, "ckpt.pt"), iter_num
    keep_iters = save_iter_set(cfg)  # a trunk's branch points: ckpt_<iter>.pt besides ckpt.pt
    nonfinite = NonFiniteTracker(mesh.device)
    layer_names, layers = run.layers
    timer_start, timed_iters = time.time(), 0

    def check_finite(at_iter):
        """All replicas agree (one all-reduce) whether any step so far went non-finite; stop if so."""
        flag = nonfinite.count.clone()
        comm.all_reduce(flag, mesh.dp_group, kind="train_metrics")
        if flag.item() > 0:
            first = nonfinite.first_iter.item()
            where = f"iter {first}" if first >= 0 else f"an iteration before iter {at_iter}"
            log.write(f"non-finite loss or gradient norm at {where}: stopping. The last good checkpoint "
                      f"({ckpt_path}, if any) is left as it was.",
                      {"type": "error", "iter": first if first >= 0 else at_iter, "error": "non-finite"})
            fail(f"training diverged (non-finite loss/grad norm at {where}); "
                 f"try a lower learning_rate or grad_clip", mesh, code=2)

    def save(paths, links=()):
        """save_checkpoint on every rank; a write that fails (a full disk) stops every rank, in one line."""
        error = saved = None
        try:
            saved = save_checkpoint(paths, raw_model, optimizer, scaler, run.model_args, cfg, mesh, iter_num,
                                    best_val_loss, links)
        except CheckpointError as e:
            error = str(e)
        if control.any_error(error is not None):
            fail(error or "rank 0 could not write the checkpoint", mesh)
        return saved

    signum, losses, syncs, final, best_iter = 0, None, None, None, None
    run_start = time.time()
    while True:
        # Evaluate and checkpoint at an iteration boundary (weights after iter_num steps).
        if iter_num % cfg.eval_interval == 0 or iter_num in keep_iters or iter_num >= cfg.max_iters or cfg.eval_only:
            check_finite(iter_num)
            losses, syncs = estimate_loss(model, raw_model, run.data_dir, cfg, mesh, run.autocast_ctx)
            stop_if_eval_nonfinite(log, mesh, iter_num, losses)
            is_best = losses["val"] < best_val_loss
            to_write = checkpoint_paths(cfg, iter_num, start_iter, keep_iters, is_best, ckpt_path)
            log_eval(log, wandb, cfg, iter_num, losses, syncs, passes_read(cfg, run.train_tokens, iter_num),
                     checkpoint=bool(to_write))
            final, best_iter = (iter_num, losses["val"]), iter_num if is_best else best_iter
            best_val_loss = min(best_val_loss, losses["val"])
            if to_write:
                save(*to_write)
            timer_start, timed_iters = time.time(), 0
        if cfg.eval_only or iter_num >= cfg.max_iters:
            break

        lr = set_lr(optimizer, iter_num, cfg)
        x, y, micro_batches = get_train_batch(run.data_dir, cfg, iter_num, mesh.dp_rank, run.layout.micro_steps,
                                              mesh.device)
        seeds = [dropout_seed(cfg.seed, iter_num, g) for g in micro_batches]
        logged = iter_num % cfg.log_interval == 0
        train_loss, grad_norm, layer_norms = train_step(
            model, raw_model, optimizer, scaler, x, y, seeds, cfg.grad_clip, mesh.tp_group, run.autocast_ctx,
            mesh.device, keep_grads=run.graphs, grad_groups=layers if logged else None)
        nonfinite.update(iter_num, train_loss, None if scaler.is_enabled() else grad_norm)
        timed_iters += 1

        if logged:
            dt = (time.time() - timer_start) / timed_iters
            mfu = estimate_mfu(raw_model, cfg, run.tokens_per_iter, dt, run.peak_flops)
            log_train(log, wandb, mesh, iter_num, lr, train_loss, grad_norm, nonfinite, check_finite, dt, mfu,
                      run.tokens_per_iter, None if layer_norms is None else (layer_names, layer_norms))
            timer_start, timed_iters = time.time(), 0
        iter_num += 1
        if iter_num == start_iter + 1:
            # the first step is done: from now on a signal stops after a step, with a checkpoint. Before it
            # (the first eval, and when compiled minutes of compiling) it stops at once: nothing new to save
            control.start()
        signum = control.agreed_stop()  # SIGINT/SIGTERM: every rank stops after the same step
        if signum:
            say_stopped(log, signum, iter_num, ckpt_path, save([ckpt_path]))
            break

    if not cfg.eval_only:  # finished, or stopped by a signal (with a checkpoint): the last block and record
        if best_iter is None and mesh.is_master:  # a resumed run's best from before the resume: from the log
            best_iter = best_eval_iter(os.path.join(cfg.out_dir, "metrics.jsonl"), best_val_loss, iter_num)
        say_summary(log, cfg, mesh, trained=iter_num - start_iter, iter_num=iter_num,
                    tokens_per_iter=run.tokens_per_iter, passes=passes_read(cfg, run.train_tokens, iter_num),
                    seconds=time.time() - run_start, final=final, best_val=best_val_loss, best_iter=best_iter,
                    syncs=syncs, ckpt_path=ckpt_path, stopped=signal.Signals(signum).name if signum else None)
    return signum


def train_branch(run, trunk_cfg, budget, out_dir, trunk_log):
    """One cooldown branch of the trunk that just ended (its branches=), in this process: what `--init_from=branch
    --branch_from=<the trunk's ckpt_<s>.pt> --max_iters=B --lr_decay_iters=B --out_dir=...` does in a process of its
    own (tests/test_budgets.py compares them bit for bit), with the model built and compiled already. A branch whose
    out_dir holds a run is left to a process of its own (a resume). Returns the signal that stopped it, or 0."""
    held = run.mesh.is_master and os.path.isdir(out_dir) and bool(os.listdir(out_dir))
    if run.control.any_error(held):  # rank 0's look, for every rank: its open_run below fills the folder
        note = f"branch {budget} is not trained here: {out_dir} holds a run already (resume it with --init_from=resume)"
        trunk_log.write(f"note: {note}", {"type": "note", "note": note})
        return 0
    source = os.path.join(trunk_cfg.out_dir, f"ckpt_{wsd_decay_start(trunk_cfg, budget)}.pt")
    trunk_log.write(f"branch {budget}: trained in this process from {source} into {out_dir}",
                    {"type": "branch_out", "budget": budget, "from": source, "out_dir": out_dir})
    try:
        cfg = merge(trunk_cfg, {"out_dir": out_dir, "init_from": "branch", "branch_from": source, "max_iters": budget,
                                "lr_decay_iters": budget, "save_iters": "", "branches": ""})
    except ConfigError as e:
        fail(f"branch {budget}: {e}", run.mesh)
    cfg, init = read_init(cfg, run.vocab_size, run.data_dir, run.mesh)
    try:  # in place: the compiled model (and its CUDA graphs) keeps its parameters' storage
        load_weights(run.raw_model, init.checkpoint, init.path)
    except CheckpointError as e:
        fail(str(e), run.mesh)
    log, _ = open_run(cfg, run.layout, run.mesh, run.control, run.raw_model, run.dtype, run.plan)
    iter_num, best_val_loss = restore(init, run.optimizer, run.scaler, run.raw_model, run.dtype, run.mesh, log,
                                      os.path.join(out_dir, "ckpt.pt"), cfg)
    return train(run, cfg, log, None, iter_num, best_val_loss)


# ----------------------------------------------------------------------------- main
def main(argv):
    cfg, layout = read_request(argv)
    if cfg is None:
        return 0  # --help
    mesh = start_processes(cfg, layout)
    control = Control(mesh, cfg.stall_timeout)  # every rank, now: it creates a process group
    data_dir, vocab_size, dtype = check_request(cfg, layout, mesh)
    cfg, init = read_init(cfg, vocab_size, data_dir, mesh)
    run = SimpleNamespace(mesh=mesh, control=control, layout=layout, dtype=dtype, data_dir=data_dir,
                          vocab_size=vocab_size, raw_model=build_model(cfg, vocab_size, init, mesh))
    run.plan = resolve_compile(cfg, mesh.device.split(":")[0])  # 'auto': compiled + CUDA graphs on CUDA, eager on CPU
    try:  # async_tp's device and compile, now that both are resolved
        check_tp_comm_overlap(cfg, mesh.device.split(":")[0], run.plan.compiled, run.plan.mode == "reduce-overhead")
    except ConfigError as e:
        fail(str(e), mesh)
    log, derived = open_run(cfg, layout, mesh, control, run.raw_model, dtype, run.plan)
    run.autocast_ctx, run.scaler = precision(mesh.device, dtype)
    run.optimizer = configure_optimizer(run.raw_model, cfg, mesh.device)
    iter_num, best_val_loss = restore(init, run.optimizer, run.scaler, run.raw_model, dtype, mesh, log,
                                      os.path.join(cfg.out_dir, "ckpt.pt"), cfg)
    run.model = wrap(run.raw_model, cfg, mesh, run.plan)
    run.graphs = run.plan.compiled and run.plan.mode == "reduce-overhead"  # CUDA graphs: .grad kept (train_step)
    run.model_args = dataclasses.asdict(run.raw_model.config)  # GPTConfig's fields, as checkpoints keep them
    run.tokens_per_iter = derived["tokens_per_iter"]
    run.train_tokens = os.path.getsize(os.path.join(data_dir, "train.bin")) // 2
    run.peak_flops = peak_flops_total(mesh.device, dtype, mesh.world_size)
    run.layers = layer_groups(run.raw_model) if cfg.log_layer_grad_norms else ((), None)
    wandb = start_wandb(cfg, mesh, derived)

    signum = train(run, cfg, log, wandb, iter_num, best_val_loss)
    for budget, out_dir in ([] if signum or cfg.eval_only else branch_list(cfg)):
        signum = train_branch(run, cfg, budget, out_dir, log)
        if signum:
            break
    # the compiled model, its graphs' inputs and outputs and the optimizer's state may each keep alive what
    # references an NCCL communicator: dropped here before the teardown
    run.__dict__.clear()
    stuck_stage = shut_down(control, wandb)
    return end_process(128 + signum if signum else 0, stuck_stage)  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them


if __name__ == "__main__":
    install_signal_handlers()  # SIGINT/SIGTERM: at once until the first step is done, then after a step with a checkpoint
    watch_parent()  # kill -9 of torchrun: its workers stop too, instead of training on as orphans
    leave_on_exit(exits_fast())  # the teardown leaves to os._exit what the process's end frees (parallel/mesh.py)
    exit_now(report_fatal(main, sys.argv[1:]))  # after the teardown: no interpreter finalization (cli_guard.py)
