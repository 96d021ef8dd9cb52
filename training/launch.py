"""torchrun, with the trainer's line last:

    python -m training.launch --standalone --nproc_per_node=8 train_reduced_sync.py config/train_grouped_6sync.py

takes torchrun's options and runs torchrun's own launcher in this process (torch.distributed.run: the same
agent, rendezvous, workers and signal forwarding). It changes only how a launch ends. torchrun ends a failed
launch with a traceback of itself (ChildFailedError) and a stopped one with another (SignalException),
printed below the workers' one-line errors and stop lines; here each becomes one line:

    launch failed: rank R exited with code C: <the first failed rank's error line>
    launch stopped by SIGTERM: the workers were told to stop (their stop lines are above)
    launch refused: a torchrun option is not valid: <torchrun's reason> (--nnodes=..., ...)

The error line is the one the trainer writes to torchrun's error file (parallel/mesh.py). Exit codes are
torchrun's: 1 for a failed worker, 128 + the signal's number for a stop; 2 for an option torchrun refuses
(checked before any worker starts). The elastic agent's own warnings about shutting workers down are kept
below error level; torchrun's start-up notes are kept.
"""
import logging
import signal
import sys
import types

from cli_guard import exit_now
from training.config import OneLineArgumentParser


HELP = """usage: python -m training.launch [torchrun's options] SCRIPT [SCRIPT's arguments]
  e.g. python -m training.launch --standalone --nproc_per_node=8 train_reduced_sync.py config/train_grouped_6sync.py

torchrun (torch.distributed.run, run in this process: the same agent, rendezvous, workers and signal
forwarding), changed only in how a launch ends. Where torchrun ends with a traceback of its own, this
prints one line, last, below the workers' own lines:
  launch failed: rank R exited with code C: <the first failed rank's error line>
  launch stopped by SIGTERM: the workers were told to stop (their stop lines are above)
  launch refused: a torchrun option is not valid: <torchrun's reason> (--nnodes=..., ...)
Exit codes are torchrun's (1: a worker failed; 128 + the signal's number: stopped), 2 for a refused option.

The options are torchrun's own, unchanged: torchrun --help (python -m torch.distributed.run --help) lists them."""


_launched = False  # whether main ran torch's launcher (its workers have ended when it returns)


def print_help(file=None):
    print(HELP, file=file or sys.stdout)


def first_failure_line(error):
    """The one line of a ChildFailedError: the first failed rank, its exit code or signal, its message."""
    rank, failure = error.get_first_failure()
    message = failure.message if isinstance(failure.message, str) else failure.message.get("message", "")
    how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"code {failure.exitcode}"
    if "To enable traceback" in message:  # torchrun's placeholder when a worker wrote no error file
        message = "see its output above"
    return f"launch failed: rank {rank} exited with {how}: {message.strip().splitlines()[-1] if message else ''}"


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):  # at once: torchrun's parser imports torch, seconds on a loaded machine
        print_help()
        return 0
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
    from torch.distributed.run import config_from_args, get_args_parser, run

    # the agent's per-worker shutdown notes ('Sending process N closing signal SIGTERM', 'failed (exitcode)')
    # restate what the line below says
    for name in ("torch.distributed.elastic.multiprocessing.api",
                 "torch.distributed.elastic.multiprocessing.errors.error_handler",
                 "torch.distributed.elastic.agent.server.api",
                 "torch.distributed.launcher.api"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    parser = get_args_parser()  # torchrun's own parser, under the name this launcher runs by
    parser.prog = "python -m training.launch"
    parser.error = types.MethodType(OneLineArgumentParser.error, parser)  # one line, not torchrun's 30-line usage
    parser.print_help = print_help  # what this adds, then a pointer to torchrun's own 150 lines
    args = parser.parse_args(argv)
    try:  # torchrun's own checks of its options (run() makes the same call first), before any worker starts
        if str(args.nproc_per_node).lstrip("-").isdigit() and int(args.nproc_per_node) < 1:
            raise ValueError(f"--nproc_per_node={args.nproc_per_node} must be >= 1 (or auto, cpu, gpu)")
        if args.master_port is not None and not 0 <= args.master_port <= 65535:  # torchrun checks after the agent started
            raise ValueError(f"--master_port={args.master_port} must be a port number in [0, 65535]")
        config_from_args(args)
        if args.rdzv_endpoint:
            parse_rendezvous_endpoint(args.rdzv_endpoint, default_port=-1)
    except (ValueError, AssertionError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"launch refused: a torchrun option is not valid: {reason} (--nnodes="
              f"{args.nnodes}, --nproc_per_node={args.nproc_per_node}, --rdzv_endpoint={args.rdzv_endpoint!r}); "
              f"torchrun --help lists them", file=sys.stderr, flush=True)
        return 2
    global _launched
    _launched = True
    try:
        run(args)
    except ChildFailedError as e:
        print(first_failure_line(e), file=sys.stderr, flush=True)
        return 1
    except SignalException as e:
        name = signal.Signals(e.sigval).name
        print(f"launch stopped by {name}: the workers were told to stop (their stop lines are above)",
              file=sys.stderr, flush=True)
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # after torch's launcher ran: no interpreter finalization (cli_guard.py, 0.55 s of the launcher's exit on 4 H200s);
    # --help and a refused option leave sys.exit to a caller that runs this module in process (tests/test_docs.py)
    if _launched:
        exit_now(code)
    sys.exit(code)
