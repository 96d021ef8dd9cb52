"""The step-time model of bench/step_model.py (its docstring states the model), in parts along its seams:

    shapes      shapes, devices, workloads; where the stored results live
    policy      what a sync policy syncs, runs per track and all-reduces (model/gpt.py's rules)
    compute     the roofline per sublayer, the extra streams' and counted passes' units, `calibrate`'s times
    comm        the all-reduce law per tp and its fits (sweeps, rows over their floors, profiles)
    rows        the stored rows: which files, which code each measured, which are prospective
    families    a (size, workload, mode) family's compute scale and tracks terms from its tp=1 rows
    predict     one step's modeled time: compute + tracks + all-reduces, with the overlap bounds
    fitting     every fitted quantity from the rows a split keeps (fit_split)
    scores      time and saving errors against the measured rows, and the targets
    validation  --validate: the full fit and held-out refits, and step_model_validation.md (in --out_dir)
    answers     one question's answer with its interval
    pareto      --pareto: loss gap against modeled time, and the 70B-class table
    calibrate   per-sublayer times on one GPU

The names below are the model's API, imported by bench/step_model.py (the command line), analysis/plan.py and the
tests."""
from bench.steptime.shapes import (ALIASES, DEVICES, LAT, MODELED_TPS, RESULTS, SHAPES, TRAINER_MODE, WORKLOADS,
                                   answer_mode, shape_of, tracks_problem)
from bench.steptime.policy import collectives, policy_ops, tracks_features
from bench.steptime.compute import (DECODE_CACHE, kernel_count, latency_fraction, measured_sublayers, op_pass, roofline,
                                    step_roofline, stream_pass, sublayers)
from bench.steptime.comm import (allreduce_ms, comm_by_tp, extrapolate_regimes, fit_comm, fit_comm_rows, load_comm_fit,
                                 row_comm_points, rows_regimes, sweep_regimes)
from bench.steptime.rows import (PROSPECTIVE, PROSPECTIVE_REVISIONS, ROW_FILES, feeds_fits, implementation,
                                 row_implementation, stored_rows)
from bench.steptime.families import (calibrate_from_rows, family_on, fit_replicated, fit_streams, mlp_ratios,
                                     nonneg_lstsq, one_shape, resolve_streams, scale_to, size_distance)
from bench.steptime.predict import WIDTH_LAW_MIN_K, compute_of, ladder_fraction, overhead_for, predict, tracks_ms
from bench.steptime.fitting import fit_ladder_overlap, fit_overhead, fit_split, in_comm_fit
from bench.steptime.scores import CODE_GROUPS, held_out_saving_error, saving_stats, savings, score_table, time_error
from bench.steptime.validation import validate, width_law_lines, width_law_pairs, write_validation
from bench.steptime.answers import (answer, comm_law_line, far_k_line, measured_saving_line, saving_with_interval,
                                    with_tp8)
from bench.steptime.pareto import nearest_sync_spec, paper_table, pareto
from bench.steptime.calibrate import calibrate, calibration_repeatability
