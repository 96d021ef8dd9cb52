#!/usr/bin/env bash
# Run a command in the project's Python environment, from the repository root, without activating it first:
#   bash scripts/run.sh python -m training.launch --standalone --nproc_per_node=8 train_reduced_sync.py config/...
# It sets up the environment as the quickstart does (scripts/env.sh: the active virtual environment, else the
# project's .venv/, created on the first run), prepares the offline Shakespeare data if missing, then runs the
# command in it (exec: its exit code and signals are the command's).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
    echo "usage: bash scripts/run.sh COMMAND [ARGS...], e.g. bash scripts/run.sh python -m training.launch --help" >&2
    exit 2
fi
source scripts/env.sh
if [ ! -f data/shakespeare/train.bin ]; then
    python data/shakespeare/prepare.py
fi
exec "$@"
