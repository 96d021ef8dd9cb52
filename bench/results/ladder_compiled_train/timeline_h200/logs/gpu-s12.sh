#!/bin/bash
# session of 11bcd1d+: ladder's compiled training step, located on the device timeline (bench.train_throughput
# --profile now prints span, busy, idle and the all-reduce/compute overlap per iteration)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
st 400 tt_ladder_tl torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size 124m --variants tp2 --policies baseline,ladder --tp2_n_tracks 2 --modes compiled-graphs --warmup 8 --iters 20 --profile compiled-graphs --out_dir $R/tt_ladder_tl
log "all done"; touch $R/DONE
