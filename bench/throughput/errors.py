"""What a failed benchmark variant records about its exception.

A row's one-line `error` (type and first line) fits a table cell, but a dynamo error's first line names only the
category ("Unsupported: Observed exception"); the exception that user code raised, and where, come on later lines and
in the exception's causes. The first tp=4 run on H200 lost exactly that (bench/results/tp4_comm_h200/README.md), so
a failed row keeps the whole message, the chain of causes and the innermost traceback frames as well.
"""
import traceback

FRAMES = 8  # innermost frames kept: enough to reach the op or traced line that raised, past the benchmark's own
MESSAGE_CHARS = 20_000  # a dynamo message with its user-code stack is a few thousand; a bound keeps the JSON small
CAUSES = 4


def one_line(e):
    """'Type: first line of the message', at most 300 characters: the table's cell."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def _frames(tb, n):
    return [f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in traceback.extract_tb(tb)[-n:]]


def _clip(text):
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + f"\n... ({len(text) - MESSAGE_CHARS} more)"


def describe(e, frames=FRAMES):
    """{type, message, traceback, causes} of e: the whole message, its innermost `frames` traceback frames, and each
    exception it was raised from or while handling (its own type, message and frames), outermost first."""
    def one(x):
        return {"type": f"{type(x).__module__}.{type(x).__qualname__}".removeprefix("builtins."),
                "message": _clip(str(x)), "traceback": _frames(x.__traceback__, frames)}

    out, seen, cause = one(e), {id(e)}, e.__cause__ or e.__context__
    out["causes"] = []
    while cause is not None and id(cause) not in seen and len(out["causes"]) < CAUSES:
        seen.add(id(cause))
        out["causes"].append(one(cause))
        cause = cause.__cause__ or cause.__context__
    return out


def text(detail, indent=""):
    """describe()'s record as lines for a log: type and message, then the frames, then each cause the same way."""
    def block(d, head):
        lines = [f"{indent}{head}{d['type']}: " + d["message"].replace("\n", "\n" + indent + "  ")]
        lines += [f"{indent}  at {frame}" for frame in d["traceback"]]
        return lines

    lines = block(detail, "")
    for cause in detail.get("causes", []):
        lines += block(cause, "caused by ")
    return "\n".join(lines)


def markdown(rows):
    """An 'Errors' section: per failed row, describe()'s record in a fenced block (none: no lines)."""
    failed = [r for r in rows if r.get("error_detail")]
    if not failed:
        return []
    out = ["", "## Errors", "", "Rank 0's exception per failed row: type, whole message, innermost frames, causes."]
    for r in failed:
        body = text(r["error_detail"]).replace("```", "'''")
        out += ["", f"**{r['name']}**", "", "```text", body, "```"]
    return out
