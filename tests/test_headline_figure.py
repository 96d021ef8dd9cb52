"""Issue 52, item 11: the README's first figure (experiments/docs_study/budgets/budget.png) is one panel a newcomer
reads in 30 seconds: the paired gap to the baseline at the end of each budget with its 95% band, labels that say
each policy's syncs per forward, the zero line named, the better direction on the y axis; no seeds, fits, trunks
or cosine points (those stay in budget_full.png). Built here from the stored stats.json, on the CPU."""
import json
import os

import matplotlib

matplotlib.use("Agg")

import analysis.compare as compare
import analysis.plots
from experiments.docs_study.run import model_params

SWEEP = os.path.join("experiments", "docs_study", "budgets")


def build(tmp_path, monkeypatch):
    """The headline figure of the stored stats, drawn into tmp_path; (figure, analysis, path)."""
    with open(os.path.join(SWEEP, "stats.json")) as f:
        budgets = json.load(f)["budgets"]
    figures = []
    save = analysis.plots.save_figure
    monkeypatch.setattr(analysis.plots, "save_figure", lambda fig, path: (figures.append(fig), save(fig, path)))
    path = tmp_path / "budget.png"
    params = model_params(sorted(os.path.join(SWEEP, "runs", d) for d in os.listdir(os.path.join(SWEEP, "runs"))))
    compare.plot_budget_headline(budgets, str(path), params, "GPT-2 124M: loss cost of fewer syncs")
    [fig] = figures
    return fig, budgets, path


def test_headline_figure_is_one_plain_panel(tmp_path, monkeypatch):
    fig, budgets, path = build(tmp_path, monkeypatch)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [ax] = fig.axes  # one panel
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    # every policy, its syncs per forward in words (singular for 1), ordered as the lines end, top to bottom
    assert labels == ["grouped:12 (1 sync)", "grouped:4 (3 syncs)", "spd (12 syncs)", "parallel (12 syncs)",
                      "ladder (24 syncs, overlapped)"]
    last = {e["policy"]: e["budgets"][-1]["gap"] for e in budgets}  # the order, from the stored gaps at 83.9M
    assert [lab.split(" ")[0] for lab in labels] == sorted(last, key=last.get, reverse=True)
    ylabel = ax.get_ylabel()
    assert "gap to baseline" in ylabel and "below 0" in ylabel and "better" in ylabel
    assert any(t.get_text() == "baseline (24 syncs)" and t.get_position()[1] == 0 for t in ax.texts)
    # the ticks at the measured budgets, with tokens per parameter (123.59M parameters)
    ticks = sorted({b["tokens"] for e in budgets for b in e["budgets"]})
    assert list(ax.get_xticks()) == ticks
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "10.5M\n0.085 per param", "21M\n0.17 per param", "42M\n0.34 per param", "84M\n0.68 per param"]
    # nothing but the policies' mean lines and the zero line: no dotted trunks, dashed fits, seed dots or diamonds
    lines = ax.get_lines()
    assert len(lines) == len(budgets) + 1 and all(line.get_linestyle() == "-" for line in lines)
    assert ax.xaxis.get_data_interval()[0] >= ticks[0]  # nothing left of the first budget
    assert ax.containers == [] and len(ax.collections) == len(budgets)  # the bands only (no scatter, no errorbar)
    for e in budgets:  # each line is the stored mean gap at the end of each budget
        [line] = [l for l in lines if l.get_label().startswith(e["policy"] + " (")]
        assert list(line.get_xdata()) == [b["tokens"] for b in e["budgets"]]
        assert list(line.get_ydata()) == [b["gap"] for b in e["budgets"]]
    words = " ".join([ax.get_title(), ax.get_xlabel(), ylabel, *labels, *(t.get_text() for t in ax.texts)])
    for jargon in ("w768", "n4", "log2", "a + b", "3/3", "seeds 3"):
        assert jargon not in words
    assert ax.get_title().startswith("GPT-2 124M: loss cost of fewer syncs")
