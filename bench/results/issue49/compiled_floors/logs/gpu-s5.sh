#!/bin/bash
# session of 1bdb054+: issue 49 (spd's floor compiled, its eager-graph trace) and issue 50 (unseen large tp=2 rows,
# spd's training all-reduces at k=2 traced). Run detached from a copy of the tree (see next.sh).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3"
PP="torchrun --standalone --nproc_per_node=2 -m bench.profile_policy"
st 300 tlc_124m $TL --sizes 124m --policies "baseline;spd;grouped:4" --n_tracks 2 --workloads prefill_b1,decode_b1 --modes compiled+graph --out_dir $R/tlc_124m
st 150 prof_spd_floor $PP --size 124m --n_tracks 2 --policies "baseline;spd" --workload decode_b1 --mode graph --floor --calls 20 --top 16 --out_dir $R/prof_floor
st 330 tl_large $TL --sizes large --policies "baseline;ladder;spd;parallel;grouped:4" --n_tracks 2,4 --modes graph --out_dir $R/tl_large
st 200 prof_train_k2 $PP --size medium --n_tracks 4 --policies "baseline;spd" --workload train_b8 --mode graph --calls 10 --top 16 --out_dir $R/prof_train_k2
st 420 tlc_large $TL --sizes large --policies "baseline;spd" --n_tracks 2 --workloads prefill_b1,decode_b1 --modes compiled+graph --out_dir $R/tlc_large
st 330 tlc_medium $TL --sizes medium --policies "baseline;spd" --n_tracks 2 --workloads prefill_b1,decode_b1 --modes compiled+graph --out_dir $R/tlc_medium
log "all done"; touch $R/DONE
