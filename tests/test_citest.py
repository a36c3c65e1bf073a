"""`invoke test`'s two halves of pytest (hostlab.ci.testcommand): between them they select every test, and a test that
would skip in the engine-free half for want of the engine fails there instead (tests/conftest.py), so none runs in
neither."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostlab.ci.testcommand import ENGINE_FREE_TESTS, ENGINE_TESTS, NO_ENGINE_SOCKET, engine_free_env

REPO = Path(__file__).resolve().parents[1]

SOME_TESTS = '''
import pytest

def test_wants_the_engine_unmarked():
    pytest.skip("no Docker engine reachable (CI starts one)")

@pytest.mark.docker
def test_wants_the_engine_marked():
    pytest.skip("no Docker engine reachable (CI starts one)")

def test_wants_vllm():
    pytest.skip("vLLM's CPU build is not installed here (track cv's venv or image has it)")

def test_computes():
    assert 1 + 1 == 2
'''


def run_half(tmp_path: Path, marks: str, engine_free: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_some.py").write_text(SOME_TESTS)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO / "tests") + ":" + str(REPO / "entrypoint") + ":" + str(REPO),
    }
    if engine_free:
        env = engine_free_env(env)
    # Our conftest as a plugin (it is the tests' conftest by name), the project's markers as pyproject.toml declares
    # them.
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conftest",
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-m",
            marks,
            "-q",
            "-rA",
            str(tmp_path / "test_some.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_engine_free_half_fails_a_test_that_skips_for_want_of_the_engine(tmp_path):
    half = run_half(tmp_path, ENGINE_FREE_TESTS, engine_free=True)
    # The unmarked test that wants the engine fails; the skip for want of vLLM stays a skip; the marked one is not here.
    assert "1 failed, 1 passed, 1 skipped, 1 deselected" in half.stdout, half.stdout + half.stderr
    assert (
        "test_wants_the_engine_unmarked skipped (Skipped: no Docker engine reachable (CI starts one)) in the half of "
        "the tests that runs without the engine"
        in half.stdout
    )
    assert "mark it @pytest.mark.docker" in half.stdout
    # The other half, with the engine in reach, takes the marked test; run by hand (no variable set) nothing fails.
    assert "1 skipped, 3 deselected" in run_half(tmp_path, ENGINE_TESTS, engine_free=False).stdout
    assert "1 passed, 3 skipped" in run_half(tmp_path, "docker or not docker", engine_free=False).stdout


def test_the_engine_free_half_reaches_no_engine_and_its_openmp_threads_sleep_unless_told_otherwise():
    env = engine_free_env({"PATH": "/usr/bin", "DOCKER_HOST": "unix:///run/docker.sock"})
    assert env["DOCKER_HOST"] == NO_ENGINE_SOCKET and env["PATH"] == "/usr/bin"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert engine_free_env({"OMP_WAIT_POLICY": "ACTIVE"})["OMP_WAIT_POLICY"] == "ACTIVE"  # the caller's choice stands


def test_environ_set_puts_every_variable_back_as_it_was(monkeypatch):
    """CI's verl step sets GRPOLAB_RUNS_DIR, a build from nothing buildah's store: afterwards each is as before."""
    from hostlab.host.environ import environ_set

    monkeypatch.setenv("GRPOLAB_TEST_KEPT", "before")
    monkeypatch.delenv("GRPOLAB_TEST_UNSET", raising=False)
    with pytest.raises(RuntimeError), environ_set(GRPOLAB_TEST_KEPT="inside", GRPOLAB_TEST_UNSET="inside"):
        assert os.environ["GRPOLAB_TEST_KEPT"] == os.environ["GRPOLAB_TEST_UNSET"] == "inside"
        raise RuntimeError("the block failed")
    assert os.environ["GRPOLAB_TEST_KEPT"] == "before" and "GRPOLAB_TEST_UNSET" not in os.environ
