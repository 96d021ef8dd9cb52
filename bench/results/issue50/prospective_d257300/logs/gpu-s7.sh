#!/bin/bash
# session of d257300: issue 50's prospective rows, measured after the model was committed (no fit, no revision saw
# them): medium at n_tracks 8 on tp=2 (k = 4 tracks per GPU: no stored tp >= 2 row has k = 4), the 124m training
# workload at tp=2 on the current code; then issue 49's one gap, the medium training loop with every policy.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3"
st 300 tl_medium_k4 $TL --sizes medium --policies "baseline;ladder;spd;parallel;grouped:4" --n_tracks 8 --modes graph --out_dir $R/tl_medium_k4
st 200 tl_124m_train $TL --sizes 124m --policies "baseline;ladder;spd;parallel;grouped:4" --n_tracks 2,4 --workloads train_b8 --modes graph --out_dir $R/tl_124m_train
st 420 tt_medium torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --variants tp1,tp2 --tp1_policies baseline --tp1_n_tracks 2 --size medium --policies baseline,spd,parallel,ladder,grouped:4 --tp2_n_tracks 2 --modes compiled-graphs --warmup 8 --iters 20 --out_dir $R/tt_medium
log "all done"; touch $R/DONE
