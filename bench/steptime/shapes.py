"""The shapes, devices and workloads the step-time model prices (bench/step_model.py), and where its stored
results live."""
import os

from training.config import REPO


RESULTS = os.path.join(REPO, "bench", "results")

# name: (n_layer, n_head, n_embd, vocab). 70b: a 70B-class GPT shape (80 x 8192, MHA, 4C MLP); not
# Llama-2-70B's GQA and SwiGLU, which change its per-layer bytes and FLOPs by a few percent.
SHAPES = {"124m": (12, 12, 768, 50304), "medium": (24, 16, 1024, 50304), "large": (36, 20, 1280, 50304),
          "xl": (48, 25, 1600, 50304), "70b": (80, 64, 8192, 32000),
          "tiny": (2, 4, 64, 256)}  # tiny: the CPU test of `calibrate`
ALIASES = {"350m": "medium", "774m": "large", "1.5b": "xl"}
# Datasheet dense bf16 peak and HBM bandwidth (SXM). lat: a small kernel's time in a CUDA graph
# (bench/results/decode/README.md: 1.4-3.3 us per elementwise/LayerNorm kernel in the decode trace).
DEVICES = {"H200": dict(flops=989e12, hbm=4.8e12), "H100": dict(flops=989e12, hbm=3.35e12)}
LAT = 2.0e-6
MODELED_TPS = (1, 2, 4, 8)  # the tp the all-reduce laws cover (measured at 2 and 4, extrapolated to 8)
# workload: batch, tokens per sequence in this call, attention context, backward?, optimizer?
WORKLOADS = {"prefill_b1": (1, 1024, 1024, False, False), "prefill_b8": (8, 1024, 1024, False, False),
             "decode_b1": (1, 1, 1024, False, False), "decode_b8": (8, 1, 1024, False, False),
             "train_b8": (8, 1024, 1024, True, False), "train_b12": (12, 1024, 1024, True, True)}
GRAPH_MODES = {"graph", "compiled+graph", "compiled-graphs"}  # device-bound: the model's targets
# The trainer's step runs compiled with CUDA graphs (train_reduced_sync.py's compile='auto', bench.train_throughput's
# compiled-graphs rows): a question about it is priced by that mode's families, where the rows of train_b12 were
# validated. The eager kernels that `calibrate` times price it a third slower at 124m tp=2 (30.5 ms against 23.0
# modeled compiled and 23.2 measured on 2x H100: bench/results/ladder_compiled_overlap/tt_after/).
TRAINER_MODE = "compiled-graphs"


def answer_mode(workload):
    """The mode a question about `workload` is priced in: the trainer's for its step, CUDA graphs of eager kernels
    (bench.tp_latency's 'graph') for prefill and decode."""
    return TRAINER_MODE if workload == "train_b12" else "graph"


def shape_of(size):
    size = ALIASES.get(size, size)
    if size not in SHAPES:
        raise ValueError(f"unknown size {size!r}; allowed: {', '.join(list(SHAPES) + list(ALIASES))}")
    return size, SHAPES[size]


def tracks_problem(size, tp, n_tracks):
    """One line on why n_tracks is past what the model can build at this size, else None. A track holds whole
    attention heads (GPTConfig refuses n_head % n_tracks != 0), so there are at most n_head tracks; past them the
    streams term ran on unchecked (`analysis.plan --tp 8 --n_tracks 8192` printed savings of -7379%, issue 70).
    Heads need not divide by n_tracks here (predict: 1.5B has 25)."""
    name, (_, n_head, _, _) = shape_of(size)
    if n_tracks > n_head:
        return (f"--n_tracks {n_tracks}: allowed: a multiple of --tp {tp} up to {n_head}, the n_head of {name} "
                f"(a track holds at least one attention head)")
    return None


def device_name(text):
    for name in DEVICES:
        if name in text:
            return name
    raise ValueError(f"device {text!r} has no datasheet entry; allowed: {', '.join(DEVICES)}")


def mode_class(mode):
    """graph: CUDA graphs (device-bound); eager and compiled without graphs are host-bound at tp>1."""
    return "graph" if mode in GRAPH_MODES else mode
