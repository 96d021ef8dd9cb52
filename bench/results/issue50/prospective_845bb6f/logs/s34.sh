#!/bin/bash
# session of 2026-11-26 (eleventh), call 2, on 4 GPUs (nvidia-h100-x4; the lender may give H200s): a second tp=4 batch,
# prospective for 845bb6f's model (tp=4 priced by the in-step sweep at 4 ranks, seen after the first batch): policies
# and k the first tp=4 batch did not have. 124m n_tracks 4, 12: grouped:2, 3, 6, 12, selective:0-5,m6-11; medium
# n_tracks 4, 16 (k = 4): spd, grouped:8, grouped:24; large n_tracks 4, 20 (k = 5): spd, grouped:4, grouped:36; each
# beside baseline, every workload, CUDA graphs. If the GPUs are H100s: the in-step sweep at 4 ranks on them, and the
# trainer's compiled step at tp=1 on GPU 0 (124m, spd and grouped:4 at n_tracks 2 and 4) for H100's train_b12 family.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
GPU="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';')"
log "master start: $GPU commit $COMMIT"
case "$GPU" in *H100*) H100=1 ;; *) H100=0 ;; esac
[ $H100 = 1 ] && st 120 sweep4 torchrun --standalone --nproc_per_node=4 -m bench.allreduce_sweep --between 1024 --producer gemm --out_dir $R/sweep4
TL="torchrun --standalone --nproc_per_node=4 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph"
INF=prefill_b1,prefill_b8,decode_b1,decode_b8
st 200 tl_124m $TL --sizes 124m --n_tracks 4,12 --policies "baseline;grouped:2;grouped:3;grouped:6;grouped:12;selective:0-5,m6-11" --out_dir $R/tl_124m
st 200 tl_medium $TL --sizes medium --n_tracks 4,16 --policies "baseline;spd;grouped:8;grouped:24" --workloads $INF --out_dir $R/tl_medium
st 200 tl_medium_train $TL --sizes medium --n_tracks 4,16 --policies "baseline;spd;grouped:8;grouped:24" --workloads train_b8 --out_dir $R/tl_medium_train
st 200 tl_large $TL --sizes large --n_tracks 4,20 --policies "baseline;spd;grouped:4;grouped:36" --workloads $INF --out_dir $R/tl_large
st 200 tl_large_train $TL --sizes large --n_tracks 4,20 --policies "baseline;spd;grouped:4;grouped:36" --workloads train_b8 --out_dir $R/tl_large_train
log "tp=4 done"; touch $R/TP4_DONE
if [ $H100 = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 st 240 tt1_124m python -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 \
        --size 124m --variants tp1 --tp1_policies baseline,spd,grouped:4 --tp1_n_tracks 2,4 --out_dir $R/tt1_124m
fi
log "all done"; touch $R/DONE
