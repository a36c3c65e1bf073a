"""TRL's declared vLLM range, read from installed TRL's metadata; and when it cannot be read, a verdict that says why
(here: `packaging` made unimportable in a child process, a real ImportError), never a silent "range unknown"."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.environment.trl_range import describe_range, range_unknown_because, trl_vllm_range

REPO = Path(__file__).resolve().parents[1]

WITHOUT_PACKAGING = """
import json, sys
sys.modules["packaging.requirements"] = None  # importing it now raises ImportError, as in a broken environment
from grpolab.environment.trl_range import describe_range, range_unknown_because, trl_vllm_range, vllm_in_trl_range
from grpolab.rollouts.vllm import check_vllm_version
print(json.dumps({"range": trl_vllm_range(), "inside": vllm_in_trl_range("0.31.0"), "why": range_unknown_because(),
                  "described": describe_range(), "rollout_line": check_vllm_version("0.31.0")}))
"""


def test_the_range_is_read_when_trl_is_installed():
    pytest.importorskip("trl")
    assert range_unknown_because() is None
    assert trl_vllm_range().startswith(">=") and describe_range() == trl_vllm_range()


def test_a_failed_import_is_a_named_verdict_in_every_layer_that_reads_the_range():
    pytest.importorskip("trl")
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGING],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "entrypoint")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["range"] is None and seen["inside"] is None
    trl_version = __import__("importlib.metadata").metadata.version("trl")
    assert seen["why"] == (
        "the `packaging` module could not be imported (ModuleNotFoundError: import of packaging.requirements halted; "
        f"None in sys.modules), so TRL {trl_version}'s requirements cannot be read: reinstall the track's lock"
    )
    assert seen["described"] == f"unknown ({seen['why']})"
    assert seen["rollout_line"] == f"vLLM 0.31.0, TRL's declared range unknown ({seen['why']})"
