#!/bin/bash
# session of 2026-11-26 (eleventh), call 5, on 4 GPUs (nvidia-h100-x4; the lender may give H200s): the trainer's step
# at tp=4 (bench.train_throughput over 4 processes, compiled with CUDA graphs, batch 12 x 1024, AdamW), one track
# per GPU (n_tracks 4), baseline, spd and grouped:4, at 124m, medium and large: what the planner's answers price
# (train_b12 in the trainer's mode), at the largest tp this project can measure. Prospective for the step model
# committed with this script.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TT="torchrun --standalone --nproc_per_node=4 -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 --variants tp2 --policies baseline,spd,grouped:4 --tp2_n_tracks 4"
st 130 tt4_124m $TT --size 124m --out_dir $R/tt4_124m
st 150 tt4_medium $TT --size medium --out_dir $R/tt4_medium
st 150 tt4_large $TT --size large --out_dir $R/tt4_large
log "all done"; touch $R/DONE
