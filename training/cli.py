"""The guards a command line shares (issue 53): what a user does ends in one line, never a traceback.

    sys.exit(guarded(main))    main() under the guard:
                                 Ctrl-C (SIGINT)  -> "stopped (Ctrl-C)" on stderr, exit 130
                                 SIGTERM          -> "stopped (SIGTERM)", exit 143
                                 stdout closed (`... | head`) -> quiet, exit 0
                                 SystemExit from argparse or a check -> as raised (one line, exit 2 or 1)
    positive_int, non_negative_int, fraction   argparse types: a bad value is one line naming it and
                                 what is allowed, before any work starts
    check_policies(parser, specs, n_layers)    every sync-policy spec parses for every n_layer, or
                                 parser.error names the first that does not

The trainer has its own signal handling (training/stop.py: every rank stops after the same step, with
a checkpoint); this is for the tools around it, whose work is lost on a stop anyway.
"""
import argparse
import os
import signal
import sys

from model.sync_policy import parse_sync_policy

EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM


class Stopped(BaseException):
    """A stop signal, raised where the main thread is: a BaseException, as KeyboardInterrupt is, so that a
    library's `except Exception` does not swallow it (tqdm's did, starting its monitor thread, and the stopped
    prepare script went on waiting for its pool)."""

    def __init__(self, name, code):
        super().__init__(name)
        self.name, self.code = name, code


def _on_sigterm(signum, frame):
    raise Stopped("SIGTERM", EXIT_SIGTERM)


def _quiet_finalizers():
    """After a stop, an object the signal interrupted mid-construction (a tqdm bar) can fail in its __del__ as
    the stop's traceback is freed: Python would print that as "Exception ignored in ..." with a traceback."""
    sys.unraisablehook = lambda unraisable: None


def guarded(main, *args, **kwargs):
    """main(*args, **kwargs) under the guard (module docstring); returns the exit code."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = main(*args, **kwargs)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        _quiet_finalizers()
        print("stopped (Ctrl-C)", file=sys.stderr)
        return EXIT_SIGINT
    except Stopped as stop:
        _quiet_finalizers()
        print(f"stopped ({stop.name})", file=sys.stderr)
        return stop.code
    except BrokenPipeError:  # the reader took what it wanted; stdout's flush at exit must not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def positive_int(text):
    return _int(text, 1, "an integer >= 1")


def non_negative_int(text):
    return _int(text, 0, "an integer >= 0")


def _int(text, low, allowed):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {allowed}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{text!r} is not {allowed}")
    return value


def fraction(text):
    """A number in (0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in (0, 1)") from None
    if not 0.0 < value < 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in (0, 1)")
    return value


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
