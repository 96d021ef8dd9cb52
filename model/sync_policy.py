"""Sync policies: which of the 2*n_layer tensor-parallel sync points all-reduce.

A policy is data: a tuple `sync` of 2*n_layer booleans, point 2*l after the attention of
layer l and point 2*l+1 after its MLP, plus `parallel` (the MLP of every block reads the
block's input, as in PaLM / GPT-J) and `ladder` (every sublayer reads the stream from before the
previous sublayer's output arrived, as in Ladder Residual). The model turns it into computation
(see model/gpt.py).

Spec strings (the command line's --sync_policy=...):
    baseline          every point: 2*n_layer syncs (standard Megatron TP)
    spd               only MLP points: n_layer syncs (Sync-Point Drop drops every attention sync)
    parallel          PaLM parallel block y = x + Attn(LN1 x) + MLP(LN2 x): n_layer exact syncs
    ladder            every point, but each all-reduce runs while the next sublayer computes: sublayer
                      j reads the stream without sublayer j-1's output (Ladder Residual)
    grouped:G         sync after the MLP of every G-th layer: n_layer/G syncs (Parallel-Track)
    selective:SPEC    any set. SPEC is a comma-separated list of tokens:
                        a<i>      the attention point of layer i (0-based)
                        m<i>      the MLP point of layer i
                        <i>       both points of layer i
                      each with an optional range: a2-5, m0-3, 4-7.
                      The last layer's MLP point (the final sync before ln_f) must be listed.
                      e.g. selective:m0-3,m5,m7,m9-11 has 9 syncs at 12 layers.
"""
import re
from dataclasses import dataclass

POLICY_NAMES = ("baseline", "spd", "parallel", "ladder", "grouped:G", "selective:SPEC")


@dataclass(frozen=True)
class SyncPolicy:
    spec: str
    sync: tuple          # 2*n_layer bools
    parallel: bool = False
    ladder: bool = False

    @property
    def n_syncs(self):
        return sum(self.sync)

    def describe(self):
        return ",".join(("a" if p % 2 == 0 else "m") + str(p // 2) for p, s in enumerate(self.sync) if s)


def _error(spec, why):
    return ValueError(f"bad sync_policy {spec!r}: {why}. Allowed: {', '.join(POLICY_NAMES)} "
                      f"(selective SPEC: comma-separated a<i>, m<i>, <i> or ranges like m0-3)")


def _parse_selective(spec, body, n_layer):
    points = set()
    for token in (t.strip() for t in body.split(",")):
        if not token:
            raise _error(spec, "empty token (a trailing, leading or doubled comma)")
        # [0-9], not \d: only ASCII digits (int() would also read Arabic-Indic or full-width digits)
        m = re.fullmatch(r"([am]?)([0-9]+)(?:-([0-9]+))?", token)
        if not m:
            raise _error(spec, f"token {token!r} is not a<i>, m<i>, <i> or a range like m0-3 (ASCII digits)")
        kind, lo = m.group(1), int(m.group(2))
        hi = int(m.group(3)) if m.group(3) is not None else lo
        if hi < lo:
            raise _error(spec, f"token {token!r} is a reversed range; write {kind}{hi}-{lo}")
        if hi >= n_layer:
            raise _error(spec, f"token {token!r} names layer {hi}, outside 0..{n_layer - 1}")
        for layer in range(lo, hi + 1):
            if kind in ("", "a"):
                points.add(2 * layer)
            if kind in ("", "m"):
                points.add(2 * layer + 1)
    return tuple(p in points for p in range(2 * n_layer))


def parse_sync_policy(spec, n_layer):
    """Parse a spec string (see module docstring) into a SyncPolicy for n_layer layers.
    Any bad spec or n_layer raises ValueError with a one-line message."""
    if not isinstance(spec, str):
        raise _error(spec, f"expected a string, got {type(spec).__name__}")
    if not isinstance(n_layer, int) or isinstance(n_layer, bool) or n_layer < 1:
        raise ValueError(f"bad n_layer={n_layer!r} for sync_policy {spec!r}: must be an int >= 1")
    n_points = 2 * n_layer
    name, colon, arg = spec.partition(":")
    parallel = ladder = False
    if name in ("baseline", "spd", "parallel", "ladder") and colon:
        raise _error(spec, f"{name!r} takes no ':' argument; write {name!r}")
    if name in ("baseline", "ladder"):
        sync = (True,) * n_points
        ladder = name == "ladder"
    elif name in ("spd", "parallel"):
        sync = tuple(p % 2 == 1 for p in range(n_points))
        parallel = name == "parallel"
    elif name == "grouped":
        divisors = [g for g in range(1, n_layer + 1) if n_layer % g == 0]
        if not re.fullmatch(r"[0-9]+", arg) or int(arg) < 1 or n_layer % int(arg) != 0:
            raise _error(spec, f"grouped:G needs G dividing n_layer={n_layer} (ASCII digits), one of {divisors}")
        group = int(arg)
        sync = tuple(p % 2 == 1 and (p // 2 + 1) % group == 0 for p in range(n_points))
    elif name == "selective":
        if not arg.strip():
            raise _error(spec, "selective:SPEC needs a non-empty SPEC, e.g. selective:m0-3,m5")
        sync = _parse_selective(spec, arg, n_layer)
    else:
        raise _error(spec, f"unknown policy name {name!r}")
    if not sync[-1]:
        raise _error(spec, f"the final sync before ln_f (m{n_layer - 1}) is required")
    return SyncPolicy(spec=spec, sync=sync, parallel=parallel, ladder=ladder)
