"""Boundaries kept by scanning the source (AST, no imports):

- every collective goes through parallel/comm.py (which counts it): no other module of the project
  calls a torch.distributed collective (or a functional collective) directly;
- checkpoints are loaded safely: every torch.load outside training/checkpoint.py passes weights_only=True;
- result files are written atomically (configurator.write_text / save_figure), never in place.

tests/ is not scanned: tests may cross-check against raw torch.distributed.
"""
import ast
import os

from tests.conftest import REPO

COLLECTIVES = {
    "all_reduce", "all_reduce_coalesced", "all_reduce_multigpu", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_gather_coalesced", "all_gather_multigpu", "_all_gather_base", "broadcast",
    "broadcast_object_list", "broadcast_multigpu", "reduce", "reduce_multigpu", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_multigpu", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
    "recv_object_list", "gather", "gather_object", "scatter", "scatter_object_list",
    # torch.distributed._functional_collectives
    "all_gather_tensor", "all_gather_tensor_autograd", "reduce_scatter_tensor_autograd", "all_gather_single",
    "reduce_scatter_single", "all_gather_single_autograd", "reduce_scatter_single_autograd",
    "all_reduce_inplace", "all_gather_inplace", "reduce_scatter_tensor_coalesced", "all_gather_into_tensor_coalesced",
}
DIST_MODULES = ("torch.distributed", "torch.distributed.distributed_c10d", "torch.distributed._functional_collectives",
                "torch.distributed._functional_collectives_impl")
COMM = os.path.join("parallel", "comm.py")


def python_files():
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("tests", "__pycache__")]
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                yield os.path.relpath(path, REPO), path


def aliases(tree):
    """{local name: dotted module or object it names} from the imports of a module (any scope)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def dotted(node, names):
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, names)
        return f"{base}.{node.attr}" if base else None
    return None


def direct_collectives(source, filename="<src>"):
    """[(line, 'torch.distributed.X')] of the collective calls and imports in `source`."""
    tree = ast.parse(source, filename)
    names = aliases(tree)
    found = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call):
            target = dotted(node.func, names)
        elif isinstance(node, ast.ImportFrom) and node.module in DIST_MODULES:
            hits = [a.name for a in node.names if a.name in COLLECTIVES]
            target = f"{node.module}.{hits[0]}" if hits else None
        if target:
            module, _, name = target.rpartition(".")
            if module in DIST_MODULES and name in COLLECTIVES:
                found.append((node.lineno, target))
    return found


def test_the_scanner_finds_every_spelling():
    cases = {
        "import torch.distributed as dist\ndist.all_reduce(t)": 1,
        "import torch\ntorch.distributed.barrier()": 1,
        "from torch import distributed as d\nd.all_gather_object(out, x)": 1,
        "from torch.distributed import broadcast_object_list\nbroadcast_object_list(x)": 2,  # import and call
        "import torch.distributed._functional_collectives as funcol\nfuncol.all_reduce(x, 'sum', g)": 1,
        "def f():\n    import torch.distributed as dist\n    dist.send(t, 1)": 1,
        "import torch.distributed as dist\ndist.get_rank(); dist.init_process_group('gloo'); dist.new_group([0])": 0,
        "from parallel import comm\ncomm.all_reduce(t, g, 'x'); comm.barrier()": 0,
    }
    for source, n in cases.items():
        assert len(direct_collectives(source)) == n, source
    with open(os.path.join(REPO, COMM)) as f:
        assert direct_collectives(f.read()), "the scanner must see parallel/comm.py's own collectives"


# A reproduction of a torch bug, which calls torch's functional collectives on purpose.
UPSTREAM_REPRO = os.path.join("experiments", "compiler_repros", "collective_fusion", "repro.py")


def test_no_module_outside_comm_calls_collectives_directly():
    offenders = []
    for rel, path in python_files():
        if rel in (COMM, UPSTREAM_REPRO):
            continue
        with open(path, encoding="utf-8") as f:
            source = f.read()
        offenders += [f"{rel}:{line}: {name}" for line, name in direct_collectives(source, rel)]
    assert not offenders, ("collectives must go through parallel/comm.py (which counts them); direct calls:\n"
                           + "\n".join(offenders))


def torch_loads_without_weights_only(source, filename="<src>"):
    tree = ast.parse(source, filename)
    names = aliases(tree)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and dotted(node.func, names) in ("torch.load", "torch.serialization.load"):
            safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                       for k in node.keywords)
            if not safe:
                bad.append(node.lineno)
    return bad


def test_checkpoints_load_with_weights_only_everywhere():
    # training/checkpoint.py: --convert --trust is the one explicit weights_only=False.
    allowed = {os.path.join("training", "checkpoint.py")}
    assert torch_loads_without_weights_only("import torch\ntorch.load(p, weights_only=False)\ntorch.load(p)") == [2, 3]
    offenders = []
    for rel, path in python_files():
        if rel in allowed:
            continue
        with open(path, encoding="utf-8") as f:
            offenders += [f"{rel}:{line}" for line in torch_loads_without_weights_only(f.read(), rel)]
    assert not offenders, "torch.load without weights_only=True (use checkpoint.read_checkpoint):\n" + "\n".join(offenders)


def non_atomic_writes(source, filename="<src>"):
    """Lines that write a file in place: open() in a writing mode, Path.write_text/write_bytes, savefig."""
    bad = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("write_text", "write_bytes", "savefig"):
            bad.append(node.lineno)
        elif isinstance(func, ast.Name) and func.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                bad.append(node.lineno)
    return bad


def test_result_files_are_written_atomically():
    # The writers themselves (a temp file, then os.replace), logs appended line by line on purpose:
    # training/step.py's RunLog (a killed run's partial line is ended on resume, or cut from metrics.jsonl) and
    # experiments/runner.py's per-run stdout, and the error file torchrun reads once the process has exited (parallel/mesh.py).
    allowed = {"atomic_files.py": 1, os.path.join("data", "prepare_utils.py"): 1,
               os.path.join("training", "step.py"): 4,
               os.path.join("experiments", "runner.py"): 1, os.path.join("parallel", "mesh.py"): 1}
    assert non_atomic_writes("open(p, 'w')\nopen(p)\nopen(p, mode='ab')\nopen(p, 'rb')\nfig.savefig(p)\n"
                             "Path(p).write_text(t)") == [1, 3, 5, 6]
    offenders = []
    for rel, path in python_files():
        with open(path, encoding="utf-8") as f:
            lines = non_atomic_writes(f.read(), rel)
        if len(lines) > allowed.get(rel, 0):
            offenders.append(f"{rel}: lines {lines}")
    assert not offenders, ("write result files with training.config.write_text / save_figure (a temp file and "
                           "os.replace), so a killed run leaves no half-written file:\n" + "\n".join(offenders))
