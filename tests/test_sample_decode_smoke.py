"""bench/sample_decode.py runs the real sample.py on a checkpoint it writes, and tabulates tokens/s."""
import os

from bench import sample_decode
import pytest

pytestmark = pytest.mark.slow  # the slow tier (pytest.ini): bash scripts/test.sh --slow; CI runs its gate tests


def test_sample_decode_smoke_writes_a_row_per_mode(tmp_path):
    out = tmp_path / "res"
    assert sample_decode.main(["--shape", "tiny", "--nprocs", "1", "--modes", "eager", "--device", "cpu",
                               "--max_new_tokens", "4", "--num_samples", "2", "--check_tokens", "3",
                               "--out_dir", str(out)]) == 0
    table = (out / "sample_decode.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| baseline |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[:4] == ["baseline", "1", "eager", ""] and float(cells[4]) > 0 and cells[6] == "1.00" and cells[7] == "yes"


def test_sample_decode_rejects_an_unknown_compile_mode(capsys):
    import pytest
    with pytest.raises(SystemExit):
        sample_decode.main(["--compile_modes", "default,reduce-overhead", "--device", "cpu"])
    assert "['reduce-overhead'] not allowed" in capsys.readouterr().err
