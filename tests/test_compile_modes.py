"""The decode step's compile modes (model/compile_modes.py). On the CPU, inductor keeps every GEMM on
its own kernels, so what is checked here is the rewrite that makes coordinate-descent reach GPT-2:
a one-row addmm (baddbmm) leaves the decompositions as mm (bmm) + bias (on a GPU, inductor then turns
that product into a tuned reduction), a GEMM of more rows keeps its bias, and the sampled tokens do not
change."""
import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from model.compile_modes import COMPILE_MODES, compile_step
from tests.test_model import batch, make


def linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def per_track_linear_gelu(x, w, b):  # as model.gpt.column_parallel on diverged tracks
    return F.gelu(torch.baddbmm(b, x, w))


def extern_gemms(mode, rows, fn=linear_gelu):
    """The extern GEMM calls of inductor's CPU code for fn(x, W, b), x of `rows` rows (per track)."""
    torch._dynamo.reset()
    if fn is linear_gelu:
        x, w, b = torch.randn(rows, 64), torch.randn(96, 64), torch.randn(96)
    else:
        x, w, b = torch.randn(3, rows, 64), torch.randn(3, 64, 96), torch.randn(3, 1, 96)
    compiled = compile_step(fn, "inductor", mode)
    # the CPU's post-grad pass would fuse mm + bias back into an addmm; on a GPU the mm is gone by then
    with inductor_config.patch(pattern_matcher=False, fx_graph_cache=False):
        y, code = run_and_get_code(compiled, x, w, b)
    torch.testing.assert_close(y, fn(x, w, b))
    return sorted({call.split("(")[0] for call in "\n".join(code).split() if call.startswith("extern_kernels.")})


@pytest.mark.slow
def test_coordinate_descent_splits_a_one_row_addmm_only():
    assert extern_gemms("default", 1) == ["extern_kernels.addmm"]
    assert extern_gemms("coordinate-descent", 1) == ["extern_kernels.mm"]
    assert extern_gemms("coordinate-descent", 4) == ["extern_kernels.addmm"]
    assert extern_gemms("default", 1, per_track_linear_gelu) == ["extern_kernels.baddbmm"]
    # the bmm left may become a CPU reduction kernel (inductor's rule for small bmm): no baddbmm is the point
    assert "extern_kernels.baddbmm" not in extern_gemms("coordinate-descent", 1, per_track_linear_gelu)
    assert extern_gemms("coordinate-descent", 4, per_track_linear_gelu) == ["extern_kernels.baddbmm"]


def test_compile_mode_settings_apply_to_inductor_only(monkeypatch):
    calls = []

    def spy(graph_module, example_inputs):
        calls.append(len(example_inputs))
        return graph_module.forward
    monkeypatch.setitem(COMPILE_MODES, "coordinate-descent", dict(backend=spy))
    x = torch.randn(3)
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        torch.testing.assert_close(compile_step(lambda t: t * 2, backend, "coordinate-descent")(x), x * 2)
    assert calls == [1]  # aot_eager traced without the mode's backend; inductor's name was replaced by it
    with pytest.raises(ValueError, match="compile_mode='reduce-overhead'; allowed: 'default', "):
        compile_step(lambda t: t, "inductor", "reduce-overhead")


@pytest.mark.slow
def test_coordinate_descent_decode_samples_the_eager_tokens():
    # two layers (inductor compiles the step twice, uncached): grouped:2 is one group over both, whose first
    # sublayer reads the shared stream and whose later ones read the tracks
    model = make("grouped:2", n_layer=2).eval()
    prompt, _ = batch(B=1, T=5)  # one sequence: every GEMM of the decode step has one row
    torch.manual_seed(7)
    eager = model.generate(prompt, 6, top_k=10, decode="eager")
    gemms_with_bias = {}
    for mode in ("default", "coordinate-descent"):
        torch._dynamo.reset()
        torch.manual_seed(7)
        with inductor_config.patch(pattern_matcher=False, fx_graph_cache=False):
            compiled, code = run_and_get_code(model.generate, prompt, 6, top_k=10, decode="compiled",
                                              compile_mode=mode)
        assert torch.equal(compiled, eager)
        code = "\n".join(code)
        gemms_with_bias[mode] = code.count("extern_kernels.addmm(") + code.count("extern_kernels.baddbmm(")
    # grouped:2 at tp=1 over 4 tracks has GEMMs of shared inputs (addmm) and of per-track ones (baddbmm)
    assert gemms_with_bias["default"] > 0 and gemms_with_bias["coordinate-descent"] == 0
