#!/bin/bash
# session of 2026-11-26 (twelfth), call 3 (and later tries), on 4 GPUs (nvidia-h100-x4; the lender may give H200s). Prospective for
# 1d4e68c's step model. If H100s: the in-step all-reduce sweep at 4 ranks on H100 (tp=4's law is H200's sweep
# alone, and every answer is priced for H100), then the first tp=4 batch's rows (prospective_2b98aa0) on H100: 124m
# n_tracks 4, 12; medium 4, 8; large 4; baseline, ladder, spd, parallel, grouped:4, CUDA graphs, every workload; then
# the trainer's compiled step at tp=4, 124m. If H200s: nothing (the H200 rows are measured; the call stops).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
GPU="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';')"
log "master start: $GPU commit $COMMIT"
nvidia-smi topo -m > $R/logs/topo.txt 2>&1
case "$GPU" in *H100*) H100=1 ;; *) H100=0 ;; esac
TT="torchrun --standalone --nproc_per_node=4 -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 --variants tp2 --policies baseline,spd,grouped:4 --tp2_n_tracks 4"
if [ $H100 = 1 ]; then
    st 120 sweep4 torchrun --standalone --nproc_per_node=4 -m bench.allreduce_sweep --between 1024 --producer gemm --out_dir $R/sweep4
    TL="torchrun --standalone --nproc_per_node=4 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph"
    P="baseline;ladder;spd;parallel;grouped:4"
    INF=prefill_b1,prefill_b8,decode_b1,decode_b8
    st 200 tl_124m $TL --sizes 124m --n_tracks 4,12 --policies "$P" --out_dir $R/tl_124m
    st 200 tl_medium $TL --sizes medium --n_tracks 4,8 --policies "$P" --workloads $INF --out_dir $R/tl_medium
    st 200 tl_medium_train $TL --sizes medium --n_tracks 4,8 --policies "$P" --workloads train_b8 --out_dir $R/tl_medium_train
    st 200 tl_large $TL --sizes large --n_tracks 4 --policies "$P" --out_dir $R/tl_large
    log "tp=4 done"; touch $R/TP4_DONE
    st 200 tt4_124m $TT --size 124m --out_dir $R/tt4_124m
fi
log "all done"; touch $R/DONE
