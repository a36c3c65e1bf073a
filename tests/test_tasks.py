"""tasks.py: the table of contents works from a shell, passes options through, and bad input gets a clear
error (exit status 2, no traceback)."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Collection
from invoke.loader import FilesystemLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import REPO

from hostlab.run import lab as labrun  # noqa: E402

# Every task, by the name `invoke` runs it under: one that disappears, or appears without being listed here, fails
# test_every_task_is_listed_and_documented. A sub-collection's default task also answers to the collection's name.
TASKS = {
    "base",
    "clean",
    "source-wheels",
    "venv",
    "up",
    "serve",
    "smoke",
    "lab",
    "estimate",
    "doctor",
    "tiny-model",
    "export",
    "verl-cpu",
    "report",
    "test",
    "lock.make",
    "lock.check",
    "lock.instructions",
    "lock.prove",
    "lock.provenance",
    "lock.base",
    "lock.side",
    "lock.test-tools",
    "kernels.table",
    "kernels.readme",
    "build.image",
    "build.reproducible",
    "build.disk",
    "build.disk-predict",
    "bench.lab",
    "bench.build",
    "bench.learning",
    "bench.stale",
    "bench.memory",
    "bench.colocate",
    "bench.versus-trl",
    "bench.projection",
    "bench.cold-up", "bench.test-command",
    "bench.reproducible",
    "bench.vendor",
    "vendor.make",
    "vendor.check",
    "bench.docs",
}
DEFAULTS = {"lock": "lock.make", "kernels": "kernels.table", "build": "build.image"}
# What a first docstring line (what `invoke --list` prints) says a task costs: a time or a size, measured or not.
COST = re.compile(r"\d\s?(s|min|GB|MB|GiB)\b|\b(seconds|minutes|hours|GBs)\b")


def invoke(*args, env=None):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=600)  # no terminal: a task that would ask refuses


def task_contexts() -> tuple:
    """tasks.py's namespace as invoke itself loads it, and {task name: its parser context} as invoke parses with."""
    module, _ = FilesystemLoader(start=str(REPO)).load("tasks")
    namespace = Collection.from_module(module)
    return namespace, {context.name: context for context in namespace.to_contexts()}


def test_every_task_is_listed_and_documented():
    namespace, contexts = task_contexts()
    assert set(contexts) == TASKS, f"tasks added: {set(contexts) - TASKS}; gone: {TASKS - set(contexts)}"
    for collection, default in DEFAULTS.items():
        assert collection in contexts[default].aliases
    for name, context in contexts.items():
        doc = inspect.getdoc(namespace[name])
        assert doc and len(doc.splitlines()) <= 2, f"{name}: a docstring of one or two lines says what it does"
        assert COST.search(doc.splitlines()[0]), f"{name}: its first line (what --list prints) says what it costs"
        for flag, argument in context.flags.items():
            assert argument.help, f"invoke {name} {flag} has no help text"
    proc = invoke("--list")
    assert proc.returncode == 0, proc.stderr
    # A task's line starts two spaces in; its help wraps onto lines indented further.
    listed = {line.split()[0] for line in proc.stdout.splitlines()[1:] if re.match(r"  \S", line)}
    assert listed == TASKS


@pytest.mark.parametrize("args, message", [
    (["lock.check", "--prove"], "No idea what '--prove' is!"),  # once the check ran and --prove went unsaid
    (["build", "--check-reproducible"], "No idea what '--check-reproducible' is!"),
    (["bench.colocate", "--rounds", "3"], "--rounds needs --case"),
])
def test_two_modes_at_once_are_refused_in_one_line(args, message):
    proc = invoke(*args)
    assert proc.returncode != 0 and proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_lock_check_passes_offline_and_fast():
    proc = invoke("lock.check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "c: ok" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["build", "--track", "q"], "unknown track 'q'"),
        (["build", "--track", "x"], "lockfiles/x.README"),  # no terminal to ask on: no lock is made, before the engine
        (["build", "--track", "m"], "invoke venv --track m"),
        (["lock", "--track", "m", "--vllm", "0.30.0"], "has no vLLM"),
        (["smoke", "--track", "q"], "unknown track 'q'"),
    ],
)
def test_bad_input_is_a_sentence_not_a_traceback(args, message):
    proc = invoke(*args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_lab_command_passes_options_through(monkeypatch, tmp_path):
    monkeypatch.setattr(labrun, "VENVS", tmp_path)
    argv = labrun.lab_command("lab", "c", {"model": "tiny", "max_steps": 5, "rollout": None}, ["--seed", "1"])
    assert argv[0] == sys.executable
    assert argv[1:] == ["-m", "grpolab", "lab", "--track", "c", "--model", "tiny", "--max-steps", "5", "--seed", "1"]


def test_lab_command_uses_the_tracks_venv(monkeypatch, tmp_path):
    monkeypatch.setattr(labrun, "VENVS", tmp_path)
    python = tmp_path / "m" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert labrun.lab_command("smoke", "m", {}, [])[0] == str(python)


def test_host_runs_get_the_track_env(monkeypatch, tmp_path):
    monkeypatch.setattr(labrun, "VENVS", tmp_path)
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    env = labrun.lab_env(get_track("m"))
    assert env["GRPOLAB_TRACK"] == "m" and env["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    assert env["PYTHONPATH"].split(":")[0] == str(REPO / "entrypoint")
