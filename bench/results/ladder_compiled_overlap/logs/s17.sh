#!/bin/bash
# session after 6c0e2c5, call 5: the compiled ladder (57b00c9) with the backward's input-gradient all-reduces
# overlapped too (--tp_async_grad on), against off, beside baseline: 124m tp=2, one track per GPU, CUDA graphs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
st 300 tt_async torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size 124m --variants tp2 --policies baseline,ladder --tp2_n_tracks 2 --modes compiled-graphs --tp_async_grad off,on --warmup 8 --iters 20 --profile ladder --out_dir $R/tt_async
log "all done"; touch $R/DONE
