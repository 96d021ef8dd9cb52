#!/usr/bin/env bash
# The sync-point study on the embedded Shakespeare data (issue: how few syncs keep the loss).
#
#   bash experiments/shakespeare_sweep/run.sh [SWEEP_DIR]     # default experiments/shakespeare_sweep
#
# Phase 1: every policy of config/shakespeare_*.py (4 tracks, 12 layers), all from seed 1337
#          (same init, same tokens in the same order), plus baseline at seeds 1338 and 1339 for
#          the noise band. The runs go concurrently onto the visible GPU(s) (or CPU).
# Phase 2: spd_sensitivity.py on the seed-1337 baseline: zero-shot sensitivity of every sync
#          point, and data-driven selective policies with 9 and 6 syncs.
# Phase 3: those two policies trained from scratch (same seed and tokens), and the baseline
#          fine-tuned into each for FT_ITERS iterations.
# Logs land in SWEEP_DIR/runs/<run>/ (log.txt, config.json, metrics.jsonl), the sensitivities and the
# table in SWEEP_DIR/; then
#   python compare_runs.py SWEEP_DIR/runs/*
# Environment: ITERS, FT_ITERS, EXTRA (more --key=value overrides), RUNS (a subset of the phase-1
# run names, to split the sweep over several machines or calls; phases 2 and 3 run when RUNS
# includes baseline_24sync), PROGRESS_EVERY (seconds between the progress lines, 60).
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"  # the header above
    exit 0
fi
usage="usage: bash experiments/shakespeare_sweep/run.sh [SWEEP_DIR] (--help)"
if [ $# -gt 1 ] || [[ "${1:-}" == -* ]]; then  # an option would become a folder name, then a mkdir error
    echo "error: unknown argument(s) $*; $usage" >&2
    exit 2
fi
for var in ITERS FT_ITERS PROGRESS_EVERY; do
    if [ -n "${!var:-}" ] && ! [[ "${!var}" =~ ^[0-9]+$ && "${!var}" -ge 1 ]]; then
        echo "error: $var=${!var}: must be an integer >= 1" >&2
        exit 2
    fi
done
sweep=${1:-experiments/shakespeare_sweep}
if [ -e "$sweep" ] && [ ! -d "$sweep" ]; then
    echo "error: SWEEP_DIR $sweep exists and is not a folder; $usage" >&2
    exit 2
fi
runs_dir=$sweep/runs
iters=${ITERS:-1500}
ft_iters=${FT_ITERS:-300}
# GPU-sized schedule on the config family's architecture: 32 x 256 tokens per iteration, in one micro-step
# (as the stored sweep ran; the configs themselves accumulate 2 x 4 sequences so that 8 processes can split them).
common="--gradient_accumulation_steps=1 --batch_size=32 --block_size=256 --max_iters=$iters --lr_decay_iters=$iters --warmup_iters=100
        --eval_interval=100 --eval_iters=20 --log_interval=50 --always_save_checkpoint=False ${EXTRA:-}"
mkdir -p "$runs_dir"

declare -A running  # pid -> run name
train() {  # train NAME CONFIG [overrides...]: one run in the background, its stdout in SWEEP_DIR/runs/NAME.out
    local name=$1 config=$2; shift 2
    python train_reduced_sync.py "config/$config.py" $common --out_dir="$runs_dir/$name" "$@" \
        > "$runs_dir/$name.out" 2>&1 &
    running[$!]=$name
}

# Wait for the background runs. They log only to their .out files, so every PROGRESS_EVERY seconds (60)
# print each running one's last eval or training line.
wait_runs() {
    local t=0 pid
    while [ -n "$(jobs -rp)" ]; do
        sleep 5
        t=$((t + 5))
        [ $((t % ${PROGRESS_EVERY:-60})) -eq 0 ] || continue
        for pid in "${!running[@]}"; do
            if kill -0 "$pid" 2>/dev/null; then
                echo "   $(date -u +%T) ${running[$pid]}: $(grep -E '^(step|iter) [0-9]+' "$runs_dir/${running[$pid]}.out" \
                    | tail -1 | cut -d, -f1,2)"
            else
                unset "running[$pid]"
            fi
        done
    done
    wait
}

runs=${RUNS:-baseline_24sync spd_12sync parallel_12sync selective_9sync grouped_6sync grouped_4sync
              grouped_3sync grouped_2sync baseline_24sync_seed1338 baseline_24sync_seed1339}
# The stored sweep is a record: a run dir that holds a run would be refused by the trainer only after phase 2
# had overwritten the sweep's sensitivity tables, so refuse it here, before anything is written.
for run in $runs; do
    if [ -e "$runs_dir/$run/log.txt" ] || [ -e "$runs_dir/$run/metrics.jsonl" ]; then
        echo "error: $runs_dir/$run already holds a run; give a new SWEEP_DIR:" \
             "bash experiments/shakespeare_sweep/run.sh DIR" >&2
        exit 1
    fi
done
echo "== phase 1: $(date -u +%T): $runs"
for run in $runs; do
    case $run in
        *_seed*) train "$run" "shakespeare_${run%_seed*}" --seed="${run##*_seed}" ;;
        *) train "$run" "shakespeare_$run" ;;
    esac
done
wait_runs
case " $runs " in *" baseline_24sync "*) ;; *) exit 0 ;; esac

echo "== phase 2: $(date -u +%T)"
for n in 9 6; do
    python spd_sensitivity.py "$runs_dir/baseline_24sync/ckpt_best.pt" --syncs $n \
        --out "$sweep/sensitivity_$n.json" | tee "$sweep/sensitivity_$n.txt"
done

echo "== phase 3: $(date -u +%T)"
for n in 9 6; do
    policy=$(python -c "import json; print(json.load(open('$sweep/sensitivity_$n.json'))['policy'])")
    train "datadriven_${n}sync" shakespeare_baseline_24sync --sync_policy="$policy"
    train "datadriven_${n}sync_finetuned" shakespeare_baseline_24sync --sync_policy="$policy" \
        --init_from="$runs_dir/baseline_24sync/ckpt_best.pt" --max_iters=$ft_iters --lr_decay_iters=$ft_iters \
        --warmup_iters=20 --learning_rate=3e-4 --min_lr=3e-5 --eval_interval=50
done
wait_runs
echo "== done: $(date -u +%T)"
python compare_runs.py "$runs_dir"/*/ --markdown --out "$sweep/compare_runs.png" | tee "$sweep/compare_runs.md"
