#!/bin/bash
# session of 2026-11-26 (ninth), call 1, only where the lender gives H200s: the in-step all-reduce sweep on 2x H200,
# and medium's tp=2 inference rows at n_tracks 2 and 4 (baseline, spd, parallel, grouped:4): the configuration of
# bench/results/issue49/final/after/medium_tp2.json whose decode_b1 grouped:4 floor sits below every neighbour's.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res/h200; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
GPU="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';')"
log "master start: $GPU commit $COMMIT"
case "$GPU" in *H200*) ;; *) log "not H200: nothing run"; touch $R/DONE; exit 0 ;; esac
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
st 200 gemm1024 torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --between 1024 --producer gemm --out_dir $R/gemm_1024
st 240 tl_medium torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph --n_tracks 2,4 --sizes medium --policies "baseline;spd;parallel;grouped:4" --workloads prefill_b1,decode_b1,decode_b8 --out_dir $R/tl_medium
st 200 tp1_medium python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --no_torch_tp --sizes medium --n_tracks 1,2 --policies "baseline;spd;parallel;grouped:4" --workloads prefill_b1,decode_b1,decode_b8 --out_dir $R/tp1_medium
log "all done"; touch $R/DONE
