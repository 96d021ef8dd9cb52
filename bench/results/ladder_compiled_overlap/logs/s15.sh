#!/bin/bash
# session after 6c0e2c5, call 3: ladder's compiled all-reduces launched and waited as two ops (this tree), against
# the blocking op before it (.gpu/before: git archive 9ea0447), side by side on the same GPUs: the trainer's
# compiled training step with CUDA graphs (124m tp=2, one track per GPU, device timeline), then compiled+graph
# prefill and decode (tp_latency).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree /tmp/before; cp -r "$SRC" /tmp/tree; cp -r "$SRC/.gpu/before" /tmp/before
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2 dir=$3; shift 3; log "$name start"; (cd $dir && timeout $lim "$@" > $R/logs/$name.log 2>&1); log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TT="torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size 124m --variants tp2 --policies baseline,ladder --tp2_n_tracks 2 --modes compiled-graphs --warmup 8 --iters 20 --profile compiled-graphs"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --sizes 124m --policies baseline;ladder --n_tracks 2 --workloads prefill_b1,prefill_b8,decode_b1 --modes compiled+graph"
st 240 tt_after /tmp/tree $TT --out_dir $R/tt_after
st 240 tt_before /tmp/before $TT --out_dir $R/tt_before
st 300 tlc_after /tmp/tree $TL --out_dir $R/tlc_after
st 300 tlc_before /tmp/before $TL --out_dir $R/tlc_before
log "all done"; touch $R/DONE
