"""The llama.cpp rollout path: completions sampled through TRL's rollout_func from a GGUF copy of the policy, stale
between its refreshes (every llamacpp_refresh_every steps, or never)."""

from __future__ import annotations

from .base import TORCH_GPU_LIBRARIES, MemoryBasis, MemoryTerm, SettingsWarning

NAME = "llamacpp"
ENGINE = "llamacpp"
SETTINGS = ("llamacpp_refresh_every",)
SETTINGS_WARNINGS = (
    SettingsWarning(("llamacpp_refresh_every", "max_steps"), lambda s: s["llamacpp_refresh_every"] >= s["max_steps"],
                    "the sampler is never refreshed in this run (the same as 0: stale rollouts)"),
)
DOCTOR_ITEMS = ("llama.cpp",)
LOCK_EXTRA = "llamacpp"  # llama-cpp-python, compiled from its sdist where a track's row names this extra
GPU_LIBRARIES = TORCH_GPU_LIBRARIES
LAG_BASIS = "measured: each batch's sampler version against the trainer's step (the rollout ledger)"
SMOKE_KEEPS_LAB_MODEL = False
VERL_REFUSAL = "llama.cpp has no weight sync, so its rollouts go stale; verl has no such rollout"
GPU_MEMORY_FREED_BEFORE_UPDATE = False  # llama-server keeps its copy and its cache for the whole run


def memory_terms(basis: MemoryBasis) -> list[MemoryTerm]:
    return [("llama-server weights and key-value cache", basis.weights_gb + basis.kv_cache_gb,
             f"a {basis.weights_label} GGUF copy of the policy plus {basis.kv_cache_note}")]


def disk_writes(settings, model) -> dict[str, int]:
    """The GGUF copies while training: the old copy and the refreshed one, at their peak together."""
    model_parameters = sum(p.numel() for p in model.parameters())
    bytes_per_weight = 4 if settings.dtype == "float32" else 2  # the GGUF outtype: f32 for float32 models, else f16
    return {"GGUF copies while training": 2 * model_parameters * bytes_per_weight}
