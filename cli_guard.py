"""What every command line of the repository shares, so that what a user does ends in one line, never a
traceback (issue 53). It imports nothing of the project, so data/, model/, training/, bench/ and analysis/
all import it from the repository root without reaching back up (and a script checks its options with it
before importing torch).

    sys.exit(guarded(main))    main() under the guard:
                                 Ctrl-C (SIGINT)  -> "stopped (Ctrl-C)" on stderr, exit 130
                                 SIGTERM          -> "stopped (SIGTERM)", exit 143
                                 stdout closed (`... | head`) -> quiet, exit 0
                                 SystemExit from argparse or a check -> as raised (one line, exit 2 or 1)
    OneLineArgumentParser      argparse whose errors are one line naming the problem and pointing to --help
    HelpFormatter              --help with the description's line breaks and each option's default
    positive_int, non_negative_int, fraction, ascii_int, ascii_float
                               argparse types: a bad value is one line naming it and what is allowed, before
                               any work starts

The trainer has its own signal handling (training/stop.py: every rank stops after the same step, with
a checkpoint); this is for the tools around it, whose work is lost on a stop anyway.
"""
import argparse
import math
import os
import re
import signal
import sys

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



# argparse's type=int and type=float accept any Unicode digit ('\u0663' is 3) and float also 'nan'
# and 'inf'; the scripts use these instead, so numbers are ASCII digits and finite.
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def ascii_int(text):
    if not _INT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (ASCII digits 0-9)")
    return int(text)


def ascii_float(text):
    if not _FLOAT.fullmatch(text) or not math.isfinite(float(text)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (ASCII digits 0-9)")
    return float(text)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the description's own line breaks and shows each option's default, unless its help
    already states it or there is none to show (a flag, or None)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS) or action.nargs == 0:
            return text
        return super()._get_help_string(action)


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, 'error: ...' (exit code 2), without the usage."""

    def error(self, message):
        self.exit(2, f"error: {message.splitlines()[0] if message else 'bad arguments'} "
                     f"(see {self.prog} --help)\n")
