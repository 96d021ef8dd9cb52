"""The plan of a sync policy: what GPT.forward reads instead of the policy (model/gpt.py's docstring states the math).

Per sync point p (p = 2l after layer l's attention, 2l + 1 after its MLP) one Step of constants, built once per
policy, so that the compiled forward has no branch on names or on the policy itself:

    megatron     the point reads the shared stream and syncs: f(LN(x)) -> sublayer -> g (plain Megatron TP)
    ladder       megatron, and its all-reduce overlaps the next sublayer (Ladder Residual)
    sync         the point all-reduces
    per_track    in a region: the output stays per track (a later sublayer of the region reads it)
    block_input  the sublayer reads the streams of its block's input (parallel's MLP)
    ln_weight, ln_bias, proj_bias   for a region's sublayer, slots in the partial-grad parameters
    sync_bias    a region's synced sublayer: the slot (after the parameters') of the bias its GEMM adds

Partial-grad parameters. Inside a track-local region the replicated parameters a sublayer uses (its LayerNorm,
its row-parallel bias) see only this rank's tracks, so their gradients are partial: they get slots in one list
that the forward passes through one f (GPT._partial_params), whose backward sums them over the TP group once.
Under sequence parallelism a Megatron sublayer's LayerNorm and ln_f act on this rank's tokens and take slots too.

Synced biases. Every track's stream holds the region's biases, and the all-reduced change must hold each bias once:
a region's synced GEMM adds c = adds*b + (adds - k)*sum(track biases) + (adds - 1)*sum(summed biases), adds = 1 on
TP rank 0 and 0 elsewhere, k tracks on this rank. One matmul per forward, sync_bias_coeffs @ partial, gives every
region's c (GPT._sync_biases).
"""
from collections import namedtuple

import torch

Step = namedtuple("Step", "megatron ladder sync per_track block_input ln_weight ln_bias proj_bias sync_bias")
Plan = namedtuple("Plan", "layers partial ln_f_slots sync_bias_coeffs")


def build_plan(policy, transformer, k, tp_rank, sequence_parallel):
    """Plan(layers: per layer the Steps of its two points, partial: the partial-grad parameters in slot order,
    ln_f_slots: ln_f's slots under sequence parallelism (else None), sync_bias_coeffs: [regions, slots])."""
    sync, parallel, ladder = policy.sync, policy.parallel, policy.ladder
    partial, steps, sync_rows = [], [], []
    in_tracks, in_summed = [], []  # the open region's bias slots: in every track's stream, in the sum

    def slot(p):
        if p is None:
            return None
        partial.append(p)
        return len(partial) - 1

    for j in range(len(sync)):
        layer, sub = divmod(j, 2)
        block = transformer.h[layer]
        ln, proj = (block.ln_1, block.attn) if sub == 0 else (block.ln_2, block.mlp)
        megatron = (j == 0 or sync[j - 1]) and sync[j]
        # parallel: the MLP reads the block input, so the attention output only feeds the sum
        per_track = not sync[j] and not (parallel and sub == 0)
        if megatron:  # sequence parallel: the LayerNorm of a token chunk (its bias: Block.rank0_bias)
            slots = (slot(ln.weight), slot(ln.bias), None) if sequence_parallel else (None, None, None)
        else:
            slots = (slot(ln.weight), slot(ln.bias), slot(proj.c_proj.bias))
        sync_bias = None
        if not megatron and slots[2] is not None:
            if sync[j]:
                sync_bias = len(sync_rows)
                sync_rows.append((slots[2], tuple(in_tracks), tuple(in_summed)))
                in_tracks, in_summed = [], []
            else:
                (in_tracks if per_track else in_summed).append(slots[2])
        steps.append(Step(megatron, ladder, sync[j], per_track, parallel and sub == 1, *slots, sync_bias))
    ln_f = transformer.ln_f
    ln_f_slots = (slot(ln_f.weight), slot(ln_f.bias)) if sequence_parallel else None
    # the rank enters as values, not as an `if`, so every rank traces the same graph (with an `if`, inductor
    # placed the tp_grad all-reduce differently on two ranks: experiments/compiler_repros/collective_order/)
    adds = float(tp_rank == 0)
    coeffs = torch.zeros(len(sync_rows), len(partial))
    for row, (own, tracks, summed) in enumerate(sync_rows):
        coeffs[row, own] = adds
        coeffs[row, list(tracks)] = adds - k
        coeffs[row, list(summed)] = adds - 1
    layers = [tuple(step._replace(sync_bias=None if step.sync_bias is None else len(partial) + step.sync_bias)
                    for step in steps[2 * layer:2 * layer + 2]) for layer in range(len(transformer.h))]
    return Plan(layers, partial, ln_f_slots, coeffs)
