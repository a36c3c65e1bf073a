"""Shared test set-up: the package under entrypoint/ is imported from the working tree, with its committed
tiny model (entrypoint/tiny-model/), and a cache of the tests' own (.cache/tests, ignored by git)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "entrypoint"))
sys.path.insert(0, str(REPO / "tests"))  # rewards_for_tests, imported by name like a user's own rewards

TEST_CACHE = REPO / ".cache" / "tests"


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


def lab_in_training(env: dict, runs: Path, steps: int = 500, timeout_s: float = 240):
    """A `grpolab lab` subprocess on track c, returned once its first training step is printed (for tests that
    interrupt or kill a run mid-training), with the output read so far."""
    process = subprocess.Popen(
        [sys.executable, "-m", "grpolab", "lab", "--track", "c", "--smoke", "never", "--max-steps", str(steps)],
        cwd=REPO, env={**env, "GRPOLAB_RUNS_DIR": str(runs)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output, deadline = "", time.time() + timeout_s
    while time.time() < deadline and process.poll() is None:
        line = process.stdout.readline()
        output += line
        if "step " in line and f"/{steps}" in line:  # training is under way
            break
    return process, output
