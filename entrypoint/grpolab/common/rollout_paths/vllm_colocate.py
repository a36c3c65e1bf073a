"""The vLLM colocate rollout path: a vLLM engine in the trainer's process, on its device (a share of GPU memory, or
vLLM's CPU build on a CPU), given the policy's weights by TRL before every generation."""

from __future__ import annotations

from .base import TORCH_GPU_LIBRARIES, VLLM_GPU_LIBRARIES, MemoryBasis, MemoryTerm

NAME = "vllm-colocate"
ENGINE = "vllm_colocate"
SETTINGS = ("vllm_gpu_memory_utilization", "vllm_importance_sampling_correction")
SETTINGS_WARNINGS = ()
DOCTOR_ITEMS = ("vllm",)
LOCK_EXTRA = None  # vLLM comes with the track's TRL (trl[vllm] in its lock inputs)
GPU_LIBRARIES = TORCH_GPU_LIBRARIES + VLLM_GPU_LIBRARIES
LAG_BASIS = "by TRL's design, not measured: TRL syncs the policy's weights into vLLM before every generation"
SMOKE_KEEPS_LAB_MODEL = False
VERL_REFUSAL = None
# TRL 1.16.0 sleeps the engine (level 2: weights and key-value cache discarded) only with GRPOConfig's
# vllm_enable_sleep_mode, False by default and not set by the lab (grpolab.rollouts.vllm colocate_choice):
# vLLM's share is held through the update.
GPU_MEMORY_FREED_BEFORE_UPDATE = False


def memory_terms(basis: MemoryBasis) -> list[MemoryTerm]:
    if basis.device == "cpu":  # the engine's copies of the weights, its KV space (whole GiB), its runtime
        return basis.vllm_cpu_engine_terms()
    u = basis.settings.vllm_gpu_memory_utilization
    total = basis.device_total_gb
    return [(f"vLLM allocation at a {u:g} memory fraction", u * total,
             f"vllm_gpu_memory_utilization {u:g} x {total:g} GB, whatever the model")]


def disk_writes(settings, model) -> dict[str, int]:
    return {}
