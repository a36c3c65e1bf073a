"""The memory estimate's CUDA terms: where TRL and the rollout engine hold a GPU's memory otherwise than a CPU's,
read from the code of the versions track n's lock pins (TRL 1.16.0, transformers 5.17.0, vLLM 0.31.0). Both terms are
predicted and not yet checked on a GPU: the estimate says so in its table and its JSON until CHECKED_ON_GPU names
the run that checked them.

1. One log-probability tile. TRL's fused LM head (trl/trainer/utils.py add_fused_lm_head, TRL 1.16.0) projects the
   final hidden states through the LM head in tiles of at most 4096 tokens x 32768 vocabulary entries
   (trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE) into one
   buffer, `mm_buf`, made in ChunkedLogProbFunction's forward and made again in its backward. Where
   `_use_triton(device)` holds (Triton importable, the device type cuda or xpu), Triton kernels fold each tile in
   place (_forward_kernel, _backward_kernel), so that buffer is the whole of it; elsewhere torch folds the tile
   (_forward_tile, _backward_tile) with float32 temporaries of its size, which the CPU's terms count as three tiles
   (estimate.LOGIT_TILE_COPIES). On Triton devices TRL also scores only the positions whose label is not -100
   (`compact` in add_fused_lm_head), the completion tokens (trl/trainer/grpo_trainer.py
   _get_per_token_logps_and_entropies sets the prompt's and the padding's labels to -100): at most completions x
   max_completion_length, where elsewhere every position of every sequence is scored.
2. Phases apart. On CUDA the peak the lab measures is torch.cuda.max_memory_allocated, live tensors only
   (grpolab.memory.peak). A rollout engine whose memory is freed before the update (its path's
   GPU_MEMORY_FREED_BEFORE_UPDATE, grpolab.common.rollout_paths) is never held together with the update's
   activations: the peak is the larger of the generation phase and the update phase, not their sum. In-process,
   transformers' generate() makes a DynamicCache for each call (transformers 5.17.0 generation/utils.py
   _prepare_cache_for_generation, when no cache_implementation is set, and TRL 1.16.0's GRPOConfig leaves it None),
   and TRL keeps only the token ids it returns (_generate_single_turn): the cache is freed when generate() returns.
   vLLM colocate is not so: TRL sleeps its engine, level 2, which discards vLLM's weights and key-value cache
   (trl/generation/vllm_generation.py after LLM() and after each generate; vLLM 0.31.0
   vllm/device_allocator/sleep_mode_backend.py CuMemBackend.suspend -> cumem.py CuMemAllocator.sleep with no tag
   offloaded), only when GRPOConfig's vllm_enable_sleep_mode is True, False by default (trl/trainer/grpo_config.py);
   the lab does not set it (grpolab.rollouts.vllm colocate_choice), so vLLM's whole gpu_memory_utilization share
   (vllm/v1/worker/utils.py request_memory: the fraction of the device's total, weights and key-value cache
   included) is held through the update, and its term adds as on the CPU.

On a CPU both stay as they were fitted: the torch fold's three tiles over every position, and every term added (the
resident set keeps freed heap; see estimate.ALLOCATOR_RETAINED_FRACTION).
"""

from __future__ import annotations

# trl/kernels/chunked_logprob.py _use_triton (TRL 1.16.0): the device types on which Triton folds the tiles.
TRITON_FOLD_DEVICES = ("cuda", "xpu")
TRITON_TILE_COPIES = 1  # the projection's buffer, folded in place: no temporaries of its size

# The device types whose measured peak counts live tensors only (grpolab.memory.peak: torch.cuda.max_memory_allocated,
# which ROCm's torch answers too); MPS's driver_allocated_memory is not known to, so its terms still add.
LIVE_PEAK_DEVICES = ("cuda",)

# The bench/ result of the GPU run that checked these terms within the estimate's 15% band, once one has
# (images/gpu/memory_check.sh); until then every estimate using them says they are unchecked.
CHECKED_ON_GPU: str | None = None
NOT_CHECKED = "predicted, not yet checked on a GPU"


def folds_in_triton(device: str) -> bool:
    """Does TRL fold the log-probability tiles in Triton on this device type (one tile, completion tokens only)?"""
    return device in TRITON_FOLD_DEVICES


def phases_apart(device: str, path) -> bool:
    """Is the rollout engine's memory freed before the update on this device type, so that the peak is the larger
    phase? `path` is the rollout path's description (grpolab.common.rollout_paths); read only on such a device."""
    return device in LIVE_PEAK_DEVICES and path.GPU_MEMORY_FREED_BEFORE_UPDATE


def status() -> str:
    """"predicted, not yet checked on a GPU", or the run that checked the terms."""
    return NOT_CHECKED if CHECKED_ON_GPU is None else f"checked on a GPU ({CHECKED_ON_GPU})"


FREED_ROW = "Freed before the update"  # the estimate's row taking the smaller phase off where the phases are apart


def split_phases(shared_gb: float, engine_terms: list, update_terms: list, device: str, apart: bool) -> dict:
    """The estimate's phase fields: each phase's GB (what both hold, the weights and the adapter, plus its own terms)
    and, where the phases are apart, the smaller phase's own GB (not held at the peak), with a sentence saying so."""
    engine_gb = sum(gb for _, gb, _ in engine_terms)
    update_gb = sum(gb for _, gb, _ in update_terms)
    phases_gb = {"generation": shared_gb + engine_gb, "update": shared_gb + update_gb}
    if not apart:
        return {"phases_gb": phases_gb, "freed_before_update_gb": 0.0, "freed_before_update_note": None}
    engine_names = ", ".join(name for name, _, _ in engine_terms)
    note = (
        f"on {device} the rollout engine's {engine_gb:.3f} GB ({engine_names}) is freed when generation ends, before "
        f"the update's {update_gb:.3f} GB: the peak is the larger phase (generation {phases_gb['generation']:.3f} GB, "
        f"update {phases_gb['update']:.3f} GB), not their sum"
    )
    return {"phases_gb": phases_gb, "freed_before_update_gb": min(engine_gb, update_gb),
            "freed_before_update_note": note}


def cuda_report(triton_fold: bool, tile_gb: float, completion_tokens: int, apart: bool) -> dict | None:
    """The estimate's record of the CUDA terms it used, with their status; None where it used neither."""
    used = []
    if triton_fold:
        used.append(f"the log-probabilities folded in Triton, one {tile_gb:.3f} GB tile buffer over the "
                    f"{completion_tokens} completion tokens")
    if apart:
        used.append("the rollout engine's memory freed before the update, so the larger phase is the peak")
    if not used:
        return None
    return {"status": status(), "checked_on_gpu": CHECKED_ON_GPU, "terms": used}
