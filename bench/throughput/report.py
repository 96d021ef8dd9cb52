"""bench/train_throughput.py's report: the key ratios of its rows and the markdown table (its docstring says what
each ratio compares)."""
from bench.common import md_row
from bench.throughput import errors

FLOOR_TAG = " [floor]"  # a --floors twin's name: its row's name and this


def _ok(row):
    return row is not None and not row.get("error") and isinstance(row.get("ms"), float) and row["ms"] > 0


def timed_ms(row):
    """The row's median ms, or None for a row that failed or holds no time."""
    return row["ms"] if _ok(row) else None


def comm_mode(row):
    """A tp row's communication: its tp_comm ('off', 'sp', or SP's overlap), or 'async_grad' for plain TP with the
    async input-gradient all-reduce; None for async_grad under SP, which the model turns off (the SP row again)."""
    comm = row.get("tp_comm", "off")
    if row.get("async_grad", "off") == "off":
        return comm
    return "async_grad" if comm == "off" else None


def fastest_rows(rows, key=lambda r: (r["n_tracks"], r["policy"], r["mode"]), with_async=False):
    """{key(row): the fastest timed tp row among those of that key}, floors left out, and async-grad rows unless
    with_async. The default key keeps each policy's best exact mode over its --tp_comm values, per n_tracks and
    compile mode."""
    fastest = {}
    for r in rows:
        if (r["group"] == "tp2" and not r.get("floor") and _ok(r)
                and (r.get("async_grad", "off") == "off" or with_async and comm_mode(r) is not None)):
            k = key(r)
            if k not in fastest or r["ms"] < fastest[k]["ms"]:
                fastest[k] = r
    return fastest


def key_ratios(rows):
    """[{section, label, value or None, a, b}], each value a throughput ratio (> 1: the first is faster), but for the
    no-sync floor section's, which are ms ratios (row ms / floor ms, >= 1)."""
    out = []
    floors = {r["name"]: r for r in rows if r.get("floor")}
    rows = [r for r in rows if not r.get("floor")]  # a floor is only ever compared with its own row
    by = {(r["group"], r["impl"], r["n_tracks"], r["policy"], r["mode"]): r for r in rows
          if r.get("async_grad", "off") == "off" and r.get("tp_comm", "off") == "off"}
    sp_rows = {(r["n_tracks"], r["policy"], r["mode"]): r for r in rows
               if r.get("async_grad", "off") == "off" and r.get("tp_comm") == "sp"}

    def add(section, label, a, b, value=None):
        if value is None and _ok(a) and _ok(b):
            value = a["tok_s"] / b["tok_s"]
        out.append(dict(section=section, label=label, value=value,
                        a=a["name"] if a else None, b=b["name"] if b else None))

    plains = [r for r in rows if r["group"] == "plain"]
    for r in (r for r in rows if r["group"] == "tp1"):
        plain = next((p for p in plains if p["mode"] == r["mode"]), None)
        if plain is not None:
            add("ours tp1 / plain (speedup = plain ms / ours ms)", f"{r['name']} vs {plain['name']}", r, plain)
    for r in (r for r in rows if r.get("async_grad") == "on"):
        sync = by.get(("tp2", "ours", r["n_tracks"], r["policy"], r["mode"]))
        if sync is not None:
            add(f"tp{r['tp']} async grad / tp{r['tp']} (tokens/s, same n_tracks, policy and mode)",
                f"{r['policy']} n_tracks {r['n_tracks']} {r['mode']}", r, sync)
    overlapped = [r for r in rows if r.get("tp_comm", "off") != "off" and r.get("async_grad", "off") == "off"]
    for r in overlapped:
        plain_tp = by.get(("tp2", "ours", r["n_tracks"], r["policy"], r["mode"]))
        if plain_tp is not None:
            add(f"tp{r['tp']} sequence parallel, alone or + overlap / tp{r['tp']} (tokens/s, same n_tracks, policy and mode)",
                f"{r['tp_comm']} {r['policy']} n_tracks {r['n_tracks']} {r['mode']}", r, plain_tp)
    for r in (r for r in overlapped if r["tp_comm"] != "sp"):
        sp = sp_rows.get((r["n_tracks"], r["policy"], r["mode"]))
        if sp is not None:
            add(f"tp{r['tp']} sequence parallel + overlap / tp{r['tp']} sequence parallel (tokens/s, same n_tracks, "
                "policy and mode)", f"{r['tp_comm']} {r['policy']} n_tracks {r['n_tracks']} {r['mode']}", r, sp)
    # the other ratios: the default rows
    defaults = [r for r in rows if r.get("async_grad", "off") == "off" and r.get("tp_comm", "off") == "off"]
    for r in (r for r in defaults if r["group"] == "tp2" and r["policy"] == "baseline"):
        base1 = by.get(("tp1", "ours", r["n_tracks"], "baseline", r["mode"]))
        if base1 is not None:
            add(f"tp{r['tp']} baseline / tp1 baseline (tokens/s, same n_tracks and mode; {r['tp']:.2f} = perfect "
                "scaling)",
                f"n_tracks {r['n_tracks']} {r['mode']}", r, base1)
    for r in (r for r in defaults if r["group"] == "tp2" and r["policy"] != "baseline"):
        base = by.get(("tp2", "ours", r["n_tracks"], "baseline", r["mode"]))
        if base is not None:
            add(f"tp{r['tp']} policy / tp{r['tp']} baseline (tokens/s, same n_tracks and mode)",
                f"{r['policy']} n_tracks {r['n_tracks']} {r['mode']}", r, base)
    for r in (r for r in defaults if r["group"] == "dp2" and r["impl"] == "ours"):
        torch_row = by.get(("dp2", "torch_ddp", 1, "baseline", r["mode"]))
        if torch_row is not None:
            add("ours dp2 / torch DDP dp2 (tokens/s, same mode)", r["mode"], r, torch_row)
    fastest = fastest_rows(rows)
    if any(r.get("tp_comm", "off") != "off" for r in fastest.values()):  # else the same as policy / baseline
        for (n, policy, mode), r in fastest.items():
            base = fastest.get((n, "baseline", mode))
            if policy != "baseline" and base is not None:
                add(f"tp{r['tp']} policy's fastest row / baseline's fastest row (tokens/s, same n_tracks and mode, "
                    "each over its --tp_comm rows: against the strongest baseline measured; saving = 1 - 1 / ratio)",
                    f"{policy} ({r.get('tp_comm', 'off')}) vs baseline ({base.get('tp_comm', 'off')}) n_tracks {n} "
                    f"{mode}", r, base)
    for r in (r for r in rows if r["group"] == "tp2" and r["name"] + FLOOR_TAG in floors):
        floor = floors[r["name"] + FLOOR_TAG]
        both = _ok(r) and _ok(floor)
        add(f"tp{r['tp']} row / its no-sync floor (ms ratio, not throughput: row ms / floor ms = floor tokens/s / "
            "row tokens/s, >= 1 up to noise; 1.00 = communication costs nothing)",
            r["name"] + (f" (communication {r['ms'] - floor['ms']:.3f} ms = row ms - floor ms)" if both else ""),
            r, floor, r["ms"] / floor["ms"] if both else None)
    return out


COLUMNS = ["variant", "tp", "dp", "GPUs", "n_tracks", "policy", "mode", "syncs/fwd", "ms/iter (median)", "tok/s",
           "MFU"]


def row_cells(r):
    if r.get("error"):
        timing = ["error: " + r["error"].replace("|", "/"), "-", "-"]
    else:
        timing = [f"{r['ms']:.3f}", f"{r['tok_s']:,.0f}", "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.2f}%"]
    syncs = "-" if r["syncs_per_forward"] is None else str(r["syncs_per_forward"])
    return [r["name"], str(r["tp"]), str(r["dp"]), str(r["gpus"]), str(r["n_tracks"]), r["policy"], r["mode"],
            syncs] + timing


def markdown(meta, rows, ratios):
    out = ["# Training throughput (bench/train_throughput.py)\n",
           f"- device: {meta['device']}" + (f" x {meta['n_gpus']}" if meta["n_gpus"] else "")
           + f" ({meta['world_size']} process(es))",
           f"- torch {meta['torch']}, commit {meta['commit']}",
           f"- command: `{meta['command']}`",
           f"- model {meta['size']} (n_layer {meta['n_layer']}, n_head {meta['n_head']}, n_embd {meta['n_embd']}, "
           f"vocab {meta['vocab_size']}{'' if meta.get('bias', True) else ', no biases'}), batch {meta['batch_size']} x seq {meta['seq_len']} x "
           f"{meta['micro_steps']} micro-step(s) per replica, {meta['dtype']}, warmup {meta['warmup']}, "
           f"median of {meta['iters']} iterations (slowest rank)"
           + (f"; compiled with {meta['inductor']}" if meta.get("inductor") else "")
           + ("" if meta.get("peak_memory_reorder", "auto") == "auto" else
              f", inductor's peak-memory reordering {meta['peak_memory_reorder']} for every row"),
           "- plain and tp1 rows: one GPU (every rank runs its own copy at once); "
           f"tp{max(2, meta['world_size'])}: one replica on {max(2, meta['world_size'])} GPUs; "
           "dp2: 2 replicas on 2 GPUs. MFU over the GPUs the row uses.",
           ""]
    if any(r.get("floor") for r in rows):
        out.insert(-1, "- [floor] rows (--floors): the row above with every collective skipped "
                   "(parallel.comm.skipped_collectives); their syncs/fwd is the plan's, though nothing communicates.")
    if meta.get("note"):
        out += [f"Note: {meta['note']}", ""]
    out += [md_row(COLUMNS), "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|"]
    out += [md_row(row_cells(r)) for r in rows]
    out += ["", "## Key ratios", "", "Throughput ratios: > 1 means the first named is faster."
            + (" The no-sync floor section is the exception: ms ratios, row / floor." if any(
                "no-sync floor" in q["section"] for q in ratios) else "")]
    section = None
    for q in ratios:
        if q["section"] != section:
            section = q["section"]
            out += ["", f"**{section}**", ""]
        out.append(f"- {q['label']}: " + ("-" if q["value"] is None else f"{q['value']:.3f}"))
    if not ratios:
        out += ["", "(none: their rows were not run)"]
    out += errors.markdown(rows)
    return "\n".join(out) + "\n"
