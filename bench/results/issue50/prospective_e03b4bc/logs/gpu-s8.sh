#!/bin/bash
# session of e03b4bc: prospective rows for its revised streams term ((k - 1)^gamma, fitted at k = 2 and 4 on tp=1):
# tracks per GPU that no stored row has, k = 3 and 6 (124m at n_tracks 6 and 12) and k = 5 (large at n_tracks 10), tp=2.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3"
st 240 tl_124m_k3k6 $TL --sizes 124m --policies "baseline;spd;parallel;grouped:4" --n_tracks 6,12 --modes graph --out_dir $R/tl_124m_k3k6
st 300 tl_large_k5 $TL --sizes large --policies "baseline;spd;parallel;grouped:4" --n_tracks 10 --modes graph --out_dir $R/tl_large_k5
log "all done"; touch $R/DONE
