#!/bin/bash
# session 4 master: quiet timings first (all-reduce sweep, the trainer's step with mix-order off, tp=1 k=2 rows),
# then the study's open cells on both GPUs beside the correctness checks (compile_check of every policy, launches).
# Runs from a COPY of the tree outside the repository root (a later call's fresh working tree removes run dirs).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s); DL=${DEADLINE:-1380}; left() { echo $(( DL - ($(date +%s) - T0) )); }
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site
st 200 prepare python3 data/debian_docs/prepare.py --from-pack .corpus/debian_docs_pack.tar.xz --workers 16
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv -l 20 > $R/logs/smi.csv 2>&1 &
# quiet: timings
st 200 ar_sweep torchrun --standalone --nproc_per_node=2 -m bench.allreduce_sweep --out_dir $R/ar
st 420 tt_124m torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --size 124m --variants tp1,tp2 --tp1_policies baseline --tp1_n_tracks 2 --policies baseline,spd,grouped:4 --tp2_n_tracks 2 --modes compiled-graphs --warmup 10 --iters 30 --out_dir $R/tt
st 300 t1_n2 env CUDA_VISIBLE_DEVICES=0 python3 -m bench.tp_latency --sizes 124m,medium --n_tracks 2 --policies "baseline;ladder;spd;parallel;grouped:4;grouped:12" --modes graph --warmup 2 --repeats 10 --rounds 5 --out_dir $R/t1n2
touch $R/QUIET
# the study's open cells, deadline-driven
sw() { local gpu=$1 tag=$2 jobs=$3; shift 3; CUDA_VISIBLE_DEVICES=$gpu python3 -m experiments.docs_study.run run --jobs $jobs --deadline $(left) --scratch /tmp/scr_$tag --pack $R/pack_$tag --status-every 120 "$@" > $R/logs/sweep_$tag.log 2>&1; log "sweep $tag rc $?"; }
sw 0 par 3 --config config/docs_124m.py --budgets 2560 --policies parallel --seeds 1337,1338,1339 & P="$!"
sw 1 w384 6 --config config/size_w384.py --sweep experiments/docs_study/sizes/w384 --seeds 1338,1339 --set gradient_accumulation_steps=1 --set batch_size=10 & P="$P $!"
sw 0 w256 4 --config config/size_w256.py --sweep experiments/docs_study/sizes/w256 --seeds 1339 --set gradient_accumulation_steps=1 --set batch_size=6 & P="$P $!"
# correctness beside them (contention changes times, not results)
C="--shape 124m --n_tracks 4 --block_size 1024 --batch_size 4 --micro_steps 2"
st 600 cc_tp2 torchrun --standalone --nproc_per_node=2 -m bench.compile_check $C --out_dir $R/cc
L="train_reduced_sync.py config/train_grouped_6sync.py --dataset=shakespeare --gradient_accumulation_steps=2 --max_iters=30 --eval_interval=30 --eval_iters=2 --log_interval=1 --always_save_checkpoint=False --keep_best=False"
st 400 launch_graphs torchrun --standalone --nproc_per_node=2 $L --compile=True --compile_mode=reduce-overhead --out_dir=/tmp/l_graphs
st 300 launch_eager torchrun --standalone --nproc_per_node=2 $L --compile=False --out_dir=/tmp/l_eager
log "checks done"; touch $R/CHECKS
wait $P; log "all done"; touch $R/DONE
