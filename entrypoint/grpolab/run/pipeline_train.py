"""The walk's roll-out-and-train step (grpolab.run.pipeline): the rollout path set up, GRPOTrainer run with every
logged step checked (and printed, in the lab), the first step judged, the rollout engine freed; then, for a smoke test
that stands before a lab, its calibration steps at the lab's shape and the probe of the lab's model size."""

from __future__ import annotations

import gc
import time
from dataclasses import replace
from pathlib import Path

from .calibration import Calibration, start
from .checks import check_first_step, check_rollout, check_step_metrics, group_collapsed, say_layer
from ..model.shape import weights_dtype
from ..rollouts.base import importance_sampling_correction
from ..settings.lab_settings import LabSettings
from .size_probe import StepShape, measure
from ..common.rollout_paths import rollout_path
from ..common.tracks import Track
from .training import make_trainer, model_wrapper, release_vllm_engine, step_recorder, torch_dtype
from .pipeline_shapes import Prepared, RunShape
from .pipeline_record import VLLM_STEP_PARTS

# On what basis each rollout path's `stale` / `max_lag_steps` is given (the run log's rollout.lag_basis) is its path's
# LAG_BASIS; a colocated vLLM whose syncs were probed has this one instead.
LAG_BASIS_MEASURED_SYNC = (
    "measured and verified: each batch's synced policy version against the trainer's step, and after the "
    "checked syncs a probe prompt's greedy completion from vLLM against the trainer's policy (sync_checks)"
)


def train(
    settings: LabSettings, track: Track, shape: RunShape, run: Prepared, peft_model, output_dir: Path, record: dict, say
):
    """Set up the rollout path, train with every logged step checked, free the rollout engine.

    Records the rollout path with `stale`, the largest lag and the basis they are given on. Returns
    (the trainer, its StepRecords).
    """
    prompt_tokens = (
        run.estimate.inputs.get("prompt_tokens") if run.estimate else None
    )  # the data's longest prompt: vLLM's context
    rollout, rollout_line = check_rollout(
        settings, track, run.device_type, run.model_path, run.tokenizer, output_dir / "gguf", prompt_tokens
    )
    record["rollout"] = {"path": settings.rollout, **rollout.pop("log", {})}
    if shape.show_steps:
        say_layer(say, "rollout", rollout_line)
        say(f"training {settings.max_steps} steps...")
    recorder = step_recorder(
        run.reward_funcs, on_record=step_check(settings, shape, say), stop_on=first_step_collapsed(shape)
    )
    try:
        trainer = make_trainer(
            settings,
            peft_model,
            run.tokenizer,
            run.train,
            run.reward_funcs,
            run.device_type,
            output_dir / "trainer",
            rollout,
            [recorder],
            probe_every_sync=shape.probe_every_sync,
        )
        recorder.trainer = trainer
        # transformers' own clock of the whole training loop: the basis the benchmark against plain TRL reads.
        record["train_runtime_s"] = round(trainer.train().metrics["train_runtime"], 3)
        record["trainer_model_wrapper"] = model_wrapper(trainer)
    finally:
        close_rollout(rollout)
    ledger = getattr(trainer, "rollout_ledger", None)
    record["rollout"].update(ledger.summary() if ledger else {"stale": False, "max_lag_steps": 0})
    path_basis = rollout_path(settings.rollout).LAG_BASIS
    record["rollout"]["lag_basis"] = LAG_BASIS_MEASURED_SYNC if record["rollout"].get("lag_measured") else path_basis
    if hasattr(ledger, "check_verdict"):
        ledger.check_verdict()  # vLLM colocate: a checked sync that did not reach the engine fails the rollout layer
    steps = recorder.records
    record["first_reward"] = steps[0].reward if steps else None
    judge_first_step(shape, steps, rollout_line, record, say)
    return trainer, steps


def calibrate(
    smoke: LabSettings,
    calibration: LabSettings | None,
    track: Track,
    run: Prepared,
    peft_model,
    smoke_steps: list,
    output_dir: Path,
    smoke_trainer,
    lab_steps: int,
) -> Calibration:
    """The smoke test's steps at the lab's per-step shape, after its layers passed: a trainer of their own on the
    same adapter, rollout path and settings, every step timed as the lab times its steps. Its verdicts are the
    smoke test's alone: a calibration that fails is recorded with why, and the smoke test still passes."""
    measured = start(calibration, smoke)
    if calibration is None:  # the smoke test's own steps were at the lab's shape
        measured.step_seconds = [step.seconds for step in smoke_steps]
        return measured
    started = time.perf_counter()
    try:
        released = release_vllm_engine(
            smoke_trainer
        )  # the smoke test's engine is not the lab's: one engine at a time, as in the lab
        del smoke_trainer
        if released:  # its memory freed before the calibration's engine starts beside it
            gc.collect()
        # Otherwise the calibration's own trainer.train() collects before its first step (accelerate's free_memory), as
        # the lab's does: a second full collection here cost 0.19-0.22 s on track c, a sixth of the calibration.
        calibration = replace(calibration, report_to="none")  # no live-logging run of its own
        prompt_tokens = run.estimate.inputs.get("prompt_tokens") if run.estimate else None
        rollout, _ = check_rollout(
            calibration,
            track,
            run.device_type,
            run.model_path,
            run.tokenizer,
            output_dir / "calibration-gguf",
            prompt_tokens,
        )
        rollout.pop("log", None)
        recorder = step_recorder(run.reward_funcs)
        try:
            trainer = make_trainer(
                calibration,
                peft_model,
                run.tokenizer,
                run.calibration_train,
                run.reward_funcs,
                run.device_type,
                output_dir / "calibration",
                rollout,
                [recorder],
                sync_check_steps=lab_steps,
            )
            recorder.trainer = trainer
            trainer.train()
        finally:
            close_rollout(rollout)
        measured.step_seconds = [step.seconds for step in recorder.records]
        measured.completion_tokens_mean = [step.metrics.get("completions/mean_length") for step in recorder.records]
    except Exception as error:  # noqa: BLE001 - recorded with why; never the smoke test's verdict
        measured.error = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
    measured.cost_s = time.perf_counter() - started + run.calibration_data_s
    return measured


def probe_model_size(calibration: dict, lab: LabSettings, run: Prepared) -> None:
    """What the lab's model adds to a step at the lab's shape, timed here (grpolab.run.size_probe); its cost is the
    calibration's too."""
    prompt_tokens = (run.estimate.inputs.get("prompt_tokens") if run.estimate else None) or lab.max_prompt_length
    # TRL's extra forward runs where the lab's vLLM path (the paths that own the setting) keeps its importance-sampling
    # correction on; on a CPU the engine is vLLM's CPU build in the weights' dtype (vllm_cpu_memory.engine_plan), as
    # rollouts/vllm_cpu.py decides.
    engine_cpu_float32 = run.device_type == "cpu" and weights_dtype(lab.dtype, lab.track) == "float32"
    vllm_path = "vllm_importance_sampling_correction" in rollout_path(lab.rollout).SETTINGS
    setting = lab.vllm_importance_sampling_correction
    corrected = vllm_path and importance_sampling_correction(setting, engine_cpu_float32)[0]
    step = StepShape(lab.per_device_train_batch_size, prompt_tokens, lab.max_completion_length, lab.lora_rank,
                     recompute_forward=run.device_type != "cpu", old_logprobs_forward=corrected)
    calibration["size_probe"] = measure(
        run.model_path, lab.model, step, torch_dtype(lab, run.device_type), run.device_type
    )
    calibration["cost_s"] = round(calibration["cost_s"] + calibration["size_probe"]["cost_s"], 3)


def step_check(settings: LabSettings, shape: RunShape, say):
    """Called on every logged step: the metrics must be numbers; the lab prints the step."""
    show = progress_printer(settings, say) if shape.show_steps else None

    def on_record(step_record, state):
        check_step_metrics(step_record)
        if show:
            show(step_record, state)

    return on_record


def first_step_collapsed(shape: RunShape):
    """The smoke test stops at once when the first logged step collapsed: the verdict is in, the rest is waste."""
    if not shape.collapse_fails:
        return None
    seen = []

    def stop(step_record) -> bool:
        seen.append(step_record)
        return len(seen) == 1 and group_collapsed(step_record)

    return stop


def judge_first_step(shape: RunShape, steps: list, rollout_line: str, record: dict, say) -> None:
    """The smoke test's verdict on the first logged step (collapse fails it); the lab only warns."""
    if shape.collapse_fails:
        say_layer(say, "first step", check_first_step(steps))
        say_layer(say, "rollout", rollout_line)
    elif steps and group_collapsed(steps[0]):
        say("  warning: the first logged step had no reward spread in any group (group collapse)")
    record["layers_passed"] += ["first_step", "rollout"]


def close_rollout(rollout: dict) -> None:
    """Free a rollout engine the run started (llama.cpp's sampler and its GGUF copies)."""
    func = rollout.get("rollout_func")
    if func is not None and hasattr(func, "close"):
        func.close()


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_printer(settings: LabSettings, say):
    started = time.perf_counter()

    def show(record, state):
        elapsed = time.perf_counter() - started
        remaining = elapsed / max(1, record.step) * (settings.max_steps - record.step)
        say(
            f"  step {record.step:>4}/{settings.max_steps}  reward {record.reward:.3f} ± {record.reward_std:.3f}  "
            f"no-spread {record.frac_reward_zero_std:.0%}  {record.seconds:.2f} s/step "
            f"(generation {record.generation_seconds:.2f}, reward {record.reward_seconds:.3f}, "
            + "".join(
                f"{name.replace('_', ' ')} {getattr(record, field):.2f}, "
                for field, name in VLLM_STEP_PARTS.items()
                if getattr(record, field)
            )
            + f"update {record.update_seconds:.2f})  "
            f"ETA {format_duration(remaining)}"
        )

    return show
