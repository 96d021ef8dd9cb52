"""A step-time model for tensor parallelism at tp 1, 2, 4 and 8: ms per training iteration or per
decoded token, per sync policy, for GPT-2 shapes and a 70B-class shape, from one-GPU measurements.

    t(step) = compute(tp, k) + tracks(k, policy) + comm(tp, policy)          [modeled, per rank]

Compute. Each sublayer s (LayerNorm, attention, MLP, residual adds, embedding, head + cross-entropy,
optimizer) has FLOPs F_s and HBM bytes B_s at the shard width tp implies (a rank holds 1/tp of the
heads, MLP columns and vocabulary; LayerNorms and the residual stream are replicated, fp32 in training; in
eager training at tp > 1 the vocab-parallel cross-entropy's extra passes over the rank's logits) and K_s
kernels. Its roofline time is r_s = K_s * lat + max(F_s / peak_flops, B_s / hbm_bw) with the
device's datasheet peaks. One scale per (size, workload, mode) family, fitted at tp=1 only,

    s = measured tp=1 baseline ms / sum_s r_s(tp=1),     compute(tp) = s * sum_s r_s(tp),

splits the stored one-GPU time into sublayers by FLOPs and bytes ("scaled from stored one-GPU
rows"). Shapes no row measured (1.5B, 70B-class) take the nearest measured family's s and are
marked scaled.

Where `calibrate` has measured a sublayer on a device whose own whole tp=1 CUDA-graph steps (eager kernels captured)
of a calibrated size and workload fit a gap per kernel (fit_overhead), that device's CUDA-graph predictions take the
measured kernel times, the roofline of the rest and that gap per kernel; elsewhere the scaled split. A device without
such a step does not borrow another device's gap (overhead_for); H100 and H200 each have their own.

Tracks. A rank holds k = n_tracks / tp tracks. At any k the policy runs a few elementwise passes over the stream
that a Megatron layer does not (policy_ops, counted from model/gpt.py: one per spd region, two per grouped region,
and in training at tp > 1 one bias add per Megatron sublayer), each costing s * op_pass; their coefficient c1 is 1
(the code's count) unless tp=1 rows of the current code at k = 1 fit it, and 0 in a compiled family (inductor fuses
them: fit_ops). At k >= 2 the diverged streams cost more:
with n_entry the regions entered from a synced stream and n_attn, n_mlp the attention and MLP sublayers that run
per track, where any stream diverges (tracks_features), and u(k) = s * C * (lat / 768 + N * 4 B / hbm_bw) *
((1 - q) share + q (k - 1)) the extra streams' pass over the N tokens (stream_pass: its latency-bound part grows
with the width C; q, the part each further track repeats),
    tracks = c1 * s * policy_ops * op_pass + [k >= 2] u(k) * (c_entry * n_entry + c_attn * n_attn + c_mlp * n_mlp),
share = the rank's roofline time at tp over tp=1's (the streams' extra is a fraction of the rank's work: measured
on 2x H100, a floor at tp=2 and k=2 is the tp=1 row's multiple of baseline, not its extra ms), and
with c_entry, c_attn, c_mlp >= 0 fitted by least squares to a family's tp=1 rows at the row's k where it measured
that k, else to its rows at every k >= 2 (c_mlp only where a policy ran its MLPs per track without its attention,
else c_attn times the ratio such families fitted: mlp_ratios); a family uses the current code's
fit, its own or, where it has none, another family's of the same workload kind (times the factor that fits its own
rows where they are of one policy shape: scale_to), and the older code's only where no family has a current-code
fit (resolve_streams). At tp >= 2 and k >= 3, where one GPU was measured at n_tracks = tp k, the streams' bytes
follow the width law, 1/tp of that row's term, weighted by their share of the pass (latency_fraction; tracks_ms).
Priced on the family's device, the term carries to another device as the step's roofline does. Rows are told apart
by the code they measured
(implementation(): issue 49 changed what a policy computes at one track per GPU), and the current code's rows at
tp >= 2 enter no fit (feeds_fits). Row files: ROW_FILES.

Communication. One all-reduce of b bytes over tp ranks (ring, NCCL's algorithm in every stored
profile) costs
    t(b, tp) = alpha(tp) + 2 (tp - 1) / tp * b / bw,
at tp=2 a two-regime law (sweep_regimes: NCCL changes protocol with the message size, and the stored tp=2 rows
jump between 1.57 and 2.1 MB) fitted to what an all-reduce adds to a step, measured apart from every model row
(bench/allreduce_sweep.py --between 1024 --producer gemm: each all-reduce's message written by a GEMM and read by a
residual add, less the same CUDA graph without the all-reduces; bench/results/allreduce/allreduce_instep_gemm_n2.json,
and H200's in instep_h200/ for a split that holds H100 out).
Where no such in-step sweep is stored, alpha(2) and bw(2) are fitted (relative least squares) to the all-reduce
kernel times of the stored 2xH200 profiles, and a back-to-back sweep (allreduce_sweep_n<tp>.json) gives the
regimes' shape, moved to that alpha. tp=4 likewise takes the in-step sweep at 4 ranks
(bench/results/allreduce/instep_h200/allreduce_instep_gemm_n4.json, on 4x H200: change point 3.25 MiB), and where a
split holds that device out, alpha(4), bw(4) fitted to the older code's tp=4 rows' time over their floor. tp=8 is
extrapolated regime by regime (extrapolate_regimes: alpha linear in tp - 1 through tp 2 and 4, bw and the change point
held at tp=4's), with the public nccl-tests busbw as the bound (PUBLIC_BUSBW).
--validate scores time and saving (1 - policy / baseline, same run and n_tracks) for this fit and for refits
that leave the row's size, or device, out of every fitted quantity (fit_split). The policy's collectives come from its plan (collectives()): per forward
one g per synced point (N*C compute-dtype bytes), the vocabulary-parallel embedding and head; per
backward one f per Megatron sublayer (compute dtype), one per region entry (compute dtype since 240c34d, fp32
before it, as the older rows that fit alpha/bw ran it), one
sum of the regions' replicated-parameter gradients, the head's f. Two bounds: no overlap (every
all-reduce adds), and full overlap where the policy allows it: ladder hides each forward g behind
the next sublayer, async input-gradient all-reduce hides each backward f behind its wgrad GEMM;
hidden = min(t_ar, that compute).

A question about training is priced as the trainer runs its step, compiled with CUDA graphs (TRAINER_MODE); prefill
and decode as CUDA graphs of eager kernels. Everything this module prints is modeled unless a row says measured.
Commands (repository root):
    python -m bench.step_model --size xl --tp 8 --policy grouped:4 --device H100   # one question
    python -m bench.step_model --validate        # every stored tp>=2 row: predicted / measured
    python -m bench.step_model --pareto          # loss gap against modeled time, and the 70B table
    python -m bench.step_model calibrate --device cuda   # per-sublayer times on this GPU
--validate, --pareto and calibrate write into a fresh folder under bench/results/local/ (ignored by git) unless
--out_dir names one: `--out_dir bench/results` replaces the stored files, which the model reads (a default run
never overwrites them).
This file is the model's command line; the model lives in bench/steptime/, one module per part (its __init__
lists them). The names the validation and the docs cite: ROW_FILES, PROSPECTIVE, PROSPECTIVE_REVISIONS in
bench/steptime/rows.py; sweep_regimes, rows_regimes and PUBLIC_BUSBW in comm.py; collectives and tracks_features in
policy.py; step_roofline in compute.py; fit_split in fitting.py; predict, tracks_ms and WIDTH_LAW_MIN_K in predict.py;
TRAINER_MODE in shapes.py.
"""
import json
import os
import sys

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.step_model ...")
from bench.common import out_dir_problem, results_dir  # noqa: E402
from bench.steptime import (ALIASES, DEVICES, MODELED_TPS, SHAPES, WORKLOADS, answer,  # noqa: E402
                            calibrate, calibration_repeatability, paper_table, pareto, score_table, time_error,
                            tracks_problem, validate, write_validation)
from training.cli import guarded, positive_int  # noqa: E402
from training.config import REPO, HelpFormatter, OneLineArgumentParser, write_text  # noqa: E402


def write_json(out_dir, name, obj):
    write_text(os.path.join(out_dir, name), json.dumps(obj, indent=1))


def shown(path):
    """path relative to the repository where it is inside, as given elsewhere."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def out_dir_arg(ap, what):
    ap.add_argument("--out_dir", default=None,
                    help=f"where {what} go; default: a fresh folder under bench/results/local/ (ignored by git); "
                         f"--out_dir bench/results replaces the stored ones")


def check_out_dir(ap, a):
    """--out_dir that cannot be a folder: one line, before the work (the fits take seconds, calibrate minutes)."""
    if a.out_dir is not None and out_dir_problem(a.out_dir):
        ap.error(out_dir_problem(a.out_dir))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate-compare"]:
        ap = OneLineArgumentParser(prog="python -m bench.step_model calibrate-compare", formatter_class=HelpFormatter,
                                     description="How far two calibrations of the same rows differ (repeatability).")
        ap.add_argument("first", help="a step_model_calibration_<device>.json")
        ap.add_argument("second", help="another run's, of the same rows")
        a = ap.parse_args(argv[1:])
        try:
            print("\n".join(calibration_repeatability(a.first, a.second)))
        except (OSError, ValueError, KeyError) as e:
            ap.error(str(e))
        return
    if argv[:1] == ["calibrate"]:
        ap = OneLineArgumentParser(prog="python -m bench.step_model calibrate", formatter_class=HelpFormatter,
                                     description="Per-sublayer times on one device at each tp's shard width.")
        ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
        ap.add_argument("--sizes", default="124m,medium", help=f"comma-separated, of {', '.join(SHAPES)}")
        ap.add_argument("--tps", default="1,2,4,8", help="comma-separated shard counts")
        ap.add_argument("--workloads", default="train_b8,train_b12,prefill_b8,decode_b1,decode_b8",
                        help=f"comma-separated, of {', '.join(WORKLOADS)}")
        ap.add_argument("--repeats", type=int, default=20, help="timed repeats per sublayer (their median)")
        out_dir_arg(ap, "the calibration's json and md")
        a = ap.parse_args(argv[1:])
        check_out_dir(ap, a)
        for w in a.workloads.split(","):
            if w not in WORKLOADS:
                ap.error(f"unknown workload {w!r}; allowed: {', '.join(WORKLOADS)}")
        tps = [int(t) for t in a.tps.split(",")]
        out_dir = results_dir(a.out_dir, "step_model_calibration", a.device)
        print(calibrate(a.device, a.sizes.split(","), tps, a.workloads.split(","), a.repeats, out_dir))
        return
    ap = OneLineArgumentParser(prog="python -m bench.step_model", description=__doc__.split("\n\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--validate", action="store_true",
                    help="predict every stored tp>=2 row; write the table (into --out_dir)")
    ap.add_argument("--pareto", action="store_true", help="loss gap against modeled time; the 70B-class table")
    ap.add_argument("--size", default="xl", help=f"one of {', '.join(list(SHAPES) + list(ALIASES))}")
    ap.add_argument("--tp", type=positive_int, default=8, help="tensor-parallel degree: 1, 2, 4 or 8")
    ap.add_argument("--policy", default="grouped:4", help="a sync_policy spec, as train_reduced_sync.py takes it")
    ap.add_argument("--n_tracks", type=positive_int, default=None,
                    help="default: tp (one track per GPU); a multiple of tp, at most the n_head of --size")
    ap.add_argument("--device", default="H100", help=f"one of {', '.join(DEVICES)}")
    out_dir_arg(ap, "--validate's and --pareto's files")
    a = ap.parse_args(argv)
    check_out_dir(ap, a)
    if a.device not in DEVICES:
        ap.error(f"unknown --device {a.device!r}; allowed: {', '.join(DEVICES)}")
    if a.tp not in MODELED_TPS:  # before the fits, which take seconds
        ap.error(f"--tp {a.tp}: tp={a.tp} is not modeled; allowed: {', '.join(map(str, MODELED_TPS))}")
    if not (a.validate or a.pareto):
        try:
            problem = tracks_problem(a.size, a.tp, a.n_tracks or a.tp)
        except ValueError as e:
            ap.error(str(e))
        if problem:
            ap.error(problem)
    fit, tables, rows, held = validate()  # reads the stored files under bench/results (RESULTS), wherever it writes
    err = time_error(rows)
    out_dir = None
    if a.validate or a.pareto:
        out_dir = results_dir(a.out_dir, "step_model", "validate" if not a.pareto else
                              "pareto" if not a.validate else "validate-pareto")
    if a.validate:  # the fit and calibration files are written here only: a question reads, never writes
        write_json(out_dir, "step_model_comm_fit.json", fit)
        for device, table in tables.items():
            write_json(out_dir, f"step_model_compute_{device.lower()}.json", table)
        lines = write_validation(fit, tables, rows, held, out_dir)
        print("\n".join(lines[:lines.index("## Scores per code, device and tp") + 2 + len(score_table(rows))]))
        print(f"table: {shown(os.path.join(out_dir, 'step_model_validation.md'))}")
    if a.pareto:
        for path in pareto(tables, fit, err, out_dir):
            print(path)
        print("\n".join(paper_table(tables, fit, err, out_dir)))
        print(f"table: {shown(os.path.join(out_dir, 'step_model_70b_tp8.md'))}")
    if not (a.validate or a.pareto):
        try:
            print("\n".join(answer(a.size, a.tp, a.policy, a.device, a.n_tracks or a.tp, tables, fit, err, rows, held)))
        except ValueError as e:
            ap.error(str(e))


if __name__ == "__main__":
    sys.exit(guarded(main))  # Ctrl-C, SIGTERM and a closed stdout end in one line
