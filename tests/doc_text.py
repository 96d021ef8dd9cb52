"""The documents the checks of tests/test_docs.py and tests/test_docs_numbers.py read, and how they read them (the
commands of a document's fenced blocks, its inline code); tests/test_study_tables.py reads the summary's commands
with them too."""
import glob
import os
import re

from tests.conftest import REPO

GUIDES = ("README.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))))
# the studies' and benchmark sets' full records, which EXPERIMENT_SUMMARY.md summarizes and links
NOTEBOOKS = ("experiments/docs_study/budgets/README.md", "experiments/docs_study/sizes/README.md",
             "experiments/docs_study/one_budget/README.md", "experiments/shakespeare_sweep/README.md",
             "experiments/char_sweep/README.md", "experiments/compiler_repros/README.md",
             "bench/results/decode/README.md", "bench/results/issue49/README.md",
             "bench/results/ladder_compiled_overlap/README.md", "bench/results/issue50/README.md",
             "bench/results/h100_tp2/README.md", "experiments/gpu_stop/README.md",
             "experiments/large_budgets/README.md")
DOCS = (*GUIDES, "TRAINING_INSTRUCTIONS.md", "EXPERIMENT_SUMMARY.md", "experiments/README.md", *NOTEBOOKS)
FENCE = re.compile(r"```(?:bash|sh)?\n(.*?)```", re.S)


def read(doc):
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        return f.read()


def code_blocks(text):
    return FENCE.findall(text)


def inline_code(text):
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def command_lines(block):
    """Shell lines of a code block with continuations joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    for line in joined.splitlines():
        line = re.sub(r"\s#.*$", "", line).strip()
        if line and not line.startswith("#"):
            yield line
