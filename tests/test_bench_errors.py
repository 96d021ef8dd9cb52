"""bench/throughput/errors.py: a failed variant keeps its exception's type, whole message, causes and innermost
frames (a dynamo error's first line names only its category), and the report prints them under Errors."""
from bench.throughput import errors
from bench.throughput.report import markdown


def _raise_chain():
    def inner():
        raise KeyError("the piece's address")

    try:
        inner()
    except KeyError as e:
        raise RuntimeError("Unsupported: Observed exception\n  Explanation: user code raised\n  from user code: "
                           "line 3") from e


def _caught():
    try:
        _raise_chain()
    except RuntimeError as e:
        return e


def test_describe_keeps_the_whole_message_the_cause_and_the_frames():
    d = errors.describe(_caught())
    assert d["type"] == "RuntimeError" and d["message"].endswith("from user code: line 3")
    assert "_raise_chain" in d["traceback"][-1] and "raise RuntimeError" in d["traceback"][-1]
    (cause,) = d["causes"]
    assert cause["type"] == "KeyError" and "the piece's address" in cause["message"]
    assert cause["traceback"][-1].split(" in ")[1].startswith("inner:")
    assert errors.one_line(_caught()) == "RuntimeError: Unsupported: Observed exception"


def test_long_messages_and_deep_tracebacks_are_bounded():
    def deep(n):
        if n == 0:
            raise ValueError("x" * (errors.MESSAGE_CHARS + 50))
        deep(n - 1)

    try:
        deep(20)
    except ValueError as e:
        d = errors.describe(e)
    assert len(d["traceback"]) == errors.FRAMES and d["causes"] == []
    assert d["message"].endswith("(50 more)") and len(d["message"]) < errors.MESSAGE_CHARS + 20


def test_report_prints_the_record_under_errors():
    meta = dict(device="CPU", n_gpus=0, world_size=2, torch="t", commit="c", command="cmd", size="tiny", n_layer=4,
                n_head=4, n_embd=64, vocab_size=512, batch_size=1, seq_len=8, micro_steps=1, dtype="float32",
                warmup=0, iters=1)
    row = dict(name="ours tp2 n2 baseline compiled sp+async_tp", tp=2, dp=1, gpus=2, n_tracks=2, policy="baseline",
               mode="compiled", syncs_per_forward=None, error=errors.one_line(_caught()),
               error_detail=errors.describe(_caught()))
    md = markdown(meta, [row], [])
    table_line = next(line for line in md.splitlines() if line.startswith("| ours"))
    assert "error: RuntimeError: Unsupported: Observed exception |" in table_line
    errors_part = md.split("## Errors", 1)[1]
    assert "**ours tp2 n2 baseline compiled sp+async_tp**" in errors_part
    assert "from user code: line 3" in errors_part and "caused by KeyError" in errors_part
    assert "## Errors" not in markdown(meta, [dict(row, error_detail=None)], [])
