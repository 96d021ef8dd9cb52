"""Benchmarks: each script runs as a module from the repository root (python -m bench.<name>);
common.py holds what they share."""
