"""The trainer's library: its config (config.py) and --help (help.py), checkpoint format (checkpoint.py), run
directory (run_dir.py), stopping (stop.py), memory check (memory_check.py), the training step, schedule,
evaluation and run log (step.py), what a run writes about itself (records.py), and a torchrun whose launch ends
in our line (launch.py). train_reduced_sync.py is the entry point that puts them together."""
