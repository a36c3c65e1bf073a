"""The vLLM server rollout path: `vllm serve` on a card of its own (grpolab serve), the trainer streaming the policy's
weights to it over NCCL before every generation."""

from __future__ import annotations

from .base import TORCH_GPU_LIBRARIES, VLLM_GPU_LIBRARIES, MemoryBasis, MemoryTerm

NAME = "vllm-server"
ENGINE = "vllm_server"
SETTINGS = ("vllm_server_url", "vllm_importance_sampling_correction")
SETTINGS_WARNINGS = ()
DOCTOR_ITEMS = ("vllm", "vllm server")
LOCK_EXTRA = None  # vLLM comes with the track's TRL (trl[vllm] in its lock inputs)
GPU_LIBRARIES = TORCH_GPU_LIBRARIES + VLLM_GPU_LIBRARIES
LAG_BASIS = "by TRL's design, not measured: TRL streams the policy's weights to the server before every generation"
# The server holds the lab's model and the trainer streams its weights into it: a smaller model could not be
# smoke-tested against it.
SMOKE_KEEPS_LAB_MODEL = True
VERL_REFUSAL = "verl's separate rollout server is its async trainer, which never delivers a LoRA adapter (verl#7495)"
GPU_MEMORY_FREED_BEFORE_UPDATE = False  # nothing of it on this device to free: the server has a card of its own


def memory_terms(basis: MemoryBasis) -> list[MemoryTerm]:
    return [("vLLM server (on another device)", 0.0,
             "server mode runs vLLM on a second card; on one shared device count its gpu_memory_utilization too")]


def disk_writes(settings, model) -> dict[str, int]:
    return {}
