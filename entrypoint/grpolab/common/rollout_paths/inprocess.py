"""The in-process rollout path: the policy's own generate() in the trainer's process, with the weights being trained."""

from __future__ import annotations

from .base import TORCH_GPU_LIBRARIES, MemoryBasis, MemoryTerm

NAME = "inprocess"
ENGINE = "inprocess"
SETTINGS: tuple[str, ...] = ()
SETTINGS_WARNINGS = ()
DOCTOR_ITEMS: tuple[str, ...] = ()
LOCK_EXTRA = None
GPU_LIBRARIES = TORCH_GPU_LIBRARIES
LAG_BASIS = "by construction: the policy's own generate() samples with the weights being trained"
SMOKE_KEEPS_LAB_MODEL = False
VERL_REFUSAL = None  # the export maps every path verl can run to its vLLM colocate
# transformers 5.17.0's generate() makes its DynamicCache for each call (no cache_implementation: TRL 1.16.0's
# default) and TRL keeps only the token ids: the cache is freed when generate() returns.
GPU_MEMORY_FREED_BEFORE_UPDATE = True


def memory_terms(basis: MemoryBasis) -> list[MemoryTerm]:
    return [(f"Rollout key-value cache, {basis.completions} sequences", basis.kv_cache_gb, basis.kv_cache_note)]


def disk_writes(settings, model) -> dict[str, int]:
    return {}
