"""What every rollout path shares: the rollout layer's refusal, and the record of the path chosen."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import LayerFailure


def refused(what: str, action: str) -> LayerFailure:
    return LayerFailure("rollout", what, action)


@dataclass
class RolloutChoice:
    path: str
    grpo_kwargs: dict  # GRPOConfig fields for this path
    reason: str  # one sentence for the log
    log: dict = field(default_factory=dict)
