"""The one walk every run takes: prepare -> roll out and train -> evaluate -> record.

The smoke test and the lab are two shapes of this walk (SMOKE and LAB below), not two copies of it. The
layer checks (grpolab.run.checks) are called at the moment the walk reaches their layer; the run-log line is
written by grpolab.run.record.recorded_run whatever happens.

    prepare    device, data, rewards, the memory meter and estimate, model
    evaluate   held-out pass@1 before training (lab)
    adapter    LoRA on the model
    train      the rollout path set up, GRPOTrainer run, every logged step checked
    evaluate   held-out pass@1 after training (lab)
    record     per-step averages, peak memory against the estimate, fingerprint; the plot, the adapter and the
               summary (lab), what to write down before scaling up (smoke)
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from .calibration import Calibration, calibration_settings, start
from .checks import (
    check_adapter,
    check_device,
    check_first_step,
    check_rewards,
    check_rollout,
    check_step_metrics,
    group_collapsed,
    say_layer,
)
from .diskspace import check_free_space, disk_full_failure, free_bytes, is_disk_full, lab_writes, save_elsewhere
from ..common.errors import LayerFailure
from ..model.files import check_model_files
from ..model.shape import weights_dtype
from ..common.paths import runs_dir
from ..rollouts.base import importance_sampling_correction
from ..rollouts.choice import check_engine_installed
from .record import recorded_run
from .before_scaling_up import before_scaling_up
from ..settings.lab_settings import LabSettings, check_model_context
from .size_probe import StepShape, measure
from ..common.rollout_paths import rollout_path
from ..common.tracks import Track
from .training import (
    load_model,
    load_tokenizer,
    make_trainer,
    model_wrapper,
    release_vllm_engine,
    step_recorder,
    torch_dtype,
)

# On what basis each rollout path's `stale` / `max_lag_steps` is given (the run log's rollout.lag_basis) is its path's
# LAG_BASIS; a colocated vLLM whose syncs were probed has this one instead.
LAG_BASIS_MEASURED_SYNC = (
    "measured and verified: each batch's synced policy version against the trainer's step, and after the "
    "checked syncs a probe prompt's greedy completion from vLLM against the trainer's policy (sync_checks)"
)


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


def run_pipeline(
    settings: LabSettings,
    track: Track,
    shape: RunShape,
    expect_device: str | None = None,
    log_path=None,
    say=print,
    lab: LabSettings | None = None,
) -> dict:
    """Walk one run of `shape`. Returns its run-log record; raises LayerFailure at the first failing layer.

    `lab`: for the smoke test, the lab it stands before; once its layers pass, it times that lab's per-step shape
    (grpolab.run.calibration) and projects the lab's wall clock from it (grpolab.run.before_scaling_up)."""
    say(headline(settings, track, shape))
    started = time.perf_counter()
    calibration = calibration_settings(settings, lab) if lab is not None and not shape.evaluate else None
    with recorded_run(shape.kind, settings, log_path=log_path, say=say) as record:
        record["layers_passed"] = passed = []
        run = prepare(settings, track, shape, record, expect_device, say, calibration)
        if shape.evaluate:  # room for what the lab keeps, before an hour goes into training
            line, record["disk"] = check_free_space(runs_dir(), lab_writes(settings, run.model))
            say_layer(say, "disk space", line)
            record["pass_at_1_before"] = evaluate(settings, run, run.model, "before", say)
        peft_model, line = check_adapter(run.model, settings)
        say_layer(say, "adapter", line)
        say_layer(say, "rewards", run.rewards_line)
        passed += ["adapter", "rewards"]
        # The lab keeps what it trains under runs/<run id>/; the smoke test's trainer files are thrown away.
        run_dir = runs_dir() / record["run_id"]
        with nullcontext(run_dir) if shape.evaluate else tempfile.TemporaryDirectory() as output_dir:
            trainer, steps = train(settings, track, shape, run, peft_model, Path(output_dir), record, say)
            if lab is not None and not shape.evaluate:
                record["calibration"] = calibrate(
                    settings, calibration, track, run, peft_model, steps, Path(output_dir), trainer, lab.max_steps
                ).as_record()
                trainer = None
        if shape.evaluate:
            record["pass_at_1_after"] = evaluate(settings, run, trainer.model, "after", say)
        record_steps(record, steps)
        record_memory(run, record, say, show=not shape.evaluate)
        if (
            lab is not None and not shape.evaluate and lab.model != settings.model
        ):  # after the meter: the probe's models are not the run's
            probe_model_size(record["calibration"], lab, run)
        from ..environment.fingerprint import environment_fingerprint

        record["fingerprint"] = environment_fingerprint()
        if shape.evaluate:
            keep_outputs(record, trainer, run_dir, say)
        else:
            before_scaling_up(record, settings, track, say, lab, smoke_so_far_s=time.perf_counter() - started)
        passed.append("runlog")
    return record


def headline(settings: LabSettings, track: Track, shape: RunShape) -> str:
    if shape.evaluate:
        return f"GRPO lab, track {track.name}. Settings:\n{settings.describe()}"
    return (
        f"smoke test, track {track.name}: {settings.model}, {settings.train_size} prompts, {settings.num_generations} "
        "rollouts, "
        f"{settings.max_steps} steps, rollout path {settings.rollout}"
    )


# --- prepare --------------------------------------------------------------------------------------------


def prepare(
    settings: LabSettings,
    track: Track,
    shape: RunShape,
    record: dict,
    expect_device,
    say,
    calibration: LabSettings | None = None,
) -> Prepared:
    """Device first (everything else is misleading on the wrong one), then data and rewards before any model loads.
    A smoke test with calibration steps predicts its peak memory at their shape (the lab's), on their prompts."""
    from ..model.identity import model_identity
    from ..model.tiny import resolve_model_name
    device_type, line = check_device(track, expect_device, settings.rollout)
    record["device"] = device_type
    # Only a smoke test that checked the device the track expects counts as "passed before" for the lab.
    record["device_checked"] = expect_device in (None, track.expected_device)
    say_layer(say, "device", line)
    record["layers_passed"].append("device")
    # Before data, model and the held-out pass@1: an image without llama.cpp says so at once.
    check_engine_installed(settings)
    train, heldout_rows = load_data(settings, shape)
    reward_funcs, rewards_line = check_rewards(settings, train.column_names)
    model_path = resolve_model_name(settings.model)
    record["model_path"] = model_path
    check_model_files(settings.model, model_path)  # a cut-short or damaged file named, before any loader trips on it
    check_model_context(settings, model_path, shape.kind)  # the model's config only: before its tokenizer and weights
    try:
        tokenizer = load_tokenizer(model_path)
        started = time.perf_counter()
        calibration_train = load_data(calibration, shape)[0] if calibration else None
        calibration_data_s = time.perf_counter() - started
        meter, estimate = start_memory_meter(calibration or settings, track, shape, device_type, model_path, tokenizer,
                                             train if calibration_train is None else calibration_train, record, say)
        model = load_model(model_path, torch_dtype(settings, device_type))
    except LayerFailure:
        check_model_files(settings.model, model_path)  # a Hub model downloaded just now, broken: named as such
        raise
    check_model_files(settings.model, model_path)  # a Hub model is in the cache now: its blobs against their sha256
    record["model_identity"] = model_identity(
        settings.model
    )  # its revision and weights (hashed once, by the check above)
    if device_type != "cpu":
        model.to(device_type)
    return Prepared(
        device_type,
        train,
        heldout_rows,
        reward_funcs,
        rewards_line,
        model_path,
        tokenizer,
        model,
        meter,
        estimate,
        calibration_train,
        calibration_data_s,
    )


def start_memory_meter(
    settings: LabSettings,
    track: Track,
    shape: RunShape,
    device_type: str,
    model_path: str,
    tokenizer,
    train,
    record: dict,
    say,
):
    """The peak-memory meter, started before the model loads (its runtime baseline), and the estimate of the
    same quantity; the lab prints the estimate's table. No estimate is said in words, never a refusal."""
    from ..memory.estimate import run_estimate
    from ..memory.peak import PeakMemoryMeter

    meter = PeakMemoryMeter(device_type, unified_memory=track.unified_memory).start()
    estimate = run_estimate(model_path, settings, meter, tokenizer, train, say, show_table=shape.evaluate)
    record["peak_memory_gb_predicted"] = estimate and round(estimate.modelled_gb, 3)
    return meter, estimate


def record_memory(run: Prepared, record: dict, say, show: bool) -> None:
    """Stop the meter and log the measured peak beside the prediction, on the same basis."""
    from ..memory.peak import peak_memory_line

    run.meter.stop()
    record.update(run.meter.fields(predicted_gb=run.estimate and run.estimate.modelled_gb))
    if show:
        say(f"  peak memory {peak_memory_line(record)}")


def load_data(settings: LabSettings, shape: RunShape) -> tuple[object, list]:
    from ..task.problems import load_lab_datasets

    heldout_size = settings.heldout_size if shape.evaluate else 0
    try:
        train, heldout = load_lab_datasets(settings.dataset, settings.train_size, heldout_size, settings.seed)
    except ValueError as error:  # DatasetUnavailable included: the dataset as given cannot be used
        raise LayerFailure("input", str(error), "check --dataset, --train-size and --heldout-size") from error
    heldout_rows = list(heldout)
    if shape.evaluate and not heldout_rows:
        raise LayerFailure(
            "input",
            "heldout_size is 0: the lab measures pass@1 on held-out problems before and after",
            "set --heldout-size to 50 or more",
        )
    return train, heldout_rows


# --- roll out and train -----------------------------------------------------------------------------------


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


# --- evaluate -----------------------------------------------------------------------------------------------


def evaluate(settings: LabSettings, run: Prepared, model, when: str, say) -> float:
    """Held-out greedy pass@1, scored by the numeric reward the run trains on."""
    from ..task.evaluate import pass_at_1

    say(f"held-out pass@1 {when} training ({len(run.heldout_rows)} problems, greedy)...")
    score = pass_at_1(
        model, run.tokenizer, run.heldout_rows, settings.eval_max_new_tokens or settings.max_completion_length
    )
    say(f"  pass@1 {when}: {score:.3f}")
    return score


# --- record -------------------------------------------------------------------------------------------------


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
