"""One memory-benchmark case on a small shape, for real on the CPU: the record `invoke bench --memory` writes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.bench.memory_cases import ALL_CASES, CASES, GPU_CASES, case_settings

REPO = Path(__file__).resolve().parents[1]


def test_small_shape_case_reports_predicted_terms_measured_parts_and_ratio(tiny_model_env, tmp_path):
    out = tmp_path / "small.json"
    result = subprocess.run(
        [sys.executable, "-m", "grpolab", "memory-bench", "--case", "small-shape", "--out", str(out)],
        cwd=REPO, env={**tiny_model_env, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads(out.read_text())
    line = next(line for line in result.stdout.splitlines() if line.startswith("MEMORY-BENCH "))
    assert json.loads(line.removeprefix("MEMORY-BENCH ")) == record
    assert record["device"] == "cpu" and record["dtype"] == "float32" and record["steps_run"] == 2
    names = [t["name"] for t in record["predicted"]["terms"]]
    assert names == ["Policy weights, FP32", "Adapter, gradients and Adam states", "Rollout key-value cache, 4 sequences", "Logits and activations for the update",
                     "Allocator's retained heap (glibc, CPU)"]  # on a CPU: the resident set counts freed heap glibc keeps
    measured = record["measured"]
    assert measured["runtime_baseline_gb"] > 0.1  # torch, transformers, PEFT and TRL were imported first
    assert measured["peak_memory_gb_measured"] > 0
    assert {"runtime_baseline_gb", "peak_gb"} <= set(measured["peak_memory_parts"])
    assert record["ratio_predicted_over_measured"] == pytest.approx(record["predicted"]["modelled_gb"] / measured["peak_memory_gb_measured"], rel=0.02)


def test_cases_are_the_issues():
    assert set(CASES) >= {"tiny-track-c", "qwen3-0.6b-shape", "qwen3-1.7b-shape"}
    for name in GPU_CASES:
        settings = case_settings(ALL_CASES[name])
        assert settings.dtype == "bfloat16" and settings.rollout == "inprocess"
    assert case_settings(CASES["qwen3-0.6b-shape"]).dtype == "float32"


@pytest.mark.parametrize("script", ["memory_check.sh", "versus_trl_check.sh", "colocate_check.sh"])
def test_gpu_checks_refuse_clearly_without_a_gpu(tmp_path, script):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the script would run its cases")
    result = subprocess.run(["bash", f"images/gpu/{script}"], cwd=REPO, env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OUT": str(tmp_path)},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "FAIL  no CUDA GPU visible to torch" in result.stdout and "--dry-run" in result.stdout


def test_versus_trl_dry_run_prices_each_observer_on_the_cpu(tmp_path):
    """The GPU check's dry run: plain TRL (grpolab.bench.plain_trl), with the meter, with its polling off, and with the
    lab's recorder and checks, for real on the tiny model; every variant reports seconds per step on one basis."""
    pytest.importorskip("trl")
    result = subprocess.run(["bash", "images/gpu/versus_trl_check.sh", "--dry-run"], cwd=REPO,
                            env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OUT": str(tmp_path), "HOME": str(Path.home())},
                            capture_output=True, text=True, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [run["variant"] for run in runs] == ["plain", "meter", "unsampled", "checks"]
    for run in runs:
        assert run["result"]["steps"] == 10 and run["result"]["seconds_per_step"] > 0
        assert run["result"]["train_runtime_s"] == pytest.approx(10 * run["result"]["seconds_per_step"], rel=0.01)
    assert "peak_memory_gb_measured" in runs[1]["result"] and "peak_memory_gb_measured" not in runs[0]["result"]
    split = runs[3]["result"]["recorder"]["time_split_s_per_step"]
    assert split["generation"] > 0 and split["update"] > 0  # the lab's recorder split the step
    assert "cost of the polling thread" in result.stdout and "PASS  dry run" in result.stdout
