"""What every rollout path shares: the rollout layer's refusal, and the record of the path chosen."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common.errors import LayerFailure


def refused(what: str, action: str) -> LayerFailure:
    return LayerFailure("rollout", what, action)


@dataclass
class RolloutChoice:
    path: str
    grpo_kwargs: dict  # GRPOConfig fields for this path
    reason: str  # one sentence for the log
    log: dict = field(default_factory=dict)


def importance_sampling_correction(setting: str, engine_cpu_float32: bool) -> tuple[bool, str]:
    """TRL's vllm_importance_sampling_correction for this run, and why. `auto` keeps TRL's default (on) except where
    vLLM's CPU build samples in float32, as the trainer scores: there the trainer's and vLLM's log-probabilities of
    the sampled tokens agreed within 2.4e-5 (tiny model, 12 steps; docs/rollout-paths.md, "vLLM colocate on a CPU"), so the ratio TRL
    multiplies each token's loss by is 1 within 2.4e-5, while its extra forward of every sequence cost 3.3 s of a
    17.7 s step at the Qwen3-0.6B shape (`git show f1761f7:bench/lab-colocate-size-20261202T100017Z.json`)."""
    if setting == "on":
        return True, "on (set): TRL's extra forward scores every sampled token and corrects vLLM's sampling against the trainer's"
    if setting == "off":
        return False, "off (set): no extra forward; the sync is checked by the lab's probe"
    if engine_cpu_float32:
        return False, ("off (auto): vLLM's CPU build samples in float32 as the trainer scores, where the two agree within 2.4e-5, "
                       "so TRL's correction would multiply each token's loss by 1 for one more forward of every sequence")
    return True, "on (auto: TRL's default where vLLM runs on a GPU, whose kernels' log-probabilities differ from the trainer's)"
