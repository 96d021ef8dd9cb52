#!/bin/bash
# session of 2026-11-26 (tenth), call 5, on one H100 (nvidia-h100-x1): tp=1 rows of the trainer's compiled step at
# n_tracks 2 (baseline and grouped:4), calibration data for the H100 train_b12 families, which have no row at k >= 2
# (they take H200's, bench/results/h200_tp1_train_b12/). Written to $OUT; committed before the call.
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 130 python -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 --size 124m --variants tp1 \
    --tp1_policies baseline,grouped:4 --tp1_n_tracks 2 --out_dir $OUT/tt1_124m > $OUT/tt1_124m.log 2>&1
echo rc $?; grep -E "^ours" $OUT/tt1_124m.log | cut -c1-120
