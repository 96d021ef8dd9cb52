import json, glob, statistics, sys
from bench.step_model import *
rows = stored_rows()
full = fit_split(rows); fit = comm_fit(full["fit"])
print("| size | workload | n_tracks | policy | measured extra ms | modeled extra ms (before they fed the fits) |")
print("|---|---|---:|---|---:|---:|")
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    rs = [r for r in d["rows"] if not r["floor"]]
    base = [r for r in rs if r["policy"] == "baseline"][0]
    for r in rs:
        if r["policy"] == "baseline": continue
        pb = predict(r["size"], r["workload"], 1, "baseline", r["n_tracks"], "H200", full["tables"], fit, "graph")
        pp = predict(r["size"], r["workload"], 1, r["policy"], r["n_tracks"], "H200", full["tables"], fit, "graph")
        print(f"| {r['size']} | {r['workload']} | {r['n_tracks']} | {r['policy']} | {r['ms']-base['ms']:.3f} | {pp['ms']-pb['ms']:.3f} |")
