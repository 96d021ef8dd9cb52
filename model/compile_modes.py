"""torch.compile settings for the decode step, by name, and the one function that applies them; and the
inductor settings under which compiled training at tp > 1 equals eager (exact_training_settings).

A decode step multiplies each weight W [N, K] by one row per sequence, y = x W^T + b with x [M, K]
and M = batch. Its cost is reading W once. The cuBLAS kernels chosen for M = 1 read it at about a
tenth of an H200's bandwidth (4.3-4.8 us for 1.8-2.4 MB, bench/results/profiles/
profile_124m_n2_decode_b1_graph_tp2.txt). The modes:

  default                     inductor as torch.compile ships it: every GEMM on cuBLAS.
  max-autotune-no-cudagraphs  inductor times Triton GEMM templates (other tiles, split-K, fused
                              epilogues) against cuBLAS per GEMM shape.
  coordinate-descent          inductor with coordinate_descent_tuning (gpt-fast's setting). On a GPU
                              it rewrites a one-row mm as y_n = sum_k x_k W_nk, one Triton reduction
                              kernel over k whose block sizes it tunes (bmm likewise). It rewrites
                              mm only: an addmm (a GEMM with its bias, as GPT-2's) stays on cuBLAS.
                              So this mode first splits a one-row addmm into mm + b (baddbmm into
                              bmm + b); the bias then rides in the reduction's epilogue.

The settings are inductor's: another backend (aot_eager, for the CPU tests) traces without them.
The modes that capture CUDA graphs of their own (reduce-overhead) are left out: decode="graph"
captures the step itself, collectives included.

torch is imported in the functions that use it: sample.py and bench/sample_decode.py check their --compile_mode
against COMPILE_MODES before torch is imported (seconds), so that a bad option is answered at once.
"""


def _one_row_gemm_split(product, row_dim, inductor_own):
    """A decomposition of addmm (product mm, rows in dim 0) or baddbmm (bmm, dim 1): product + bias
    where the GEMM has one row and plain scaling; otherwise inductor's own decomposition, if any."""
    # imported here, not at the top: it pulls in sympy, a fifth of the start-up of every process that
    # imports the model (the trainer, sample.py), which mostly never compiles
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    def gemm(bias, a, b, *args, **kwargs):
        plain = not args and kwargs.get("beta", 1) == 1 and kwargs.get("alpha", 1) == 1
        if plain and statically_known_true(a.shape[row_dim] == 1):
            return product(a, b) + bias
        return NotImplemented if inductor_own is None else inductor_own(bias, a, b, *args, **kwargs)
    return gemm


def inductor_coordinate_descent(graph_module, example_inputs):
    """A torch.compile backend: inductor under coordinate_descent_tuning, one-row addmm and baddbmm
    (column-parallel GEMMs of shared and of per-track inputs) split first."""
    import torch
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    aten = torch.ops.aten
    table = dict(select_decomp_table())
    for op, product, row_dim in ((aten.addmm.default, torch.mm, 0), (aten.baddbmm.default, torch.bmm, 1)):
        table[op] = _one_row_gemm_split(product, row_dim, table.get(op))
    return compile_fx(graph_module, example_inputs, config_patches={"coordinate_descent_tuning": True},
                      decompositions=table)


COMPILE_MODES = {"default": {}, "max-autotune-no-cudagraphs": dict(mode="max-autotune-no-cudagraphs"),
                 "coordinate-descent": dict(backend=inductor_coordinate_descent)}


def check_compile_mode(mode):
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode={mode!r}; allowed: {', '.join(map(repr, COMPILE_MODES))}")


def compile_step(fn, backend="inductor", mode="default", fullgraph=True):
    """torch.compile(fn) with the settings COMPILE_MODES[mode] names when backend is inductor."""
    import torch
    check_compile_mode(mode)
    settings = {"backend": backend, **(COMPILE_MODES[mode] if backend == "inductor" else {})}
    return torch.compile(fn, fullgraph=fullgraph, **settings)


# At tp > 1 a region's replicated parameters (LayerNorm weights among them) enter the graph through f as rows of
# one tensor. inductor on CUDA (torch 2.10 and later) fuses a LayerNorm weight's gradient, a sum over rows, with the
# input gradient's reduction over columns ("mix-order reduction"); at 124M's launch shape (16k rows per track) it
# gave those weights gradients wrong by up to 2e5 relative; with it off every policy's compiled gradients match
# eager's and the launch's val loss equals eager's (bench/results/issue49/README.md, "Compiled at tp=2";
# https://github.com/pytorch/pytorch/issues/193061). At tp = 1 the parameters do not pass f, and the check passed
# with it on.
EXACT_TRAINING_SETTINGS = {"triton.mix_order_reduction": False}


def _setting(key):
    """(object, attribute name) of an inductor config key such as 'triton.mix_order_reduction'; None if absent."""
    import torch._inductor.config as inductor_config
    section, _, name = key.rpartition(".")
    owner = getattr(inductor_config, section, None) if section else inductor_config
    return (owner, name) if owner is not None and hasattr(owner, name) else None


_SHIPPED = {}  # each key's value before apply_exact_training_settings first changed it


def exact_training_settings(tp):
    """{inductor config key: value} that compiled training at this tp sets, of the keys this torch has."""
    return {} if tp == 1 else {k: v for k, v in EXACT_TRAINING_SETTINGS.items() if _setting(k) is not None}


def apply_exact_training_settings(tp):
    """Sets exact_training_settings(tp) in torch._inductor.config for the process, and puts back inductor's own
    values of the others (a benchmark compiles tp = 1 and tp = 2 models in one process); returns the settings.
    Global, not a patch around torch.compile: compiling happens at the first call, after torch.compile returns."""
    settings = exact_training_settings(tp)
    for key in EXACT_TRAINING_SETTINGS:
        where = _setting(key)
        if where is None:
            continue
        _SHIPPED.setdefault(key, getattr(*where))
        setattr(*where, settings.get(key, _SHIPPED[key]))
    return settings
