"""Habits that keep the code readable, held by tests: no function over 80 lines (past that it holds two concerns) and
no source file over 600 lines, in the lab, the host side, tasks.py and the images' Python scripts. The line length
(120) is held by ruff in CI (pyproject.toml's [tool.ruff], `invoke test`'s first step)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 600


def source_files(repo: Path = REPO) -> list[Path]:
    return sorted(
        [
            repo / "tasks.py",
            *(repo / "hostlab").rglob("*.py"),
            *(repo / "entrypoint" / "grpolab").rglob("*.py"),
            *(repo / "images").glob("*.py"),
        ]
    )


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`file:line name (N lines)` for every function or method in `path` longer than `limit` lines, decorators and
    docstring included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = node.end_lineno - first + 1
            if length > limit:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_over_80_lines():
    assert [found for path in source_files() for found in long_functions(path)] == []


def test_no_source_file_is_over_600_lines():
    lengths = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in source_files()}
    assert {name: n for name, n in lengths.items() if n > MAX_FILE_LINES} == {}


def test_the_function_check_counts_a_long_one(tmp_path):
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_FUNCTION_LINES))
    path = REPO / "tests" / "_long_function_probe.py"
    try:
        path.write_text(f"@staticmethod\ndef long():\n{body}\n")
        assert long_functions(path) == [f"tests/_long_function_probe.py:2 long ({MAX_FUNCTION_LINES + 2} lines)"]
    finally:
        path.unlink()
