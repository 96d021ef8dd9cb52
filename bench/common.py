"""The helpers the benchmarks share: what ran (commit, command line), the device, timing, lists of
sync policies, TP communication modes (--tp_comm), result files and plots.

The scripts under bench/ run as modules from the repository root (`python -m bench.tp_latency`,
`torchrun --standalone --nproc_per_node=2 -m bench.tp_latency`), which puts the root on sys.path, so
they import the project's packages directly. Run as a file instead, a script has only bench/ on
sys.path: it stops in one line that names the module command.

A script that reuses another's benchmark definitions imports it as a module of this package
(profile_policy.py profiles tp_latency.py's workloads: `from bench.tp_latency import make_workload`).

torch is imported inside the functions that use it, so a script that only reads results and plots
(experiments/char_sweep/pareto.py) does not pay for it.
"""
import json
import os
import re
import shlex
import time

from atomic_files import folder_problem
from training.config import REPO, write_text
from training.records import source_commit  # noqa: F401  (the benchmarks record it; one definition)

GPT2_VOCAB = 50304  # GPT-2's 50257 tokens padded to a multiple of 64, as nanoGPT trains it


# ----------------------------------------------------------------------------- what ran
def command_line(script, argv):
    """The command that ran `script` (its __file__) with `argv`, as typed from the repository root:
    results record it so that a run can be repeated. A script in a folder ran as a module
    (bench/tp_latency.py -> -m bench.tp_latency)."""
    launch = (f"torchrun --standalone --nproc_per_node={os.environ.get('WORLD_SIZE', '1')} "
              if "LOCAL_RANK" in os.environ else "python ")
    path = os.path.relpath(os.path.abspath(script), REPO)
    target = ["-m", os.path.splitext(path)[0].replace(os.sep, ".")] if os.sep in path else [path]
    return launch + shlex.join([*target, *argv])


def multicast_off():
    """Keep NVLink multicast off unless the environment says otherwise: the lent multi-GPU machines
    need it off. Call before any NCCL communicator exists."""
    for key, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                       ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(key, value)


# ----------------------------------------------------------------------------- device and timing
def use_cuda(device):
    """--device auto, cuda or cpu -> whether to run on CUDA; 'cuda' where there is none exits in one line."""
    import torch
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here (use --device cpu or auto)")
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def call_times(fn, calls, cuda):
    """ms of each of `calls` back-to-back calls of fn, bracketed by CUDA events (wall clock on CPU)."""
    import torch
    if not cuda:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return times
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def as_graph(fn, pool=None):
    """Capture fn() into a CUDA graph (after a warm-up on a side stream); returns its replay.
    Graphs given one `pool` share their memory: only for graphs never replayed at the same time."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        fn()

    def replay(keep_alive=fn):
        # The graph reads and writes memory that only fn's closure holds (its inputs, a decode step's
        # KV cache), allocated before the capture, so outside the graph's pool. Returning graph.replay
        # alone let those tensors be freed with fn: the caching allocator then gave their memory to
        # other tensors, which every replay overwrote (illegal memory accesses and SIGSEGVs in
        # bench/tp_latency.py --modes graph, where nothing else held fn).
        graph.replay()
    return replay


# ----------------------------------------------------------------------------- arguments
def split_policies(text):
    """Policies separated by ';', or by ',' where a comma inside a selective: spec is kept with it
    ('baseline,selective:m0-3,m5,grouped:2' -> baseline, selective:m0-3,m5, grouped:2)."""
    if ";" in text:
        return [p.strip() for p in text.split(";") if p.strip()]
    out = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if out and out[-1].startswith("selective:") and re.fullmatch(r"[am]?[0-9]+(-[0-9]+)?", token):
            out[-1] += "," + token
        else:
            out.append(token)
    return out


# ----------------------------------------------------------------------------- TP communication (--tp_comm)
# train_throughput.py and tp_latency.py take the same values, name their rows alike and build the same models:
#     off                    plain TP: each kept sync all-reduces
#     sp                     Megatron's sequence parallelism (GPT's sequence_parallel, parallel/sequence.py)
#     chunked[:K], async_tp  sequence parallelism with that tp_comm_overlap (parallel/overlap.py)
# async_tp is inductor's micro-pipeline TP pass over symmetric memory: a row that cannot run it (CPU, or an uncompiled
# mode) holds ASYNC_TP_NEEDS instead of failing the run, as the trainer refuses it (training/config.py).
ALLOWED = "off, sp, chunked, chunked:K (K in 1-64) or async_tp"
ASYNC_TP_NEEDS = "tp_comm async_tp needs CUDA and a compiled mode (inductor's micro-pipeline TP pass)"


def parse_tp_comm(text, flag="--tp_comm"):
    """'off,sp,chunked:4' -> ['off', 'sp', 'chunked:4'] (each once, in order). A bad value raises ValueError, one line
    naming the flag, the value and what is allowed."""
    values = list(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    for value in values or [""]:
        if value in ("off", "sp"):
            continue
        from model.gpt_config import parse_tp_comm_overlap  # here: scripts that only read results skip the model
        try:
            parse_tp_comm_overlap(value)
        except ValueError:
            raise ValueError(f"{flag}={text!r}: {value!r} is not {ALLOWED}") from None
    return values


def tp_comm_tag(value):
    """How rows name the mode: '' for off (rows as before the option), 'sp', or 'sp+<overlap>'."""
    return "" if value == "off" else "sp" if value == "sp" else f"sp+{value}"


def model_options(value):
    """GPT's constructor arguments for the mode."""
    return dict(sequence_parallel=value != "off", tp_comm_overlap="off" if value in ("off", "sp") else value)


def async_tp_problem(value, cuda, compiled):
    """ASYNC_TP_NEEDS where the mode is async_tp and the row cannot run it, else None."""
    return ASYNC_TP_NEEDS if value == "async_tp" and not (cuda and compiled) else None


# ----------------------------------------------------------------------------- results
def md_row(cells):
    """One row of a markdown table."""
    return "| " + " | ".join(cells) + " |"


LOCAL_RESULTS = os.path.join(REPO, "bench", "results", "local")  # ignored by git (.gitignore)


def results_dir(out_dir, name, device):
    """Where a benchmark writes: --out_dir as given (so replacing a committed table under bench/results/ takes
    naming it), else a fresh folder bench/results/local/<name>-<device>-<time>-<pid>/ that git ignores: a
    default run never overwrites a stored result. A given --out_dir that cannot be a folder stops here,
    before the work, in one line."""
    if out_dir is None:
        tag = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "device"
        return os.path.join(LOCAL_RESULTS, f"{name}-{tag}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    problem = out_dir_problem(out_dir)
    if problem:
        raise SystemExit(f"error: {problem}")
    return out_dir


def out_dir_problem(path, flag="--out_dir"):
    """Why path cannot take the results (one line naming flag and path), or None (atomic_files.py)."""
    return folder_problem(path, flag)


def device_tag(cuda):
    """The device a result folder is named after: the GPU's name, or cpu."""
    import torch
    return torch.cuda.get_device_name() if cuda else "cpu"


def save_results(out_dir, name, data, markdown, indent=1):
    """<out_dir>/<name>.json (data) and <name>.md (markdown), each replaced whole: a run that is cut
    short leaves the files of its last save."""
    write_text(os.path.join(out_dir, name + ".json"), json.dumps(data, indent=indent))
    write_text(os.path.join(out_dir, name + ".md"), markdown)


def pyplot():
    """matplotlib.pyplot drawing to files only (no display on the GPU machines)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
