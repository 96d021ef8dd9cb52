"""Ladder's all-reduces under torch.compile (inductor, CPU, 2 gloo ranks): the generated forward starts each
sublayer's all-reduce and waits for it only after the next sublayer's GEMMs, and computes what eager computes.

Before, a traced ladder g was one blocking op (parallel/comm.py), so a compiled ladder had no overlap at all
(bench/results/ladder_compiled_train/: 0.000 ms of all-reduce beside compute on 2x H200)."""
import re

import torch
import torch._dynamo

from parallel.launch import run_on_gloo
from tests.test_model import batch, make

N_LAYER = 3


def _forward_code_worker(rank, world_size):
    import torch.distributed as dist
    from torch._inductor.utils import run_and_get_code
    from parallel import comm
    group = dist.new_group([0, 1])
    torch._dynamo.reset()
    model = make("ladder", n_tracks=2, tp_group=group, n_layer=N_LAYER).eval()
    idx, _ = batch()
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    with torch.no_grad():
        eager_logits, _ = model(idx)
        (logits, _), codes = run_and_get_code(compiled, idx)
    assert not comm._in_flight
    calls = [line.strip() for code in codes for line in code.splitlines()
             if re.match(r"\s*(buf\d+ = torch\.ops\.reduced_sync\.all_reduce_(start|wait)|extern_kernels\.(add)?mm\()",
                         line)]
    return (logits - eager_logits).abs().max().item(), calls, model.syncs_per_forward


def test_compiled_ladder_waits_after_the_next_sublayers_gemms():
    """Per rank: logits equal to eager; one start and one wait per sync point (the plan's count, 2 per layer); and
    between each start and its wait (first in, first out) the GEMMs of the next sublayer (two: attention's qkv and
    projection, or the MLP's two), except the last, which the final LayerNorm waits for."""
    for diff, calls, syncs in run_on_gloo(_forward_code_worker, 2):
        assert diff < 1e-10, diff
        starts = [i for i, c in enumerate(calls) if "all_reduce_start" in c]
        waits = [i for i, c in enumerate(calls) if "all_reduce_wait" in c]
        assert len(starts) == len(waits) == syncs == 2 * N_LAYER, calls
        for s, w in zip(starts[:-1], waits[:-1]):
            gemms = sum("extern_kernels" in c for c in calls[s:w])
            assert s < w and gemms >= 2, (s, w, calls)
