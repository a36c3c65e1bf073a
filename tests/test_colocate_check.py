"""The GPU script comparing vLLM colocate with in-process generation (images/gpu/colocate_check.sh), run here as
its dry run: the lab for real on the tiny model, on the CPU, with and without the rank variables a single-GPU
colocate user sets, and with find_unused_parameters left to transformers. Its refusal without a GPU is tested
beside the other GPU scripts' (tests/test_membench.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_colocate_check_dry_run_splits_each_step_and_names_the_wrapper_at_world_size_1(tmp_path):
    pytest.importorskip("trl")
    have_vllm = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, timeout=600).returncode == 0
    result = subprocess.run(
        ["bash", "images/gpu/colocate_check.sh", "--dry-run"],
        cwd=REPO,
        env={
            "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
            "OUT": str(tmp_path),
            "HOME": str(Path.home()),
        },
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    runs = {run["variant"]: run for run in map(json.loads, (tmp_path / "runs.jsonl").read_text().splitlines())}
    if not have_vllm:  # the device machine's case: it says so, and runs what it can
        assert "NOTE  vLLM is not installed here" in result.stdout
        assert list(runs) == ["inprocess", "inprocess-ranks", "inprocess-ranks-auto"]
    # On a CPU, LOCAL_RANK set before the run makes accelerate wrap the model in DDP at world size 1; the lab's
    # GRPOConfig then turns find_unused_parameters off, and transformers' own default (checkpointing off) is on.
    assert runs["inprocess"]["wrapper"] == "none"
    assert runs["inprocess-ranks"]["wrapper"] == "DistributedDataParallel (find_unused_parameters=False)"
    assert runs["inprocess-ranks-auto"]["wrapper"] == "DistributedDataParallel (find_unused_parameters=True)"
    for name, run in runs.items():
        assert run["seconds_per_step"] > 0 and run["split"]["generation"] > 0 and run["split"]["update"] > 0
        if name.startswith("inprocess"):
            assert run["split"]["weight_sync"] == run["split"]["old_logprobs"] == 0  # in-process has neither
    assert "PASS  inprocess-ranks on cpu" in result.stdout and "FAIL" not in result.stdout
