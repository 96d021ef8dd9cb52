"""Decode speed of sample.py itself: tokens/s per --decode mode, at each TP degree, side by side.

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1      # on the lent H200 machines
    python -m bench.sample_decode --nprocs 1,2 --modes eager,compiled,graph --out_dir bench/results
    python -m bench.sample_decode --shape tiny --nprocs 1,2 --modes eager,compiled --device cpu   # CPU smoke

For each policy of --policies it writes a checkpoint of --shape (124m: GPT-2 small, 12 x 768,
vocabulary 50257, block 1024; random init: decode time does not depend on the weights) with
n_tracks --n_tracks, then runs the real sample.py on it once per (TP degree, decode mode), as a user
would (torchrun for TP > 1): --num_samples samples of --max_new_tokens tokens each, from one prompt.
sample.py reports each sample's tokens/s; the table holds the median over samples 2..n (sample 1
includes compilation and graph capture) and each mode's speed-up over eager at the same TP degree.
The compiled and graph modes run once per --compile_modes entry (sample.py --compile_mode).

Same tokens. With --check_tokens N, each (policy, TP degree) is also sampled in float32 for N tokens
in every mode, and the table says whether each mode's text equals eager's. (In bf16 a compiled
kernel may round differently from eager, and one flipped draw changes every later token, so the
check runs in float32; the timed runs use --dtype.)
"""
import os
import re
import subprocess
import sys
import tempfile

if not __package__:  # run as a file, the repository root is not on sys.path
    sys.exit("run it from the repository root as: python -m bench.sample_decode ...")
from training.cli import check_policies, guarded, non_negative_int, positive_int  # noqa: E402
from bench.common import REPO, out_dir_problem, source_commit, split_policies, use_cuda  # noqa: E402
from training.config import HelpFormatter, OneLineArgumentParser, write_text  # noqa: E402
from model.compile_modes import COMPILE_MODES  # noqa: E402

SHAPES = {  # model_args of the checkpoint sample.py loads
    "124m": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257),
    "tiny": dict(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=50257),
}
PROMPT = "ROMEO: Is the day so young?"
RATE = re.compile(r"^decode: median ([0-9.]+) tokens/s", re.M)


def write_random_checkpoint(out_dir, shape, policy, n_tracks):
    import torch
    from training.checkpoint import write_checkpoint
    from model.gpt import GPT, GPTConfig
    args = dict(SHAPES[shape], bias=False, dropout=0.0, n_tracks=n_tracks, sync_policy=policy)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**args))
    os.makedirs(out_dir, exist_ok=True)
    write_checkpoint([os.path.join(out_dir, "ckpt.pt")],
                     {"model": model.state_dict(), "model_args": args, "config": {"dataset": "openwebtext"}})


def run_sample(ckpt_dir, nproc, mode, tokens, samples, dtype, device, compile_mode="default"):
    launch = [sys.executable] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    argv = [*launch, os.path.join(REPO, "sample.py"), f"--out_dir={ckpt_dir}", f"--prompt={PROMPT}",
            f"--num_samples={samples}", f"--max_new_tokens={tokens}", f"--decode={mode}", f"--dtype={dtype}",
            f"--device={device}", "--seed=1337", f"--compile_mode={compile_mode}"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-10:])} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    if samples == 1:  # a token check: sample.py reports a median only over samples 2..n
        return None, proc.stdout
    match = RATE.search(proc.stderr)
    if match is None:
        raise RuntimeError(f"sample.py printed no 'decode: median' line:\n{proc.stderr[-2000:]}")
    return float(match.group(1)), proc.stdout


def main(argv=None):
    p = OneLineArgumentParser(prog="python -m bench.sample_decode", formatter_class=HelpFormatter, description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="124m")
    p.add_argument("--policies", default="baseline", help="comma-separated sync policies (one checkpoint each)")
    p.add_argument("--n_tracks", type=positive_int, default=2)
    p.add_argument("--nprocs", default="1,2", help="comma-separated TP degrees (processes of sample.py)")
    p.add_argument("--modes", default="eager,compiled,graph")
    p.add_argument("--compile_modes", default="default", help=f"comma-separated, of {list(COMPILE_MODES)}")
    p.add_argument("--max_new_tokens", type=positive_int, default=200)
    p.add_argument("--num_samples", type=positive_int, default=3)
    p.add_argument("--check_tokens", type=non_negative_int, default=0, help="float32 token check length (0: none)")
    p.add_argument("--dtype", default="auto", help="sample.py --dtype of the timed runs")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out_dir", default=None, help="write sample_decode.md there")
    args = p.parse_args(argv)
    if args.out_dir and out_dir_problem(args.out_dir):
        p.error(out_dir_problem(args.out_dir))
    if not all(n.isdigit() and int(n) >= 1 for n in args.nprocs.split(",")):
        p.error(f"--nprocs {args.nprocs!r}: comma-separated integers >= 1 (TP degrees)")
    nprocs = [int(n) for n in args.nprocs.split(",")]
    check_policies(p, args.policies.split(","), [SHAPES[args.shape]["n_layer"]])
    bad = [m for m in args.compile_modes.split(",") if m not in COMPILE_MODES]
    if bad:
        p.error(f"--compile_modes {bad} not allowed; allowed: {list(COMPILE_MODES)}")
    runs = [(mode, cm) for mode in args.modes.split(",")
            for cm in (args.compile_modes.split(",") if mode != "eager" else ["default"])]
    if args.num_samples < 2:
        p.error(f"--num_samples must be >= 2 (sample 1 includes compilation), got {args.num_samples}")
    import torch
    device = "cuda" if use_cuda(args.device) else "cpu"
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    lines = [f"# sample.py decode speed ({args.shape}, n_tracks {args.n_tracks}, {args.max_new_tokens} tokens "
             f"x {args.num_samples} samples, dtype {args.dtype}; {where}, torch {torch.__version__}, "
             f"commit {source_commit()})\n",
             "| policy | tp | decode | compile mode | tokens/s (median, samples 2..n) | ms/token | × eager |"
             + (f" same {args.check_tokens} tokens as eager (fp32) |" if args.check_tokens else ""),
             "|---|---:|---|---|---:|---:|---:|" + ("---|" if args.check_tokens else "")]
    with tempfile.TemporaryDirectory() as tmp:
        for policy in split_policies(args.policies):
            ckpt_dir = os.path.join(tmp, policy.replace(":", ""))
            write_random_checkpoint(ckpt_dir, args.shape, policy, args.n_tracks)
            for nproc in nprocs:
                rates, texts = {}, {}
                for mode, compile_mode in runs:
                    run = (mode, compile_mode)
                    rates[run], _ = run_sample(ckpt_dir, nproc, mode, args.max_new_tokens, args.num_samples,
                                               args.dtype, device, compile_mode)
                    if args.check_tokens:
                        _, texts[run] = run_sample(ckpt_dir, nproc, mode, args.check_tokens, 1, "float32", device,
                                                   compile_mode)
                    rate, eager = rates[run], rates.get(("eager", "default"))
                    speedup = f"{rate / eager:.2f}" if eager else ""
                    shown_mode = "" if mode == "eager" else compile_mode
                    row = f"| {policy} | {nproc} | {mode} | {shown_mode} | {rate:.1f} | {1e3 / rate:.3f} | {speedup} |"
                    if args.check_tokens:
                        same = texts[run] == texts.get(("eager", "default"), texts[run])
                        row += f" {'yes' if same else 'NO'} |"
                    lines.append(row)
                    print(row, flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out_dir:
        write_text(os.path.join(args.out_dir, "sample_decode.md"), table)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main))
