#!/bin/bash
# session of 2026-11-26 (eleventh), call 4, on 4 GPUs where the lender gives H200s (nothing runs on H100s): tp=1 rows on
# H200 at the n_tracks the width law reads for the tp=4 rows at k = 3-5 (124m n_tracks 12, medium 16, large 20;
# baseline, spd, grouped:4), which H100's families have (bench/results/h100_tp1_width/) and H200's lack: the second
# tp=4 batch (bench/results/issue50/prospective_845bb6f/) missed at k = 4 and 5 where H200's term had none.
# One process per GPU, each its own jobs in turn.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
GPU="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';')"
log "master start: $GPU commit $COMMIT"
case "$GPU" in *H200*) ;; *) log "not H200: nothing run"; touch $R/DONE; exit 0 ;; esac
TL="python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --no_torch_tp --policies baseline;spd;grouped:4"
jobs_on() {  # $1 gpu, then "size|n_tracks|workload" items
  local gpu=$1; shift
  for job in "$@"; do
    IFS='|' read size n w <<< "$job"; tag=${size}_n${n}_${w}
    CUDA_VISIBLE_DEVICES=$gpu timeout 300 $TL --sizes $size --n_tracks $n --workloads $w --out_dir $R/t_$tag > $R/logs/$tag.log 2>&1
    log "$tag rc $?"
  done
}
jobs_on 0 "large|20|prefill_b8" "large|20|prefill_b1" "large|20|decode_b1" "large|20|decode_b8" &
jobs_on 1 "medium|16|prefill_b8" "medium|16|prefill_b1" "medium|16|decode_b1" "medium|16|decode_b8" &
jobs_on 2 "medium|16|train_b8" "124m|12|prefill_b8" "124m|12|train_b8" &
jobs_on 3 "large|20|train_b8" "124m|12|prefill_b1" "124m|12|decode_b1" "124m|12|decode_b8" &
wait; log "all done"; touch $R/DONE
