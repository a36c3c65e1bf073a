"""Imports run one way, down the layers: the project's own import graph (entrypoint/grpolab, hostlab, tasks.py)
has no circle. Every import counts, wherever it is written (a function-level import that closes a circle only
hides it), and importing `a.b.c` counts as importing the packages `a` and `a.b` too, since Python runs their
__init__ first. Two levels are checked: no circle between modules, and between the lab's subpackages every import
goes down an order this file states (LAYERS)."""

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


# The lab's subpackages, bottom to top: each may import its own modules and those of the subpackages listed before
# it, never one listed after it. Written here, not derived from the graph, so that an import going the wrong way fails
# (a derived order would move to fit it). The host side (hostlab, tasks) stands above all of it, and reaches only
# grpolab.common and grpolab.report (tests/test_boundary.py).
LAYERS = [
    "grpolab",  # the package itself: a docstring and __version__, imports nothing
    "grpolab.common", "grpolab.task", "grpolab.model", "grpolab.environment", "grpolab.settings", "grpolab.memory",
    "grpolab.rollouts", "grpolab.run", "grpolab.export", "grpolab.bench", "grpolab.report",
    "grpolab.cli", "grpolab.__main__",
]


def layer_of(module: str) -> str:
    """The entry of LAYERS that holds `module`: the longest one that is the module or a package above it."""
    held = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(held, key=len)


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a grpolab module to a module of a subpackage above its own in LAYERS."""
    rank = {layer: n for n, layer in enumerate(LAYERS)}
    return sorted(f"{module} ({layer_of(module)}) imports {down} ({layer_of(down)})"
                  for module, downs in graph.items() if module.startswith("grpolab")
                  for down in downs if down.startswith("grpolab") and rank[layer_of(down)] > rank[layer_of(module)])


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert (
        len(graph) > 60 and "grpolab.run.pipeline" in graph and "hostlab.locks.resolve" in graph
    )  # the walk found the project
    assert circles(graph) == []


def test_every_lab_module_sits_in_a_layer_and_imports_only_its_own_or_lower_layers():
    graph = import_graph()
    lab = [module for module in graph if module.startswith("grpolab")]
    # A new subpackage must be given its place in LAYERS: a module directly in grpolab/ belongs to no subpackage.
    assert [module for module in lab if layer_of(module) == "grpolab" and module != "grpolab"] == []
    assert {layer_of(module) for module in lab} == set(LAYERS)  # the list is not stale
    assert wrong_way_imports(graph) == []


def test_an_import_up_the_layers_is_found(tmp_path):
    """The checker itself: a model module that imports the run layer fails, though it closes no circle."""
    package = tmp_path / "entrypoint" / "grpolab"
    for sub in ("model", "run"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (tmp_path / "hostlab").mkdir()
    (tmp_path / "tasks.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "run" / "pipeline.py").write_text("from ..model.shape import model_shape\n")
    (package / "model" / "shape.py").write_text("def model_shape():\n    pass\n")
    graph = import_graph(tmp_path)
    assert circles(graph) == [] and wrong_way_imports(graph) == []
    (package / "model" / "shape.py").write_text("def model_shape():\n    from ..run.training import load_model\n")
    (package / "run" / "training.py").write_text("")
    assert wrong_way_imports(import_graph(tmp_path)) == [
        "grpolab.model.shape (grpolab.model) imports grpolab.run (grpolab.run)",
        "grpolab.model.shape (grpolab.model) imports grpolab.run.training (grpolab.run)",
    ]


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


# The host side's subpackages, bottom to top, as LAYERS is for the lab: each may import its own modules, the package
# `hostlab` itself (REPO, HostError) and the subpackages listed before it. `tasks` (the invoke tasks) sits on top.
HOST_LAYERS = [
    "hostlab",  # REPO and HostError
    "hostlab.host", "hostlab.locks", "hostlab.kernels", "hostlab.images", "hostlab.run", "hostlab.ci", "hostlab.bench",
    "tasks",
]


def host_layer_of(module: str) -> str:
    held = [layer for layer in HOST_LAYERS if module == layer or module.startswith(layer + ".")]
    return max(held, key=len)


def wrong_way_host_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a host module to a host module of a subpackage above its own in HOST_LAYERS."""
    rank = {layer: n for n, layer in enumerate(HOST_LAYERS)}
    host = [module for module in graph if module == "tasks" or module.startswith("hostlab")]
    return sorted(f"{module} ({host_layer_of(module)}) imports {down} ({host_layer_of(down)})"
                  for module in host for down in graph[module] if down == "tasks" or down.startswith("hostlab")
                  if rank[host_layer_of(down)] > rank[host_layer_of(module)])


def test_every_host_module_sits_in_a_layer_and_imports_only_its_own_or_lower_layers():
    graph = import_graph()
    host = [module for module in graph if module == "tasks" or module.startswith("hostlab")]
    # A module directly in hostlab/ belongs to no concern: it must go in a subpackage (or HOST_LAYERS gets a line).
    assert [module for module in host if host_layer_of(module) == "hostlab" and module != "hostlab"] == []
    assert {host_layer_of(module) for module in host} == set(HOST_LAYERS)  # the list is not stale
    assert wrong_way_host_imports(graph) == []


def test_no_product_module_imports_the_benchmarks():
    """Measurement stays apart: only the benchmarks themselves (and tasks.py's bench tasks) import hostlab.bench."""
    graph = import_graph()
    importers = sorted(module for module, downs in graph.items()
                       if module != "tasks" and not module.startswith("hostlab.bench")
                       and any(down == "hostlab.bench" or down.startswith("hostlab.bench.") for down in downs))
    assert importers == []


def test_a_host_import_up_the_layers_is_found(tmp_path):
    """The checker itself: a lock module that imports the image builder fails."""
    (tmp_path / "entrypoint" / "grpolab").mkdir(parents=True)
    (tmp_path / "entrypoint" / "grpolab" / "__init__.py").write_text("")
    (tmp_path / "tasks.py").write_text("")
    for sub in ("locks", "images"):
        (tmp_path / "hostlab" / sub).mkdir(parents=True)
        (tmp_path / "hostlab" / sub / "__init__.py").write_text("")
    (tmp_path / "hostlab" / "__init__.py").write_text("")
    (tmp_path / "hostlab" / "images" / "build.py").write_text("from ..locks.lockfile import parse_lock\n")
    (tmp_path / "hostlab" / "locks" / "lockfile.py").write_text("def parse_lock():\n    pass\n")
    assert wrong_way_host_imports(import_graph(tmp_path)) == []
    (tmp_path / "hostlab" / "locks" / "lockfile.py").write_text("def parse_lock():\n    from ..images import build\n")
    assert wrong_way_host_imports(import_graph(tmp_path)) == [
        "hostlab.locks.lockfile (hostlab.locks) imports hostlab.images (hostlab.images)",
        "hostlab.locks.lockfile (hostlab.locks) imports hostlab.images.build (hostlab.images)",
    ]
