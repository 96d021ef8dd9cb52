#!/bin/bash
# session after 6c0e2c5, call 4: after 57b00c9 (the compiled ladder overlaps): medium's training step compiled with
# CUDA graphs (ladder against baseline, one track per GPU, device timeline), then the user's 2-GPU launch with
# sync_policy=ladder, compiled with CUDA graphs and eager: the same val loss?
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
st 200 tt_medium torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size medium --variants tp2 --policies baseline,ladder --tp2_n_tracks 2 --modes compiled-graphs --warmup 8 --iters 20 --profile ladder --out_dir $R/tt_medium
L="train_reduced_sync.py config/train_grouped_6sync.py --sync_policy=ladder --n_tracks=2 --dataset=shakespeare --gradient_accumulation_steps=2 --max_iters=30 --eval_interval=30 --eval_iters=2 --log_interval=1 --always_save_checkpoint=False --keep_best=False"
st 240 launch_graphs torchrun --standalone --nproc_per_node=2 $L --compile=True --compile_mode=reduce-overhead --out_dir=/tmp/l_graphs
st 200 launch_eager torchrun --standalone --nproc_per_node=2 $L --compile=False --out_dir=/tmp/l_eager
for n in graphs eager; do cp /tmp/l_$n/log.txt $R/logs/launch_${n}_log.txt 2>/dev/null; done
log "all done"; touch $R/DONE
