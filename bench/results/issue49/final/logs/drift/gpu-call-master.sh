#!/bin/bash
# one master per machine, started with setsid by callF; later calls watch /tmp/res/master.log
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs $R/bench
cd "$(dirname "$0")/.."
log() { echo "== $* $(date +%T)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; local rc=$?; log "$name rc $rc"; return $rc; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $(git rev-parse --short HEAD 2>/dev/null)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site
st 200 prepare python3 data/debian_docs/prepare.py --from-pack .corpus/debian_docs_pack.tar.xz --workers 16
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv -l 20 > $R/logs/smi.csv 2>&1 & SMI=$!
P="baseline;ladder;spd;parallel;grouped:4"
# P1: timings on quiet GPUs
st 240 t2_124m torchrun --standalone --nproc_per_node=2 -m bench.tp_latency --sizes 124m --policies "$P" --n_tracks 2,4 --modes graph --no_torch_tp --warmup 2 --repeats 10 --rounds 5 --out_dir $R/bench/t2_124m
st 300 t1 env CUDA_VISIBLE_DEVICES=0 python3 -m bench.tp_latency --sizes 124m,medium --n_tracks 4 --policies "$P;grouped:12" --modes graph --warmup 2 --repeats 10 --rounds 5 --out_dir $R/bench/t1 & A=$!
st 300 calibrate env CUDA_VISIBLE_DEVICES=1 python3 -m bench.step_model calibrate --device cuda --out_dir $R/bench/cal & B=$!
wait $A $B
log "P1 done"
# P2: the size sweeps, one runner per width, pinned; then the drift hunt beside them
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
J=4; [ "$MEM" -gt 100000 ] && J=6
DL=${DEADLINE:-840}
sweep() { local gpu=$1 w=$2 jobs=$3; CUDA_VISIBLE_DEVICES=$gpu python3 -m experiments.docs_study.run run --config config/size_w$w.py --sweep experiments/docs_study/sizes/w$w --jobs $jobs --deadline $DL --scratch /tmp/scratch$w --pack $R/pack$w --status-every 120 > $R/logs/sweep_w$w.log 2>&1; log "sweep w$w rc $?"; }
sweep 0 512 $J & PIDS="$!"; sweep 1 384 $J & PIDS="$PIDS $!"; sweep 1 256 $J & PIDS="$PIDS $!"
L="train_reduced_sync.py config/train_grouped_6sync.py --dataset=shakespeare --gradient_accumulation_steps=2 --max_iters=30 --eval_interval=30 --eval_iters=2 --log_interval=1 --always_save_checkpoint=False --keep_best=False"
tr() { local name=$1; shift; st 400 $name "$@" --out_dir=/tmp/$name; }
tr l_eager torchrun --standalone --nproc_per_node=2 $L --compile=False & PIDS="$PIDS $!"
tr l_inductor torchrun --standalone --nproc_per_node=2 $L --compile=True & PIDS="$PIDS $!"
tr l_inductor_blocking env CUDA_LAUNCH_BLOCKING=1 torchrun --standalone --nproc_per_node=2 $L --compile=True & PIDS="$PIDS $!"
tr l_inductor_nocudnn torchrun --standalone --nproc_per_node=2 .gpu/no_cudnn.py $L --compile=True & PIDS="$PIDS $!"
tr l_aot_eager torchrun --standalone --nproc_per_node=2 $L --compile=True --compile_backend=aot_eager & PIDS="$PIDS $!"
tr l_dynamo_eager torchrun --standalone --nproc_per_node=2 $L --compile=True --compile_backend=eager & PIDS="$PIDS $!"
st 400 cc_124m torchrun --standalone --nproc_per_node=2 -m bench.compile_check --shape 124m --n_tracks 4 --block_size 1024 --batch_size 4 --micro_steps 2 --policies baseline,grouped:2 --out_dir $R/logs/cc_124m & PIDS="$PIDS $!"
st 400 cc_124m_nocudnn torchrun --standalone --nproc_per_node=2 -m bench.compile_check --shape 124m --n_tracks 4 --block_size 1024 --batch_size 4 --micro_steps 2 --policies baseline,grouped:2 --no_cudnn_sdpa --out_dir $R/logs/cc_124m_nocudnn & PIDS="$PIDS $!"
wait $PIDS; kill $SMI
log "all done"
touch $R/DONE
