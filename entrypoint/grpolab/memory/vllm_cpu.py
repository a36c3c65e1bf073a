"""What vLLM's CPU engine will hold, worked out before it starts: its context (max_model_len), its key-value space
(VLLM_CPU_KVCACHE_SPACE, whole GiB) and its copies of the weights, from the model's shape and the run's settings.
The memory estimate counts these terms; vLLM colocate on a CPU (rollouts/vllm_cpu.py) and `grpolab serve` set them."""

from __future__ import annotations

import math
import os

from ..common.errors import LayerFailure
from ..model.shape import DTYPE_BYTES, model_context_tokens, model_shape, weights_dtype

GIB = 2**30
GB = 1e9
# The KV space is the estimate's rollout key-value term times this, rounded up to whole GiB: vLLM's CPU blocks
# hold 128 tokens each (vllm/platforms/cpu.py), so every sequence is rounded up to whole blocks.
KV_SPACE_HEADROOM = 2.0
CPU_BLOCK_TOKENS = 128
# What the engine holds beyond its weights and key-value space (its buffers sized by max_num_batched_tokens and
# max_num_seqs, the scheduler, oneDNN's workspaces): what the tiny model's colocate lab measured above its other
# terms. It was 0.35 GB, measured before the estimate had transformers 5.17's term (estimate.STACK_EXTRA_ON_CPU,
# freed heap that stack keeps resident, fitted on in-process labs), so on colocate, which runs only on that stack,
# the two counted the same memory twice: the default colocate lab in the grpolab:cv image measured 1.490-1.496 GB
# in 5 runs against 1.770 predicted (bench/projection-cv-vllm-colocate-image-cold.json). Refitted on those runs:
# 1.493 less the other terms' 1.420. The runs not fitted on, in docs/rollout-paths.md, are within 15 % with it.
ENGINE_RUNTIME_GB = 0.075
# The engine's resident copies of the weights at the run's peak. Measured on a Qwen3-0.6B-shaped folder (2.4 GB
# in float32): building the engine added 1.6 copies (the checkpoint-format load, then the packed oneDNN copies),
# the first weight sync through the layerwise reload 1.1 more (each layer materialised and packed again; the old
# copies' memory stays with the allocator). In the lab, the trainer's own load shares part of it: the peak there
# was 2.2 copies above the other terms. 2 is what the estimate counts.
ENGINE_WEIGHT_COPIES = 2


def engine_context_tokens(prompt_tokens: int, settings, model_context: int | None) -> int:
    """The engine's max_model_len: max_prompt_length + max_completion_length (prompts are not truncated, so the
    bound leaves room for a prompt longer than the ones sampled), within the model's context; refused when the
    run's longest prompt plus its completions do not fit the model's context."""
    completion = settings.max_completion_length
    needed = prompt_tokens + completion
    if model_context is not None and needed > model_context:
        raise LayerFailure(
            "rollout",
            f"the run needs {needed} tokens per sequence (the longest prompt, {prompt_tokens} tokens, + "
            "max_completion_length "
            f"{completion}), more than the model's context (max_position_embeddings {model_context}): vLLM refuses to "
            "start",
            f"lower --max-completion-length to {max(1, model_context - prompt_tokens)} or less (or use shorter "
            "prompts), or a model with a longer context",
        )
    bound = max(needed, settings.max_prompt_length + completion)
    return min(bound, model_context) if model_context is not None else bound


def kv_space_gib(kv_bytes_per_token: int, sequences: int, context_tokens: int) -> tuple[int, float, str]:
    """(VLLM_CPU_KVCACHE_SPACE in whole GiB, the rollout key-value term in GB, how it was computed)."""
    blocks_per_sequence = math.ceil(context_tokens / CPU_BLOCK_TOKENS)
    term_bytes = sequences * context_tokens * kv_bytes_per_token
    in_blocks = sequences * blocks_per_sequence * CPU_BLOCK_TOKENS * kv_bytes_per_token
    gib = max(1, math.ceil(KV_SPACE_HEADROOM * in_blocks / GIB))
    how = (
        f"{sequences} sequences x {context_tokens} tokens x {kv_bytes_per_token / 1024:g} KiB = {term_bytes / GB:.4f} "
        "GB; in "
        f"{CPU_BLOCK_TOKENS}-token blocks {in_blocks / GB:.4f} GB, x {KV_SPACE_HEADROOM:g} headroom, rounded up to "
        "whole GiB (vLLM reads an integer)"
    )
    return gib, term_bytes / GB, how


def engine_plan(model, settings, prompt_tokens: int | None, environ=os.environ) -> dict:
    """What the engine will hold, for the choice and for the memory estimate alike: its dtype and copy of the
    weights, its context, and its key-value space (the user's VLLM_CPU_KVCACHE_SPACE wins over the estimate's)."""
    shape = model_shape(model)
    dtype = weights_dtype(settings.dtype, settings.track)
    dbytes = DTYPE_BYTES[dtype]
    prompt = settings.max_prompt_length if prompt_tokens is None else prompt_tokens
    context = engine_context_tokens(prompt, settings, model_context_tokens(model))
    kv_gib, kv_term_gb, how = kv_space_gib(
        shape.kv_bytes_per_token(dbytes), settings.per_device_train_batch_size, context
    )
    user_kv = environ.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
    source = f"from the estimate: {how}"
    if user_kv:
        try:
            kv_gib, source = int(user_kv), "set in the environment"
        except ValueError as error:
            raise LayerFailure(
                "rollout",
                f"VLLM_CPU_KVCACHE_SPACE={user_kv!r} is not a whole number of GiB (vLLM reads it as an int)",
                "set it to a whole number, or unset it",
            ) from error
    return {"dtype": dtype, "weights_gb": shape.num_parameters * dbytes / GB, "context": context, "kv_gib": kv_gib,
            "kv_term_gb": kv_term_gb, "kv_source": source, "num_parameters": shape.num_parameters}


def estimate_terms(model, settings, prompt_tokens: int | None) -> list[tuple[str, float, str]]:
    """The memory estimate's rollout terms for vLLM colocate on a CPU (in place of a fraction of device memory)."""
    plan = engine_plan(model, settings, prompt_tokens)
    label = plan["dtype"].replace("float32", "FP32").replace("bfloat16", "BF16")
    kv_gb = plan["kv_gib"] * GIB / GB
    return [
        (
            f"vLLM's copies of the weights, {label}",
            ENGINE_WEIGHT_COPIES * plan["weights_gb"],
            f"{ENGINE_WEIGHT_COPIES} x {plan['weights_gb']:.3f} GB: the engine loads the model again and repacks it "
            "for oneDNN, at start and at each sync (measured)",
        ),
        (
            "vLLM key-value space (VLLM_CPU_KVCACHE_SPACE)",
            kv_gb,
            f"{plan['kv_gib']} GiB, allocated whole when the engine starts ({plan['kv_source']})",
        ),
        (
            "vLLM engine runtime",
            ENGINE_RUNTIME_GB,
            "the engine's own buffers and scheduler, measured on the tiny model (a constant)",
        ),
    ]
