"""bench/decode_gemm.py on CPU at a tiny shape: a row per (GEMM, M), every variant timed, and every
variant computes what F.linear (+ GELU) computes."""
import json

import pytest

from bench import decode_gemm


def test_decode_gemm_smoke_times_every_variant(tmp_path):
    assert decode_gemm.main(["--size", "tiny", "--device", "cpu", "--compile_backend", "aot_eager", "--repeats", "2",
                             "--rows", "1,3", "--out_dir", str(tmp_path)]) == 0
    rows = json.load(open(tmp_path / "decode_gemm.json"))["rows"]
    assert len(rows) == 5 * 2 * len(decode_gemm.VARIANTS)  # GEMMs x M x variants at tp=2
    assert all(r["us"] > 0 and r["max_abs_err"] < 1e-5 for r in rows)
    assert {r["N"] for r in rows if r["gemm"] == "mlp.c_fc"} == {4 * 64 // 2}
    table = (tmp_path / "decode_gemm.md").read_text()
    assert table.count("| 2 | mlp.c_fc + gelu | 128 × 64 |") == 2


@pytest.mark.parametrize("args,message", [
    (["--variants", "cublas,magic"], "['magic'] not allowed"),
    (["--tps", "5"], "--tps must divide n_embd=768"),
    (["--rows", "0"], "--rows be >= 1"),
    (["--rows", "one"], "comma-separated integers"),
])
def test_decode_gemm_rejects_bad_arguments(args, message, capsys):
    with pytest.raises(SystemExit):
        decode_gemm.main([*args, "--device", "cpu"])
    assert message in capsys.readouterr().err
