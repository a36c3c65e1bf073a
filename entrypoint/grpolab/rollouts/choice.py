"""The choice between rollout paths: the engine of settings.rollout (each path's description, in
grpolab.common.rollout_paths, names its module here), asked whether it can run on this machine and what the lab calls;
and the facts of this machine it is asked on."""

from __future__ import annotations

import importlib
import sys

from ..common.rollout_paths import UnknownRolloutPath, path_names_in_words, rollout_path
from ..memory.peak import host_available_gb
from .base import RolloutChoice, RolloutEngine, RolloutFacts, refused
from .vllm import vllm_build, vllm_distribution


def rollout_engine(name: str) -> RolloutEngine:
    """The module of this package that samples through rollout path `name`, or the rollout layer's refusal."""
    try:
        path = rollout_path(name)
    except UnknownRolloutPath:
        raise refused(f"unknown rollout path {name!r}", f"choose {path_names_in_words()}") from None
    return importlib.import_module(f"{__package__}.{path.ENGINE}")


def check_engine_installed(settings) -> None:
    """The path's engine refuses at once, before data and the model load, where it is missing (llama.cpp's can)."""
    rollout_engine(settings.rollout).check_installed()


def choose_rollout(settings, track, *, device_type: str, platform: str = sys.platform, vllm_version: str | None = None,
                   gpu_count: int = 0, device_total_gb: float | None = None, model=None, estimate=None,
                   vllm_build: str | None = None, prompt_tokens: int | None = None,
                   available_gb: float | None = None) -> RolloutChoice:
    """The GRPOConfig keyword arguments for settings.rollout on this machine, or LayerFailure with the reason.

    Pure: every fact is an argument (configure_rollout gathers them), so each refusal is testable anywhere.
    """
    facts = RolloutFacts(device_type, platform, vllm_version, gpu_count, device_total_gb, model, estimate, vllm_build,
                         prompt_tokens, available_gb)
    return rollout_engine(settings.rollout).choose(settings, track, facts)


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def facts_on_this_machine(device_type: str, model_path, prompt_tokens: int | None) -> RolloutFacts:
    """The facts a path is chosen on, read here: the vLLM installed and its build, the GPUs, the host's free memory."""
    distribution, version = vllm_distribution()
    return RolloutFacts(device_type, sys.platform, vllm_version=version, gpu_count=gpu_count(), model=str(model_path),
                        vllm_build=vllm_build(distribution, version), prompt_tokens=prompt_tokens,
                        available_gb=host_available_gb())


def configure_rollout(settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print,
                      prompt_tokens: int | None = None) -> tuple[dict, str]:
    """(GRPOTrainer keyword arguments + "log", the line to print) for settings.rollout; LayerFailure if it can't run.

    For llamacpp the kwargs hold `rollout_func` (a LlamaCppRollout; its `.ledger` is also set on the trainer
    as `trainer.rollout_ledger` at the first batch). For vllm-server it waits (bounded) for the server.
    """
    engine = rollout_engine(settings.rollout)
    return engine.configure(settings, track, device_type, model_path, tokenizer, out_dir, progress, prompt_tokens)
