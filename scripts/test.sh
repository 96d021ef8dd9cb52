#!/usr/bin/env bash
# The project's test command (README.md): set up the Python environment and install the requirements
# (scripts/env.sh: the active virtual environment, else the project's .venv/), prepare the offline
# Shakespeare datasets if they are missing, then run the unit tests and the all-architectures check.
# Run from anywhere:  bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/env.sh

# tests/test_data.py checks the prepared .bin files when they exist; preparing is offline and fast
for name in shakespeare shakespeare_char; do
    if [ ! -f "data/$name/train.bin" ]; then
        python "data/$name/prepare.py"
    fi
done

echo "running tests/ (about 12 minutes on an idle 2-core CPU machine, much longer on a busy one; pytest prints a dot per test)"
python -m pytest -q tests/
if [ -f test_all_architectures.py ]; then
    python test_all_architectures.py
fi
