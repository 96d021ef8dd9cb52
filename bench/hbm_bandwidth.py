"""Device memory bandwidth as a copy sees it: the bytes-per-second behind the floor of what k separate
residual streams cost (docs/gpu-results.md, "Tracks on one GPU: what k residual streams cost").

    python -m bench.hbm_bandwidth --out bench/results/hbm_bandwidth_h100.txt

y.copy_(x) of --gib GiB of float32, timed with CUDA events; a copy reads and writes every byte, so the
bandwidth is 2 * size / time. Median of --iters copies after 3 untimed ones.
"""
import os
import statistics
import sys

import torch

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.hbm_bandwidth ...")
from training.cli import guarded, positive_int  # noqa: E402
from atomic_files import replace_problem  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser, write_text  # noqa: E402


def main():
    p = OneLineArgumentParser(prog="python -m bench.hbm_bandwidth", formatter_class=HelpFormatter, description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=1.0, help="size of the copied tensor, GiB")
    p.add_argument("--iters", type=positive_int, default=20)
    p.add_argument("--out", default=None, help="also write the line to this file")
    args = p.parse_args()
    if not 0 < args.gib <= 1024:  # also nan and inf
        p.error(f"--gib={args.gib:g}: must be a size in GiB in (0, 1024]")
    if args.out and replace_problem(args.out):
        p.error(f"--out: {replace_problem(args.out)}")
    if not torch.cuda.is_available():
        raise SystemExit("hbm_bandwidth.py measures a CUDA device; none is available")
    x = torch.empty(int(args.gib * 2**30) // 4, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(args.iters):
        start.record()
        y.copy_(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    seconds = statistics.median(times)
    line = (f"{torch.cuda.get_device_name()}: copy of {args.gib:g} GiB float32, median of {args.iters}: "
            f"{seconds * 1e3:.3f} ms, {2 * x.numel() * 4 / seconds / 1e12:.2f} TB/s (read + write)")
    print(line)
    if args.out:
        write_text(args.out, line + "\n")


if __name__ == "__main__":
    sys.exit(guarded(main))
