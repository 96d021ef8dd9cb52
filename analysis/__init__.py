"""Reading run directories and turning them into tables, paired statistics over seeds and plots
(compare.py). compare_runs.py is its command line; the study runners under experiments/ import it."""
