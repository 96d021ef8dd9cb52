#!/bin/bash
# session of 2026-11-26 (ninth), call 2: tp=1 rows on H100 at n_tracks = 2k for the stored tp=2 rows at k tracks per
# GPU that have no such tp=1 row (124m n_tracks 4 and 12, medium 16, large 20; baseline, spd, grouped:4), to test
# a width law before it is used: a rank at tp=2 with k tracks runs half of what one GPU runs at n_tracks = 2k (the
# same tracks, as wide). Stated before these rows ran: on prefill_b8 and train_b8, the stored tp=2 floor's extra
# over baseline's floor lies within 0.90-1.10 of half the tp=1 extra at n_tracks = 2k (16 stored pairs: 0.91-1.05).
# One process per job (graph pools); GPU 0 large then 124m n_tracks 4, GPU 1 medium then 124m n_tracks 12.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --no_torch_tp --policies baseline;spd;grouped:4"
jobs_on() {  # $1 gpu, then "size|n_tracks|workload" items
  local gpu=$1; shift
  for job in "$@"; do
    IFS='|' read size n w <<< "$job"; tag=${size}_n${n}_${w}
    CUDA_VISIBLE_DEVICES=$gpu timeout 300 $TL --sizes $size --n_tracks $n --workloads $w --out_dir $R/t_$tag > $R/logs/$tag.log 2>&1
    log "$tag rc $?"
  done
}
jobs_on 0 "large|20|prefill_b8" "large|20|prefill_b1" "large|20|decode_b1" "large|20|decode_b8" \
  "124m|4|prefill_b8" "124m|4|train_b8" "124m|4|prefill_b1" "124m|4|decode_b1" "124m|4|decode_b8" &
jobs_on 1 "medium|16|prefill_b8" "medium|16|train_b8" "medium|16|prefill_b1" "medium|16|decode_b1" "medium|16|decode_b8" \
  "124m|12|prefill_b8" "124m|12|train_b8" "124m|12|prefill_b1" "124m|12|decode_b1" "124m|12|decode_b8" &
wait; log "all done"; touch $R/DONE
