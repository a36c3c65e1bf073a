"""The choice between rollout paths: which one settings.rollout can use on this machine, and what the lab calls."""

from __future__ import annotations

import sys

from .base import RolloutChoice, refused
from .llamacpp import configure_llamacpp
from ..memory.peak import host_available_gb
from .vllm import VLLM_PATHS, check_vllm_version, colocate_choice, server_choice, vllm_build, vllm_distribution, wait_for_vllm_server
from .vllm_cpu import colocate_cpu_choice


def choose_rollout(settings, track, *, device_type: str, platform: str = sys.platform, vllm_version: str | None = None,
                   gpu_count: int = 0, device_total_gb: float | None = None, model=None, estimate=None, vllm_build: str | None = None,
                   prompt_tokens: int | None = None, available_gb: float | None = None) -> RolloutChoice:
    """The GRPOConfig keyword arguments for settings.rollout on this machine, or LayerFailure with the reason.

    Pure: every fact is an argument (configure_rollout gathers them), so each refusal is testable anywhere.
    """
    path = settings.rollout
    if path == "inprocess":
        return RolloutChoice(path, {}, "in-process: the policy's own generate(), always on-policy")
    if path == "llamacpp":
        return RolloutChoice(path, {}, "llama.cpp through rollout_func: sampled from a GGUF copy of the policy, stale between refreshes")
    if path not in VLLM_PATHS:
        raise refused(f"unknown rollout path {path!r}", "choose inprocess, vllm-colocate, vllm-server or llamacpp")

    if platform == "darwin" or track.expected_device == "mps":
        raise refused("vLLM does not run on macOS (no macOS wheels; its GPU path does not cover Metal)", "use --rollout inprocess (or llamacpp)")
    if path == "vllm-server":  # the trainer's side decides: TRL's weight transfer is NCCL (server_choice says so)
        return server_choice(settings, vllm_version, gpu_count)
    if device_type == "cpu" and path == "vllm-colocate" and vllm_build == "cpu":
        return colocate_cpu_choice(settings, vllm_version, check_vllm_version(vllm_version), model or settings.model, prompt_tokens, available_gb)
    if device_type != "cuda":
        build = {"gpu": f"the vLLM installed here ({vllm_version}) is a GPU build", "cpu": "vLLM's CPU build runs colocate only here"}.get(vllm_build or "", "vLLM is not installed")
        raise refused(f"vLLM needs a CUDA or ROCm GPU and this run is on {device_type} ({build})",
                      "use --rollout inprocess (or llamacpp); on a CPU, vLLM colocate needs vLLM's CPU build (track cv's image)")
    return colocate_choice(settings, track, vllm_version, device_total_gb, model, estimate)


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def configure_rollout(settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print, prompt_tokens: int | None = None) -> tuple[dict, str]:
    """(GRPOTrainer keyword arguments + "log", the line to print) for settings.rollout; LayerFailure if it can't run.

    For llamacpp the kwargs hold `rollout_func` (a LlamaCppRollout; its `.ledger` is also set on the trainer
    as `trainer.rollout_ledger` at the first batch). For vllm-server it waits (bounded) for the server.
    """
    if settings.rollout == "llamacpp":
        return configure_llamacpp(settings, model_path, tokenizer, out_dir, progress)

    distribution, version = vllm_distribution()
    choice = choose_rollout(settings, track, device_type=device_type, vllm_version=version, gpu_count=gpu_count(), model=str(model_path),
                            vllm_build=vllm_build(distribution, version), prompt_tokens=prompt_tokens, available_gb=host_available_gb())
    log = dict(choice.log)
    if choice.path == "vllm-server":
        log.update(wait_for_vllm_server(settings.vllm_server_url, model=str(model_path)))
    progress(f"rollout: {choice.reason}")
    return {**choice.grpo_kwargs, "log": {**log, "reason": choice.reason}}, choice.reason
