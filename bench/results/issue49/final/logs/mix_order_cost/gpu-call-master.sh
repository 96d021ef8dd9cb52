#!/bin/bash
# session 4, call 3 (one call, foreground): current-code tp=2 rows on 2x H100 for the step model's held-out check,
# the trainer's tp=2 step with inductor's defaults against its own settings, and a dp=2 launch with CUDA graphs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res5; mkdir -p $R/logs; T0=$(date +%s); END=${END:-545}
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)" | tee -a $R/master.log; }
st() { local lim=$1 name=$2; shift 2; local left=$(( END - 15 - ($(date +%s) - T0) )); [ $left -lt $lim ] && lim=$left
       [ $lim -lt 20 ] && { log "$name skipped"; return; }; log "$name start ($lim s)"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "start: $(nvidia-smi --query-gpu=name --format=csv,noheader | tr '\n' ';') commit $(git rev-parse --short HEAD 2>/dev/null)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site
st 190 tl torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --sizes 124m,medium --policies "baseline;ladder;spd;parallel;grouped:4" --n_tracks 2,4 --modes graph --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --out_dir $R/tl
TT="--size 124m --variants tp2 --policies baseline,grouped:4 --tp2_n_tracks 2 --modes compiled-graphs --warmup 10 --iters 30"
st 95 tt_trainer torchrun --standalone --nproc_per_node=2 -m bench.train_throughput $TT --out_dir $R/tt_trainer
st 95 tt_defaults torchrun --standalone --nproc_per_node=2 -m bench.train_throughput $TT --inductor_defaults --out_dir $R/tt_defaults
L="train_reduced_sync.py config/train_grouped_6sync.py --tp=1 --dataset=shakespeare --gradient_accumulation_steps=2 --max_iters=30 --eval_interval=30 --eval_iters=2 --log_interval=1 --always_save_checkpoint=False --keep_best=False"
st 110 launch_dp2_auto torchrun --standalone --nproc_per_node=2 $L --out_dir=/tmp/l_dp2_auto
st 50 launch_dp2_eager torchrun --standalone --nproc_per_node=2 $L --compile=False --out_dir=/tmp/l_dp2_eager
log done
cd $R && tar czf $OUT/all.tgz . ; grep -h "rc\|skipped" master.log; grep -h "val loss: final\|compile:" logs/launch_*.log; grep -h "ms/iter\|^| ours" tt_*/train_throughput.md | head; ls tl
