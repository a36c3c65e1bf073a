"""A learner's `grpolab` stays light and apart from the measurement: its help and its refusals load no torch (or any
heavy library) and no module of grpolab.bench, no product module imports grpolab.bench, and the benchmarks' own entry
point (`python -m grpolab.bench`) answers --help without torch too. Each is checked in a fresh process, by what it
left in sys.modules."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_imports import import_graph

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "trl", "peft", "vllm", "verl")
# Runs a module as `python -m` does, then says which of the lab's and the heavy modules the process held at exit.
RUN_SAYING_WHAT_LOADED = (
    "import atexit, json, runpy, sys\n"
    "module = sys.argv.pop(1)\n"
    "atexit.register(lambda: print('LOADED ' + json.dumps(sorted(m for m in sys.modules\n"
    f"    if m.split('.')[0] in {HEAVY!r} or m.startswith('grpolab'))), file=sys.stderr))\n"
    "sys.argv[0] = module\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def loaded_by(module: str, *argv: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint"), "GRPOLAB_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-c", RUN_SAYING_WHAT_LOADED, module, *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    line = next(line for line in proc.stderr.splitlines() if line.startswith("LOADED "))
    return proc, json.loads(line.removeprefix("LOADED "))


@pytest.mark.parametrize("argv", [["--help"], ["lab", "--help"], ["smoke", "--help"], ["estimate", "--help"],
                                  ["lab", "--track", "c", "--max-steps", "0"]])
def test_grpolab_help_and_a_refusal_load_no_benchmark_and_nothing_heavy(argv, tmp_path):
    proc, loaded = loaded_by("grpolab", *argv, tmp_path=tmp_path)
    assert proc.returncode in (0, 2), proc.stderr[-2000:]  # help, or the input layer's refusal
    assert "grpolab.cli" in loaded  # the walk saw the real entry point
    assert [m for m in loaded if m.startswith("grpolab.bench") or not m.startswith("grpolab")] == []


def test_grpolab_offers_no_benchmark_or_proof_command():
    from grpolab.cli import build_parser

    parser = build_parser()
    (commands,) = [action.choices for action in parser._actions if action.dest == "command"]
    assert not {"bench", "memory-bench", "verl-cpu"} & set(commands)
    code = (REPO / "entrypoint" / "grpolab" / "cli.py").read_text()
    assert "grpolab.bench" not in code.replace("`python -m grpolab.bench`", "")  # named in its docstring only


@pytest.mark.parametrize("argv", [["--help"], ["memory", "--help"], ["plain-trl", "--help"], ["verl-cpu", "--help"]])
def test_the_bench_entry_point_answers_help_without_torch(argv, tmp_path):
    proc, loaded = loaded_by("grpolab.bench", *argv, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: python -m grpolab.bench" in proc.stdout
    assert [m for m in loaded if not m.startswith("grpolab")] == []


def test_no_lab_module_outside_grpolab_bench_imports_it():
    """grpolab.bench sits below report and cli in the layers (tests/test_imports.py), so an import would be allowed
    there: this is what keeps measurement apart. Only grpolab.bench's own modules import it."""
    graph = import_graph()
    importers = sorted(module for module, imported in graph.items() if not module.startswith("grpolab.bench")
                       and any(name == "grpolab.bench" or name.startswith("grpolab.bench.") for name in imported))
    assert importers == []


def test_no_function_in_the_command_lines_is_over_80_lines():
    lab = REPO / "entrypoint" / "grpolab"
    paths = [lab / "cli.py", *sorted((lab / "bench").glob("*.py"))]
    long = [f"{path.name}:{node.name} {node.end_lineno - node.lineno + 1}" for path in paths
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80]
    assert long == []


@pytest.mark.parametrize("track, said", [
    ("clustercpu", "TRL is not in this image: track clustercpu's image runs verl's GRPO trainer, not TRL's lab"),
    ("c", "TRL is not installed in this environment, though the track's lock pins it"),
])
def test_an_environment_without_trl_fails_in_the_trainer_layer_in_one_line(track, said, tmp_path):
    """The cluster tracks' images hold verl, not TRL: `lab` there names the trainer layer and what runs in that image,
    where it crashed with a traceback. Here TRL is installed, so the process is told it is not (sys.modules)."""
    code = "import sys; sys.modules['trl'] = None\nfrom grpolab.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint"), "GRPOLAB_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-c", code, "lab", "--track", track], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 13 and f"[first_step] {said}" in out and "Traceback" not in out, out[-800:]
    assert ("invoke verl-cpu" in out) == (track == "clustercpu")
