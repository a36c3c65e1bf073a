"""Quiet runs: a smoke test and a lab on track c print no FutureWarning or DeprecationWarning.

Python's default filters apply (as a user's run has them), with one filter added: DeprecationWarning and
PendingDeprecationWarning attributed to our own package (module grpolab or grpolab.*) are always shown. Python's
defaults show those two only for __main__, so without it a deprecated call in our code (the warning points at
its caller) would pass unseen; library-internal deprecations stay hidden as they are for users, while
FutureWarning, shown by default from anywhere, counts from any library. stderr is read whole: a library that
warns at import counts too. What our code passed under a deprecated name is fixed where it is passed; the one
library warning about another library is filtered exactly, with why and when to remove it (grpolab/run/training.py)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPRECATIONS = ("FutureWarning", "DeprecationWarning", "PendingDeprecationWarning")
# `python -m grpolab`, with our package's deprecations always shown (a regex on the module the warning points at;
# -W cannot say it: its module field is matched literally, so -W default::DeprecationWarning:grpolab would miss
# grpolab.run.training).
ENTRY = (
    "import runpy, warnings\n"
    "for category in (DeprecationWarning, PendingDeprecationWarning):\n"
    "    warnings.filterwarnings('always', category=category, module=r'grpolab(\\.|$)')\n"
    "runpy.run_module('grpolab', run_name='__main__', alter_sys=True)\n"
)


def test_a_smoke_test_then_a_short_lab_warn_of_nothing_deprecated(tiny_model_env, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, "lab", "--track", "c", "--smoke", "always", "--max-steps", "2", "--logging-steps", "1",
         "--heldout-size", "10", "--train-size", "32", "--per-device-train-batch-size", "8"],
        cwd=REPO, env={**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path)}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "smoke test passed" in proc.stdout and "pass@1" in proc.stdout  # both ran
    warned = [line for line in proc.stderr.splitlines() if any(kind in line for kind in DEPRECATIONS)]
    assert warned == [], "\n".join(warned)
