#!/usr/bin/env python3
"""Compare training runs: a table of loss vs synchronization, and a trade-off plot.

The command line of analysis/compare.py (its docstring describes every column, test and panel), which runs the
code of analysis/runs.py, stats.py, tables.py and plots.py:

    python compare_runs.py out-shakespeare-*                  # dirs or quoted globs
    python compare_runs.py 'sweep/*' --stats --trend trend.png
"""
import sys

from analysis.compare import main
from atomic_files import one_line_write_errors
from training.cli import guarded

if __name__ == "__main__":
    # Ctrl-C, SIGTERM and a closed stdout end in one line (issue 53), a plot or table it cannot write too (issue 70)
    sys.exit(guarded(one_line_write_errors(main)))
