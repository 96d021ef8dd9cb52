#!/bin/bash
# session of 2026-11-26 (eighth), call 3: GPT-2 large at tp=1 on H100, k = 2 (GPU 0) and k = 4 (GPU 1) tracks,
# the same jobs as bench/results/h200_tp1_large/ ran on H200: the H100 large family had no one-GPU rows.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --no_torch_tp --sizes large"
one_gpu() {  # $1 gpu, $2 n_tracks
  for job in "decode_b1|baseline;spd;parallel;grouped:4" "prefill_b1|baseline;spd;parallel;grouped:4" \
             "decode_b8|baseline;spd;parallel;grouped:4" "prefill_b8|baseline;spd;parallel;grouped:4" \
             "train_b8|baseline;spd" "train_b8|baseline;parallel;grouped:4"; do
    w=${job%%|*}; p=${job#*|}; tag=k$2_${w}_$(echo $p | tr ';:' '__')
    CUDA_VISIBLE_DEVICES=$1 timeout 300 $TL --n_tracks $2 --workloads $w --policies "$p" --out_dir $R/t_$tag > $R/logs/$tag.log 2>&1
    log "$tag rc $?"
  done
}
one_gpu 0 2 &
one_gpu 1 4 &
wait; log "all done"; touch $R/DONE
