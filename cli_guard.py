"""What every command line of the repository shares, so that what a user does ends in one line, never a
traceback (issue 53). It imports nothing of the project, so data/, model/, training/, bench/ and analysis/
all import it from the repository root without reaching back up (and a script checks its options with it
before importing torch).

    sys.exit(guarded(main))    main() under the guard:
                                 Ctrl-C (SIGINT)  -> "stopped (Ctrl-C)" on stderr, exit 130
                                 SIGTERM          -> "stopped (SIGTERM)", exit 143
                                   (also when it lands in a __del__ or a C library's callback, where Python
                                   would print "Exception ignored" and go on: the process exits there)
                                 stdout's reader gone (`... | head`) -> quiet, exit 0
                                 stdout closed (`>&-`) -> its output discarded, quietly
                                 stdout full (/dev/full), or not writable -> one line on stderr, exit 1
                                 SystemExit from argparse or a check -> as raised (one line, exit 2 or 1)
    OneLineArgumentParser      argparse whose errors are one line naming the problem and pointing to --help
    exit_now(code)             sys.exit(code) for a command whose work is written: the atexit handlers run, the
                                 interpreter's finalization does not (REDUCED_SYNC_EXIT=normal: sys.exit);
                                 exits_fast() says which it will be
    HelpFormatter              --help with the description's line breaks and each option's default
    positive_int, non_negative_int, fraction, ascii_int, ascii_float
                               argparse types: a bad value is one line naming it and what is allowed, before
                               any work starts

The trainer has its own signal handling (training/stop.py: every rank stops after the same step, with
a checkpoint); this is for the tools around it, whose work is lost on a stop anyway.
"""
import argparse
import atexit
import errno
import functools
import math
import os
import re
import signal
import sys
import threading

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


class StdoutError(OSError):
    """A write or flush of stdout failed (a print's OSError does not say which file it was)."""


class _Stdout:
    """sys.stdout under the guard: the stream itself, except that its write errors are StdoutErrors."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        try:
            return self.stream.write(text)
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None

    def flush(self):
        try:
            self.stream.flush()
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _discard_stdout():
    """fd 1 on /dev/null: the rest of stdout's output, and the flush at exit, go nowhere without a second error;
    and when fd 1 was closed, no file the tool opens later becomes fd 1 (a child process's stdout)."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != 1:  # fd 1 closed: os.open took it
        os.dup2(null, 1)
        os.close(null)


def _stop_where_swallowed(unraisable, otherwise=sys.__unraisablehook__):
    """sys.unraisablehook under the guard. A stop raised in a finalizer (__del__, a weakref callback) or a
    callback that C code calls (torch.compile's) cannot unwind the main thread: Python would print
    "Exception ignored ... Stopped" and go on (bench.compile_check ran on after a SIGTERM). So the process ends
    here, at once; a tool under the guard loses its work on a stop anyway, and atomic writes leave at most a
    temp file, never a half-written target."""
    stop = unraisable.exc_value
    if not isinstance(stop, (Stopped, KeyboardInterrupt)):
        return otherwise(unraisable)
    name, code = (stop.name, stop.code) if isinstance(stop, Stopped) else ("Ctrl-C", EXIT_SIGINT)
    print(f"stopped ({name})", file=sys.stderr, flush=True)
    os._exit(code)


def guarded(main, *args, **kwargs):
    """main(*args, **kwargs) under the guard (module docstring); returns the exit code."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    hook = sys.unraisablehook = functools.partial(_stop_where_swallowed, otherwise=sys.unraisablehook)
    if sys.stdout is None:  # fd 1 was closed (`>&-`): Python leaves sys.stdout None
        _discard_stdout()
        sys.stdout = os.fdopen(1, "w", closefd=False)  # /dev/null now
    stdout = sys.stdout = _Stdout(sys.stdout)
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
    except StdoutError as e:
        _discard_stdout()
        if e.errno == errno.EPIPE:  # the reader took what it wanted
            return 0
        print(f"error: cannot write to stdout: {e.strerror} (is it redirected to a full disk, /dev/full, or a file "
              f"opened read-only?); the output is incomplete", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        if sys.unraisablehook is hook:
            sys.unraisablehook = hook.keywords["otherwise"]
        if sys.stdout is stdout:
            sys.stdout = stdout.stream


EXIT_ENV = "REDUCED_SYNC_EXIT"


def exits_fast():
    """Whether exit_now will end the process through os._exit (REDUCED_SYNC_EXIT unset, 'fast' or unknown): a
    script may then leave what the process's end frees anyway (parallel/mesh.py's leave_on_exit)."""
    return os.environ.get(EXIT_ENV, "") != "normal"


def exit_now(code):
    """sys.exit(code) without the interpreter's finalization, for an entry point whose work is written and closed
    (the trainer and sample.py after their process groups' teardown, training.launch after its workers ended).
    What a normal exit does for the program still happens, in its order: the threads that are not daemons are
    waited for, the atexit handlers run (torch.compile's worker pool is shut down, logging flushed), stdout and
    stderr are flushed. What is left out is the teardown of every module and of torch's C++ state, object by
    object: 0.5-0.8 s for a process that imported torch on a 2-core CPU, and after a compiled run on 4 H200s
    4.0-4.9 s passed between the last rank's teardown and torchrun's exit (experiments/gpu_stop/README.md). The
    kernel frees the memory and closes the files and devices as for any process that ends.
    Where that could change what the program does, sys.exit(code) as before: a code that is not an int (a
    message), stdout or stderr that cannot be flushed (the exit reports it as it always did), or
    REDUCED_SYNC_EXIT=normal (any other value is named in one line and ignored)."""
    mode = os.environ.get(EXIT_ENV, "")
    if mode not in ("", "fast", "normal"):
        print(f"note: {EXIT_ENV}={mode!r} is not a mode; allowed: fast (the default) or normal; exiting fast",
              file=sys.stderr, flush=True)
    code = 0 if code is None else code
    if mode == "normal" or not isinstance(code, int) or not hasattr(threading, "_shutdown"):
        sys.exit(code)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # a full disk, a closed reader, a closed stream: the normal exit's report
        sys.exit(code)
    threading._shutdown()  # the interpreter's own first step: non-daemon threads (and executors) joined
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # an atexit handler's late line; the normal exit would print "Exception ignored" and exit the same
    os._exit(code & 0xFF)  # the status sys.exit gives an int: 256 -> 0, -1 -> 255


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
