#!/usr/bin/env bash
# GPU check of the training path on the embedded Shakespeare data (1 or 2 GPUs):
# a GPT-2 124M config for a few iterations at tp=1 (4 tracks on one GPU), then, with 2 GPUs,
# tp=2 and dp=2 under torchrun. Logs go to ${OUT_ROOT:-out-gpu-smoke}/<run>/log.txt.
#   bash scripts/gpu_smoke.sh [max_iters]
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
iters=${1:-60}
root=${OUT_ROOT:-out-gpu-smoke}
common=(--dataset=shakespeare --max_iters=$iters --lr_decay_iters=$iters --warmup_iters=10
        --eval_interval=$iters --eval_iters=10 --log_interval=10 --gradient_accumulation_steps=4)
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
for policy in baseline_24sync grouped_3sync; do
  python3 train_reduced_sync.py config/train_$policy.py --tp=1 "${common[@]}" --out_dir=$root/${policy}_tp1
done
if [ "$ngpu" -ge 2 ]; then
  torchrun --standalone --nproc_per_node=2 train_reduced_sync.py config/train_baseline_24sync.py \
    --tp=2 "${common[@]}" --out_dir=$root/baseline_24sync_tp2
  torchrun --standalone --nproc_per_node=2 train_reduced_sync.py config/train_baseline_24sync.py \
    --tp=1 "${common[@]}" --out_dir=$root/baseline_24sync_dp2
fi
grep -H . $root/*/log.txt
