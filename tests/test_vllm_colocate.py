"""vLLM colocate on a CPU, through the lab's own code: the engine's key-value space, context and threads chosen
from the run, the refusals before the engine starts, and lag 0 verified after the weight syncs.

The pure parts run everywhere. The real engine runs where vLLM's CPU build is installed (track cv's venv or
image): one smoke test per module (an engine start takes one to two minutes here) whose run-log line several
tests read. Nothing of vLLM or TRL is replaced.
"""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from grpolab.common.errors import LayerFailure
from grpolab.memory.estimate import estimate_memory
from grpolab.model.shape import QWEN3_MODELS
from grpolab.rollouts import choose_rollout
from grpolab.rollouts.vllm import vllm_build, vllm_distribution
from grpolab.rollouts.vllm_cpu import check_fits_in_ram
from grpolab.memory.vllm_cpu import GIB, engine_context_tokens, kv_space_gib
from grpolab.rollouts.vllm_sync import LOGPROB_TOLERANCE, SyncCheck, VllmSyncLedger, verdict
from grpolab.common.runlog import read_runs
from grpolab.settings.lab_settings import LabSettings
from grpolab.common.tracks import get_track

REPO = Path(__file__).resolve().parents[1]
HAVE_VLLM_CPU = vllm_build(*vllm_distribution()) == "cpu"
needs_vllm_cpu = pytest.mark.skipif(
    not HAVE_VLLM_CPU, reason="vLLM's CPU build is not installed here (track cv's venv or image has it)"
)


# --- sizes and refusals, before any engine starts --------------------------------------------------------------


def test_the_kv_space_is_the_rollout_term_in_whole_blocks_with_headroom_rounded_up_to_gib():
    qwen3_06b_fp32 = 2 * 28 * 8 * 128 * 4  # bytes per token: K and V, 28 layers, 8 kv heads of 128, float32
    gib, term_gb, how = kv_space_gib(qwen3_06b_fp32, sequences=64, context_tokens=272)
    assert term_gb == pytest.approx(64 * 272 * qwen3_06b_fp32 / 1e9)
    assert gib == 11  # 64 sequences x 3 blocks of 128 tokens x 229,376 B = 5.64 GB, x 2 headroom = 10.5 GiB, rounded up
    assert "rounded up to whole GiB" in how


def test_a_model_longer_than_its_context_is_refused_naming_the_limit_and_the_flag():
    settings = LabSettings(max_completion_length=16, max_prompt_length=256)
    with pytest.raises(LayerFailure) as refused:
        engine_context_tokens(250, settings, model_context=256)
    message = str(refused.value)
    assert refused.value.layer == "rollout"
    assert "max_position_embeddings 256" in message and "266 tokens" in message
    assert "--max-completion-length to 6" in message
    # Within the context, the engine's context is the settings' bound, capped by the model's.
    assert engine_context_tokens(30, settings, model_context=256) == 256
    assert engine_context_tokens(30, settings, model_context=1024) == 272


def test_a_kv_cache_larger_than_free_ram_is_refused_with_the_numbers():
    with pytest.raises(LayerFailure) as refused:
        check_fits_in_ram(64, 0.5, available_gb=20.0, source="set in the environment")
    message = str(refused.value)
    assert refused.value.layer == "rollout" and refused.value.exit_status == 14
    assert "VLLM_CPU_KVCACHE_SPACE=64 GiB (68.7 GB, set in the environment)" in message
    assert "69.2 GB, and MemAvailable is 20.0 GB" in message and "unset VLLM_CPU_KVCACHE_SPACE" in message


@pytest.mark.parametrize("build, said", [(None, "vLLM is not installed"), ("gpu", "is a GPU build")])
def test_vllm_on_a_cpu_without_its_cpu_build_is_refused_with_the_reason(build, said):
    settings = LabSettings(rollout="vllm-colocate")
    with pytest.raises(LayerFailure) as refused:
        choose_rollout(
            settings,
            get_track("c"),
            device_type="cpu",
            platform="linux",
            vllm_version="0.31.0" if build else None,
            vllm_build=build,
        )
    assert refused.value.layer == "rollout"
    assert "needs a CUDA or ROCm GPU and this run is on cpu" in str(refused.value) and said in str(refused.value)


def test_the_estimate_on_cpu_counts_vllms_copy_of_the_weights_its_kv_space_and_its_runtime():
    shape = {**QWEN3_MODELS["Qwen/Qwen3-0.6B"], "_name_or_path": "qwen3-0.6b-shape"}
    settings = LabSettings(
        track="cv",
        rollout="vllm-colocate",
        dtype="float32",
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=16,
    )
    estimate = estimate_memory(shape, settings, device_total_gb=24.0, device_type="cpu", prompt_tokens=30)
    names = [name for name, _, _ in estimate.terms]
    assert "vLLM's copies of the weights, FP32" in names and "vLLM engine runtime" in names
    assert estimate.term("vLLM's copies") == pytest.approx(2 * estimate.terms[0][1])  # loaded, then repacked (measured)
    assert estimate.term("vLLM key-value space") == pytest.approx(1 * GIB / 1e9)  # 4 x 272 tokens fits in 1 GiB
    assert not any(name.startswith("vLLM allocation at") for name in names)  # no fraction of "device memory" on a CPU
    inprocess = estimate_memory(
        shape, replace(settings, rollout="inprocess"), device_total_gb=24.0, device_type="cpu", prompt_tokens=30
    )
    assert estimate.modelled_gb > inprocess.modelled_gb + estimate.terms[0][1]


def test_a_sync_that_did_not_reach_vllm_fails_the_rollout_layer_with_what_to_do():
    # A probe that matched, then one where vLLM still answered with the previous policy's numbers.
    matched, first, diff = verdict([5, 9, 2], [-0.1, -0.5, -0.02], [5, 9, 2], [-0.1000004, -0.5000002, -0.02])
    assert matched and first is None and diff < LOGPROB_TOLERANCE
    stale, first, diff = verdict([5, 9, 2], [-0.1, -0.5, -0.02], [5, 7, 2], [-0.2, -0.9, -0.03])
    assert not stale and first == 1 and diff == pytest.approx(0.4)
    # A different greedy choice where the trainer rates vLLM's token as high as its own (a tie) is no mismatch.
    tie, first, _ = verdict([5, 9], [-0.1, -0.69315], [5, 7], [-0.1, -0.69315], trainer_max_logprobs=[-0.1, -0.69314])
    assert tie and first is None
    ledger = VllmSyncLedger([1, 2, 3], max_steps=10)
    ledger.checks = [SyncCheck(0, True, 3, None, 1e-7, None, 0.05), SyncCheck(1, False, 3, 1, 0.4, 0.4, 0.05)]
    summary = ledger.summary()
    assert summary["sync_checks"] == 2 and summary["sync_failures"] == 1
    with pytest.raises(LayerFailure) as refused:
        ledger.check_verdict()
    message = str(refused.value)
    assert refused.value.layer == "rollout"
    assert (
        "1 of 2 checked weight syncs did not reach vLLM" in message and "step 1" in message and "what to do:" in message
    )


class FakeTrainer:
    """Only what the ledger reads of a trainer: its model's parameter dtype (a real torch tensor)."""

    def __init__(self, dtype):
        import torch

        self.model = torch.nn.Linear(2, 2).to(dtype)


def test_the_smoke_test_probes_every_sync_and_a_lab_the_first_then_trls_check_of_the_sampled_tokens():
    import torch

    smoke, lab = VllmSyncLedger([1], max_steps=10, probe_every_sync=True), VllmSyncLedger([1], max_steps=120)
    assert [v for v in range(10) if smoke.should_check(v)] == list(range(10))
    lab.record(0, 0)
    lab.after_scoring(FakeTrainer(torch.float32), {"sampling/sampling_logp_difference/max": [2.4e-5]})
    assert [v for v in range(120) if lab.should_check(v)] == [0]
    assert lab.summary()["sync_checks"] == 1 and not lab.failures
    # A sync that did not reach the engine: TRL scores vLLM's tokens far apart from the trainer's policy.
    lab.record(1, 1)
    lab.after_scoring(FakeTrainer(torch.float32), {"sampling/sampling_logp_difference/max": [2.4e-5, 0.38]})
    assert [c.policy_version for c in lab.failures] == [1]
    with pytest.raises(LayerFailure) as refused:
        lab.check_verdict()
    assert (
        "1 of 2 checked weight syncs did not reach vLLM: after the sync of step 1, TRL's importance-sampling pass"
        in str(refused.value)
    )


def test_the_ledger_follows_trls_weight_sync_client_for_the_policy_version_and_probes_after_a_sync_only(monkeypatch):
    import torch
    from types import SimpleNamespace

    engine_syncs = []
    trainer = FakeTrainer(torch.float32)
    trainer.state = SimpleNamespace(global_step=0)
    trainer.vllm_generation = SimpleNamespace(sync_weights=lambda: engine_syncs.append(trainer.state.global_step))
    ledger = VllmSyncLedger([1], max_steps=10, probe_every_sync=True)
    monkeypatch.setattr(ledger, "check", lambda _trainer, version: SyncCheck(version, True, 1, None, 0.0, None, 0.0))
    ledger.follow_weight_syncs(trainer)
    for step, syncs in ((0, True), (1, True), (1, False)):  # the third: a generation that reused step 1's weights
        trainer.state.global_step = step
        if syncs:  # as TRL does before generating, when the step changed
            trainer.vllm_generation.sync_weights()
        ledger.after_generation(trainer, generation_seconds=0.1)
        ledger.after_scoring(trainer, {"sampling/sampling_logp_difference/max": [2.4e-5]})
        ledger.after_scoring(trainer, {"sampling/sampling_logp_difference/max": [2.4e-5]})  # a step with no generation
    assert engine_syncs == [0, 1]  # the client wrapped, still called
    assert [b.policy_version for b in ledger.batches] == [0, 1, 1]
    assert [c.policy_version for c in ledger.checks] == [0, 1]  # probed after each sync, not after the reuse
    assert [c.policy_version for c in ledger.sampled_checks] == [0, 1, 1]  # one per generation, none per idle step


@pytest.mark.parametrize(
    "dtype, metrics", [("bfloat16", {"sampling/sampling_logp_difference/max": [0.03]}), ("float32", {})]
)
def test_where_trls_comparison_is_not_tight_or_not_logged_a_lab_probes_every_tenth_sync_and_the_last(dtype, metrics):
    import torch

    lab = VllmSyncLedger([1], max_steps=120)
    lab.record(0, 0)
    lab.after_scoring(FakeTrainer(getattr(torch, dtype)), metrics)
    assert [v for v in range(120) if lab.should_check(v)] == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 119]
    assert lab.sampled_checks == []  # half precision's differences are not judged against float32's tolerance


# --- the real engine ------------------------------------------------------------------------------------------------


def grpolab(
    args: list[str], runs: Path, extra_env: dict | None = None, timeout_s: float = 900
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint"), "GRPOLAB_RUNS_DIR": str(runs), **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-m", "grpolab", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.fixture(scope="module")
def colocate_smoke(tmp_path_factory, tiny_model_path):
    """One smoke test on track cv's default path, vLLM colocate, with the real engine: its output and run-log line."""
    runs = tmp_path_factory.mktemp("runs")
    proc = grpolab(["smoke", "--track", "cv", "--rollout", "vllm-colocate"], runs)
    return proc, read_runs(runs / "runlog.jsonl")


@needs_vllm_cpu
def test_the_colocate_smoke_test_passes_every_layer_naming_vllm_on_cpu(colocate_smoke):
    proc, _ = colocate_smoke
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for layer in ("device", "adapter", "rewards", "first step", "rollout"):
        assert f"  ok  {layer:<11}" in proc.stdout
    rollout_line = next(line for line in proc.stdout.splitlines() if line.startswith("  ok  rollout"))
    assert "vLLM colocate on CPU, vLLM 0.31.0 (cpu build)" in rollout_line
    assert "inside TRL's declared range >=0.22.0,<=0.31.0" in rollout_line
    assert "VLLM_CPU_KVCACHE_SPACE=1 GiB" in rollout_line and "VLLM_CPU_OMP_THREADS_BIND=nobind" in rollout_line


@needs_vllm_cpu
def test_the_run_log_records_the_engine_and_the_policy_version_vllm_sampled_with_each_step(colocate_smoke):
    _, lines = colocate_smoke
    rollout = lines[-1]["rollout"]
    assert lines[-1]["status"] == "passed"
    assert rollout["path"] == "vllm-colocate" and rollout["vllm_version"] == "0.31.0" and rollout["vllm_build"] == "cpu"
    assert rollout["policy_versions"] == list(range(10))  # step s sampled with the weights after s - 1 updates
    assert rollout["max_lag_steps"] == 0 and rollout["stale"] is False and rollout["lag_measured"] is True
    assert rollout["vllm_cpu_kvcache_space_gib"] == 1 and rollout["engine_dtype"] == "float32"


@needs_vllm_cpu
def test_every_weight_sync_of_the_smoke_test_is_verified_against_the_trainers_policy(colocate_smoke):
    _, lines = colocate_smoke
    rollout = lines[-1]["rollout"]
    assert rollout["sync_checks"] == 10 and rollout["sync_failures"] == 0 and rollout["sync_probes"] == 10
    # vLLM's CPU build samples in float32: `auto` turned TRL's importance-sampling correction off, so no step paid its
    # pass.
    assert (
        rollout["importance_sampling_correction"] is False
        and "off (auto)" in rollout["importance_sampling_correction_reason"]
    )
    split = lines[-1]["time_split_s_per_step"]
    assert rollout["sync_sampled_tokens_log"] == [] and "weight_sync" in split and "old_logprobs" not in split
    # vLLM and the trainer agree far inside the tolerance, and one step's learning moves the probe far outside
    # it: a sync that silently did nothing would have been caught.
    assert rollout["sync_max_logprob_diff"] < LOGPROB_TOLERANCE / 10
    assert rollout["sync_min_stale_diff"] > LOGPROB_TOLERANCE


@needs_vllm_cpu
def test_a_kv_cache_larger_than_free_ram_is_refused_before_the_engine_starts(tmp_path, tiny_model_path):
    proc = grpolab(
        ["smoke", "--track", "cv", "--rollout", "vllm-colocate"],
        tmp_path / "runs",
        {"VLLM_CPU_KVCACHE_SPACE": "100000"},
        timeout_s=300,
    )
    assert proc.returncode == 14, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (
        "[rollout] vLLM's key-value cache does not fit in free RAM: VLLM_CPU_KVCACHE_SPACE=100000 GiB"
        in proc.stdout + proc.stderr
    )
    assert "Loading safetensors checkpoint" not in proc.stderr  # the engine never started
    ended = read_runs(tmp_path / "runs" / "runlog.jsonl")
    assert len(ended) == 1 and ended[-1]["status"] == "failed" and ended[-1]["failed_layer"] == "rollout"


# The fault: TRL believes it synced (it calls its weight-sync client, which the sync ledger follows from outside
# time_weight_syncs) while the engine keeps its first weights.
SYNC_THAT_DOES_NOTHING = """
import sys
import grpolab.run.training as training
training.time_weight_syncs = lambda trainer: setattr(trainer.vllm_generation, "sync_weights", lambda: None)
from grpolab.cli import main
sys.exit(main(sys.argv[1:]))
"""


@needs_vllm_cpu
@pytest.mark.parametrize("correction", ["on", "auto"])
def test_a_lab_whose_weight_syncs_do_nothing_fails_the_rollout_layer(tmp_path, tiny_model_path, correction):
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint"), "GRPOLAB_RUNS_DIR": str(tmp_path / "runs")}
    argv = [
        sys.executable,
        "-c",
        SYNC_THAT_DOES_NOTHING,
        "lab",
        "--track",
        "cv",
        "--rollout",
        "vllm-colocate",
        "--smoke",
        "never",
        "--max-steps",
        "3",
        "--vllm-importance-sampling-correction",
        correction,
    ]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 14, proc.stdout[-3000:] + proc.stderr[-3000:]
    rollout = read_runs(tmp_path / "runs" / "runlog.jsonl")[-1]["rollout"]
    # The first sync is probed and passes: the engine loaded the trainer's first weights.
    assert rollout["sync_check_log"][0]["policy_version"] == 0 and rollout["sync_check_log"][0]["matched"]
    if correction == "on":  # TRL's pass checked every sync; the stale ones stand thousands of times the tolerance apart
        assert (
            "2 of 3 checked weight syncs did not reach vLLM: after the sync of step 1, TRL's importance-sampling pass"
            in proc.stdout + proc.stderr
        )
        assert rollout["sync_probes"] == 1 and rollout["importance_sampling_correction"] is True
        log = rollout["sync_sampled_tokens_log"]
        assert [c["matched"] for c in log] == [True, False, False]
        assert (
            log[0]["max_logprob_diff"] < LOGPROB_TOLERANCE
            and min(c["max_logprob_diff"] for c in log[1:]) > 100 * LOGPROB_TOLERANCE
        )
    else:  # auto on the CPU: the correction off, so the probe at the last sync catches it
        assert (
            "1 of 2 checked weight syncs did not reach vLLM: after the sync of step 2, vLLM's greedy probe"
            in proc.stdout + proc.stderr
        )
        assert (
            rollout["sync_probes"] == 2
            and rollout["importance_sampling_correction"] is False
            and rollout["sync_sampled_tokens_log"] == []
        )
