"""What every rollout path's engine shares: the interface it keeps (RolloutEngine), the facts a path is chosen on, the
rollout layer's refusal, and the record of the path chosen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..common.errors import LayerFailure


def refused(what: str, action: str) -> LayerFailure:
    return LayerFailure("rollout", what, action)


@dataclass
class RolloutChoice:
    path: str
    grpo_kwargs: dict  # GRPOConfig fields for this path
    reason: str  # one sentence for the log
    log: dict = field(default_factory=dict)


def announced(choice: RolloutChoice, progress, log: dict | None = None) -> tuple[dict, str]:
    """(the chosen path's GRPOTrainer keyword arguments with its run-log `log`, the reason added; the line to print),
    the line printed first. `log` stands in for the choice's own where the engine learnt more since."""
    progress(f"rollout: {choice.reason}")
    logged = {**(choice.log if log is None else log), "reason": choice.reason}
    return {**choice.grpo_kwargs, "log": logged}, choice.reason


@dataclass(frozen=True)
class RolloutFacts:
    """What a path is chosen on, every fact passed in (choice.facts_on_this_machine gathers this machine's), so that
    each refusal is testable anywhere."""

    device_type: str  # where training runs: cuda, mps or cpu
    platform: str  # sys.platform
    vllm_version: str | None = None  # None: vLLM is not installed
    gpu_count: int = 0
    device_total_gb: float | None = None
    model: object = None  # the model's id or folder (None: the settings')
    estimate: object = None  # the run's memory estimate, where one was made
    vllm_build: str | None = None  # "gpu" or "cpu" (vLLM's CPU build), None without vLLM
    prompt_tokens: int | None = None  # the longest prompt of the run's data
    available_gb: float | None = None  # the host's available memory


class RolloutEngine(Protocol):
    """What samples through one rollout path: a module of this package, the one its description names (ENGINE in
    grpolab.common.rollout_paths). choice.py asks it; nothing else tests a path's name."""

    def check_installed(self) -> None:
        """Refuse (the rollout layer's LayerFailure) at once, before data and the model load, where the engine is
        missing and that can be known this early; else nothing."""

    def choose(self, settings, track, facts: RolloutFacts) -> RolloutChoice:
        """The GRPOConfig keyword arguments for this path on a machine with these facts, or the refusal. Pure."""

    def configure(self, settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print,
                  prompt_tokens: int | None = None) -> tuple[dict, str]:
        """(GRPOTrainer keyword arguments, with `rollout_func` and a `log` dict where the path has them; the line to
        print) on this machine, or the refusal."""


def importance_sampling_correction(setting: str, engine_cpu_float32: bool) -> tuple[bool, str]:
    """TRL's vllm_importance_sampling_correction for this run, and why. `auto` keeps TRL's default (on) except where
    vLLM's CPU build samples in float32, as the trainer scores: there the trainer's and vLLM's log-probabilities of
    the sampled tokens agreed within 2.4e-5 (tiny model, 12 steps; docs/rollout-paths.md, "vLLM colocate on a CPU"), so
    the ratio TRL
    multiplies each token's loss by is 1 within 2.4e-5, while its extra forward of every sequence cost 3.3 s of a
    17.7 s step at the Qwen3-0.6B shape (`git show f1761f7:bench/lab-colocate-size-20261202T100017Z.json`)."""
    if setting == "on":
        return (
            True,
            "on (set): TRL's extra forward scores every sampled token and corrects vLLM's sampling against the "
            "trainer's",
        )
    if setting == "off":
        return False, "off (set): no extra forward; the sync is checked by the lab's probe"
    if engine_cpu_float32:
        return False, (
            "off (auto): vLLM's CPU build samples in float32 as the trainer scores, where the two agree within 2.4e-5, "
            "so TRL's correction would multiply each token's loss by 1 for one more forward of every sequence"
        )
    return (
        True,
        "on (auto: TRL's default where vLLM runs on a GPU, whose kernels' log-probabilities differ from the trainer's)",
    )
