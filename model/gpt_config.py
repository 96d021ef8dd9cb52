"""GPTConfig: the model's keys (nanoGPT's, with n_tracks and sync_policy), validated here and only here, without
torch, so that training/config.py checks a request's model before the trainer imports torch. model/gpt.py builds
the model from it (and re-exports it).
"""
from dataclasses import dataclass

from model.sync_policy import parse_sync_policy


@dataclass
class GPTConfig:
    """The model's keys, validated here and only here; sync_policy is parsed once, into .policy."""
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    n_tracks: int = 1
    sync_policy: str = "baseline"

    def __post_init__(self):
        """Check types and ranges: a bad value raises ValueError with one line naming it."""
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "n_tracks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):  # bool is an int: True is not 1 here
                raise ValueError(f"invalid {name}={value!r} ({type(value).__name__}); must be an int >= 1")
            # counts (layers, heads, tracks) size Python tuples per layer: 2**16 is far above any model; sizes
            # index tensors
            top = 2 ** 16 if name in ("n_layer", "n_head", "n_tracks") else 2 ** 31 - 1
            if not 1 <= value <= top:
                raise ValueError(f"invalid {name}={value!r}; must be in [1, {top}]")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.n_head % self.n_tracks != 0:
            divisors = [d for d in range(1, self.n_head + 1) if self.n_head % d == 0]
            raise ValueError(f"n_head={self.n_head} is not divisible by n_tracks={self.n_tracks}; "
                             f"n_tracks must be one of {divisors}")
        dropout = self.dropout
        if (not isinstance(dropout, (int, float)) or isinstance(dropout, bool)
                or not 0.0 <= dropout < 1.0):  # also rejects nan
            raise ValueError(f"invalid dropout={dropout!r}; must be in [0, 1)")
        if not isinstance(self.bias, bool):
            raise ValueError(f"invalid bias={self.bias!r} ({type(self.bias).__name__}); must be True or False")
        self.policy = parse_sync_policy(self.sync_policy, self.n_layer)  # ValueError naming the spec


TP_COMM_OVERLAP = ("off", "chunked", "chunked:K", "async_tp")
DEFAULT_CHUNKS = 2


def parse_tp_comm_overlap(spec):
    """A tp_comm_overlap value -> None ('off') or (mode, chunks): ('chunked', K) for 'chunked:K' (K in [1, 64];
    'chunked' is chunked:2), ('async_tp', 1). A bad value raises ValueError with one line naming it
    (parallel/overlap.py: what the modes compute)."""
    allowed = f"allowed: {', '.join(TP_COMM_OVERLAP)}"
    if not isinstance(spec, str):
        raise ValueError(f"invalid tp_comm_overlap={spec!r} ({type(spec).__name__}); {allowed}")
    if spec == "off":
        return None
    if spec == "async_tp":
        return ("async_tp", 1)
    mode, _, k = spec.partition(":")
    if mode == "chunked" and not k:
        return ("chunked", DEFAULT_CHUNKS)
    if mode == "chunked" and k.isdigit() and 1 <= int(k) <= 64:  # more pieces than that only shrink the GEMMs
        return ("chunked", int(k))
    raise ValueError(f"invalid tp_comm_overlap={spec!r}; {allowed} (K an int in [1, 64])")
