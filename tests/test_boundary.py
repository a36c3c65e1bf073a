"""The host side (hostlab/, tasks.py) and the lab package meet in six small modules: the tracks table
(grpolab.common.tracks), the run log's format and reader (grpolab.common.runlog), the report built from run logs
(grpolab.report.table, which `invoke report` and `grpolab report` share), the server health wait
(grpolab.common.health), a file's sha256 (grpolab.common.filehash) and the kernels table with its verdict per GPU
(grpolab.common.gpucode, which `invoke kernels` writes and the doctor reads). Each side can change the rest without
reading the other."""

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SHARED = {"grpolab.common.tracks", "grpolab.common.runlog", "grpolab.report.table", "grpolab.common.health", "grpolab.common.filehash", "grpolab.common.gpucode"}
HEAVY = {"torch", "trl", "transformers", "peft", "datasets", "numpy", "vllm", "llama_cpp"}


def grpolab_imports(path) -> set[str]:
    """Every grpolab module a Python file imports, wherever in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "grpolab"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "grpolab":
            found |= {f"grpolab.{alias.name}" for alias in node.names} if node.module == "grpolab" else {node.module}
    return found


def test_the_host_side_imports_only_the_shared_modules():
    host_files = [REPO / "tasks.py", *sorted((REPO / "hostlab").glob("*.py"))]
    reaches = {str(path.relative_to(REPO)): sorted(grpolab_imports(path) - SHARED) for path in host_files}
    assert {path: modules for path, modules in reaches.items() if modules} == {}
    assert set().union(*(grpolab_imports(path) for path in host_files)) == SHARED  # the list is not stale


def test_the_shared_modules_import_nothing_heavy():
    code = (
        "import json, sys\n"
        f"import {', '.join(sorted(SHARED))}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {'grpolab', *json.loads(sys.argv[1])})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(sorted(HEAVY))], env={"PYTHONPATH": str(REPO / "entrypoint")},
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    assert set(json.loads(out)) <= SHARED | {"grpolab", "grpolab.common", "grpolab.report", "grpolab.common.errors", "grpolab.common.paths", "grpolab.common.durations", "grpolab.common.tolerance"}
