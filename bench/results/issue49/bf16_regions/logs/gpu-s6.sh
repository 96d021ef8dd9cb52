#!/bin/bash
# issue 49: a region's all-reduces in bf16 (this commit) against 1bdb054 (.gpu/before.tar), back to back, tp=2.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree /tmp/before; cp -r "$SRC" /tmp/tree; mkdir /tmp/before; tar xf $SRC/.gpu/before.tar -C /tmp/before
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2 dir=$3; shift 3; log "$name start"; (cd $dir && timeout $lim "$@") > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT (before: 1bdb054)"
TL="torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --workloads train_b8 --modes graph"
TT="torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --variants tp2 --modes compiled-graphs --warmup 10 --iters 30"
for v in after before; do d=/tmp/tree; [ $v = before ] && d=/tmp/before
  st 150 tl_medium_$v $d $TL --sizes medium --policies "baseline;spd;parallel;grouped:4" --n_tracks 2,4 --out_dir $R/$v/tl_medium; done
for v in after before; do d=/tmp/tree; [ $v = before ] && d=/tmp/before
  st 200 tt_124m_$v $d $TT --size 124m --policies baseline,spd,parallel,grouped:4 --tp2_n_tracks 2 --out_dir $R/$v/tt_124m; done
for v in after before; do d=/tmp/tree; [ $v = before ] && d=/tmp/before
  st 120 tl_large_$v $d $TL --sizes large --policies "baseline;spd;grouped:4" --n_tracks 2 --out_dir $R/$v/tl_large; done
log "all done"; touch $R/DONE
