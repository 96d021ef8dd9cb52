"""bench/compile_check.py (compiled vs eager gradients, meant for the GPU) runs on the CPU and passes."""
from bench import compile_check


def test_compile_check_passes_on_cpu(tmp_path):
    assert compile_check.main(["--device", "cpu", "--backend", "aot_eager", "--steps", "2", "--policies",
                               "baseline,grouped:2", "--out_dir", str(tmp_path)]) == 0
    rows = [line for line in (tmp_path / "compile_check_tp1.md").read_text().splitlines() if line.endswith("PASS |")]
    assert [r.split("|")[1].strip() for r in rows] == ["baseline", "grouped:2"]
