"""tasks.py: the table of contents works from a shell, passes options through, and bad input gets a clear
error (exit status 2, no traceback)."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import REPO

from hostlab.run import lab as labrun  # noqa: E402

TASKS = ["base", "bench", "build", "doctor", "estimate", "export", "kernels", "lab", "lock", "report", "serve", "smoke", "test", "tiny-model", "up", "venv"]


def invoke(*args, env=None):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=600)


def test_every_task_is_listed():
    proc = invoke("--list")
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[0] for line in proc.stdout.splitlines()[1:] if line.startswith("  ") and line.split()}
    assert set(TASKS) <= listed


def test_lock_check_passes_offline_and_fast():
    proc = invoke("lock", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "c: ok" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["build", "--track", "q"], "unknown track 'q'"),
        pytest.param(["build", "--track", "x"], "lockfiles/x.README", marks=pytest.mark.docker),  # the engine is asked first
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
