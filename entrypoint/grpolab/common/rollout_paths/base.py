"""The interface every rollout path's description keeps (RolloutPath), and what the lab hands a path when it asks.

A description is data and arithmetic, no engine: standard library only, so the host tasks, the settings, the memory
estimate, the doctor and the export may all read it (grpolab.common sits below them all). The engine that samples
through a path lives in grpolab.rollouts, in the module its description names (ENGINE), behind grpolab.rollouts.base's
RolloutEngine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

# The libraries a path launches GPU kernels from (paths inside their wheels, fnmatch patterns): the lock refuses one
# with no code for the track's GPUs, the doctor names one that JITs or has none (grpolab.common.gpucode judges them).
TORCH_GPU_LIBRARIES = ("torch/lib/libtorch_cuda.so", "torch/lib/libtorch_hip.so", "nvidia/*/lib/libcublasLt.so*",
                       "nvidia/cublas/lib/libcublasLt.so*")
VLLM_GPU_LIBRARIES = ("vllm/_C*.so", "vllm/_moe_C*.so", "vllm/vllm_flash_attn/_vllm_fa2_C*.so",
                      "vllm/vllm_flash_attn/_vllm_fa3_C*.so")

MemoryTerm = tuple[str, float, str]  # one row of the memory estimate: (label, GB, how it was worked out)


@dataclass(frozen=True)
class MemoryBasis:
    """What the memory estimate (grpolab.memory.estimate) has worked out when it asks a path for its rollout terms."""

    settings: object  # the lab's settings (grpolab.settings.LabSettings)
    device: str  # where training runs: cuda, mps or cpu
    device_total_gb: float
    weights_label: str  # the weights' dtype as the lesson writes it (BF16, FP32)
    weights_gb: float  # one copy of the policy's weights
    kv_cache_gb: float  # the key-value cache of one generation batch
    kv_cache_note: str  # how kv_cache_gb was worked out
    completions: int  # the sequences one step generates
    # What vLLM's CPU engine will hold (grpolab.memory.vllm_cpu): that arithmetic needs the model's shape, a layer
    # above this one, so the estimate hands it in, and it is worked out only for the path that asks.
    vllm_cpu_engine_terms: Callable[[], list[MemoryTerm]]


@dataclass(frozen=True)
class SettingsWarning:
    """A relation between the chosen path's settings that makes one pointless: said before the run, never refused."""

    names: tuple[str, ...]  # the settings it is about, shown with their values and where they came from
    applies: Callable[[dict], bool]  # given the settings' values, each of which passed its own check
    text: str  # what follows the settings in the warning


class RolloutPath(Protocol):
    """One rollout path, as cibuildwheel keeps one module per platform: each module of this package is one, and the
    package's registry lists them. Every part is asked for by name; nothing outside this package and grpolab.rollouts
    tests a path's name."""

    NAME: str  # the value of the `rollout` setting (--rollout NAME)
    ENGINE: str  # the module of grpolab.rollouts that samples through it (a RolloutEngine)
    SETTINGS: tuple[str, ...]  # the lab's settings that belong to it: for another path they change nothing (said)
    SETTINGS_WARNINGS: tuple[SettingsWarning, ...]  # relations among its settings worth a warning
    DOCTOR_ITEMS: tuple[str, ...]  # the doctor's items it needs (by name): they fail for it, and only inform otherwise
    LOCK_EXTRA: str | None  # the pyproject.toml extra a track's lock takes for its engine (None: the lab's own)
    GPU_LIBRARIES: tuple[str, ...]  # the libraries it launches GPU kernels from
    LAG_BASIS: str  # on what basis its runs' `stale` and `max_lag_steps` are given (the run log's rollout.lag_basis)
    SMOKE_KEEPS_LAB_MODEL: bool  # the smoke test trains the lab's model, not the track's smaller smoke model
    VERL_REFUSAL: str | None  # why the verl export cannot carry it (None: verl's vLLM colocate runs it)
    # On a GPU whose peak counts live tensors (CUDA), whether its memory terms are freed before the update: then
    # they are never held with the update's activations, and the estimate takes the larger phase, not the sum
    # (grpolab.memory.cuda_terms).
    GPU_MEMORY_FREED_BEFORE_UPDATE: bool

    def memory_terms(self, basis: MemoryBasis) -> list[MemoryTerm]:
        """The memory estimate's rows for the rollout engine (the lesson's fourth term)."""

    def disk_writes(self, settings, model) -> dict[str, int]:
        """Bytes a run on this path writes under runs/ beyond what every run writes, by what writes them; `model`
        is the loaded policy (its parameters are counted, nothing else is touched)."""
