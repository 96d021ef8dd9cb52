"""Run a bench script with GPT's async_grad_allreduce on (issue 29 step 3), without editing the bench.

    torchrun --standalone --nproc_per_node=2 experiments/async_grad_bench.py bench/train_throughput.py ARGS...

Every GPT the script builds gets async_grad_allreduce=True (a no-op at tp=1); the script's variant names
do not say so, so give it its own --out_dir. Run the plain script on the same machine in the same session
for the synchronous rows.
"""
import os
import runpy
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
import model.gpt as gpt  # noqa: E402

_init = gpt.GPT.__init__


def _async_init(self, config, tp_group=None, async_grad_allreduce=True):
    _init(self, config, tp_group, async_grad_allreduce)


gpt.GPT.__init__ = _async_init
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
