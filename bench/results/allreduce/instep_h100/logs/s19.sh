#!/bin/bash
# session of 2026-11-26 (eighth), call 2: what an all-reduce adds to a step at tp=2, with each call's own message
# written by a GEMM of inner size N and read by a residual add (--producer gemm, N = 512, 1024, 2048), and the
# matmul producer again at N = 1024 and 4096, now with every rank's floor (the sweep reads rank 0's clock).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
for n in 512 1024 2048; do
  st 200 gemm$n torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --between $n --producer gemm --out_dir $R/gemm_$n
done
for n in 1024 4096; do
  st 200 matmul$n torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --between $n --producer matmul --out_dir $R/matmul_$n
done
nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/logs/clocks.txt
log "all done"; touch $R/DONE
