"""Shared test set-up: the package under entrypoint/ is imported from the working tree, with its committed
tiny model (entrypoint/tiny-model/), and a cache of the tests' own (.cache/tests, ignored by git)."""

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "entrypoint"))
sys.path.insert(0, str(REPO / "tests"))  # rewards_for_tests, imported by name like a user's own rewards

TEST_CACHE = REPO / ".cache" / "tests"

# The real entry point (grpolab.cli.main, as `python -m grpolab` runs it), which also says at exit which heavy
# modules the process imported (`python -c ENTRY_SAYING_WHAT_LOADED ARGS`): a refusal must come before any of them.
HEAVY = ("torch", "transformers", "datasets", "trl", "peft")
ENTRY_SAYING_WHAT_LOADED = (
    "import atexit, sys\n"
    f"atexit.register(lambda: print('imported:', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr))\n"
    "from grpolab.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The committed tiny model (entrypoint/tiny-model/), its hashes checked; the tests' cache is .cache/tests."""
    os.environ["GRPOLAB_CACHE_DIR"] = str(TEST_CACHE)
    from grpolab.model.tiny import verify_tiny_model

    return verify_tiny_model()


@pytest.fixture
def tiny_model_env(tiny_model_path) -> dict:
    """Environment for a `python -m grpolab` subprocess on track c, with the tests' own cache."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "entrypoint"), str(REPO / "tests")]),
        "GRPOLAB_CACHE_DIR": str(TEST_CACHE),
        "GRPOLAB_TRACK": "c",
    }


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    """A fresh runs/ folder for the run log of one test."""
    monkeypatch.setenv("GRPOLAB_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


def read_until(process: subprocess.Popen, seen, timeout_s: float) -> str:
    """What the child (stdout piped) has printed, once one of its lines makes `seen(line)` true or it has exited. A
    child that does neither within timeout_s is killed and the test fails with what it printed: a deadline, where a
    bare readline() would wait for ever on a child that hangs silently. Reads the pipe's file descriptor directly (a
    buffered readline could hold a line that select() no longer sees), so everything read so far is returned, and
    what the child prints later is left in the pipe for communicate()."""
    fd, read, deadline = process.stdout.fileno(), b"", time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left_s = deadline - time.monotonic()
            if left_s <= 0 or not selector.select(timeout=left_s):
                process.kill()
                process.wait(timeout=30)
                raise AssertionError(f"waited {timeout_s:.0f} s for a line that never came; the child printed:\n{read.decode(errors='replace')}")
            chunk = os.read(fd, 65536)
            read += chunk
            text = read.decode(errors="replace")
            if not chunk or any(seen(line) for line in text.splitlines(keepends=True) if line.endswith("\n")):
                return text


def sigint_as_at_a_terminal() -> None:
    """A Popen preexec_fn for children a test interrupts with SIGINT. A process started in a shell's background job
    (CI harnesses, `nohup ... &`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so
    the child would never see the Ctrl-C the test sends: give it the default disposition a terminal's process has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def lab_in_training(env: dict, runs: Path, steps: int = 500, timeout_s: float = 240):
    """A `grpolab lab` subprocess on track c, returned once its first training step is printed (for tests that
    interrupt or kill a run mid-training), with the output read so far."""
    process = subprocess.Popen(
        [sys.executable, "-m", "grpolab", "lab", "--track", "c", "--smoke", "never", "--max-steps", str(steps)],
        cwd=REPO, env={**env, "GRPOLAB_RUNS_DIR": str(runs)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=sigint_as_at_a_terminal,
    )  # fmt: skip
    return process, read_until(process, lambda line: "step " in line and f"/{steps}" in line, timeout_s)  # training under way
