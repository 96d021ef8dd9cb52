#!/usr/bin/env bash
# Quickstart on a fresh machine: install, prepare Shakespeare (offline), train two small
# 4-track models with real tensor parallelism (2 processes, tp=2), and compare them:
#   baseline   24 all-reduces per forward pass (standard Megatron TP)
#   grouped:4   3 all-reduces per forward pass
# Runs on CPU (gloo), or on GPUs (NCCL) when the machine has at least 2.
# Extra arguments go to both training runs, e.g.  bash scripts/quickstart.sh --max_iters=50
# Re-running starts the runs (and their logs) afresh; the previous ones move into out-*/replaced-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q -r requirements.txt
python data/shakespeare/prepare.py

for run in shakespeare_baseline_24sync shakespeare_grouped_3sync; do
    echo "=== training config/$run.py with tp=2 (device=auto: 2 GPUs if present, else CPU)"
    # 150 iterations keep the demo to a few minutes on 2 CPU cores (the configs run 200)
    torchrun --standalone --nproc_per_node=2 train_reduced_sync.py "config/$run.py" --tp=2 \
        --max_iters=150 --lr_decay_iters=150 --eval_interval=50 --overwrite=True "$@"
done

python compare_runs.py out-shakespeare-baseline-24sync out-shakespeare-grouped-3sync
