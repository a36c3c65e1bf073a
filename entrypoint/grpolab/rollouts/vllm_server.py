"""The vLLM server rollout path's engine: TRL's server mode against `vllm serve` on a card of its own (grpolab serve),
checked before training starts (vllm.py)."""

from __future__ import annotations

from .base import RolloutChoice, RolloutFacts, announced
from .choice import facts_on_this_machine
from .vllm import refuse_on_macos, server_choice, wait_for_vllm_server


def check_installed() -> None:
    """Nothing to refuse this early: whether vLLM is installed, and inside TRL's range, is the choice's refusal."""


def choose(settings, track, facts: RolloutFacts) -> RolloutChoice:
    refuse_on_macos(track, facts.platform)
    # The trainer's side decides: TRL's weight transfer is NCCL (server_choice says so).
    return server_choice(settings, facts.vllm_version, facts.gpu_count)


def configure(settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print,
              prompt_tokens: int | None = None) -> tuple[dict, str]:
    """Chosen, then the server waited for (bounded) and its answers added to the run log."""
    choice = choose(settings, track, facts_on_this_machine(device_type, model_path, prompt_tokens))
    answers = wait_for_vllm_server(settings.vllm_server_url, model=str(model_path))
    return announced(choice, progress, {**choice.log, **answers})
