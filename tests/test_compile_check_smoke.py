"""bench/compile_check.py (compiled vs eager gradients, meant for the GPU) runs on the CPU and passes."""
from bench import compile_check


def test_compile_check_passes_on_cpu(tmp_path):
    assert compile_check.main(["--device", "cpu", "--backend", "aot_eager", "--steps", "2", "--policies",
                               "baseline,grouped:2", "--out_dir", str(tmp_path)]) == 0
    rows = [line for line in (tmp_path / "compile_check_tp1.md").read_text().splitlines() if line.endswith("PASS |")]
    assert [r.split("|")[1].strip() for r in rows] == ["baseline", "grouped:2"]


def test_bisect_partial_grads_runs_each_variant_in_place_of_the_model_construction(tmp_path, monkeypatch):
    import importlib.util
    import os
    import sys
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "experiments", "char-sweep-miscompiled", "bisect_partial_grads.py")
    spec = importlib.util.spec_from_file_location("bisect_partial_grads", path)
    bisect = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bisect)  # dynamo looks traced functions' modules up by name
    spec.loader.exec_module(bisect)
    calls = []

    def recording(tensors, group):
        calls.append(len(tensors))
        return bisect.VARIANTS["cat_f"](tensors, group)
    monkeypatch.setitem(bisect.VARIANTS, "recording", recording)
    assert bisect.main(["--device", "cpu", "--backend", "aot_eager", "--steps", "1", "--policies", "grouped:2",
                        "--variants", "recording,cat_split", "--out_dir", str(tmp_path)]) == 0
    # bias=False: the replicated parameters in regions are LayerNorm weights. grouped:2 syncs only
    # after the MLPs of layers 1, 3, 5, so all 12 sublayers are track-local: 12 weights per forward
    assert calls and set(calls) == {12}
    rows = (tmp_path / "bisect_partial_grads.md").read_text().splitlines()
    assert [r.split("|")[1].strip() for r in rows if r.endswith("PASS |")] == ["recording", "cat_split"]
