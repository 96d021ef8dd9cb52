import bench.step_model as sm
rows = sm.stored_rows()
full = sm.fit_split(rows)
fit, tables = sm.comm_fit(full["fit"]), full["tables"]
loso = {s: sm.fit_split(rows, lambda size, device, k=s: size == k) for s in ("124m", "medium", "large")}
def table(dev, conf, pols, wls, mode):
    print("| device | size | workload | n_tracks | policy | modeled ms | saving | held out by size: ms | saving | all-reduce ms |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|")
    for size, ns in conf:
        sp = loso[size]
        for wl in wls:
            for n in ns:
                b = sm.predict(size, wl, 4, "baseline", n, dev, tables, fit, mode)
                bl = sm.predict(size, wl, 4, "baseline", n, dev, sp["tables"], sp["fit"], mode, measured={})
                for pol in pols:
                    p = sm.predict(size, wl, 4, pol, n, dev, tables, fit, mode)
                    pl = sm.predict(size, wl, 4, pol, n, dev, sp["tables"], sp["fit"], mode, measured={})
                    print(f"| {dev} | {size} | {wl} | {n} | {pol} | {p['ms']:.3f} | {100*(1-p['ms']/b['ms']):+.1f}% | {pl['ms']:.3f} | {100*(1-pl['ms']/bl['ms']):+.1f}% | {p['comm']:.3f} |")
import sys
if sys.argv[1] == "h100":
    table("H100", [("124m", (4, 12)), ("medium", (4, 8)), ("large", (4,))],
          ["baseline", "ladder", "spd", "parallel", "grouped:4"],
          ["prefill_b1", "prefill_b8", "decode_b1", "decode_b8", "train_b8"], "graph")
    table("H100", [("124m", (4,))], ["baseline", "spd", "grouped:4"], ["train_b12"], "compiled-graphs")
else:
    table("H200", [("medium", (4,)), ("large", (4,))], ["baseline", "spd", "grouped:4"], ["train_b12"], "compiled-graphs")
a = [sm.allreduce_ms(x, 4, fit) * 1e3 for x in (2048, 16384, 2**21, 12 * 2**20)]
print("tp=4 all-reduce us at 2 KiB, 16 KiB, 2 MiB, 12 MiB:", ", ".join(f"{v:.1f}" for v in a))
