"""What a kind of run does on the walk (RunShape, and its two shapes SMOKE and LAB) and what the walk has once the
device, data, rewards and model are ready (Prepared). grpolab.run.pipeline walks them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunShape:
    """What a kind of run does on the walk."""

    kind: str  # the run log's `kind`
    evaluate: bool  # memory estimate, held-out pass@1 before and after, plot, adapter and summary
    collapse_fails: bool  # a collapsed first step fails the first_step layer (else: a warning)
    show_steps: bool  # one line per logged step (else: one line per layer)
    probe_every_sync: bool  # vLLM colocate: the lag-0 probe after every weight sync (else: a lab's schedule)


SMOKE = RunShape("smoke", evaluate=False, collapse_fails=True, show_steps=False, probe_every_sync=True)
LAB = RunShape("lab", evaluate=True, collapse_fails=False, show_steps=True, probe_every_sync=False)


@dataclass
class Prepared:
    """What the walk has once the device, data, rewards and model are ready."""

    device_type: str
    train: object  # datasets.Dataset
    heldout_rows: list
    reward_funcs: list
    rewards_line: str
    model_path: str
    tokenizer: object
    model: object
    meter: object  # grpolab.memory.peak.PeakMemoryMeter, started before the model loaded
    estimate: object  # grpolab.memory.estimate.MemoryEstimate, or None when none could be made
    calibration_train: object = None  # the smoke test's calibration steps' prompts (the lab's), when it has them
    calibration_data_s: float = 0.0  # what loading them took: part of the calibration's cost
