"""The vLLM colocate rollout path's engine: vLLM in the trainer's process, on its GPU with a share of its memory
(vllm.py), or on a CPU with vLLM's CPU build (vllm_cpu.py)."""

from __future__ import annotations

from .base import RolloutChoice, RolloutFacts, announced, refused
from .choice import facts_on_this_machine
from .vllm import check_vllm_version, colocate_choice, refuse_on_macos
from .vllm_cpu import colocate_cpu_choice


def check_installed() -> None:
    """Nothing to refuse this early: whether vLLM is installed, and inside TRL's range, is the choice's refusal."""


def choose(settings, track, facts: RolloutFacts) -> RolloutChoice:
    refuse_on_macos(track, facts.platform)
    if facts.device_type == "cpu" and facts.vllm_build == "cpu":
        version_line = check_vllm_version(facts.vllm_version)
        return colocate_cpu_choice(settings, facts.vllm_version, version_line, facts.model or settings.model,
                                   facts.prompt_tokens, facts.available_gb)
    if facts.device_type != "cuda":
        build = {"gpu": f"the vLLM installed here ({facts.vllm_version}) is a GPU build",
                 "cpu": "vLLM's CPU build runs colocate only here"}.get(facts.vllm_build or "", "vLLM is not installed")
        raise refused(f"vLLM needs a CUDA or ROCm GPU and this run is on {facts.device_type} ({build})",
                      "use --rollout inprocess (or llamacpp); on a CPU, vLLM colocate needs vLLM's CPU build "
                      "(track cv's image)")
    return colocate_choice(settings, track, facts.vllm_version, facts.device_total_gb, facts.model, facts.estimate)


def configure(settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print,
              prompt_tokens: int | None = None) -> tuple[dict, str]:
    return announced(choose(settings, track, facts_on_this_machine(device_type, model_path, prompt_tokens)), progress)
