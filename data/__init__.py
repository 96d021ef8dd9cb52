"""Datasets: data/<name>/prepare.py writes them; loader.py reads them for training."""
