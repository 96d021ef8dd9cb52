#!/bin/bash
# session of 2026-11-26 (eighth), call 1: what an all-reduce adds to a step at tp=2 against message size
# (bench/allreduce_sweep.py --between N: an N x N bf16 matmul and a write of the message before each all-reduce,
# less the same graph without them), at two sizes of the work between, and the back-to-back sweep again.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
st 240 instep1024 torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --between 1024 --out_dir $R/instep_1024
st 240 instep4096 torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --between 4096 --out_dir $R/instep_4096
st 240 backtoback torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --out_dir $R/backtoback
log "all done"; touch $R/DONE
