"""The in-process rollout path's engine: GRPOTrainer's default, the policy's own generate(), so there is nothing to
install or configure; the line it prints says whether a vLLM is installed beside it, and inside TRL's range."""

from __future__ import annotations

from .base import RolloutChoice, RolloutFacts
from .vllm import vllm_range_note

ON_POLICY = "in-process: the policy's own generate(), always on-policy"


def check_installed() -> None:
    """Nothing to refuse: TRL's own generate() comes with TRL."""


def choose(settings, track, facts: RolloutFacts) -> RolloutChoice:
    return RolloutChoice(settings.rollout, {}, ON_POLICY)


def configure(settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print,
              prompt_tokens: int | None = None) -> tuple[dict, str]:
    return {}, f"{ON_POLICY}; {vllm_range_note()}"
