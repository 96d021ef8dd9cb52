#!/bin/bash
# session 3 master: checks of the stacked partial params (both GPUs) beside the study's open cells; deadline-driven
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs $R/cc; cd "$(dirname "$0")/.."
T0=$(date +%s); DL=${DEADLINE:-1380}
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; local rc=$?; log "$name rc $rc"; return $rc; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $(git rev-parse --short HEAD 2>/dev/null)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site
st 200 prepare python3 data/debian_docs/prepare.py --from-pack .corpus/debian_docs_pack.tar.xz --workers 16
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv -l 20 > $R/logs/smi.csv 2>&1 & SMI=$!
left() { echo $(( DL - ($(date +%s) - T0) )); }
sw() { local gpu=$1 tag=$2 jobs=$3; shift 3; CUDA_VISIBLE_DEVICES=$gpu python3 -m experiments.docs_study.run run --jobs $jobs --deadline $(left) --scratch /tmp/scr_$tag --pack $R/pack_$tag --status-every 120 "$@" > $R/logs/sweep_$tag.log 2>&1; log "sweep $tag rc $?"; }
# the budget study's open cells first: the cosine runs of spd and grouped:12 at 83.9M, split over the GPUs
sw 0 cosA 3 --config config/docs_124m.py --schedule cosine --budgets 2560 --policies spd --seeds 1337,1338,1339 & P="$!"
sw 1 cosB 3 --config config/docs_124m.py --schedule cosine --budgets 2560 --policies grouped:12 --seeds 1337,1338,1339 & P="$P $!"
# the size axis's third seed (and w384 grouped:12's second)
sw 0 w256 5 --config config/size_w256.py --sweep experiments/docs_study/sizes/w256 --seeds 1339 --set gradient_accumulation_steps=1 --set batch_size=6 & P="$P $!"
sw 0 w384 5 --config config/size_w384.py --sweep experiments/docs_study/sizes/w384 --seeds 1338,1339 --set gradient_accumulation_steps=1 --set batch_size=10 & P="$P $!"
sw 1 w512 5 --config config/size_w512.py --sweep experiments/docs_study/sizes/w512 --seeds 1339 --set gradient_accumulation_steps=1 --set batch_size=16 & P="$P $!"
# issue 49: the stacked region parameters under inductor on CUDA at the launch's shape, then the launch compiled
checks() {
  C="--shape 124m --n_tracks 4 --block_size 1024 --batch_size 4 --micro_steps 2"
  st 420 bisect torchrun --standalone --nproc_per_node=2 -m experiments.compiler_repros.partial_grads.bisect_partial_grads $C --policies grouped:2 --variants cat_f,stack_f,coalesced_f,cat_f_no_mix --out_dir $R/cc/bisect
  st 600 cc_tp2 torchrun --standalone --nproc_per_node=2 -m bench.compile_check $C --out_dir $R/cc/tp2
  st 400 cc_tp1 env CUDA_VISIBLE_DEVICES=1 python3 -m bench.compile_check $C --out_dir $R/cc/tp1
  L="train_reduced_sync.py config/train_grouped_6sync.py --dataset=shakespeare --gradient_accumulation_steps=2 --max_iters=30 --eval_interval=30 --eval_iters=2 --log_interval=1 --always_save_checkpoint=False --keep_best=False"
  st 400 launch_compiled torchrun --standalone --nproc_per_node=2 $L --compile=True --out_dir=/tmp/l_compiled
  st 400 launch_graphs torchrun --standalone --nproc_per_node=2 $L --compile=True --compile_mode=reduce-overhead --out_dir=/tmp/l_graphs
  log "checks done"; touch $R/CHECKS
}
checks & P="$P $!"
wait $P; kill $SMI
log "all done"; touch $R/DONE
