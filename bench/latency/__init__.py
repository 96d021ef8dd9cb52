"""Library code of bench/tp_latency.py: the workloads it times and PyTorch's TP, the reference model of its rows."""
