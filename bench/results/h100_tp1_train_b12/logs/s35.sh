#!/bin/bash
# session of 2026-11-26 (eleventh), call 3, on one H100 (nvidia-h100-x1): the trainer's compiled step at tp=1, 124m
# at n_tracks 2 and 4 and medium at n_tracks 2 (baseline, spd, grouped:4), calibration data for H100's train_b12
# families, which have one row at k >= 2 (grouped:4 at n_tracks 2, 124m: bench/results/h100_tp1_train_b12/).
export PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $(git rev-parse --short HEAD 2>/dev/null)"
st 230 tt1_124m python -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 --size 124m --variants tp1 \
    --tp1_policies baseline,spd,grouped:4 --tp1_n_tracks 2,4 --out_dir $R/tt1_124m
st 250 tt1_medium python -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 --size medium --variants tp1 \
    --tp1_policies baseline,spd,grouped:4 --tp1_n_tracks 2 --out_dir $R/tt1_medium
log "all done"; touch $R/DONE
