"""The walk's record step (grpolab.run.pipeline): the logged steps and their per-step averages on the run-log line,
and the lab's adapter, reward plot and summary kept under runs/<run id>/ (elsewhere, or lost and said so, when the
disk is full)."""

from __future__ import annotations

import shutil
from pathlib import Path
from statistics import median

from .diskspace import disk_full_failure, free_bytes, is_disk_full, save_elsewhere


# The parts of a step only the vLLM paths have (StepRecord's field, the name in the split); a run without them
# keeps the three-part split (generation, reward, update).
VLLM_STEP_PARTS = {
    "sync_seconds": "weight_sync",  # TRL's sync_weights (+ the CPU build's layerwise reload)
    "sync_check_seconds": "sync_check",  # the lab's lag-0 probe
    "old_logprobs_seconds": "old_logprobs",  # TRL's no-grad pass for the importance-sampling correction
}


def step_parts(steps: list) -> dict[str, str]:
    """StepRecord field -> split name, for the parts this run has."""
    parts = {"generation_seconds": "generation", "reward_seconds": "reward"}
    parts.update({field: name for field, name in VLLM_STEP_PARTS.items() if any(getattr(r, field) for r in steps)})
    return {**parts, "update_seconds": "update"}


def step_averages(steps: list, steps_per_record: int = 1) -> dict:
    """Seconds per step and its split into generation, reward, the vLLM paths' own parts and update, averaged
    over the logged steps (each record the mean of `steps_per_record` optimiser steps: the run's logging_steps)."""
    count = len(steps)
    mean = lambda values: round(sum(values) / count, 4)  # noqa: E731
    seconds = [r.seconds for r in steps]
    steady = round(median(seconds[1:]), 4) if count > 1 else None
    return {
        "seconds_per_step": mean(seconds),
        # The run's steady state (the median record after the first) and what its first logged steps cost over it in
        # all (first use: a new process's, a new trainer's), on the terms of the smoke test's calibration, which
        # projects both (grpolab.run.calibration).
        "steady_seconds_per_step": steady,
        "first_steps_logged": steps_per_record,
        "first_steps_extra_s": round(max(0.0, seconds[0] - steady) * steps_per_record, 4)
        if steady is not None
        else None,
        "time_split_s_per_step": {
            name: mean(getattr(r, field) for r in steps) for field, name in step_parts(steps).items()
        },
    }


def record_steps(record: dict, steps: list) -> None:
    parts = step_parts(steps)
    record["steps"] = [
        {"step": r.step, "reward": r.reward, "reward_std": r.reward_std, "frac_reward_zero_std": r.frac_reward_zero_std,
         "seconds": round(r.seconds, 4), **{f"{name}_s": round(getattr(r, field), 4) for field, name in parts.items()},
         "completion_tokens_mean": r.metrics.get("completions/mean_length")}
        for r in steps
    ]
    if steps:
        record["first_reward"], record["last_reward"] = steps[0].reward, steps[-1].reward
        record.update(step_averages(steps, max(1, int((record.get("settings") or {}).get("logging_steps") or 1))))


def keep_outputs(record: dict, trainer, run_dir: Path, say) -> None:
    """The lab's adapter and reward plot under runs/<run id>/, then its summary. A full disk there (ENOSPC, EDQUOT)
    is the run-log layer's verdict: what was half-written is removed, and the adapter and plot are saved in the cache
    or /tmp instead (the verdict names where), or the verdict says plainly that they are lost and why."""
    try:
        record["adapter"], record["plot"] = save_outputs(record, trainer, run_dir)
    except Exception as error:  # noqa: BLE001 - a full disk is a verdict; anything else is raised as it was
        if not is_disk_full(error):
            raise
        free = free_bytes(run_dir)
        shutil.rmtree(
            run_dir / "adapter", ignore_errors=True
        )  # a half-written adapter is worse than none: nothing loads it
        (run_dir / "reward.png").unlink(missing_ok=True)
        needed = (record.get("disk") or {}).get("estimate", {})
        needed = needed.get("adapter", 0) + needed.get("plot", 0) or None
        saved = {}
        into, tried = save_elsewhere(
            record["run_id"],
            lambda folder: saved.update(zip(("adapter", "plot"), save_outputs(record, trainer, folder))),
            needed or 0,
        )
        if into is not None:
            record.update(saved, outputs_moved_from=str(run_dir))
            kept = (
                f"The trained adapter was saved to {saved['adapter']} instead (the plot to {saved['plot']}); nothing "
                "half-written "
                f"was left in {run_dir}. Move them there once it has room."
            )
        else:
            record.update(adapter=None, plot=None)
            kept = (
                f"The trained adapter is lost: nothing half-written was kept in {run_dir}, and no other place took it "
                f"({'; '.join(tried)}). The run-log line keeps what it measured (pass@1, rewards, memory)."
            )
        say_summary(record, say)
        raise disk_full_failure(run_dir, error, needed, free, kept) from error
    say_summary(record, say)


def save_outputs(record: dict, trainer, folder: Path) -> tuple[str, str]:
    """The adapter first (what the hour of training made), then the plot (which the run-log line can redraw)."""
    from .reward_plot import plot_run

    adapter_dir = folder / "adapter"
    trainer.model.save_pretrained(adapter_dir)
    return str(adapter_dir), str(plot_run(record, folder / "reward.png"))


def say_summary(record: dict, say) -> None:
    before, after = record["pass_at_1_before"], record["pass_at_1_after"]
    say("\nsummary")
    say(f"  pass@1          {before:.3f} -> {after:.3f} on {record['settings']['heldout_size']} held-out problems")
    steps = record["steps"]
    if steps:
        say(
            f"  reward          {steps[0]['reward']:.3f} (step {steps[0]['step']}) -> {steps[-1]['reward']:.3f} (step "
            f"{steps[-1]['step']})"
        )
        split = record["time_split_s_per_step"]
        total = sum(split.values()) or 1.0
        say(
            f"  seconds/step    {record['seconds_per_step']:.3f}: "
            + ", ".join(f"{part} {seconds:.3f} ({seconds / total:.0%})" for part, seconds in split.items())
        )
        if record.get("steady_seconds_per_step") is not None:
            say(
                f"                  steady {record['steady_seconds_per_step']:.3f} (the median after the first "
                "logged); the first "
                f"{record['first_steps_logged']} steps {record['first_steps_extra_s']:.2f} s over it in all (first use)"
            )
    from ..memory.peak import peak_memory_line

    say(f"  peak memory     {peak_memory_line(record)}")
    rollout = record["rollout"]
    lag = f"stale: max lag {rollout.get('max_lag_steps')} steps" if rollout.get("stale") else "lag 0"
    say(f"  rollout path    {rollout['path']} ({lag}; {rollout['lag_basis']})")
    if rollout.get("stale"):
        say(
            "                  stale rollouts: the reward above is the old sampler's; held-out pass@1 is what training "
            "did"
        )
    say(
        "  plot            "
        f"{record['plot'] or 'not saved (the disk was full; `grpolab report` draws it from the run log)'}"
    )
    say(f"  adapter         {record['adapter'] or 'lost (the disk was full, see below)'}")
