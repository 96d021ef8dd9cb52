#!/bin/bash
# session of the q revision: prospective rows past every tp=1 row's k (6): medium at n_tracks 16 (k = 8) and large at
# n_tracks 20 (k = 10) on tp=2; training apart (its k streams in fp32 are the memory risk).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph"
st 200 tl_medium_k8 $TL --sizes medium --policies "baseline;spd;parallel;grouped:4" --n_tracks 16 --workloads prefill_b1,prefill_b8,decode_b1,decode_b8 --out_dir $R/tl_medium_k8
st 200 tl_medium_k8_train $TL --sizes medium --policies "baseline;spd;parallel;grouped:4" --n_tracks 16 --workloads train_b8 --out_dir $R/tl_medium_k8_train
st 240 tl_large_k10 $TL --sizes large --policies "baseline;spd;parallel;grouped:4" --n_tracks 20 --workloads prefill_b1,prefill_b8,decode_b1,decode_b8 --out_dir $R/tl_large_k10
log "all done"; touch $R/DONE
