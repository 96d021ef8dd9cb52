#!/bin/bash
# session of 2026-11-26 (eighth), call 4: prospective rows for 1e1d05d's step model (issue 50): the fewest syncs,
# grouped:12 at every size and one sync per forward (grouped:24 at medium, grouped:36 at large), and at 124m a
# selective set that is spd in the first half and baseline in the second, beside baseline, at tp=2, n_tracks 2 and 4.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph --n_tracks 2,4"
INF=prefill_b1,prefill_b8,decode_b1,decode_b8
st 200 tl_124m $TL --sizes 124m --policies "baseline;grouped:12;selective:m0-5,6-11" --out_dir $R/tl_124m
st 200 tl_medium $TL --sizes medium --policies "baseline;grouped:12;grouped:24" --workloads $INF --out_dir $R/tl_medium
st 200 tl_medium_train $TL --sizes medium --policies "baseline;grouped:12;grouped:24" --workloads train_b8 --out_dir $R/tl_medium_train
st 240 tl_large $TL --sizes large --policies "baseline;grouped:12;grouped:36" --workloads $INF --out_dir $R/tl_large
st 240 tl_large_train $TL --sizes large --policies "baseline;grouped:12;grouped:36" --workloads train_b8 --out_dir $R/tl_large_train
log "all done"; touch $R/DONE
