"""The smoke test's calibration: after its layers pass, a few steps at the lab's per-step shape (the lab's
completions per step and completion length, on the lab's rollout path and settings) on the smoke model, timed as
the lab times its steps, so that the lab's seconds per step are measured at their shape, not extrapolated to it.

Why steps at the lab's shape rather than a curve fitted through two batch sizes: measured on track c
(docs/smoke-test.md),
a step's cost is not linear in its batch on a CPU, nor on the way to it, so any curve
through the smoke test's batch and one other needs the lab's batch measured anyway to be trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median

from ..settings.lab_settings import LabSettings

# Steps run at the lab's shape, every one counted. Their median is the steady state: it cannot be moved by two slow
# steps of five, whichever they are. Measured on track c (bench/projection-*.json keep each calibration's steps):
# with four steps and the first left out, the median of the other three came to 1.38 of the lab on an idle machine
# (its steps 0.118, 0.120, 0.170, 0.162 s against the lab's 0.117: two slow steps of three), and across the 29
# calibrations in those files it put 26 within 0.8-1.25 of the lab. The first step is counted because, at the
# lab's shape after the smoke test's ten, it was rarely slower than the rest (a median of all four put 28 of 29
# within); a fifth step keeps a slow first step and one slow other step (issue 36's first run: 0.608 and 3.795 s
# among 0.26-0.28 s) from moving the median. The fifth step costs one lab step (0.11-0.15 s here).
CALIBRATION_STEPS = 5
STEADY_STATISTIC = "median of every step"


@dataclass
class Calibration:
    """What the calibration measured, for the run log's `calibration` and the smoke test's summary."""

    completions_per_step: int
    completion_tokens: int
    num_generations: int
    step_seconds: list[float] = field(default_factory=list)
    completion_tokens_mean: list[float | None] = field(default_factory=list)  # TRL's completions/mean_length per step
    cost_s: float = 0.0  # its whole wall clock: data, rollout set-up, trainer, every step
    error: str | None = None
    same_shape: bool = False  # the smoke test's own steps were at the lab's shape: nothing more to run
    size_probe: dict | None = None  # grpolab.run.size_probe's record, when the lab's model is not the smoke test's

    @property
    def seconds_per_step(self) -> float | None:
        """The steady state: STEADY_STATISTIC (the smoke test's own ten too, where they are the measurement)."""
        return round(median(self.step_seconds), 4) if self.step_seconds and not self.error else None

    @property
    def first_step_extra_s(self) -> float | None:
        """What the first step took over the steady state: a first-use cost (a new trainer, the lab's batch sizes met
        for the first time), which the lab's own first step pays as well. 0 when the first step was no slower."""
        steady = self.seconds_per_step
        if steady is None or len(self.step_seconds) < 2:
            return None
        return round(max(0.0, self.step_seconds[0] - steady), 4)

    def as_record(self) -> dict:
        return {
            "completions_per_step": self.completions_per_step, "completion_tokens": self.completion_tokens,
            "num_generations": self.num_generations, "same_shape_as_smoke": self.same_shape,
            "steps": len(self.step_seconds),
            "step_seconds": [round(s, 4) for s in self.step_seconds], "seconds_per_step": self.seconds_per_step,
            "statistic": STEADY_STATISTIC, "first_step_extra_s": self.first_step_extra_s,
            "completion_tokens_mean": self.completion_tokens_mean,
            "cost_s": round(self.cost_s, 3), "error": self.error, "size_probe": self.size_probe,
        }


def lab_shape(settings: LabSettings) -> tuple[int, int]:
    """A run's per-step shape: (completions per step, completion tokens)."""
    return settings.per_device_train_batch_size, settings.max_completion_length


def calibration_settings(smoke: LabSettings, lab: LabSettings) -> LabSettings | None:
    """The smoke test's settings at the lab's per-step shape for CALIBRATION_STEPS steps, every step logged;
    None when the smoke test's own steps already have that shape (its seconds per step are then the measurement)."""
    if lab_shape(smoke) == lab_shape(lab) and smoke.num_generations == lab.num_generations:
        return None
    prompts_per_step = lab.per_device_train_batch_size // lab.num_generations
    return replace(
        smoke,
        per_device_train_batch_size=lab.per_device_train_batch_size,
        num_generations=lab.num_generations,
        max_completion_length=lab.max_completion_length,
        max_steps=CALIBRATION_STEPS,
        logging_steps=1,
        # The lab's own training prompts, in the lab's order (its dataset, size and seed): the same prompt lengths.
        dataset=lab.dataset,
        train_size=max(lab.train_size, prompts_per_step * CALIBRATION_STEPS),
        seed=lab.seed,
    )


def start(calibration: LabSettings | None, smoke: LabSettings) -> Calibration:
    shaped = calibration or smoke
    return Calibration(
        shaped.per_device_train_batch_size,
        shaped.max_completion_length,
        shaped.num_generations,
        same_shape=calibration is None,
    )
