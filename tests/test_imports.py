"""Imports run one way, down the layers: the project's own import graph (entrypoint/grpolab, hostlab, tasks.py)
has no circle. Every import counts, wherever it is written (a function-level import that closes a circle only
hides it), and importing `a.b.c` counts as importing the packages `a` and `a.b` too, since Python runs their
__init__ first. With no circle, every module has a floor (its longest chain of imports down to a module that
imports none of ours), and every import goes from a higher floor to a lower one."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def project_modules(repo: Path = REPO) -> dict[str, Path]:
    """{dotted module name: file} for tasks.py, hostlab/ and entrypoint/grpolab/."""
    files = [repo / "tasks.py", *(repo / "hostlab").rglob("*.py"), *(repo / "entrypoint" / "grpolab").rglob("*.py")]
    modules = {}
    for path in files:
        relative = path.relative_to(repo / "entrypoint" if path.is_relative_to(repo / "entrypoint") else repo)
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _longest_known_prefix(name: str, modules: dict) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(module: str, path: Path, modules: dict) -> set[str]:
    """The project's modules that `module` imports anywhere in its file, with the packages above each."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {_longest_known_prefix(alias.name, modules) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package that holds `module`
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:  # `from pkg import mod` imports the module pkg.mod
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else _longest_known_prefix(base, modules))
    found.discard(None)
    with_packages = set(found)
    for name in found:
        parts = name.split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            # A module's own packages are already being imported when it runs: not an edge of its own.
            if package in modules and not module.startswith(package + "."):
                with_packages.add(package)
    with_packages.discard(module)
    return with_packages


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    modules = project_modules(repo)
    return {module: imported_modules(module, path, modules) for module, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor: 0 for a module that imports none of ours, else one above its highest import."""
    floor: dict[str, int] = {}

    def of(module: str) -> int:
        if module not in floor:
            floor[module] = 1 + max((of(down) for down in graph[module]), default=-1)
        return floor[module]

    for module in graph:
        of(module)
    return floor


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert len(graph) > 60 and "grpolab.pipeline" in graph and "hostlab.locks" in graph  # the walk found the project
    assert circles(graph) == []


def test_every_import_goes_down_a_floor():
    graph = import_graph()
    floor = floors(graph)
    upward = [f"{module} (floor {floor[module]}) imports {down} (floor {floor[down]})"
              for module, downs in graph.items() for down in downs if floor[down] >= floor[module]]
    assert upward == []


def test_a_circle_closed_inside_a_function_is_found(tmp_path):
    """The checker itself: two modules that import each other, one of them only inside a function."""
    package = tmp_path / "entrypoint" / "grpolab"
    package.mkdir(parents=True)
    (tmp_path / "hostlab").mkdir()
    (tmp_path / "tasks.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "estimate.py").write_text("from .shape import DTYPE_BYTES\n")
    (package / "shape.py").write_text("DTYPE_BYTES = {}\n\ndef plan():\n    from .estimate import terms\n")
    assert circles(import_graph(tmp_path)) == [["grpolab.estimate", "grpolab.shape"]]
    (package / "shape.py").write_text("DTYPE_BYTES = {}\n")
    assert circles(import_graph(tmp_path)) == []


def test_importing_a_submodule_runs_its_package_first(tmp_path):
    """`from .rollouts.vllm_cpu import x` runs rollouts/__init__, whose imports then count: a circle through it."""
    package = tmp_path / "entrypoint" / "grpolab"
    (package / "rollouts").mkdir(parents=True)
    (tmp_path / "hostlab").mkdir()
    (tmp_path / "tasks.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "estimate.py").write_text("from .rollouts.vllm_cpu import terms\n")
    (package / "rollouts" / "__init__.py").write_text("from .vllm import share\n")
    (package / "rollouts" / "vllm_cpu.py").write_text("terms = []\n")
    (package / "rollouts" / "vllm.py").write_text("def share():\n    from ..estimate import estimate\n")
    assert circles(import_graph(tmp_path)) == [["grpolab.estimate", "grpolab.rollouts", "grpolab.rollouts.vllm"]]
