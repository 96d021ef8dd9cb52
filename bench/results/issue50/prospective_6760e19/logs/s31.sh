#!/bin/bash
# session of 2026-11-26 (tenth), call 4: the trainer's compiled step at two tracks per GPU on the planner's device,
# 124m at tp=2, n_tracks 4, scored against 6760e19's model (its streams for this step from H200 tp=1 rows, carried to
# H100 as the step's roofline carries). Predictions in ../README.md, committed before this call.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
st 330 tt_124m_n4 torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 --size 124m --variants tp2 --policies baseline,spd,grouped:4,grouped:12 --tp2_n_tracks 4 --out_dir $R/tt_124m_n4
log "all done"; touch $R/DONE
cd $R && tar czf $OUT/all.tgz . ; grep -E "^ours" $R/logs/tt_124m_n4.log | cut -c1-120
