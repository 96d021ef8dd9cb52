#!/usr/bin/env bash
# Quickstart on a fresh machine: install, prepare Shakespeare (offline), train two small
# 4-track models with real tensor parallelism (2 processes: tp='auto' takes tp=2), and compare them:
#   baseline   24 all-reduces per forward pass (standard Megatron TP)
#   grouped:4   3 all-reduces per forward pass
# Runs on CPU (gloo), or on GPUs (NCCL) when the machine has at least 2.
# Extra arguments go to both training runs, e.g.  bash scripts/quickstart.sh --max_iters=50
# Re-running starts the runs (and their logs) afresh; the previous ones move into out-*/replaced-<time>/.
# It demonstrates the workflow; one seed per policy measures nothing (the last lines say so).
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q -r requirements.txt
python data/shakespeare/prepare.py

for run in shakespeare_baseline_24sync shakespeare_grouped_3sync; do
    echo "=== training config/$run.py on 2 processes (device=auto: 2 GPUs if present, else CPU)"
    # 150 iterations keep the demo to a few minutes on 2 CPU cores (the configs run 200)
    torchrun --standalone --nproc_per_node=2 train_reduced_sync.py "config/$run.py" \
        --max_iters=150 --lr_decay_iters=150 --eval_interval=50 --overwrite=True "$@"
done

python compare_runs.py out-shakespeare-baseline-24sync out-shakespeare-grouped-3sync
cat <<'TEXT'

What this shows: the workflow (2-process tensor parallelism, syncs per forward measured, logs, the
comparison table and compare_runs.png), not a result. These are one seed per policy after 150
iterations of a barely trained model: one seed cannot tell the Δ above from run-to-run noise, so it
measures nothing. The measured answer (3 seeds per policy, paired tests against a stated margin,
longer runs and GPT-2 124M) is in EXPERIMENT_SUMMARY.md.
TEXT
