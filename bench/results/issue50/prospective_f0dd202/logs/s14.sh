#!/bin/bash
# session after 6c0e2c5, call 2: prospective rows for f0dd202's model (issue 50): policies no stored tp >= 2 row of the
# current code has (grouped:2, grouped:3, grouped:6, a selective set half baseline and half spd, and ladder) at tp=2,
# one and two tracks per GPU (n_tracks 2 and 4), 124m, medium and large. Training apart at medium and large.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph --n_tracks 2,4"
P="baseline;ladder;grouped:2;grouped:3;grouped:6"
INF=prefill_b1,prefill_b8,decode_b1,decode_b8
st 200 tl_124m $TL --sizes 124m --policies "$P;selective:0-5,m6-11" --out_dir $R/tl_124m
st 200 tl_medium $TL --sizes medium --policies "$P;selective:0-11,m12-23" --workloads $INF --out_dir $R/tl_medium
st 200 tl_medium_train $TL --sizes medium --policies "$P;selective:0-11,m12-23" --workloads train_b8 --out_dir $R/tl_medium_train
st 240 tl_large $TL --sizes large --policies "$P;selective:0-17,m18-35" --workloads $INF --out_dir $R/tl_large
st 240 tl_large_train $TL --sizes large --policies "$P;selective:0-17,m18-35" --workloads train_b8 --out_dir $R/tl_large_train
log "all done"; touch $R/DONE
