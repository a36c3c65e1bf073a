"""The one walk every run takes: prepare -> roll out and train -> evaluate -> record.

The smoke test and the lab are two shapes of this walk (SMOKE and LAB, grpolab.run.pipeline_shapes), not two copies
of it. The layer checks (grpolab.run.checks) are called at the moment the walk reaches their layer; the run-log line is
written by grpolab.run.record.recorded_run whatever happens. This module holds the walk, its prepare and evaluate
steps; grpolab.run.pipeline_train the roll-out-and-train step (and the smoke test's calibration), and
grpolab.run.pipeline_record what the record step writes down and keeps.

    prepare    device, data, rewards, the memory meter and estimate, model
    evaluate   held-out pass@1 before training (lab)
    adapter    LoRA on the model
    train      the rollout path set up, GRPOTrainer run, every logged step checked
    evaluate   held-out pass@1 after training (lab)
    record     per-step averages, peak memory against the estimate, fingerprint; the plot, the adapter and the
               summary (lab), what to write down before scaling up (smoke)
"""

from __future__ import annotations

import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from .calibration import calibration_settings
from .checks import check_adapter, check_device, check_rewards, say_layer
from .diskspace import check_free_space, lab_writes
from ..common.errors import LayerFailure
from ..model.files import check_hub_reachable, check_model_files
from ..common.paths import runs_dir
from ..rollouts.choice import check_engine_installed
from .record import recorded_run
from .before_scaling_up import before_scaling_up
from ..settings.lab_settings import LabSettings, check_model_context
from ..common.tracks import Track
from .training import load_model, load_tokenizer, torch_dtype
from .pipeline_shapes import Prepared, RunShape
from .pipeline_train import calibrate, probe_model_size, train
from .pipeline_record import keep_outputs, record_steps


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
    device_type, line = check_device(track, expect_device, settings.rollout, settings)
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
    check_hub_reachable(settings.model, model_path)  # a Hub model with no Hub: one line now, not 72 s of retries
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
