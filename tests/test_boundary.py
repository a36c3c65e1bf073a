"""The host side (tasks.py, hostlab/) and the lab package meet in two of the lab's subpackages: grpolab.common (the
tracks table, the run log's format and reader, the health wait, a file's sha256, the kernels table's verdicts, and the
small things those stand on) and grpolab.report (the report built from run logs, which `invoke report` and `grpolab
report` share). Checked by package path, so a new module in either is shared without a list to keep, and a module
anywhere else is not. Where the host needs the lab to do something it runs one of the lab's commands: `python -m
grpolab ...` (a learner's) or `python -m grpolab.bench ...` (the benchmarks' and CI's proofs), each named as one
argument of its own. Any other string that names a lab module (`python -c "from grpolab.bench..."`, `-m
grpolab.run...`) crosses the boundary as surely as an import, so the host's string constants are read too."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAB = REPO / "entrypoint" / "grpolab"

SHARED_PACKAGES = ("grpolab.common", "grpolab.report")
# The lab's entry points besides `python -m grpolab`: a host string that is exactly one of these (the argument after
# -m) runs the command, as the host runs `grpolab`; the same name inside a `-c` program or an import still crosses.
COMMANDS = ("grpolab.bench",)
HEAVY = {"torch", "trl", "transformers", "peft", "datasets", "numpy", "vllm", "llama_cpp"}
# A dotted name that starts with grpolab (not part of a longer dotted name such as a label io.grpolab.track).
NAMED_MODULE = re.compile(r"(?<![\w.])grpolab(?:\.\w+)+")


def host_files(repo: Path = REPO) -> list[Path]:
    return [repo / "tasks.py", *sorted((repo / "hostlab").rglob("*.py"))]


def lab_modules(lab: Path = LAB) -> set[str]:
    """Every module and package of the lab, dotted."""
    names = set()
    for path in lab.rglob("*.py"):
        parts = ["grpolab", *path.relative_to(lab).with_suffix("").parts]
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def is_shared(module: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in SHARED_PACKAGES)


def grpolab_imports(tree: ast.AST, known: set[str]) -> set[str]:
    """Every grpolab module a file imports, wherever in the file (`from grpolab.run import training` imports
    grpolab.run.training)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "grpolab"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "grpolab":
            found |= {
                f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                for alias in node.names
            }
    return found


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (prose may name a module; only code runs one)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.add(id(first.value))
    return found


def lab_modules_named_in_strings(tree: ast.AST, known: set[str]) -> set[str]:
    """The lab modules a file's string constants name (docstrings aside), each cut to the longest known module."""
    skip, found = docstrings(tree), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in COMMANDS:  # `-m grpolab.bench`: a command run, as `-m grpolab` is
                continue
            for name in NAMED_MODULE.findall(node.value):
                while name not in known and "." in name:
                    name = name.rpartition(".")[0]
                if name in known and name != "grpolab":
                    found.add(name)
    return found


def crossings(repo: Path = REPO) -> dict[str, list[str]]:
    """{host file: the lab modules outside the shared packages it imports or names in code}."""
    known, found = lab_modules(repo / "entrypoint" / "grpolab"), {}
    for path in host_files(repo):
        tree = ast.parse(path.read_text())
        outside = sorted(
            m for m in grpolab_imports(tree, known) | lab_modules_named_in_strings(tree, known) if not is_shared(m)
        )
        if outside:
            found[str(path.relative_to(repo))] = outside
    return found


def test_the_host_side_reaches_only_the_shared_packages():
    assert crossings() == {}
    # The walk saw the host's real imports: the run log's reader and the report are among them.
    used = set().union(*(grpolab_imports(ast.parse(path.read_text()), lab_modules()) for path in host_files()))
    assert "grpolab.common.runlog" in used and any(m.startswith("grpolab.report") for m in used)


def test_a_python_c_string_and_an_import_outside_the_shared_packages_are_both_found(tmp_path):
    """The checker itself, on a copy of the layout: a `-c` string, an `-m` argument and an import each cross."""
    for sub in ("common", "bench", "run"):
        (tmp_path / "entrypoint" / "grpolab" / sub).mkdir(parents=True)
        (tmp_path / "entrypoint" / "grpolab" / sub / "__init__.py").write_text("")
    (tmp_path / "entrypoint" / "grpolab" / "__init__.py").write_text("")
    for name in ("common/runlog.py", "bench/memory_cases.py", "run/training.py"):
        (tmp_path / "entrypoint" / "grpolab" / name).write_text("")
    for sub in ("bench", "run"):
        (tmp_path / "hostlab" / sub).mkdir(parents=True)
    (tmp_path / "tasks.py").write_text(
        '"""Names grpolab.run.training in prose only."""\nfrom grpolab.common.runlog import read_runs\n'
    )
    (tmp_path / "hostlab" / "bench" / "labs.py").write_text(
        "import subprocess\n"
        "LABEL = 'io.grpolab.track'\n"
        "subprocess.run(['python', '-c', 'from grpolab.bench.memory_cases import write_shape_folder; "
        "write_shape_folder()'])\n"
        "subprocess.run(['python', '-m', 'grpolab.run.training'])\n"
        "subprocess.run(['python', '-m', 'grpolab.bench', 'memory', '--case', 'small-shape'])\n"
        "subprocess.run(['python', '-c', 'import grpolab.bench'])\n"
    )
    (tmp_path / "hostlab" / "run" / "lab.py").write_text("def f():\n    from grpolab.run import training\n")
    assert crossings(tmp_path) == {
        "hostlab/bench/labs.py": ["grpolab.bench", "grpolab.bench.memory_cases", "grpolab.run.training"],
        "hostlab/run/lab.py": ["grpolab.run.training"],
    }


def test_the_shared_packages_import_nothing_heavy():
    shared = sorted(m for m in lab_modules() if is_shared(m))
    code = (
        "import importlib, json, sys\n"
        "for name in json.loads(sys.argv[1]): importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {'grpolab', *json.loads(sys.argv[2])})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(shared), json.dumps(sorted(HEAVY))],
        env={"PYTHONPATH": str(REPO / "entrypoint")},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    loaded = set(json.loads(out))
    assert len(shared) > 10 and loaded - {"grpolab"} == set(
        shared
    )  # every shared module, nothing of the rest, nothing heavy


def test_each_command_the_host_may_run_is_a_lab_entry_point():
    """COMMANDS name packages that `python -m` runs (a __main__.py), outside the shared packages."""
    for name in COMMANDS:
        package = LAB.joinpath(*name.split(".")[1:])
        assert (package / "__main__.py").is_file() and not is_shared(name), name
