"""The stored rows the model is fitted on and scored by: which files are read (ROW_FILES) or skipped and why, which
were measured after the model that scores them (PROSPECTIVE), and which implementation each row measured."""
import glob
import json
import os
import subprocess

from bench.steptime.shapes import RESULTS, device_name
from training.config import REPO


# The stored rows' files, in one place: (glob under bench/results, format). Every file a glob matches is read
# (a path two globs match, once). A new file of rows joins the validation by landing where one of these matches
# (e.g. bench/results/<any folder>/tp_latency_*.json); what it feeds is decided per row, not per file
# (row_role): tp=1 rows feed the compute and tracks fits and are never scored; rows at tp >= 2 are scored, and
# only those of the code before issue 49's model change may feed a fit (alpha/bw at tp 4, and at tp=2 where the
# profiles' configuration is held out).
ROW_FILES = (("tp_latency_*.json", "tp_latency"),
             ("*/tp_latency_*.json", "tp_latency"),  # decode/, h100_tp2/, and any new folder of rows
             ("issue49/final/after/*_tp2.json", "tp_latency"),
             ("train_throughput*.json", "train_throughput"),
             ("*/train_throughput*.json", "train_throughput"),
             ("issue49/final/train_loop/tp2_124m*.json", "train_throughput"),
             ("issue49/bf16_regions/after/*_train_tp2.json", "tp_latency"),
             ("issue49/bf16_regions/after/train_throughput_*.json", "train_throughput"),
             ("issue50/prospective_*/tp_latency_*.json", "tp_latency"),
             ("issue50/prospective_*/train_throughput_*.json", "train_throughput"),
             ("ladder_compiled_overlap/tlc_after/tp_latency_*.json", "tp_latency"),
             ("ladder_compiled_overlap/*_after/train_throughput*.json", "train_throughput"))
# (commit, what changed in the model after its prospective rows were seen): their scores since are no longer prospective
PROSPECTIVE_REVISIONS = (
    ("d257300", "the streams term's growth with k, (k - 1)^gamma with gamma fitted to the tp=1 rows at k = 2 and 4 "
                "(fit_track_growth), where it had been linear in k - 1: d257300's model put medium's k = 4 floors on "
                "tp=2 at 3x k = 2's extra (saving worst 39.4 points, full fit); the rows at k = 2 and 4 of one tp=1 "
                "family had grown 0.8-1.7x (e03b4bc; 55cbbac replaced it, below)"),
    ("e03b4bc", "(after these rows and tp=1 rows at k = 3 and 6 on H100, bench/results/h100_tp1_k3_k6/) the streams "
                "term in two parts (stream_pass, fit_replicated): a part that shrinks with the rank's share of the work "
                "and a part q that every rank repeats per further track, linear in k - 1, with q per workload kind "
                "fitted to the tp=1 rows at k = 2 and k > 2; it replaces (k - 1)^gamma times the share. The tp=1 "
                "extra at k = 6 had carried to tp=2 at 0.94 where the share was 0.66"),
    ("f0dd202", "the streams term's per-layer part counts the layers that hold a region's sublayer (tracks_features), "
                "where it had counted every layer once any stream diverged: a selective set half baseline and half spd "
                "had been charged spd's per-layer cost at two tracks per GPU (saving error median 10.7, worst 30.0 "
                "points on its 15 rows at k = 2, full fit; 1.5 and 4.9 after). Every fitted policy (spd, grouped:4) "
                "has a region in every layer, so no fitted quantity moved"),
    ("f0dd202", "(1e1d05d, after every batch above) tp=2's all-reduces priced by an in-step sweep (what one adds to a "
                "CUDA graph, its message written by a GEMM: bench/results/allreduce/allreduce_instep_gemm_n2.json), "
                "where the profiles' alpha moved a back-to-back sweep; and GPT-2 large's tp=1 rows on H100 "
                "(bench/results/h100_tp1_large/), where H100's large family had borrowed medium's. Every batch's "
                "score above is the current model's"),
    ("1e1d05d", "the extra streams' pass (stream_pass) has its latency-bound part grow with the width, a launch per "
                "768 channels, where it was one launch at any width: the tp=1 fits' decode_b1 c_div had grown with C "
                "(2.05, 2.80, 3.28 at 124m, medium, large on H100). A family with its own rows fits the same "
                "prediction (the factor is one per family); a size that borrows (held out, or unmeasured: xl, 70b) "
                "takes its streams per channel. Held out by size, k <= 2: saving worst 11.7 -> 9.2 points, sign "
                "errors 3 -> 1"),
    ("1e1d05d", "(session of 57ee9e3, after leave one device out's sign errors were split at the floors) a split "
                "without an in-step sweep prices tp=2 by the kept rows' time over their floors per message size, with "
                "two regimes (rows_regimes), before the profiles' kernel times, which leave out what an all-reduce adds "
                "around its kernel and had no protocol jump (a 2 MiB all-reduce at 15.5 us where the sweep measured "
                "28.0). Only the split holding out H100 uses it: held out by device, k <= 2, time 6.5% / 16.1% / 29.1% "
                "-> 5.1% / 10.3% / 20.3%, saving 2.6 / 10.6 / 30.5 -> 2.1 / 8.8 / 25.8 points, sign errors 12 -> 7 of "
                "325; the full fit and leave one size out do not move"),
    ("000c2f1", "(after these rows' attention-only misses, with tp=1 rows of attention-only syncs measured for it: "
                "bench/results/h100_tp1_attn_only/) the streams term counts the regions entered and the attention and "
                "MLP sublayers that run per track (tracks_features), where it had counted diverged reads and region "
                "layers, which give attention-only syncs spd's values; c_mlp is fitted where a family ran attention-only "
                "syncs and tied to c_attn elsewhere by the ratio those families fitted (mlp_ratios). And each tp=1 row's "
                "extra is taken over its own run's baseline (run_baseline), where it had been over the family's pooled "
                "median. This batch, full fit: saving worst 19.4 -> 6.2 points; every current-code row at k <= 2, full "
                "fit: 19.4 -> 6.5; held out by size at k <= 2: 16.2 -> 10.6 (the H200 row, 9.2 before this batch)"),
    ("eb3dcda", "(after every batch above, seeing leave one size out's worst at one track per GPU: 124m prefill_b1 "
                "ladder, 8.1-8.3 points) ladder's hidden fraction per tp where the older code's rows measured that tp "
                "(fit_ladder_overlap, ladder_fraction): their tp=4 rows hide 0.81-1.1 of the hideable time, their tp=2 "
                "rows 0.2-1.0, and the pooled median had priced tp=2 with tp=4's. At k = 1, held out by size: saving "
                "worst 8.1 -> 7.7 points; full fit 6.5 -> 5.6. This batch has no ladder row and does not move"),
    ("55cbbac", "(after 043b28b, data rather than a model change) H100 tp=1 rows at the k of the batches past k = 2 "
                "(bench/results/h100_tp1_k4_k10/: medium at k = 4 and 8, large at 5 and 10), so that their families "
                "price their own k where they had carried k = 2's fit by q: the full fit's time worst over every k "
                "went from 20.8% to 12.1%, its saving worst from 63.6 to 25.9 points"),
    ("eb3dcda", "(session of 0104f33, after every batch above, seeing leave one device out's seven sign errors at k <= "
                "2) the policy's own work (counted passes and streams) priced on the device whose rows fitted the "
                "family and carried to another as the step's roofline carries (tracks_ms), where it had been priced "
                "at the row's datasheet HBM: H100's tp=1 extras ran 0.94-2.09x H200's (median 1.05) over 49 pairs "
                "measured on both, against the HBM ratio 1.43. Held out by device, k <= 2: time 5.1% / 10.6% / 20.0% "
                "-> 4.1% / 9.8% / 20.0%, saving 2.4 / 9.9 / 29.4 -> 2.3 / 7.2 / 17.4 points, sign errors 7 -> 3 of "
                "443; every k: saving worst 41.8 -> 76.0 points (H100 at k = 5-10, extrapolated from H200's tp=1 rows "
                "at k <= 4, now falls short as the full fit does past k = 4, where the HBM ratio had raised it). "
                "The full fit and leave one size out do not move"),
    ("e9b815e", "(data: the tp=1 rows measured beside these, bench/results/h200_tp1_train_b12/) the trainer's compiled "
                "step at tp=1, n_tracks 2 and 4 on H200, so that the train_b12 families fit their own streams term, "
                "where they had borrowed train_b8's fit of eager kernels in a graph: compiled, inductor fuses the "
                "streams' LayerNorm, residual add and cast, and 124m grouped:4 at n_tracks 2 costs 4.5 ms over "
                "baseline's 27.1 where eager it costs 16.6 over 35.6. This batch, full fit: time median 28.6% -> 1.7%, "
                "worst 33.8% -> 8.2%; saving median 19.7 -> 7.5 points, worst 20.2 -> 8.2 (missed). What is left is "
                "one way: the model gives the dropped all-reduces more than the compiled step saves, as on the stored "
                "compiled rows at one track per GPU (2-4 points there)"),
    ("e9b815e", "the in-step all-reduce sweep on 2x H200 (bench/results/allreduce/instep_h200/, by the ninth session's "
                "H200 script): 0.95-1.05x H100's at every size (median 1.00; 2 MiB 27.8 us against 28.0), so the "
                "full fit's tp=2 law, H100's, does not move. The split that holds out H100 now takes it (load_sweeps: "
                "the first sweep whose device a split keeps), where it took the H200 rows' time over their floors. "
                "Held out by device, k <= 2: saving 2.3 / 7.2 / 22.4 -> 2.1 / 6.4 / 22.4 points, sign errors 4 -> 4 "
                "of 460; k = 1: 2.1 / 5.3 / 7.6 -> 1.8 / 4.0 / 5.9, no sign error; every k: worst 76.0 -> 89.5"),
    ("6760e19", "(after these rows, seeing the compiled step's savings modeled 7.6-8.4 points high at two tracks per "
                "GPU and 2-5 at one, its baselines 6-8% slow) the counted passes cost nothing in a compiled family "
                "(fit_ops: c1 = 0; inductor fuses a Megatron sublayer's bias add and a region's extra add into the "
                "kernel beside them, as it fuses the vocab-parallel cross-entropy's passes), where they had been "
                "priced as eager kernels. The compiled 124m step's device timeline on H200 (ladder_compiled_train/) "
                "ran 16.03 ms of kernels other than all-reduces, modeled 16.70 with baseline's bias passes and 15.68 "
                "without. This batch, full fit: saving 7.9 / 8.4 / 8.4 -> 3.1 / 4.1 / 4.1 points; every current-code "
                "compiled training row's baseline modeled 0.99-1.03x its time (1.06-1.08x before); every "
                "current-code row at k <= 2, full fit: saving worst 8.4 -> 6.2 points. 1.5B tp=8 grouped:4 training: "
                "133.78 -> 89.57 ms (33%) became 123.49 -> 87.00 ms (30%)"),
    ("6760e19", "(data and a rule: bench/results/h100_tp1_train_b12/, the compiled step on one H100 at n_tracks 2, "
                "grouped:4 alone) a family whose current-code rows are of one policy shape takes the nearest "
                "multi-shape family's coefficients times the factor that reproduces its rows (one_shape, scale_to, "
                "resolve_streams), and a k whose rows are one shape scales the family's own fit to them; fitted "
                "apart, one policy had priced spd at -74% at medium tp=2 in analysis.plan. The H100 family takes "
                "H200's x 1.02. Held out by device, k <= 2: time worst 23.6% -> 20.0%, saving 2.1 / 6.6 / 29.1 -> "
                "2.1 / 6.1 / 17.0 points (the H200 compiled training rows at k = 2 now priced from H100's own "
                "compiled row, not train_b8's eager streams), sign errors 4 -> 4; the full fit and leave one size "
                "out do not move; 1.5B tp=8 grouped:4 training 123.49 -> 87.00 became 123.19 -> 86.70 ms (30%)"),
    ("6760e19", "(after every batch above) the width law's tp=1 rows (bench/results/h100_tp1_width/, measured in the "
                "ninth session to test it) feed the fits, and from k = 3 (WIDTH_LAW_MIN_K) a tp rank's streams take "
                "1/tp of one GPU's at n_tracks = tp k for their bytes (tracks_ms, latency_fraction), where they had "
                "been carried from tp=1 at k. Every k, full fit: saving worst 24.5 -> 16.3 points; held out by "
                "size: 48.2 -> 22.8; k <= 4: 7.5 -> 7.3, and k <= 2 does not move (fed at k = 2 too, its worst went "
                "to 9.3). What is left past k = 4 is prefill_b1, half launches, which the law overshoots (large "
                "grouped:4 at k = 10: -96% modeled against -80%)"),
    ("2b98aa0", "(after these rows) tp=4's all-reduces priced by the in-step sweep at 4 ranks measured in the same "
                "call (bench/results/allreduce/instep_h200/allreduce_instep_gemm_n4.json, apart from every row), as "
                "tp=2's are, where the older code's tp=4 rows' time over their floor had given 9.75 us + bytes at 341 "
                "GB/s (19.0 us for 2 MiB; the sweep: 27.6); tp=8 extrapolates each regime from the in-step laws at 2 "
                "and 4 (extrapolate_regimes). This batch, full fit: time 7.0% / 16.2% / 27.5% -> 4.9% / 10.2% / "
                "15.6%, saving 3.0 / 8.3 / 16.6 -> 2.0 / 4.4 / 6.9 points, sign errors 1 -> 0 of 90 (medium prefill_b1 "
                "grouped:4 at n_tracks 8: +13.0% measured, -3.6% modeled); held out by size: saving worst 17.0 -> "
                "7.1. 1.5B tp=8 grouped:4: training 123.19 -> 86.70 ms (30%) became 126.59 -> 87.18 (31%), decode_b1 "
                "32% became 35%"),
    ("845bb6f", "(data, planned before the call: bench/results/h100_tp1_train_b12/) the trainer's compiled step on one "
                "H100 with spd and grouped:4 at n_tracks 2 and 4 (124m) and at 2 (medium), so that H100's train_b12 "
                "families fit their own streams term, where they had scaled H200's to one grouped:4 row (one_shape). "
                "Before they fed it, the model gave their extras within 0.9 ms (124m n_tracks 4 grouped:4: +11.09 "
                "modeled, +12.00 measured; medium's baseline 70.38 against 72.54). No row of these batches moves; "
                "1.5B tp=8 grouped:4 training, now priced from medium's own H100 family, 126.59 -> 87.18 ms became "
                "129.06 -> 89.65 (31%). "
                "Not kept: the width law's tp=1 coefficients borrowed from the other device where a family has none at "
                "n_tracks = tp k (H200 has no tp=1 row past n_tracks 4): this batch's full-fit saving worst 35.8 -> "
                "11.8 points (17.6 scaled to the family's own fit), but the first tp=4 batch's 6.9 -> 8.6 (15.6)"),
    ("845bb6f", "(data: bench/results/h200_tp1_width/, H200's tp=1 rows at n_tracks 12, 16, 20, which H100's families had "
                "and H200's lacked) the width law reads H200's own rows at n_tracks = tp k: on these rows it held at "
                "0.89-1.05 in prefill_b8 and 0.93-1.03 in training (width_law_lines). This batch, full fit: saving "
                "2.7 / 5.8 / 35.8 -> 2.3 / 6.7 / 13.6 points (k = 4: 13.9 -> 6.9, k = 5: 35.8 -> 13.5); held out by "
                "size: worst 24.0 -> 19.8. The 124m rows at k = 3 moved the other way (their prefill_b8 floors ran "
                "0.89-1.00 of the law's): full-fit worst 5.7 -> 13.6 in this batch, 6.9 -> 12.0 in the first tp=4 "
                "batch. Large train_b8 at n_tracks 20 ran out of the H200's 140 GiB at tp=1, so that family still "
                "carries k = 4's fit"),
    ("1d4e68c", "(data, planned before the call: bench/results/h200_tp1_k3_k5/) H200's tp=1 rows at k = 3 (124m) and 5 "
                "(large), the k of the tp=4 rows whose H200 families had carried another k's fit, as H100's families "
                "had their own k = 3-10. Before they fed the fits, the model gave their extras over baseline within "
                "14% (large prefill_b8 grouped:4 at n_tracks 5: 27.71 ms modeled, 24.31 measured; 124m train_b8 spd "
                "at 3: 10.42 against 11.53). The first tp=4 batch, full fit: saving worst 12.0 -> 10.3 points; the "
                "second: 13.6 -> 11.5 (held out by size 19.8 -> 20.2); rows over 8 points in every current-code "
                "full-fit saving 15 -> 12. What is left at k = 3 is 124m prefill_b8's streams at tp=4, modeled "
                "1.11x the measured floor's extra (grouped:4: 3.04 ms against 2.75)"),
    ("1d4e68c", "(data, planned before the call: bench/results/h200_tp1_attn_only/) H200's tp=1 rows of attention-only "
                "syncs at n_tracks 2, the twins of H100's, so that the split holding H100 out fits c_mlp from H200's own "
                "rows, where it had no family with attention-only rows. Before they fed the fits the model gave their "
                "extras 0.67-1.15x the measured (medium decode_b1: 0.34 ms against 0.50). Held out by device at tp=2, "
                "k <= 2: saving worst 17.0 -> 10.5 points, sign errors 4 -> 3 of 460 (two are the H200 medium "
                "decode_b1 grouped:4 rows that leave one size out misses too); k = 1 does not move (5.8, none). The "
                "full fit and leave one size out move by a tenth of a point"),)
# Rows measured after the model that scores them was committed: out of sample by construction (issue 50). They
# enter no fit (feeds_fits), their tp=1 rows included, so every split scores them as rows it never saw. Each
# folder names the commit whose model was fixed when they ran; a later model revision is said in the validation.
PROSPECTIVE = (("issue50/prospective_d257300/*.json", "d257300",
                "2x H100 at d257300: medium at n_tracks 8 (k = 4 tracks per GPU, which no stored tp >= 2 row has), "
                "124m train_b8 at tp=2, and the medium training loop (train_b12, compiled with CUDA graphs)"),
               ("issue50/prospective_e03b4bc/*.json", "e03b4bc",
                "2x H100 after e03b4bc's revision: k = 3 and 6 tracks per GPU (124m at n_tracks 6 and 12) and k = 5 "
                "(large at n_tracks 10) on tp=2, which no stored row has (the rows record d257300, whose measured code "
                "e03b4bc did not change)"),
               ("issue50/prospective_55cbbac/*.json", "55cbbac",
                "2x H100 after 55cbbac's two-part streams term: k = 8 (medium at n_tracks 16, training too) and k = 10 "
                "(large at n_tracks 20, inference) on tp=2, past every tp=1 row's k (the rows record d257300, whose "
                "measured code 55cbbac did not change)"),
               ("ladder_compiled_overlap/*_after/*.json", "cac417c",
                "2x H100 after 57b00c9 let the compiled ladder overlap its all-reduces (the step model of cac417c, "
                "unchanged by it): 124m and medium at tp=2, one track per GPU, the training step compiled with CUDA graphs, and 124m "
                "compiled+graph prefill and decode (the rows record 6c0e2c5, the device copy's lagging git metadata)"),
               ("issue50/prospective_f0dd202/*.json", "f0dd202",
                "2x H100 after f0dd202 (large's tp=1 rows, the nearest size and the sizes' mean streams): policies no "
                "current-code row at tp >= 2 had (grouped:2, 3, 6, selective half baseline and half spd, ladder) at "
                "n_tracks 2 and 4 on tp=2, 124m, medium and large (the rows record 6c0e2c5, whose measured code "
                "f0dd202 did not change)"),
               ("issue50/prospective_1e1d05d/*.json", "1e1d05d",
                "2x H100 after 1e1d05d (the in-step all-reduce law, large's H100 tp=1 rows): the fewest syncs, "
                "grouped:12 at every size and one sync per forward (grouped:24 at medium, grouped:36 at large), and "
                "at 124m a selective set spd in its first half, at n_tracks 2 and 4 on tp=2 (the rows record 89b7bd0, "
                "the device copy's lagging git metadata; its measured code is 1e1d05d's)"),
               ("issue50/prospective_000c2f1/*.json", "000c2f1",
                "2x H100 after 000c2f1 (whose full fit and leave-one-size-out are a2a8e9f's): policy shapes no "
                "stored tp >= 2 row had, attention-only syncs at every size (selective:a0-<L-1>,m<L-1>), 124m spd "
                "keeping its first and last attention syncs, grouped:8 at medium, grouped:9 and 18 at large, at "
                "n_tracks 2 and 4 on tp=2 (the rows record 06b4f1a, the device copy's lagging git metadata; its "
                "measured code is 000c2f1's)"),
               ("issue50/prospective_eb3dcda/*.json", "eb3dcda",
                "2x H100 after eb3dcda (the streams term counting per-track attention and MLP sublayers): shapes no row "
                "had with MLPs per track, spd in the first half and attention-only in the second at every size, "
                "attention-only in the first half (large), every other MLP per track (124m), three of every four "
                "(medium), at n_tracks 2 and 4 on tp=2 (the rows record 06b4f1a, the device copy's lagging git "
                "metadata; its measured code is eb3dcda's)"),
               ("issue50/prospective_e9b815e/*.json", "e9b815e",
                "2x H200 (the call asked for H100s; the lender moved it) after e9b815e: the trainer's own step "
                "(train_b12, compiled with CUDA graphs) at two tracks per GPU, which no row of that workload had, "
                "124m and medium at tp=2, n_tracks 4 (the rows record 0104f33, the device copy's lagging git "
                "metadata; its measured code is e9b815e's)"),
               ("h200_medium_remeasure/*.json", "e9b815e",
                "2x H200 after e9b815e, by the script the ninth session committed for an H200 (s24.sh): medium's "
                "inference rows at tp=2, n_tracks 2 and 4, again, the configuration of the H200 row that every "
                "held-out split missed, and its tp=1 rows at n_tracks 1 and 2 (the rows record 0104f33)"),
               ("issue50/prospective_6760e19/*.json", "6760e19",
                "2x H200 again (the call asked for H100s) after 6760e19 fitted the compiled step's streams: 124m's "
                "compiled training step at tp=2, n_tracks 4, e9b815e's configuration measured again (the rows record "
                "0104f33)"),
               ("issue50/prospective_2b98aa0/*.json", "2b98aa0",
                "4x H200 (the call asked for H100s; the lender moved it) after 2b98aa0: the current code at tp=4, "
                "which no row had (every stored tp=4 row is the older code at one track per GPU), 124m at n_tracks 4 "
                "and 12, medium at 4 and 8, large at 4, baseline, ladder, spd, parallel, grouped:4, every workload "
                "(the rows record 2b98aa0)"),
               ("issue50/prospective_845bb6f/*.json", "845bb6f",
                "4x H200 again (the call asked for H100s) after 845bb6f priced tp=4 by the in-step sweep at 4 ranks: "
                "tp=4 policies and k the first tp=4 batch did not have, 124m grouped:2, 3, 6, 12 and a selective set "
                "(baseline then spd) at n_tracks 4 and 12, medium spd, grouped:8, 24 at 4 and 16 (k = 4), large spd, "
                "grouped:4, 36 at 4 and 20 (k = 5) (the rows record 2b98aa0, the device copy's lagging git metadata; "
                "its measured code is 845bb6f's)"),
               ("issue50/prospective_567dd68/*.json", "567dd68",
                "4x H200 (the call asked for H100s) after 567dd68: the trainer's own step (train_b12, compiled with "
                "CUDA graphs, AdamW) at tp=4, one track per GPU, which no row of that step had: baseline, spd and "
                "grouped:4 at 124m, baseline and spd at medium, baseline at large (the call's budget ran out before "
                "the rest; the rows record 2b98aa0, the device copy's lagging git metadata)"),
               ("issue50/prospective_1d4e68c/*.json", "1d4e68c",
                "4x H200 (two calls asked for H100s) after 1d4e68c: the trainer's own step at tp=4 that "
                "prospective_567dd68 ran out of budget for, baseline, spd and grouped:4 at medium, and at large "
                "baseline with spd (the first call's grouped:4 timed out compiling) and baseline with grouped:4 (a "
                "second call), each against its own run's baseline (the rows record 1d4e68c)"))
# Row files that no glob above reads, and why (printed in the validation table, so that none is dropped unsaid).
SKIPPED_ROW_FILES = (
    ("issue49/final/before/*.json", "the code of dcba9e8 (before issue 49's model change) run from a git archive "
     "inside a d71e3f7 checkout, so the commit in its meta is not the code it ran; final/after holds the same "
     "configurations on the current code"),
    ("issue49/before/*.json", "the same configurations as issue49/final/before, an earlier call"),
    ("issue49/after/*.json", "an intermediate model (d961aa1: streams carried whole, the sync biases not yet one "
     "matmul), recorded as dcba9e8; superseded by issue49/final/after"),
    ("issue49/bf16_regions/before/*.json", "the same configurations as issue49/bf16_regions/after, on 1bdb054's "
     "regions (fp32 all-reduces): a git archive run in the session of 240c34d"),
    ("issue49/compiled_floors/*.json", "compiled+graph prefill and decode rows at 1bdb054, read as issue 49's floors; "
     "their configurations' graph rows are in h100_tp2_large and h100_tp2_current"),
    ("issue49/final/train_loop/tp2_medium.json", "batch 8 with the optimizer step: no workload of this model "
     "(train_b8 has no optimizer, train_b12 is batch 12)"),
    ("ladder_compiled_train/train_throughput.json", "the compiled ladder before 57b00c9, whose traced all-reduce "
     "blocked (no overlap: timeline_h200/); ladder_compiled_overlap/ measures the same step on the current code"))
# The implementation a row measured. Issue 49 changed what each policy computes at one track per GPU
# (model/gpt.py, "Regions": a track's stream carried whole, the regions' sync biases in one matmul); its final
# measurements ran at d71e3f7 (bench/results/issue49/README.md), and every commit from there on has that model.
# The commits the stored rows recorded before it, so that telling them apart needs no git history (a shallow
# clone); any other commit is placed by `git merge-base --is-ancestor`.
POST49_COMMIT = "d71e3f7"
PRE49_COMMITS = ("not recorded", "099cb48", "76e2b85", "2a47e6f", "2825bf8", "e74a26b", "6be8fc9", "57049e6",
                 "dcba9e8")  # "not recorded": the tp=4 rows, older than tp_latency's commit field


# 240c34d made a region's all-reduces move bf16 under autocast: its entry f had sent the fp32 stream's gradient and,
# on CUDA, spd's sum over k tracks went to g in fp32 (bench/results/issue49/bf16_regions/). The model prices the
# current code's (collectives()), so a training row at tp >= 2 measured before it ran another implementation: 'fp32-regions'
# (the run's baseline and ladder rows too, which that commit leaves alone, so that each saving pairs within the run).
BF16_REGIONS_COMMIT = "240c34d"
FP32_REGIONS_COMMITS = ("d71e3f7", "cec91f0", "a12a466", "1bdb054")  # the stored rows' commits before it


def descends(commit, base):
    """Whether `commit` is `base` or a descendant of it (git merge-base --is-ancestor)."""
    if commit == base:
        return True
    run = subprocess.run(["git", "merge-base", "--is-ancestor", base, commit], cwd=REPO, capture_output=True, text=True)
    if run.returncode in (0, 1):
        return run.returncode == 0
    raise ValueError(f"commit {commit!r} of a stored row is not in this clone's history, so which implementation it "
                     f"measured cannot be told: {run.stderr.strip()}")


def implementation(commit):
    """'post-49' where the commit has issue 49's model (POST49_COMMIT or a descendant), else 'pre-49'."""
    if commit in PRE49_COMMITS:
        return "pre-49"
    return "post-49" if descends(commit, POST49_COMMIT) else "pre-49"


def row_implementation(row, code):
    """code (implementation() of the row's commit), or 'fp32-regions' for a training row at tp >= 2 of the post-49
    code before BF16_REGIONS_COMMIT."""
    if code != "post-49" or row["tp"] < 2 or not row["workload"].startswith("train"):
        return code
    if row["commit"] in FP32_REGIONS_COMMITS or not descends(row["commit"], BF16_REGIONS_COMMIT):
        return "fp32-regions"
    return code


def row_files():
    """[(path, format)] of every stored row file ROW_FILES names, each once, sorted."""
    seen = {}
    for pattern, fmt in ROW_FILES:
        for path in glob.glob(os.path.join(RESULTS, pattern)):
            seen.setdefault(os.path.normpath(path), fmt)
    skipped = {os.path.normpath(p) for pattern, _ in SKIPPED_ROW_FILES for p in glob.glob(os.path.join(RESULTS, pattern))}
    return sorted((p, f) for p, f in seen.items() if p not in skipped)


def tp_latency_rows(d, source):
    m = d["meta"]
    floors = {(r["size"], r["n_tracks"], r["policy"], r["workload"], r["mode"]): r["ms"] for r in d["rows"] if r["floor"]}
    for r in d["rows"]:
        # torch_tp and the plain model: not ours; sequence-parallel rows (--tp_comm): not the modelled plain TP
        if r["floor"] or r["n_tracks"] == "-" or r.get("tp_comm", "off") != "off":
            continue
        key = (r["size"], r["n_tracks"], r["policy"], r["workload"], r["mode"])
        yield dict(size=r["size"], workload=r["workload"], mode=r["mode"], tp=m["tp"], n_tracks=int(r["n_tracks"]),
                   policy=r["policy"], ms=r["ms"], floor_ms=floors.get(key), device=m["device"],
                   commit=m.get("commit") or "not recorded", source=source)


def train_throughput_rows(d, source):
    """The trainer's step (bf16 autocast, AdamW): workload train_b12 at batch 12 x 1024; the asynchronous
    input-gradient all-reduce's rows are left out (the model's point is the default, off) and so is a model
    without biases (the model's shapes have them)."""
    m = d["meta"]
    if (m.get("batch_size", 12), m.get("seq_len", 1024)) != (12, 1024) or m.get("bias") is False:
        return
    for r in d["rows"]:
        # a --floors twin (no communication) is not a row of the step
        if r["impl"] != "ours" or r["dp"] != 1 or r.get("error") or r.get("async_grad") == "on" or r.get("floor"):
            continue
        yield dict(size=m.get("size", "124m"), workload="train_b12", mode=r["mode"], tp=r["tp"],
                   n_tracks=int(r["n_tracks"]), policy=r["policy"], ms=r["ms"], floor_ms=None, device=m["device"],
                   commit=m.get("commit") or "not recorded", source=source)


def stored_rows():
    """Every stored row of the files ROW_FILES names, as dicts with size, workload, mode, tp, n_tracks, policy, ms,
    floor_ms (tp_latency only), device, commit, impl (implementation()), source, prospective (for
    a PROSPECTIVE file's row: its folder's pattern, else None)."""
    rows, impl = [], {}
    prospective = {os.path.normpath(p): pattern for pattern, commit, _ in PROSPECTIVE
                   for p in glob.glob(os.path.join(RESULTS, pattern))}
    for path, fmt in row_files():
        with open(path) as f:
            d = json.load(f)
        parse = tp_latency_rows if fmt == "tp_latency" else train_throughput_rows
        rows += [dict(r, prospective=prospective.get(path)) for r in parse(d, os.path.relpath(path, REPO))]
    for r in rows:
        r["device"] = device_name(r["device"])
        if r["commit"] not in impl:
            impl[r["commit"]] = implementation(r["commit"])
        r["impl"] = row_implementation(r, impl[r["commit"]])
    return rows


def feeds_fits(row):
    """Whether a row may enter a fit: tp=1 rows (compute, tracks, the overhead per kernel), and rows at tp >= 2 of
    the code before issue 49 (alpha/bw). Rows at tp >= 2 of the current code are held out from every fit, and so is
    every row of a PROSPECTIVE file."""
    return not row.get("prospective") and (row["tp"] == 1 or row["impl"] == "pre-49")


def saving_config(r):
    return (r["source"], r["device"], r["size"], r["workload"], r["mode"], r["tp"], r["n_tracks"])
