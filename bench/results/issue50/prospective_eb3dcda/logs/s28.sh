#!/bin/bash
# session of 2026-11-26 (ninth), call 6: prospective rows for eb3dcda's step model (issue 50: the streams term counts
# regions entered and per-track attention and MLP sublayers, c_mlp fitted on tp=1 attention-only rows): shapes no row
# has, with MLPs per track, beside baseline, at tp=2, n_tracks 2 and 4. Mixed: spd in the first half and
# attention-only in the second (every size); attention-only in the first half (large); every other MLP per track
# (124m); three of every four MLPs per track (medium).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph --n_tracks 2,4"
INF=prefill_b1,prefill_b8,decode_b1,decode_b8
st 150 tl_124m $TL --sizes 124m --policies "baseline;selective:m0-5,a6-11,m11;selective:a0-11,m1,m3,m5,m7,m9,m11" --out_dir $R/tl_124m
st 120 tl_medium $TL --sizes medium --policies "baseline;selective:m0-11,a12-23,m23;selective:a0-23,m3,m7,m11,m15,m19,m23" --workloads $INF --out_dir $R/tl_medium
st 100 tl_medium_train $TL --sizes medium --policies "baseline;selective:m0-11,a12-23,m23;selective:a0-23,m3,m7,m11,m15,m19,m23" --workloads train_b8 --out_dir $R/tl_medium_train
st 150 tl_large $TL --sizes large --policies "baseline;selective:m0-17,a18-35,m35;selective:a0-35,m18-35" --workloads $INF --out_dir $R/tl_large
st 120 tl_large_train $TL --sizes large --policies "baseline;selective:m0-17,a18-35,m35;selective:a0-35,m18-35" --workloads train_b8 --out_dir $R/tl_large_train
log "all done"; touch $R/DONE
