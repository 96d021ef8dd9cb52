"""The layout stays readable: entry points find the packages without path hacks, one constant names the
repository root, and library functions stay short.

- at most 5 `sys.path.insert` calls outside tests/ (the data/<name>/prepare.py scripts that nanoGPT runs as
  files; everything else runs from the repository root, scripts in folders as modules: python -m bench.x);
- one repository-root constant outside tests/ (training/config.py's REPO) and one in tests/ (conftest's);
- every bench script (a file directly in bench/; its packages are library code) run as a file stops in one line
  before an import that would fail;
- no module in data/ imports from training/ (data/ is below it: the guard its scripts share is cli_guard.py);
- no function of more than 80 lines in library code, unless the line above its def says why
  (a comment starting with `# longer than 80 lines:`).
"""
import ast
import os
from pathlib import Path

from tests.conftest import REPO

MAX_PATH_INSERTS = 5  # the data prepare scripts (shakespeare, shakespeare_char, debian_docs, debian_large, openwebtext), run as files
MAX_FUNCTION_LINES = 80
LIBRARY = ("model", "parallel", "training", "analysis", os.path.join("data", "loader.py"),
           os.path.join("bench", "common.py"), os.path.join("bench", "steptime"))
LONG_REASON = "# longer than 80 lines:"


def python_files(tests=False):
    """(path relative to the repository, source) of every .py file, tests/ only when asked."""
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__", "out-")))
        rel_dir = os.path.relpath(dirpath, REPO)
        if (rel_dir.split(os.sep)[0] == "tests") != tests:
            continue
        for name in sorted(filenames):
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    yield os.path.normpath(os.path.join(rel_dir, name)), f.read()


def path_inserts(source):
    """Line numbers of the sys.path.insert calls of a module."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "insert"
            and ast.unparse(node.func.value) == "sys.path"]


PATH_CALLS = {"os.path.dirname", "os.path.abspath", "os.path.realpath", "os.path.join", "os.path.normpath", "Path"}
PATH_METHODS = {"resolve", "absolute", "rsplit", "split"}


def is_path_expression(node):
    """Whether an expression only computes a path from __file__ and names (no other call runs)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = ast.unparse(sub.func)
            if name not in PATH_CALLS and not (isinstance(sub.func, ast.Attribute) and sub.func.attr in PATH_METHODS):
                return False
    return "__file__" in ast.unparse(node) or any(isinstance(sub, ast.Name) for sub in ast.walk(node))


def root_constants(rel, source):
    """Names assigned the repository root in a module (at module level or in a function), found by
    evaluating each path expression with the module's own __file__ and its earlier path constants."""
    tree = ast.parse(source)
    scope = {"__builtins__": {}, "os": os, "Path": Path, "__file__": os.path.join(REPO, rel)}
    module_level = {id(node) for node in tree.body}
    found = []
    for node in [n for n in tree.body if isinstance(n, ast.Assign)] + \
            [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and id(n) not in module_level]:
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name) or not is_path_expression(node.value):
            continue
        try:
            value = eval(compile(ast.Expression(node.value), rel, "eval"), dict(scope))
        except Exception:  # a name this scan does not know: not a path it can compute
            continue
        if id(node) in module_level:
            scope[node.targets[0].id] = value
        if isinstance(value, (str, Path)) and os.path.normpath(str(value)) == os.path.normpath(REPO):
            found.append(f"{rel}:{node.lineno} {node.targets[0].id}")
    return found


def test_at_most_four_path_insertions_outside_tests():
    found = [f"{rel}:{line}" for rel, source in python_files() for line in path_inserts(source)]
    assert len(found) <= MAX_PATH_INSERTS, (
        f"{len(found)} sys.path.insert calls outside tests/ (at most {MAX_PATH_INSERTS}: the data prepare "
        f"scripts; run scripts in folders as modules from the repository root instead): {found}")


def test_path_insertions_are_found():
    assert path_inserts("import sys\nsys.path.insert(0, 'x')\nsys.path.append('y')\n") == [2]


def test_one_repository_root_constant():
    outside = [c for rel, source in python_files() for c in root_constants(rel, source)]
    inside = [c for rel, source in python_files(tests=True) for c in root_constants(rel, source)]
    assert [c.split(":")[0] for c in outside] == [os.path.join("training", "config.py")], (
        f"the repository root has one constant, training/config.py's REPO (import it): {outside}")
    assert [c.split(":")[0] for c in inside] == [os.path.join("tests", "conftest.py")], (
        f"tests use conftest's REPO: {inside}")


def test_root_constants_are_found():
    source = ("import os\nfrom pathlib import Path\nHERE = os.path.dirname(os.path.abspath(__file__))\n"
              "ROOT = os.path.dirname(HERE)\nDATA = os.path.join(ROOT, 'data')\n"
              "def f():\n    top = Path(__file__).resolve().parents[1]\n")
    assert root_constants(os.path.join("bench", "x.py"), source) == ["bench/x.py:4 ROOT", "bench/x.py:7 top"]


def test_bench_scripts_stop_before_a_failing_import():
    """`python bench/x.py` puts bench/ on sys.path, not the root: the guard must come before the first
    import of the project's packages (tests/test_docs.py runs one such script and each module's --help)."""
    packages = {name for name in os.listdir(REPO) if os.path.isfile(os.path.join(REPO, name, "__init__.py"))}
    bad = []
    for rel, source in python_files():
        # bench's scripts are its top-level files; a package under bench/ (bench/steptime/) is library code that a
        # script imports, not a command line
        if os.path.dirname(rel) != "bench" or os.path.basename(rel) in ("__init__.py", "common.py"):
            continue
        guard, first_import = None, None
        for node in ast.parse(source).body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "not __package__" and guard is None:
                guard = node.lineno
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in packages:
                first_import = first_import or node.lineno
        if guard is None or (first_import is not None and guard > first_import):
            bad.append(f"{rel} (guard at {guard}, first project import at {first_import})")
    assert packages >= {"bench", "model", "training"} and not bad, bad


def test_bench_packages_are_libraries():
    """A package under bench/ (bench/steptime/) is imported by a script there, never run: no module of it has a
    __main__ block, so the script guard above need not cover it."""
    package_files = [(rel, source) for rel, source in python_files()
                     if rel.startswith("bench" + os.sep) and os.path.dirname(rel) != "bench"]
    mains = [rel for rel, source in package_files for node in ast.parse(source).body
             if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"]
    assert package_files and not mains, f"run these as bench/ scripts instead: {mains}"


def imported_modules(source):
    """The modules a source imports (at any depth), as written: 'training.cli' for `from training.cli import x`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def test_data_imports_nothing_from_training():
    data = [(rel, source) for rel, source in python_files() if rel.startswith("data" + os.sep)]
    assert len(data) >= 8  # the loader, the shared helpers and the prepare scripts
    up = [f"{rel}: {module}" for rel, source in data for module in imported_modules(source)
          if module.split(".")[0] == "training"]
    assert not up, f"data/ is below training/: import the shared guard from cli_guard instead: {up}"


def test_imports_are_found():
    source = "import os, training.cli\nfrom training import cli\ndef f():\n    from data.x import y\nfrom . import z\n"
    assert imported_modules(source) == ["os", "training.cli", "training", "data.x"]


def long_functions(rel, source):
    """Functions of more than MAX_FUNCTION_LINES lines (def to last line) without a reason above them."""
    lines = source.splitlines()
    long = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = node.end_lineno - node.lineno + 1
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if size > MAX_FUNCTION_LINES and not (first > 1 and lines[first - 2].strip().startswith(LONG_REASON)):
                long.append(f"{rel}:{node.lineno} {node.name} ({size} lines)")
    return long


def test_library_functions_are_short():
    library = [(rel, source) for rel, source in python_files()
               if any(rel == part or rel.startswith(part + os.sep) for part in LIBRARY)]
    assert len(library) > 20
    long = [f for rel, source in library for f in long_functions(rel, source)]
    assert not long, (f"split these into named functions, or say why above the def "
                      f"('{LONG_REASON} ...'): {long}")


def test_long_functions_are_found():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions("m.py", "def f():\n" + body) == [f"m.py:1 f ({MAX_FUNCTION_LINES + 1} lines)"]
    assert long_functions("m.py", f"{LONG_REASON} a table\ndef f():\n" + body) == []
    assert long_functions("m.py", "def f():\n" + body[:-len("    x79 = 79\n")]) == []


def test_every_shell_script_of_the_tools_parses():
    """bash -n on each tracked .sh outside bench/results/ (those are records of calls made): a syntax error in a GPU
    script (gpu.sh, gpu_suite.sh) shows only on the lent machine, at the price of its device time."""
    import subprocess
    listed = subprocess.run(["git", "ls-files", "*.sh"], cwd=REPO, capture_output=True, text=True)
    scripts = [p for p in listed.stdout.split() if not p.startswith("bench/results/")]
    if listed.returncode or not scripts:  # not a git checkout: every .sh under the tree
        scripts = [str(p.relative_to(REPO)) for p in Path(REPO).rglob("*.sh")
                   if "bench/results" not in str(p) and ".venv" not in p.parts]
    assert "experiments/large_budgets/gpu.sh" in scripts and "bench/gpu_suite.sh" in scripts
    bad = [(p, r.stderr.strip()) for p in scripts
           if (r := subprocess.run(["bash", "-n", os.path.join(REPO, p)], capture_output=True, text=True)).returncode]
    assert not bad, bad
