#!/bin/bash
# session of 2026-11-26 (tenth), call 1: the trainer's own step (train_b12: batch 12 x 1024, AdamW, compiled with
# CUDA graphs, bench.train_throughput) at two tracks per GPU, which no stored row of the model has: tp=2 at
# n_tracks 4 for 124m, medium and large (prospective rows for e9b815e's step model, committed before this call,
# with the model's predictions in the folder's README); then tp=1 rows of the same step at n_tracks 2 and 4 (124m,
# medium), measured as calibration data for the compiled step's streams term (they enter the fits only after the
# prospective rows are scored).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TT="torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20"
st 240 tt_124m_n4 $TT --size 124m --variants tp2 --policies baseline,spd,grouped:4,grouped:12 --tp2_n_tracks 4 --out_dir $R/tt_124m_n4
st 360 tt_medium_n4 $TT --size medium --variants tp2 --policies baseline,spd,grouped:4,grouped:12 --tp2_n_tracks 4 --out_dir $R/tt_medium_n4
st 300 tt1_124m $TT --size 124m --variants tp1 --tp1_policies baseline,spd,grouped:4 --tp1_n_tracks 2,4 --out_dir $R/tt1_124m
st 480 tt1_medium $TT --size medium --variants tp1 --tp1_policies baseline,spd,grouped:4 --tp1_n_tracks 2,4 --out_dir $R/tt1_medium
st 480 tt_large_n4 $TT --size large --variants tp2 --policies baseline,spd,grouped:4,grouped:12 --tp2_n_tracks 4 --out_dir $R/tt_large_n4
log "all done"; touch $R/DONE
