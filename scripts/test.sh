#!/usr/bin/env bash
# The project's test command (README.md): set up the Python environment and install the requirements
# (scripts/env.sh: the active virtual environment, else the project's .venv/), prepare the offline
# Shakespeare datasets if they are missing, then run the unit tests and the all-architectures check.
# Run from anywhere:
#   bash scripts/test.sh          # the default tier (what CI runs): every test not marked slow, and the slow tests
#                                 # marked gate (one of each kind), then test_all_architectures.py
#   bash scripts/test.sh --slow   # the rest of the slow tier (pytest.ini's markers): process-level runs, smokes
#   bash scripts/test.sh --all    # both
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") tier=(-m "not slow or gate"); what="the default tier (about 5-8 minutes on an idle 2-core CPU machine)" ;;
  --slow) tier=(-m "slow and not gate"); what="the slow tier (about 10 minutes on an idle 2-core CPU machine)" ;;
  --all) tier=(); what="every test (about 15-18 minutes on an idle 2-core CPU machine)" ;;
  *) echo "error: unknown option ${1}; allowed: none (the default tier), --slow, --all" >&2; exit 2 ;;
esac

source scripts/env.sh

# tests/test_data.py checks the prepared .bin files when they exist; preparing is offline and fast
for name in shakespeare shakespeare_char; do
    if [ ! -f "data/$name/train.bin" ]; then
        python "data/$name/prepare.py"
    fi
done

echo "running $what of tests/ (longer on a busy machine; pytest prints a dot per test)"
python -m pytest -q "${tier[@]}" tests/
if [ "${1:-}" != --slow ] && [ -f test_all_architectures.py ]; then
    python test_all_architectures.py
fi
