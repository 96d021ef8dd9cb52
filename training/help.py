"""The trainer's --help: every key of TrainConfig (training/config.py) by group, with its type, its default after
the config files and overrides given, and its meaning; the same table that parse() validates against. No torch."""
from dataclasses import fields

from training.config import FIELD_TYPES, SAME_DATA_KEYS, TrainConfig, parse_override, read_config_file


def help_text(argv=(), prog="train_reduced_sync.py"):
    """--help: every key of TrainConfig by group, with its type, its default (after the config files and
    --key=value overrides in argv, if any) and its meaning: the same table that parse() validates against."""
    values = TrainConfig().to_dict()
    given = [a for a in argv if a not in ("-h", "--help")]
    for arg in given:
        values.update([parse_override(arg)] if arg.startswith("--") else read_config_file(arg))
    rows = [(f.metadata["group"], f.name, FIELD_TYPES[f.name], repr(values[f.name]), f.metadata["meaning"])
            for f in fields(TrainConfig)]
    widths = [max(len(r[i]) for r in rows) for i in (1, 2, 3)]
    lines = [f"usage: python {prog} [CONFIG.py ...] [--key=value ...]",
             f"       torchrun --standalone --nproc_per_node=N {prog} [CONFIG.py ...] [--key=value ...]",
             "",
             "Config files (flat Python assigning the keys below) are read in order, then --key=value overrides;",
             "values are Python literals, or text for str keys (--out_dir=out-x).",
             "",
             "Resuming (--init_from=resume): the checkpoint's model keys replace the requested ones (a note for",
             "each). A resume reads what its run would have read next, so it is refused unless these equal the",
             f"checkpoint's: {', '.join(SAME_DATA_KEYS)} (a branch shares",
             "them with its trunk). Other keys may change.",
             "",
             "Stopping: SIGINT (Ctrl-C) or SIGTERM. In training every rank stops after the same step, writes",
             "ckpt.pt and exits 130/143 ('stopped by SIGTERM at iter N: saved ...'); until the first step is",
             "done (the rendezvous, the data checks, compiling) it stops at once. A second SIGINT stops at once,",
             "without a checkpoint (one written before, if any, is intact). Several processes: launch with",
             "python -m training.launch (torchrun's options) and send it SIGTERM: the workers stop as above and",
             "its last line says so. With torchrun itself, send SIGTERM to the workers (pkill -TERM -P <torchrun pid>):",
             "SIGTERM to torchrun stops them the same way, but torchrun ends with a traceback of its own",
             "(SignalException).",
             "",
             "Columns: key, type, default" + (f" (after {' '.join(given)})" if given else "")
             + ", meaning."]
    for group in dict.fromkeys(r[0] for r in rows):
        lines += ["", group]
        lines += [f"  {name:<{widths[0]}}  {kind:<{widths[1]}}  {value:<{widths[2]}}  {meaning}"
                  for g, name, kind, value, meaning in rows if g == group]
    return "\n".join(lines)
