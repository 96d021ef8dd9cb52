"""Library code of bench/train_throughput.py: the plain references it times ours against, and its report."""
