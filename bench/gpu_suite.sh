#!/usr/bin/env bash
# The GPU runs behind bench/results/ (tp_latency, profiles, sync_frequency), one machine per call:
#   bash bench/gpu_suite.sh tp2 OUT_DIR     # 2 GPUs: tp=2 latency (124M, medium), tp=2 profiles
#   bash bench/gpu_suite.sh tp4 OUT_DIR     # 4 GPUs: tp=4 latency (n_tracks 4: one track per GPU), profiles
#   bash bench/gpu_suite.sh tp1 OUT_DIR     # 1 GPU: tp=1 latency, tp=1 profiles, sync_frequency
# then, here: copy OUT_DIR's files into bench/results/ and run `python bench/tp_latency.py --merge`.
# Each step has a time limit, so one that hangs or runs long costs only its own rows.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mode=${1:?tp1, tp2 or tp4}
out=${2:?output directory}
mkdir -p "$out/medium"
nvidia-smi -L > "$out/nvidia_smi.txt"
small="baseline;ladder;spd;parallel;selective:m0-3,m5,m7,m9-11;grouped:2;grouped:3;grouped:4;grouped:6"
medium="baseline;ladder;spd;parallel;grouped:3;grouped:6"
step() {  # step SECONDS NAME CMD...: run CMD with a time limit, log to $out/NAME.log
  local limit=$1 name=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "== $name: rc $? after ${SECONDS}s"
}
case $mode in
  tp1) launch=(python); tracks="4" ;;
  tp2) launch=(torchrun --standalone --nproc_per_node=2); tracks="4,2" ;;
  tp4) launch=(torchrun --standalone --nproc_per_node=4); tracks="4" ;;
  *) echo "gpu_suite.sh: mode '$mode' is not one of tp1, tp2, tp4" >&2; exit 2 ;;
esac
step 240 latency_124m "${launch[@]}" bench/tp_latency.py --sizes 124m --n_tracks $tracks \
  --policies "$small" --warmup 3 --repeats 20 --out_dir "$out"
for n in ${tracks//,/ }; do
  step 60 profile_prefill_b8_n$n "${launch[@]}" bench/profile_policy.py --n_tracks $n --workload prefill_b8 \
    --mode graph --policies "baseline;spd;grouped:4;parallel;ladder" --out_dir "$out"
done
step 60 profile_prefill_b1_eager "${launch[@]}" bench/profile_policy.py --workload prefill_b1 --mode eager \
  --policies "baseline;grouped:4" --torch_tp --out_dir "$out"
if [ "$mode" = tp1 ]; then
  step 240 sync_frequency python bench/sync_frequency.py --device cuda --out_dir "$out"
fi
step 200 latency_medium "${launch[@]}" bench/tp_latency.py --sizes medium --n_tracks $tracks \
  --policies "$medium" --warmup 3 --repeats 20 --out_dir "$out/medium"
