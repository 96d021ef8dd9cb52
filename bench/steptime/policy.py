"""What a sync policy runs per sublayer, by model/gpt.py's rules: its plan, its collectives, the streams it
diverges and the elementwise passes it adds."""
from bench.steptime.shapes import WORKLOADS
from model.sync_policy import parse_sync_policy


def plan(policy_spec, n_layer):
    """Per sublayer j (2l attention, 2l+1 MLP of layer l): (megatron, sync, per_track, reads_diverged,
    region_entry), by model/plan.py's rules."""
    pol = parse_sync_policy(policy_spec, n_layer)
    sync, out, diverged = pol.sync, [], False  # diverged: some track's stream differs from x
    for j in range(len(sync)):
        megatron = (j == 0 or sync[j - 1]) and sync[j]
        per_track = not sync[j] and not (pol.parallel and j % 2 == 0)
        entry = not megatron and (j == 0 or sync[j - 1])
        reads_div = not megatron and diverged and not (pol.parallel and j % 2 == 1 and not diverged)
        out.append((megatron, sync[j], per_track, reads_div, entry))
        diverged = False if sync[j] else (diverged or per_track)
    return pol, out


def collectives(policy_spec, n_layer, n_embd, batch, tokens, tp, train, compute_bytes=2, entry_bytes=None):
    """[(kind, phase, bytes)] of one step, as parallel/comm.py counts them (kinds tp_fwd, tp_bwd,
    tp_grad, vocab). The vocabulary ones and tp_grad exist only at tp > 1 (at tp=1 the model calls
    F.embedding / F.cross_entropy and sums no partial gradients). entry_bytes: per element of a region
    entry's gradient, compute_bytes unless given (240c34d; the code before it sent the fp32 stream's, 4)."""
    pol, steps = plan(policy_spec, n_layer)
    N, C = batch * tokens, n_embd
    entry_bytes = compute_bytes if entry_bytes is None else entry_bytes
    out = [("tp_fwd", "fwd", N * C * compute_bytes) for s in steps if s[1]]
    if train:
        out += [("tp_bwd", "bwd", N * C * compute_bytes) for s in steps if s[0]]
        out += [("tp_bwd", "bwd", N * C * entry_bytes) for s in steps if s[4]]
        n_partial = sum(3 * C for s in steps if not s[0])  # LN weight, LN bias, c_proj bias per region sublayer
        if tp > 1 and n_partial:
            out.append(("tp_grad", "bwd", n_partial * 4))
    if tp > 1:
        out.append(("vocab", "fwd", N * C * 4))  # the embedding's g (fp32 rows)
        if train:
            out += [("vocab", "fwd", N * 4), ("vocab", "fwd", 2 * N * 4), ("vocab", "bwd", N * C * compute_bytes)]
        else:
            out.append(("vocab", "fwd", batch * 50304 // tp * 4))  # the last position's logits, all-gathered
    return out


def tracks_features(policy_spec, n_layer):
    """(n_entry, n_attn, n_mlp) where some stream diverges, else zeros: the regions entered from a synced stream, and
    the attention and the MLP sublayers that run per track (model/gpt.py, "Regions"). The per-track sublayers are
    counted by kind because attention-only syncs (every MLP per track) and spd (every attention per track) have as
    many regions and diverged reads, yet at tp=1, k = 2 on H100 the first's extra is 1.8-2.7x the second's in decode
    and 0.71-0.83x in prefill_b8 and training (bench/results/h100_tp1_attn_only/)."""
    pol, steps = plan(policy_spec, n_layer)
    if not any(step[3] for step in steps):
        return 0, 0, 0
    return (sum(step[4] for step in steps), sum(step[2] for step in steps[0::2]), sum(step[2] for step in steps[1::2]))


def policy_ops(policy_spec, n_layer, workload, tp):
    """Elementwise passes over the [N, C] stream that the policy's forward runs beyond a Megatron layer's two
    residual adds, counted by model/gpt.py's rules at any k (its "Regions" and Block.region_sublayer): a region whose
    one per-track sublayer's output the stream holds (spd) adds it to the synced sum (+1); a region of several
    per-track sublayers sends sum_t (s_t - xin) (+2: the subtraction and its add); parallel's sum of its two
    outputs replaces the add it saves (0). In training at tp > 1 a Megatron sublayer adds its bias after the
    all-reduce (+1 each; Block.bias_into_partial), where a region's GEMM adds it. Backward passes are not counted:
    an add's gradient is routed to its inputs."""
    pol, steps = plan(policy_spec, n_layer)
    train, ops, n_per_track = WORKLOADS[workload][3], 0, 0
    for megatron, sync, per_track, reads_div, entry in steps:
        if megatron:
            ops += train and tp > 1
            continue
        n_per_track += per_track
        if sync:
            ops += min(n_per_track, 2)
            n_per_track = 0
    return ops
