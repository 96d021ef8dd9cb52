"""The command-line guard (cli_guard.py, re-exported here for the scripts that import it from training.cli),
and check_policies, the one guard that needs the model's sync-policy parser.

    check_policies(parser, specs, n_layers)    every sync-policy spec parses for every n_layer, or
                                 parser.error names the first that does not
"""
from cli_guard import (EXIT_SIGINT, EXIT_SIGTERM, Stopped, exit_now, exits_fast,  # noqa: F401 -- re-exported
                       fraction, guarded, non_negative_int, positive_int)
from model.sync_policy import parse_sync_policy


def check_policies(parser, specs, n_layers):
    """parser.error (one line, exit 2) unless every spec parses at every n_layer in n_layers."""
    if not specs:
        parser.error("no sync policy given; allowed: baseline, spd, parallel, ladder, grouped:G, selective:SPEC")
    for n_layer in n_layers:
        for spec in specs:
            try:
                parse_sync_policy(spec, n_layer)
            except ValueError as e:
                parser.error(f"{e} (at n_layer={n_layer})")
