#!/bin/bash
# session of 2026-11-26 (eighth), call 9: tp=1 rows on H100 at the k of the prospective tp=2 rows past k = 2
# (medium at k = 4 and 8, large at k = 5 and 10; baseline, spd, grouped:4), so that those rows' families price
# their own k instead of carrying k = 2's fit by q. One process per job (graph pools), GPU 0 medium, GPU 1 large.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --no_torch_tp --policies baseline;spd;grouped:4"
jobs_on() {  # $1 gpu, $2 size, then "n_tracks|workload" items
  local gpu=$1 size=$2; shift 2
  for job in "$@"; do
    n=${job%%|*}; w=${job#*|}; tag=${size}_k${n}_${w}
    CUDA_VISIBLE_DEVICES=$gpu timeout 300 $TL --sizes $size --n_tracks $n --workloads $w --out_dir $R/t_$tag > $R/logs/$tag.log 2>&1
    log "$tag rc $?"
  done
}
jobs_on 0 medium "4|decode_b1" "4|decode_b8" "4|prefill_b1" "4|prefill_b8" "8|decode_b1" "8|decode_b8" "8|prefill_b1" "8|prefill_b8" "4|train_b8" "8|train_b8" &
jobs_on 1 large "10|decode_b1" "10|decode_b8" "10|prefill_b1" "10|prefill_b8" "5|decode_b1" "5|decode_b8" "5|prefill_b1" "5|prefill_b8" "5|train_b8" &
wait; log "all done"; touch $R/DONE
