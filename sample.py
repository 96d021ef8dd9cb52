"""Sample from a trained model (nanoGPT's sample.py), at any tensor-parallel degree.

    python sample.py --out_dir=out-shakespeare-grouped-6sync --start="ROMEO:" --num_samples=3
    torchrun --standalone --nproc_per_node=2 sample.py --out_dir=out-shakespeare-grouped-6sync --prompt="ROMEO:"

(Under torchrun write --prompt: torchrun takes --start as an abbreviation of its --start-method.)

Loads out_dir/ckpt.pt (full, unsharded weights, whatever tp trained it) into the model sharded
over --tp ranks (default: all processes). Text is encoded with the dataset's meta.pkl for
character-level datasets, else with the offline GPT-2 BPE (data/gpt2_tokenizer.py). Every TP
rank draws the same tokens (same seed; logits are replicated); rank 0 prints the samples, and to
stderr each sample's decode time and tokens/s, split into its setup (the prefill and the first decode step,
which compiles and captures in sample 1) and the steady rate of the tokens after it. A sample that takes long
shows its tokens so far and tokens/s while it runs (Progress): one line rewritten on a terminal, in a log a
line after 10 s and again each time the wait doubles.

On a CPU without OMP_NUM_THREADS in the environment, sample.py picks the thread count itself: half the cores
that the load average leaves free, at most 4, at least 1 (default_threads; on a busy 2-core machine one thread
decoded 7 to 64 times faster than two). Set OMP_NUM_THREADS to choose. The rate lines name the thread count.

--decode (GPT.generate): auto (default) is graph on CUDA and eager on CPU; graph = a static KV
cache, one torch.compile(fullgraph=True) decode step for every position, captured once as a CUDA
graph and replayed per token; compiled = the same without the graph; eager = nanoGPT's loop.
"""
import os
import signal
import statistics
import sys
import time
from contextlib import contextmanager

from training.cli import exit_now, exits_fast, guarded
from training.config import HelpFormatter, OneLineArgumentParser, ascii_float, ascii_int
from model.compile_modes import COMPILE_MODES  # no torch: the options are checked before torch's import


def parse_args(argv):
    p = OneLineArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=HelpFormatter)
    p.add_argument("--out_dir", default="out", help="run directory holding ckpt.pt")
    p.add_argument("--ckpt", default="ckpt.pt", help="checkpoint file name in out_dir (e.g. ckpt_best.pt)")
    p.add_argument("--start", "--prompt", dest="start", default="\n",
                   help='prompt text, or "FILE:path" to read it from a file (default: %(default)r)')
    p.add_argument("--num_samples", type=ascii_int, default=10, help="samples to draw")
    p.add_argument("--max_new_tokens", type=ascii_int, default=500, help="tokens generated per sample")
    p.add_argument("--temperature", type=ascii_float, default=0.8,
                   help=f"< 1 sharpens, > 1 flattens the distribution; below {GREEDY_BELOW:g}: greedy")
    p.add_argument("--top_k", type=ascii_int, default=200, help="keep the top_k most likely tokens (0: all)")
    p.add_argument("--seed", type=ascii_int, default=1337, help="seed of the sampling")
    p.add_argument("--tp", type=ascii_int, default=None, help="tensor-parallel degree; %(default)s: the world size")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: CUDA when available")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                   help="auto: bfloat16 on a GPU that has it, float32 on CPU")
    p.add_argument("--decode", choices=("auto", "eager", "compiled", "graph"), default="auto",
                   help="auto: graph on CUDA, eager on CPU; compiled: a static KV cache and one "
                        "torch.compile(fullgraph=True) decode step; graph: that step as a CUDA graph")
    p.add_argument("--compile_mode", choices=list(COMPILE_MODES), default="default",
                   help="torch.compile settings of the compiled/graph decode step (model/compile_modes.py)")
    args = p.parse_args(argv)
    for name in ("num_samples", "max_new_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.max_new_tokens > MAX_NEW_TOKENS:  # a sample's tokens are all kept: 1e9 ran on for hours, silent
        p.error(f"--max_new_tokens must be at most {MAX_NEW_TOKENS:,}, got {args.max_new_tokens:,}")
    if args.temperature <= 0:
        p.error(f"--temperature must be > 0, got {args.temperature}")
    if args.top_k < 0:
        p.error(f"--top_k must be >= 0 (0: all tokens), got {args.top_k}")
    if not 0 <= args.seed < 2 ** 63:
        p.error(f"--seed must be in [0, 2**63), got {args.seed}")
    if args.tp is not None and args.tp < 1:
        p.error(f"--tp must be >= 1, got {args.tp}")
    for name in ("out_dir", "ckpt"):
        if not getattr(args, name) or "\0" in getattr(args, name):
            p.error(f"--{name} must be a non-empty path, got {getattr(args, name)!r}")
    return args


MAX_NEW_TOKENS = 1_000_000
MAX_PROMPT_CHARS = 1 << 20
GPT2_VOCAB = 50257  # the BPE's ids; a model's vocabulary may be padded above it (nanoGPT: 50304)
GREEDY_BELOW = 1e-5  # a temperature below this means greedy: logits / T would overflow to inf, softmax to NaN


def missing_checkpoint(args):
    """The one line that says args' checkpoint is not there, or None."""
    ckpt_path = os.path.join(args.out_dir, args.ckpt)
    if os.path.exists(ckpt_path):
        return None
    return f"{ckpt_path} not found (train first: python train_reduced_sync.py ... --out_dir={args.out_dir})"


def _stop_while_importing(signum, frame):
    """Ctrl-C or SIGTERM while the imports below run (seconds): the guard's line, not a KeyboardInterrupt
    traceback. The guard (cli_guard.guarded) takes over once they are done."""
    print(f"stopped ({'Ctrl-C' if signum == signal.SIGINT else signal.Signals(signum).name})", file=sys.stderr,
          flush=True)
    os._exit(128 + signum)


if __name__ == "__main__":  # a bad option or a missing checkpoint is answered before torch's import (seconds)
    _missing = missing_checkpoint(parse_args(sys.argv[1:]))
    if _missing:
        if os.environ.get("RANK", "0") in ("0", ""):
            print(f"error: {_missing}", file=sys.stderr, flush=True)
        sys.exit(1)
    _handlers = {s: signal.signal(s, _stop_while_importing) for s in (signal.SIGINT, signal.SIGTERM)}

import numpy as np  # noqa: E402
import torch  # noqa: E402

from data.loader import DATA_DIR, read_plain_pickle  # noqa: E402
from training.checkpoint import MODEL_KEYS, load_weights, read_checkpoint  # noqa: E402
import model.generate as generation  # noqa: E402
from model.gpt import GPT, GPTConfig  # noqa: E402
from parallel.mesh import close_process_groups, end_process, init_mesh, leave_on_exit  # noqa: E402


def load_codec(checkpoint, ckpt_path):
    """(encode, decode) of the checkpoint's own vocabulary: its dataset's meta.pkl (in the run's data_dir, else
    the repository's data/, never the cwd's) when that holds as many ids as the model, the GPT-2 BPE for a
    GPT-2 sized model unless its dataset is character-level (a model trained without the dataset's meta.pkl:
    character_ids); else ValueError: text decoded with another vocabulary would be garbage or an IndexError."""
    vocab = checkpoint["model_args"]["vocab_size"]
    config = checkpoint.get("config") if isinstance(checkpoint.get("config"), dict) else {}
    dataset, data_dir = config.get("dataset"), config.get("data_dir")
    dataset = dataset if isinstance(dataset, str) and dataset else None
    roots = ([data_dir] if isinstance(data_dir, str) and data_dir else []) + [DATA_DIR]
    metas = [os.path.join(root, dataset, "meta.pkl") for root in roots] if dataset else []
    other = None  # a meta.pkl of the dataset with another number of ids: (path, its vocab_size)
    for meta_path in metas:
        if os.path.exists(meta_path):
            meta = read_plain_pickle(meta_path)  # plain data only: unpickling it runs no code
            if isinstance(meta, dict) and meta.get("vocab_size") == vocab:
                break
            if isinstance(meta, dict) and "itos" in meta and other is None:
                other = meta_path, meta.get("vocab_size")
    else:
        if vocab >= GPT2_VOCAB and dataset:  # issue 53: character ids must not be decoded as GPT-2 BPE
            why = (f"{other[0]} maps {other[1]!r} ids to characters, not the model's {vocab}" if other else
                   character_ids(dataset, roots))
            if why:
                raise ValueError(f"{ckpt_path}: its dataset {dataset!r} is character-level ({why}), so its "
                                 f"{vocab} ids are not GPT-2 BPE and decoding them as BPE would print garbage; "
                                 f"the run was trained without the dataset's meta.pkl (the trainer then takes "
                                 f"GPT-2's vocabulary): prepare the dataset and retrain")
        if vocab >= GPT2_VOCAB:
            from data.gpt2_tokenizer import get_gpt2_encoding
            enc = get_gpt2_encoding()
            return (lambda s: enc.encode(s, allowed_special={"<|endoftext|>"})), enc.decode
        raise ValueError(f"{ckpt_path} has a vocabulary of {vocab} ids, not GPT-2's, and no meta.pkl of its dataset "
                         f"{dataset!r} with {vocab} ids was found ({', '.join(metas) or 'its config names no dataset'}): "
                         f"prepare that dataset to decode its tokens")
    if "stoi" not in meta or "itos" not in meta:
        raise ValueError(f"{meta_path} has no 'stoi'/'itos' vocabulary to encode the prompt with")
    stoi, itos = meta["stoi"], meta["itos"]

    def encode(s):
        unknown = sorted(set(s) - set(stoi))
        if unknown:
            raise ValueError(f"characters {unknown} are not in the vocabulary of {meta_path}")
        return [stoi[c] for c in s]

    return encode, lambda ids: "".join(itos[i] for i in ids)


CHAR_IDS_BELOW = 256  # a GPT-2 BPE text of CHAR_SAMPLE tokens uses ids above this (' the' is 262)
CHAR_SAMPLE = 1000


def character_ids(dataset, roots, scan=1 << 20):
    """Why `dataset` (under the first of roots that has it) holds character ids, or None: its name ends in
    _char (nanoGPT's convention), or the first `scan` tokens of its val.bin (else train.bin), CHAR_SAMPLE or
    more, are all below CHAR_IDS_BELOW. Called only without a meta.pkl that decodes the model's ids."""
    if dataset.endswith("_char"):
        return "its name ends in _char"
    for root in roots:
        for split in ("val", "train"):
            path = os.path.join(root, dataset, f"{split}.bin")
            try:
                with open(path, "rb") as f:
                    ids = np.frombuffer(f.read(2 * scan), dtype=np.uint16)
            except (OSError, ValueError):  # ValueError: an odd size; the trainer refuses such a file anyway
                continue
            if len(ids) >= CHAR_SAMPLE:
                top = int(ids.max())
                return (f"the first {len(ids)} token ids of {path} are all below {CHAR_IDS_BELOW}, the largest "
                        f"{top}" if top < CHAR_IDS_BELOW else None)
    return None


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def load_average():
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def default_threads(cores, load):
    """Decode threads for a CPU of `cores` cores at this 1-minute load average: half the cores the load leaves
    free, at most 4, at least 1. A batch-1 decode step is a chain of small matrix-vector products whose threads
    wait for each other at every op, so a thread that must share its core stalls them all. Measured (steady
    tokens/s, eager, tp=1): on a 2-core machine busy with tests (load 3.6), 2 threads decoded the quickstart's
    model (8.8M parameters) at 1.9 tokens/s against 123 with one, GPT-2 124M at 2.8 against 19; on an idle
    32-core host, 124M gave 23 with one thread, 59 with 4 and 68 with 8, the quickstart's model 185 and 210."""
    return max(1, min(4, int((cores - load) // 2)))


def pick_threads(device_type):
    """Intra-op threads for decoding on device_type, and why (for the rate lines). On CPU, where
    OMP_NUM_THREADS is not set: default_threads. OMP_NUM_THREADS (torch reads it; torchrun sets 1) is kept as
    given. On CUDA: as torch has it."""
    if device_type != "cpu":
        return torch.get_num_threads(), None
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    cores, load = usable_cores(), load_average()
    threads = default_threads(cores, load)
    torch.set_num_threads(threads)
    return threads, f"sample.py's choice for {cores} cores at load {load:.1f}; OMP_NUM_THREADS sets it"


class TokenClock:
    """Times one generate() call in two parts without touching it: the setup (the prefill and the first decode
    step, which compiles, and captures the CUDA graph) and the tokens after it. model/generate.py draws every
    token with sample_one(probs); while timing, the wrapper waits for the device when the second token is drawn
    (after the first decode step) and notes the time. Tokens and RNG state are those of an untimed call.
    Where generate has no sample_one (another version), only the whole call is timed."""

    def __init__(self, device_type):
        self.sync = torch.cuda.synchronize if device_type == "cuda" else (lambda: None)
        self.setup_done = None  # perf_counter() once the first decode step is done

    @contextmanager
    def timing(self, on_token=None):
        """on_token(tokens drawn so far), if given, after each token (Progress.token)."""
        original = getattr(generation, "sample_one", None)
        self.setup_done, drawn = None, 0
        if original is None:
            yield self
            return

        def timed(probs):
            nonlocal drawn
            drawn += 1
            if drawn == 2:  # probs come from the first decode step: wait for it
                self.sync()
                self.setup_done = time.perf_counter()
            token = original(probs)
            if on_token is not None:
                on_token(drawn)
            return token

        generation.sample_one = timed
        try:
            yield self
        finally:
            generation.sample_one = original


class Progress:
    """Tokens so far and tokens/s of a sample that takes long, on stderr: on a terminal one line rewritten in
    place twice a second (erased when the sample ends); in a log, a line after 10 s and again each time the
    wait doubles, so that a sample of minutes says how far it is in a few lines. On CUDA the count is of the
    tokens queued, a little ahead of the device."""

    def __init__(self, label, total, stream):
        self.label, self.total, self.stream, self.tty = label, total, stream, stream.isatty()
        self.start = time.perf_counter()
        self.next_at, self.shown = self.start + (0.5 if self.tty else 10.0), False

    def token(self, drawn):
        now = time.perf_counter()
        if now < self.next_at:
            return
        text = (f"{self.label}: {drawn}/{self.total} tokens in {now - self.start:.1f} s, "
                f"{drawn / (now - self.start):.1f} tokens/s so far")
        if self.tty:
            self.stream.write(f"\r{text}\033[K")
            self.next_at = now + 0.5
        else:
            self.stream.write(text + "\n")
            self.next_at = self.start + 2 * (now - self.start)
        self.stream.flush()
        self.shown = True

    def end(self):
        if self.tty and self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


def rate_parts(start, end, setup_done, tokens):
    """(setup seconds, steady tokens, steady tokens/s) of a timed sample; None when there is no steady part
    (fewer than 3 tokens, or no setup time)."""
    if setup_done is None or tokens < 3 or end <= setup_done:
        return None
    return setup_done - start, tokens - 2, (tokens - 2) / (end - setup_done)


def fail(message, rank=0):
    if rank == 0:
        print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(end_process(1, close_process_groups(barrier=False)))


def main(argv):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device=cuda but CUDA is not available")
    device_type = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    if args.decode == "auto":
        args.decode = "graph" if device_type == "cuda" else "eager"
    if args.decode == "graph" and device_type != "cuda":
        fail(f"--decode=graph captures a CUDA graph; the device here is {device_type} "
             f"(use --decode=auto, eager or compiled)")
    threads, threads_why = pick_threads(device_type)
    tp = args.tp if args.tp is not None else int(os.environ.get("WORLD_SIZE", "1"))
    try:
        mesh = init_mesh(tp, device_type)
    except ValueError as e:
        fail(str(e))
    if missing_checkpoint(args):  # checked before the import too; a rank can still find it gone
        fail(missing_checkpoint(args), mesh.rank)
    ckpt_path = os.path.join(args.out_dir, args.ckpt)
    try:
        checkpoint = read_checkpoint(ckpt_path, MODEL_KEYS)  # weights_only=True: runs no code
        torch.manual_seed(args.seed)
        model = GPT(GPTConfig(**checkpoint["model_args"]), tp_group=mesh.tp_group)
        load_weights(model, checkpoint, ckpt_path)
    except ValueError as e:  # CheckpointError is a ValueError
        fail(str(e), mesh.rank)
    bad = next((name for name, t in checkpoint["model"].items() if t.is_floating_point() and not t.isfinite().all()), None)
    if bad is not None:  # it would sample from NaN logits: empty text, exit 0
        fail(f"{ckpt_path}: its weights are not finite (first: {bad}); the run diverged before this checkpoint",
             mesh.rank)
    model.eval().to(mesh.device)

    dtype = args.dtype
    if dtype == "auto":
        dtype = ("bfloat16" if torch.cuda.is_bf16_supported() else "float16") if device_type == "cuda" else "float32"
    if dtype != "float32":
        # the weights cast once: autocast would re-cast every weight for every token (124M, tp=1,
        # graph decode on an H200: 1.18 ms/token with autocast, 0.88 with the cast; two runs)
        model.to(getattr(torch, dtype))

    start = args.start
    if start.startswith("FILE:"):
        try:
            with open(start[5:], encoding="utf-8") as f:
                start = f.read(MAX_PROMPT_CHARS + 1)  # bounded: FILE:/dev/zero read for ever
            if len(start) > MAX_PROMPT_CHARS:
                fail(f"--start={args.start!r}: the prompt file holds more than {MAX_PROMPT_CHARS:,} characters; "
                     f"the model sees only its last block_size tokens: give a shorter prompt", mesh.rank)
        except (OSError, ValueError) as e:  # ValueError: UnicodeDecodeError, or a NUL in the path
            fail(f"--start={args.start!r}: cannot read the prompt file: {getattr(e, 'strerror', None) or e}",
                 mesh.rank)
    try:
        encode, decode = load_codec(checkpoint, ckpt_path)
        ids = encode(start)
    except (ValueError, RuntimeError) as e:  # RuntimeError: the offline GPT-2 BPE files are missing
        fail(str(e), mesh.rank)
    if not ids:
        fail("--start encodes to no tokens; give a non-empty prompt", mesh.rank)
    x = torch.tensor(ids, dtype=torch.long, device=mesh.device)[None, ...]

    if args.decode != "eager" and mesh.is_master:  # sample 1 compiles silently otherwise
        print(f"compiling the decode step (torch.compile, fullgraph=True"
              f"{', then capturing a CUDA graph' if args.decode == 'graph' else ''}): sample 1 waits for it, "
              f"about 3 minutes on a 2-core CPU (175 s measured on one), less on a GPU", file=sys.stderr, flush=True)
    temperature, top_k = args.temperature, args.top_k or None
    if temperature < GREEDY_BELOW:  # greedy: only the most likely token is left to draw
        temperature, top_k = 1.0, 1
    torch.manual_seed(args.seed)  # the same stream on every rank: TP ranks must draw the same tokens
    times, rates, parts, clock = [], [], [], TokenClock(device_type)
    on = (f"; {threads} CPU thread{'s' if threads > 1 else ''} ({threads_why})" if threads_why else "")
    with torch.no_grad():
        for i in range(args.num_samples):
            progress = Progress(f"sample {i + 1}/{args.num_samples}", args.max_new_tokens, sys.stderr) \
                if mesh.is_master else None
            t0 = time.perf_counter()
            with clock.timing(on_token=progress and progress.token):
                y = model.generate(x, args.max_new_tokens, temperature=temperature, top_k=top_k,
                                   decode=args.decode, compile_mode=args.compile_mode)
                tokens = y[0].tolist()  # waits for the device: the time below is the whole sample's
            end = time.perf_counter()
            if progress:
                progress.end()
            seconds = end - t0
            times.append(seconds)
            rates.append(args.max_new_tokens / seconds)
            parts.append(rate_parts(t0, end, clock.setup_done, args.max_new_tokens))
            if mesh.is_master:
                print(decode(tokens))
                print("---------------", flush=True)
                work = ("compile, capture" if i == 0 else "capture") if args.decode == "graph" else \
                    "compile" if args.decode == "compiled" and i == 0 else ""
                split = (f" = setup {parts[-1][0]:.3f} s (prefill + first decode step{': ' + work if work else ''})"
                         f" + {parts[-1][1]} tokens at {parts[-1][2]:.1f} tokens/s" if parts[-1] else
                         " (no steady rate: it needs 3 or more tokens)")
                print(f"sample {i + 1}/{args.num_samples}: {args.max_new_tokens} tokens in {seconds:.3f} s, "
                      f"{rates[-1]:.1f} tokens/s (decode={args.decode}, {device_type}, tp={mesh.tp}){split}{on}",
                      file=sys.stderr, flush=True)
    if mesh.is_master and len(rates) > 1:
        first = "sample 1" + (", with compile and capture" if args.decode != "eager" else "")
        steady = [p for p in parts if p]
        after = (f"; steady after each sample's setup: median {statistics.median(p[2] for p in steady):.1f} "
                 f"tokens/s over samples 1-{len(rates)} (setup: median {statistics.median(p[0] for p in steady):.3f} s)"
                 if len(steady) == len(parts) else "")
        print(f"decode: median {statistics.median(rates[1:]):.1f} tokens/s over samples 2-{len(rates)}, "
              f"{statistics.median(times[1:]):.3f} s per sample of {args.max_new_tokens} tokens "
              f"({first}: {rates[0]:.1f} tokens/s, {times[0]:.3f} s){after}", file=sys.stderr, flush=True)
    model = x = y = None  # the compiled decode step's references, dropped before the teardown frees the rest
    return end_process(0, close_process_groups())  # a captured decode graph holds NCCL all-reduces (parallel/mesh.py)


if __name__ == "__main__":
    for _s, _handler in _handlers.items():  # the imports are done: the handlers as they were (the guard's next)
        signal.signal(_s, _handler)
    # Ctrl-C, SIGTERM and a closed stdout end in one line (issue 53); no interpreter finalization (cli_guard.py)
    leave_on_exit(exits_fast())  # the teardown leaves to os._exit what the process's end frees (parallel/mesh.py)
    exit_now(guarded(main, sys.argv[1:]))
