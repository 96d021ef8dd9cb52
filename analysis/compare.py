"""Compare training runs: a table of loss vs synchronization, and a trade-off plot.

    python compare_runs.py out-shakespeare-*                  # dirs or quoted globs
    python compare_runs.py 'out-*' --markdown --out plots/tradeoff.png

Each run dir needs config.json and metrics.jsonl (written by train_reduced_sync.py); log.txt is
read when metrics.jsonl is missing. For every run the table shows: the sync policy, syncs/fwd as
MEASURED in the run (parallel.comm's count of forward all-reduces, logged at each eval), final
and best val loss, both relative to the baseline in %, and the median of the logged tokens/s. One run
gets no verdict: verdicts come only from the paired statistics over seeds below. The baseline is
the mean over the runs of the same setting (below) whose sync_policy is 'baseline'; a setting without
one shows — in the Δ columns, and a line says why (another setting's baseline is no reference).
A resumed run logs some iterations twice: the later line wins.

Timings (tok/s) depend on the machine as much as on the policy. Each run's layout record says its device
(name), processes (world, dp, tp), CPU cores and load average at the start; its end record the load at the
end. A speed ratio (each policy's median tok/s over its seeds against the baseline's) is printed only
between runs of one setting on the same device at the same layout; where runs differ, or their conditions
are unknown (runs logged before these fields, or log.txt only), one line says so instead. Where any run
was on CPU, or its load average exceeded its CPU cores, one line says that the timing measures the machine,
not the policy, and the PNG's wall-clock panel says so too.

The PNG (matplotlib, no display needed): one colour per policy and one line style per seed in every panel,
a legend naming both (and each setting's marker when there are several). Left: final val loss against
syncs per forward, each seed a point and each policy's mean a short line (no line joins policies; a
±--margin band around the baseline keeps single seeds from filling the y-axis); middle and right, the
val-loss curves against iterations and against wall-clock seconds, without the iteration-0 eval. With
--stats, each policy's 95% t-interval over its seeds is drawn as a band: of the final val loss (left, a box
around the mean line) and of the val loss at every iteration all its seeds logged (middle, around the
bold mean curve).

Statistics over seeds (--stats, --trend PNG, --stats-json FILE). Runs are grouped into settings
(dataset, n_layer, n_embd, n_tracks, max_iters, from config.json) and, within a setting, cells of one
sync_policy; only finished runs count (final eval at max_iters). Per cell: mean ± std over seeds of the
final val loss (the last eval) and of the best val loss (the lowest eval). Per non-baseline cell: the
paired difference to the baseline of the same setting, seed by seed (a seed gives both the same init
and data order), as a relative gap 100 * (policy / baseline - 1) %, with its mean and 95% Student-t
interval over the n paired seeds (n - 1 degrees of freedom). Two tests per cell, each Holm-corrected
across the family of the non-baseline policies of that setting (family-wise α = 0.05):
  - difference: two-sided paired t-test of 'mean gap = 0';
  - equivalence (TOST) against a margin stated up front (--margin, default ±1% of the baseline's val
    loss): two one-sided t-tests of 'gap <= -margin' and 'gap >= +margin'; its p is the larger of the two.
    Unadjusted, it rejects exactly when the 90% t-interval lies inside (-margin, +margin); Holm makes
    it stricter.
Verdict (from the final val loss; best val is shown beside it): 'keeps the loss' when the equivalence
test rejects; otherwise 'worse' / 'better' when the difference test rejects; otherwise 'inconclusive'
(an interval that includes 0 but reaches past the margin says nothing either way). One seed gets no test.
Beside the verdict: non-inferiority, TOST's upper one-sided test alone (Holm-adjusted), which says a
policy is not worse by the margin or more, whether or not it is better.
The trend PNG plots these gaps against the measured syncs per forward, one curve per setting (width x
n_tracks), with the 95% intervals as error bars and the margin as a grey band. The trend sentence
('Verdict (...)') is computed from the same numbers, each interval a single 95% test: for the grouped
family (spd = a sync every layer, grouped:G = every G layers), the per-seed least-squares
slope of the gap against the layers between syncs, averaged over seeds with a 95% interval, and,
where a setting exists at two widths, the gap at the largest common interval compared across widths
(Welch interval), and where it exists at two n_tracks, the slopes compared across them (Welch). The
verdict uses the final val loss unless --metric best: the final loss compares every policy after the
same schedule, while the best loss is the minimum over all evals, which picks each run's luckiest
eval (biased low, more so for noisier runs) and hides a policy that overfits sooner.
"""
import json
import os
import sys
import tempfile

# what main uses, and the names its callers import from here (experiments/docs_study/run.py, the tests): the code
# lives in analysis/runs.py (reading runs), stats.py (statistics), tables.py (printed text) and plots.py (figures)
from analysis.plots import plot, plot_budget_headline, plot_budgets, plot_trend
from analysis.runs import RunError, expand, load_run, num, records_from_log, skipped_note
from analysis.stats import (MARGIN, bend_fit, budget_analysis, decide, fieller, fmean, holm, line_fit, mean_ci, natural,
                            paired_tests, seed_statistics, t_cdf, t_quantile, trend_analysis, versus, welch_ci)
from analysis.tables import (baseline_references, budget_table, crossover_text, format_table, stats_report, stats_table,
                             table_rows, timing_lines, verdict_sentence, versus_table)
from atomic_files import replace_problem
from training.config import HelpFormatter, OneLineArgumentParser, ascii_float, write_text

PLOT_FORMATS = ("png", "pdf", "svg")


def check_out(path, flag="--out", formats=PLOT_FORMATS):
    """RunError unless `path` can take the plot (or, formats=None, any file): a known format, not a directory,
    under no file."""
    ext = os.path.splitext(path)[1][1:].lower()
    if formats and ext not in formats:
        raise RunError(f"{flag}={path!r}: the file name must end in {', '.join('.' + e for e in formats)}")
    if os.path.isdir(path):
        raise RunError(f"{flag}={path!r} is a directory; give a file name")
    if replace_problem(path):  # a device (/dev/full), a FIFO, our own stdout: never replaced by a file
        raise RunError(f"{flag}: {replace_problem(path)}; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise RunError(f"{flag}={path!r}: {parent} is a file, not a directory")
    try:  # a real write: access() says yes to root on a read-only file system or /proc
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as e:
        raise RunError(f"{flag}={path!r}: cannot write in the directory {parent}: {e.strerror or e}") from None


def main(argv=None):
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=HelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (out_dir of train_reduced_sync.py) or globs")
    parser.add_argument("--out", default="compare_runs.png", help="path of the PNG (default: compare_runs.png)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--stats", action="store_true",
                        help="also print statistics over seeds per (setting, policy) and the verdict sentence")
    parser.add_argument("--trend", default=None, metavar="PNG",
                        help="write the trend plot (gap to baseline vs syncs per forward) here; implies --stats")
    parser.add_argument("--stats-json", default=None, metavar="FILE",
                        help="write the statistics and the verdict's numbers as JSON; implies --stats")
    parser.add_argument("--margin", type=ascii_float, default=MARGIN, metavar="PCT",
                        help=f"equivalence margin in %% of the baseline's val loss (default {MARGIN:g}); state it "
                             f"before looking at the runs")
    parser.add_argument("--metric", choices=("final", "best"), default="final",
                        help="the val loss the verdict sentence uses (default final; see the module docstring)")
    parser.add_argument("--budgets", default=None, metavar="PNG",
                        help="runs of several budgets (max_iters): the gap against training tokens per policy, its "
                             "fitted slope, crossover and extrapolation (a table), and this plot; implies --stats")
    parser.add_argument("--versus", default=None, metavar="GLOB",
                        help="other runs of the same policies, seeds and budgets (e.g. another schedule): each "
                             "policy's paired gap here minus its gap there, seed by seed, with a 95%% t-interval")
    args = parser.parse_args(argv)
    try:
        check_out(args.out)
        for flag, path in (("--trend", args.trend), ("--budgets", args.budgets)):
            if path:
                check_out(path, flag)
        if args.stats_json:
            check_out(args.stats_json, "--stats-json", formats=None)
        if not args.margin > 0:  # before any work (--margin is only used with the statistics)
            raise RunError(f"--margin={args.margin}: must be > 0 (a percentage of the baseline's val loss)")
        skipped = []
        runs = [load_run(d) for d in expand(args.runs, skipped)]
        other_runs = [load_run(d) for d in expand([args.versus], skipped)] if args.versus else None
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if skipped:  # stderr: stdout may be a markdown table (experiments/shakespeare_sweep/run.sh tees it)
        print(skipped_note(skipped), file=sys.stderr)
    refs, reference_lines = baseline_references(runs)
    header, rows = table_rows(runs, refs)
    print(format_table(header, rows, args.markdown))
    print("\n" + "\n".join(reference_lines))
    print("one run per row: no verdict here; --stats gives the paired tests over seeds")
    if len({r["final_iter"] for r in runs}) > 1:
        print("note: the runs end at different iterations; compare final losses with care")
    timing = timing_lines(runs)
    if timing:
        print("\n".join(timing))
    plot(runs, args.out, args.margin, bands=bool(args.stats or args.trend or args.stats_json or args.budgets))
    print(f"wrote {args.out}")
    if args.stats or args.trend or args.stats_json or args.budgets:
        text, stats, analysis, verdict = stats_report(runs, f"{args.metric}_val", args.markdown, args.margin)
        print(text)
        if args.trend:
            plot_trend(stats, args.trend)
            print(f"wrote {args.trend}")
        budgets = None
        if args.budgets:
            budgets = budget_analysis(stats, f"{args.metric}_val")
            if not budgets:
                print(f"error: --budgets={args.budgets!r}: no policy here has runs paired with a baseline's (same "
                      f"setting and seed) to draw against the budget; nothing written there", file=sys.stderr)
                return 1
            print("\ngap against the training budget (final val loss):\n" + budget_table(budgets, args.margin))
            plot_budgets(budgets, args.budgets, args.margin)
            print(f"wrote {args.budgets}")
        if other_runs is not None:
            print("\n" + versus_table(versus(runs, other_runs, f"{args.metric}_val", margin=args.margin), args.versus))
        if args.stats_json:
            payload = json.dumps({"stats": stats, "trend": analysis, "verdict": verdict, "budgets": budgets}, indent=1)
            write_text(args.stats_json, payload)
            print(f"wrote {args.stats_json}")
    return 0


if __name__ == "__main__":
    from atomic_files import one_line_write_errors
    from training.cli import guarded
    sys.exit(guarded(one_line_write_errors(main)))
