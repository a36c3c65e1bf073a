"""What a passing smoke test says to write down before you scale up (the lesson's three things): its seconds per
step and the lab's wall clock projected from them, its peak memory against the estimate, and the rollout path.
The smoke test prints them and keeps them in its run-log line ("before_scaling_up"); the report only reads them."""

from __future__ import annotations

from .calibration import CALIBRATION_STEPS
from ..common.durations import duration
from ..settings.lab_settings import resolve_settings
from .size_probe import MEASURED_PROJECTION_OVER_LAB
from ..common.tolerance import off_by_more_than_25_percent


def model_size_step(calibration: dict, smoke_model: str, lab_model: str) -> tuple[float | None, str]:
    """What the lab's model adds to a step over the smoke model's at the lab's shape (seconds), and in words: 0 for
    the same model; else the size probe's measured difference (grpolab.run.size_probe: a step of a random model of each
    model's shape, timed here at that shape), the one part of the projection not measured on the lab's own model
    (its measured error is in docs/smoke-test.md). None when the probe did not run through."""
    if smoke_model == lab_model:
        return 0.0, "for the same model"
    probe = calibration.get("size_probe") or {}
    if probe.get("lab_minus_smoke_s") is None:
        return (
            None,
            f"not scaled from {smoke_model} to {lab_model}: the size probe did not run "
            f"({probe.get('error') or 'no probe in this run'})",
        )
    lab = probe["lab_model"]
    return probe["lab_minus_smoke_s"], (
        f"+ {probe['lab_minus_smoke_s']:.3f} s for {lab_model}'s size (a step of a random model of its shape, "
        f"{lab['layers']} layers, {lab['grown_s']:.3f} s timed here, less {smoke_model}'s "
        f"{probe['smoke_model']['grown_s']:.3f} s; "
        f"measured across models, such a projection came to {MEASURED_PROJECTION_OVER_LAB:.2f} of the lab)"
    )


def lab_projection(calibration: dict, smoke_model: str, lab_settings) -> dict:
    """The lab's seconds per step and wall clock: the calibration's steady state (STEADY_STATISTIC, measured at the
    lab's per-step shape, grpolab.run.calibration) plus what the lab's model adds to a step (model_size_step), times
    the lab's steps, plus the first-use cost its first step pays (the calibration's first step over its steady state),
    kept apart. The per-step figure is that wall clock over the steps: the basis of the lab's own seconds per step,
    the mean of all its steps, its first included. A projection, checked against the lab's measurement by
    `invoke bench.projection` and the report."""
    measured = calibration.get("seconds_per_step")
    first_use = calibration.get("first_step_extra_s") or 0.0
    added, model_note = model_size_step(calibration, smoke_model, lab_settings.model)
    shape = f"{calibration.get('completions_per_step')} x {calibration.get('completion_tokens')}"
    steps = lab_settings.max_steps
    noted = {
        "lab_model": lab_settings.model,
        "lab_steps": steps,
        "lab_completions_per_step": lab_settings.per_device_train_batch_size,
        "lab_completion_tokens": lab_settings.max_completion_length,
        "calibration_seconds_per_step": measured,
        "model_size_s_per_step": added,
        "projected_lab_steady_seconds_per_step": None,
        "projected_lab_first_use_s": None,
        "projected_lab_seconds_per_step": None,
        "projected_lab_wall_clock_s": None,
    }
    if measured is None:
        noted["projection"] = (
            f"none: the calibration at the lab's shape ({shape}) did not run through ({calibration.get('error')})"
        )
        return noted
    if added is None:
        noted["projection"] = f"none: {model_note}"
        return noted
    steady = measured + added
    wall_clock = steady * steps + first_use
    where = (
        f"the smoke test's own {calibration['steps']} steps, already at the lab's shape"
        if calibration.get("same_shape_as_smoke")
        else f"{calibration['steps']} calibration steps at the lab's shape"
    )
    noted.update(
        projected_lab_steady_seconds_per_step=round(steady, 4),
        projected_lab_first_use_s=round(first_use, 3),
        projected_lab_seconds_per_step=round(wall_clock / steps, 4),
        projected_lab_wall_clock_s=round(wall_clock, 1),
        projection=(
            f"{measured:.3f} s/step steady (the median of {where}: {shape} completions x tokens) {model_note} x "
            f"{steps} steps"
            f" + {first_use:.2f} s first use (the first step's cost over the steady state, which the lab's first step "
            "pays too)"
        ),
    )
    return noted


def peak_against_estimate(record: dict) -> dict:
    """The run's measured peak memory and the estimate of the same quantity, as the memory meter logged them
    (grpolab.memory.peak: both above the runtime baseline)."""
    gb, predicted = record.get("peak_memory_gb_measured"), record.get("peak_memory_gb_predicted")
    return {
        "peak_memory_gb_measured": gb,
        "peak_memory_source": record.get("peak_memory_basis", "not measured"),
        "peak_memory_gb_predicted": predicted,
        "peak_memory_ratio": round(gb / predicted, 3) if gb is not None and predicted else None,
    }


def memory_verdict(measured_gb: float, predicted_gb: float) -> str:
    """The smoke test's peak, taken at the calibration's shape, judged against the estimate of that shape."""
    if off_by_more_than_25_percent(measured_gb, predicted_gb):
        return " - more than 25 % off: worth understanding before you make the run larger"
    return " - within 25 %"


def before_scaling_up(
    record: dict, settings, track, say=print, lab=None, smoke_so_far_s: float | None = None
) -> list[str]:
    """The lesson's three things to note from a passing smoke test (seconds per step times the step count,
    peak memory against the arithmetic, the rollout path), the lab's projected wall clock and what measuring it
    cost. Prints them, stores them in record["before_scaling_up"], and returns the lines."""
    per_step, steps = record["seconds_per_step"], settings.max_steps
    lab = lab or resolve_settings(track)
    calibration = record.get("calibration") or {}
    noted = {"seconds_per_step": per_step, "steps": steps, "steps_s": round(per_step * steps, 3)}
    noted.update(lab_projection(calibration, settings.model, lab))
    noted.update(peak_against_estimate(record))
    noted["calibration_cost_s"] = calibration.get("cost_s")
    if smoke_so_far_s:
        noted["smoke_wall_clock_before_record_s"] = round(smoke_so_far_s, 3)
    rollout = record.get("rollout") if isinstance(record.get("rollout"), dict) else {}
    noted.update(rollout_path=rollout.get("path", settings.rollout), stale=rollout.get("stale"))
    record["before_scaling_up"] = noted
    ratio = noted["peak_memory_ratio"]
    measured = noted["peak_memory_gb_measured"]
    at = (
        "the lab's shape"
        if calibration.get("seconds_per_step") is not None or calibration.get("same_shape_as_smoke")
        else "the smoke test's shape"
    )
    memory = (
        f"{measured:.3f} GB measured at {at} ({noted['peak_memory_source']})"
        if measured is not None
        else "not measured"
    )
    if ratio:
        memory += f" against {noted['peak_memory_gb_predicted']:.3f} GB predicted: x{ratio:.2f}" + memory_verdict(
            measured, noted["peak_memory_gb_predicted"]
        )
    projected = noted["projected_lab_seconds_per_step"]
    lab_line = (
        f"{duration(noted['projected_lab_wall_clock_s'])} for track {track.name}'s lab as configured ({projected:.3f} "
        f"s/step): {noted['projection']}"
        if projected is not None
        else noted["projection"]
    )
    lines = [
        "what to write down before you scale up:",
        f"  seconds per step   {per_step:.3f} s x {steps} steps = {duration(per_step * steps)} here; x your step count "
        "is the wall clock you commit to",
        f"  lab wall clock     {lab_line}",
        f"  calibration        {calibration_line(calibration, smoke_so_far_s)}",
        f"  peak memory        {memory}",
        f"  rollout path       {noted['rollout_path']}" + (" (stale rollouts)" if noted["stale"] else ""),
    ]
    for line in lines:
        say(line)
    return lines


def calibration_line(calibration: dict, smoke_so_far_s: float | None) -> str:
    """What the calibration ran and what it cost."""
    if not calibration:
        return "not run"
    probe = calibration.get("size_probe")
    probe_line = f"; the size probe took {probe['cost_s']:.1f} s" if probe else ""
    if calibration.get("same_shape_as_smoke"):
        return f"none needed: the smoke test's steps are at the lab's shape{probe_line or ' (cost 0 s)'}"
    seconds = ", ".join(f"{s:.3f}" for s in calibration["step_seconds"])
    shape = f"{calibration['completions_per_step']} completions x {calibration['completion_tokens']} tokens"
    cost = f"cost {calibration['cost_s']:.1f} s" + (f" (the size probe {probe['cost_s']:.1f} s of it)" if probe else "")
    if smoke_so_far_s:
        cost += (f", {calibration['cost_s'] / (smoke_so_far_s - calibration['cost_s']):.0%} on top of the rest of this "
                 f"smoke test ({smoke_so_far_s - calibration['cost_s']:.1f} s, imports not counted)")
    if calibration.get("error"):
        return (f"{calibration['steps']} of {CALIBRATION_STEPS} steps at the lab's shape ({shape}) ran, then it "
                f"failed: {calibration['error']}; {cost}")
    return (f"{calibration['steps']} steps at the lab's shape ({shape}): {seconds} s, their median the steady state "
            f"(two slow steps cannot move it), the first's excess over it the first use; {cost}")
