"""Quiet runs: a smoke test and a lab on track c print no FutureWarning or DeprecationWarning.

Python's default filters apply (as a user's run has them), and stderr is read whole: a library that warns at
import counts too. What our code passed under a deprecated name is fixed where it is passed; the one library
warning about another library is filtered exactly, with why and when to remove it (grpolab/training.py)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPRECATIONS = ("FutureWarning", "DeprecationWarning", "PendingDeprecationWarning")


def test_a_smoke_test_then_a_short_lab_warn_of_nothing_deprecated(tiny_model_env, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grpolab", "lab", "--track", "c", "--smoke", "always", "--max-steps", "2", "--logging-steps", "1",
         "--heldout-size", "10", "--train-size", "32", "--per-device-train-batch-size", "8"],
        cwd=REPO, env={**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path)}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "smoke test passed" in proc.stdout and "pass@1" in proc.stdout  # both ran
    warned = [line for line in proc.stderr.splitlines() if any(kind in line for kind in DEPRECATIONS)]
    assert warned == [], "\n".join(warned)
