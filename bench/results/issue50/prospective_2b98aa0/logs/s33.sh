#!/bin/bash
# session of 2026-11-26 (eleventh), on 4x H100 (nvidia-h100-x4): the current code at tp=4, which no stored row has
# (every tp=4 row is the older code at one track per GPU, on H200). Prospective rows for 2b98aa0's step model:
# 124m (n_tracks 4, 12), medium (4, 8), large (4), baseline, ladder, spd, parallel, grouped:4, CUDA graphs, every
# workload; and the in-step all-reduce sweep at 4 ranks, measured apart from every row. Last, on GPU 0 alone: the
# trainer's compiled step at tp=1 (124m; spd and grouped:4 at n_tracks 2 and 4), calibration data for H100's
# train_b12 family. Committed with the model's predictions before the call.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
nvidia-smi topo -m > $R/logs/topo.txt 2>&1
st 120 sweep4 torchrun --standalone --nproc_per_node=4 -m bench.allreduce_sweep --between 1024 --producer gemm --out_dir $R/sweep4
TL="torchrun --standalone --nproc_per_node=4 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph"
P="baseline;ladder;spd;parallel;grouped:4"
INF=prefill_b1,prefill_b8,decode_b1,decode_b8
st 200 tl_124m $TL --sizes 124m --n_tracks 4,12 --policies "$P" --out_dir $R/tl_124m
st 200 tl_medium $TL --sizes medium --n_tracks 4,8 --policies "$P" --workloads $INF --out_dir $R/tl_medium
st 200 tl_medium_train $TL --sizes medium --n_tracks 4,8 --policies "$P" --workloads train_b8 --out_dir $R/tl_medium_train
st 200 tl_large $TL --sizes large --n_tracks 4 --policies "$P" --out_dir $R/tl_large
log "tp=4 done"; touch $R/TP4_DONE
CUDA_VISIBLE_DEVICES=0 st 240 tt1_124m python -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 \
    --size 124m --variants tp1 --tp1_policies baseline,spd,grouped:4 --tp1_n_tracks 2,4 --out_dir $R/tt1_124m
log "all done"; touch $R/DONE
