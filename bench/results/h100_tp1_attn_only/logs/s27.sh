#!/bin/bash
# session of 2026-11-26 (ninth), call 5: tp=1 rows on H100 of attention-only syncs (selective:a0-<L-1>,m<L-1>, every
# MLP sync dropped but the last) at n_tracks 2, beside baseline, at 124m, medium and large, every workload: the policy
# shape prospective_000c2f1 found unpriced at two tracks per GPU (its per-track sublayer is the MLP, which no fitted
# policy runs alone). One process per job (graph pools); GPU 0 large, GPU 1 124m then medium.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --no_torch_tp --n_tracks 2"
jobs_on() {  # $1 gpu, then "size|last layer|workload" items
  local gpu=$1; shift
  for job in "$@"; do
    IFS='|' read size last w <<< "$job"; tag=${size}_n2_${w}
    CUDA_VISIBLE_DEVICES=$gpu timeout 240 $TL --sizes $size --policies "baseline;selective:a0-$last,m$last" --workloads $w --out_dir $R/t_$tag > $R/logs/$tag.log 2>&1
    log "$tag rc $?"
  done
}
jobs_on 0 "large|35|prefill_b8" "large|35|train_b8" "large|35|prefill_b1" "large|35|decode_b1" "large|35|decode_b8" &
jobs_on 1 "124m|11|prefill_b8" "124m|11|train_b8" "124m|11|prefill_b1" "124m|11|decode_b1" "124m|11|decode_b8" \
  "medium|23|prefill_b8" "medium|23|train_b8" "medium|23|prefill_b1" "medium|23|decode_b1" "medium|23|decode_b8" &
wait; log "all done"; touch $R/DONE
