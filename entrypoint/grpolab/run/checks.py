"""The six layer checks, one function each, in the order a run meets them (the lesson's first-run checklist).

    layer       exit  function          what it answers
    device      10    check_device      accelerator, driver and PyTorch build: is the device the track expects there?
    adapter     11    check_adapter     the trainable-parameter count: did LoRA match any module?
    rewards     12    check_rewards     the reward line: does each reward resolve, and have the columns it needs?
    first_step  13    check_first_step  the first logged step: finite metrics, and rewards that differ within a group
    rollout     14    check_rollout     the rollout path: can this engine run here, and which one produces completions?
    runlog      15    check_runlog      the run log: one JSON line per run, written whole

Each returns what the run goes on with and the line to print, or raises LayerFailure naming the layer and what
to do. grpolab.run.pipeline calls them at the right moment of every run; docs/troubleshooting.md
is this table.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..common.errors import LayerFailure
from ..common.runlog import append_run, runlog_failure
from ..common.card_verdict import card_verdict
from ..common.gpucode import device_kernels, driver_key, driver_too_old, image_table_path, load_table
from ..common.dtypes import dtype_on
from ..settings.lab_settings import LabSettings
from ..common.tracks import Track

# Metrics every logged step must carry as finite numbers: the group-collapse verdict and the run log read them.
STEP_METRICS = ("reward", "reward_std", "frac_reward_zero_std")


def say_layer(say, layer: str, text: str) -> None:
    say(f"  ok  {layer:<11} {text}")


# --- device (1. the device line) -------------------------------------------------------------------------


def check_device(track: Track, expect_device: str | None = None, rollout: str | None = None,
                 settings: LabSettings | None = None) -> tuple[str, str]:
    """Layer 1. Returns (device type to train on, the line to print). The judgement is
    grpolab.environment.torch_build's,
    the same the doctor gives; on a GPU, the image's kernels table (grpolab.common.gpucode) and its driver minimum too,
    and this card's verdict for the run's path and dtype (`settings.dtype` set to the dtype it runs in), before any
    model downloads or loads."""
    from ..environment.machine import host_facts
    from ..environment.torch_build import diagnose_device, torch_build, torch_devices

    build, host = torch_build(), host_facts()
    devices = torch_devices(build)
    finding = diagnose_device(build, devices, host, track, expect_device)
    if finding.status == "fail":
        raise LayerFailure(
            "device", finding.summary, finding.action + ("; run `grpolab doctor` for the details" if build.kind else "")
        )
    line = finding.summary
    if devices.type == "cuda":
        line += kernels_note(track, devices.arch, rollout or track.rollout, host.nvidia_driver)
        if settings is not None:
            line += card_note(settings, track, devices.arch, host.nvidia_driver)
    return finding.device_type, line


def card_note(settings: LabSettings, track: Track, gpu: str | None, driver: str | None,
              table: dict | None = None) -> str:
    """This card's verdict for the run (grpolab.common.card_verdict), appended to the device line. settings.dtype
    becomes the dtype the run uses on this card (float16, not bfloat16, on a path with vLLM below compute 8.0), so
    that the model loads in it; LayerFailure when a kernel the path runs only by JIT needs a newer driver."""
    table = table if table is not None else load_table(image_table_path(track.name))
    if table is None or not gpu or not gpu.startswith("sm_"):
        return ""
    found = card_verdict(table, gpu, settings.rollout, dtype_on(settings.dtype, "cuda"))
    if found.jit_driver and driver and driver_key(driver) < driver_key(found.jit_driver):
        raise LayerFailure(
            "device",
            f"{', '.join(found.jit_libraries)} runs on {found.card} only by JIT from PTX, which NVIDIA driver "
            f"{found.jit_driver} or newer compiles; this machine has {driver}",
            f"install NVIDIA driver {found.jit_driver} or newer, or use another rollout path",
        )
    settings.dtype = found.dtype.dtype
    return "; this card: " + found.words().split(": ", 1)[1]


def kernels_note(track: Track, gpu: str | None, rollout: str, driver: str | None, table: dict | None = None) -> str:
    """What the image's kernels table says of this GPU, appended to the device line; LayerFailure when the driver is
    older than its CUDA major needs or a library the rollout path needs has no code for the GPU."""
    table = table if table is not None else load_table(image_table_path(track.name))
    too_old = driver_too_old(table, driver) if table else None
    if too_old:
        raise LayerFailure("device", too_old, f"update the host's NVIDIA driver to {table['driver_minimum']} or newer")
    found = device_kernels(track.name, gpu, rollout, table)
    if found is None:
        return ""
    status, summary, lines = found
    if status == "fail":
        raise LayerFailure(
            "device",
            f"{summary}: " + "; ".join(lines),
            "use a GPU the track serves (docs/kernels.md: Which GPUs each image runs on) or another rollout path; "
            "`grpolab doctor` lists every library",
        )
    return f"; kernels: {summary}" + (": " + "; ".join(lines) if lines else "")


# --- adapter (2. the trainable-parameter count) ------------------------------------------------------------


def check_adapter(model, settings: LabSettings) -> tuple[object, str]:
    from .training import add_adapter

    peft_model, trainable, total = add_adapter(model, settings)
    return (
        peft_model,
        f"LoRA rank {settings.lora_rank} on {settings.lora_target_modules}: {trainable:,} trainable of {total:,} "
        f"parameters ({100 * trainable / total:.2f}%)",
    )


# --- rewards (3. the reward line) -----------------------------------------------------------------------


def check_rewards(settings: LabSettings, columns: list[str]) -> tuple[list, str]:
    """Resolve each reward, check the dataset has the columns it needs (before any model loads)."""
    from ..task.reward_choice import resolve_reward, reward_columns
    from .training import guarded_reward

    funcs = []
    for name, weight in settings.reward_weights.items():
        try:
            func = resolve_reward(name)
        except ValueError as error:
            raise LayerFailure("rewards", str(error), "fix --reward-weights") from error
        missing = [column for column in reward_columns(func) if column not in columns]
        if missing:
            raise LayerFailure(
                "rewards",
                f"reward {name} needs dataset column(s) {', '.join(missing)}, which dataset {settings.dataset!r} lacks "
                f"(it has {', '.join(columns)})",
                "use a dataset with those columns, or map yours to them",
            )
        funcs.append(guarded_reward(name, func))
    listed = ", ".join(f"{name} x {weight:g}" for name, weight in settings.reward_weights.items())
    return funcs, f"{listed}"


# --- first_step (4. the first logged step) ------------------------------------------------------------------


def check_step_metrics(record) -> None:
    """Every logged step, not only the first: a metric missing or not finite (NaN, inf) is a verdict in words,
    never a silent pass (NaN compares false with every threshold) nor a run log that cannot be written."""
    values = {name: record.metrics.get(name, "missing") for name in STEP_METRICS}
    bad = [
        f"{name} {value}" for name, value in values.items() if not isinstance(value, float) or not math.isfinite(value)
    ]
    if bad:
        raise LayerFailure(
            "first_step",
            f"step {record.step} logged {', '.join(bad)}: the trainer's metrics are not numbers, so no verdict on this "
            "run can be trusted",
            "a reward that returns NaN, inf or None for every completion, or a loss that diverged: check the rewards "
            "on a few "
            "completions, lower the learning rate, or use float32",
        )


def group_collapsed(record) -> bool:
    """Every group's rewards identical: no advantage, no gradient. Judged with our own tolerance
    (TRL's frac_reward_zero_std uses 1e-8 and misses weights floats cannot represent exactly)."""
    return record.frac_reward_zero_std >= 1.0 or record.reward_std <= 1e-6


def check_first_step(records) -> str:
    if not records:
        raise LayerFailure("first_step", "training logged no step", "check the trainer's output above")
    first = records[0]
    check_step_metrics(first)
    if group_collapsed(first):
        raise LayerFailure(
            "first_step",
            f"group collapse on step {first.step}: reward {first.reward:.3f} with std {first.reward_std:.3g} "
            f"(frac_reward_zero_std {first.frac_reward_zero_std:.2f}): every completion in every group scored the "
            "same, so there is nothing to learn",
            "the model cannot yet produce any rewarded answer, or the reward is constant: check the rewards on a few "
            "completions, "
            "raise num_generations, or start from a model that sometimes succeeds",
        )
    return (f"step {first.step}: reward {first.reward:.3f} ± {first.reward_std:.3f}, groups with no spread "
            f"{first.frac_reward_zero_std:.0%}")


# --- rollout (5. the rollout path) -------------------------------------------------------------------------


def check_rollout(
    settings: LabSettings,
    track: Track,
    device_type: str,
    model_path: str,
    tokenizer,
    out_dir: Path,
    prompt_tokens: int | None = None,
) -> tuple[dict, str]:
    """Configure the rollout path (refusing what cannot run) and say which engine produces completions: the path's
    engine decides (grpolab.rollouts).

    Returns (GRPOTrainer keyword arguments, possibly with rollout_func and a "log" dict, the line to print).
    """
    from ..rollouts import configure_rollout

    return configure_rollout(
        settings,
        track,
        device_type=device_type,
        model_path=model_path,
        tokenizer=tokenizer,
        out_dir=out_dir,
        prompt_tokens=prompt_tokens,
    )


# --- runlog (6. the run log) ----------------------------------------------------------------------------


def check_runlog(record: dict, log_path=None) -> Path:
    """Append the run's line; the runlog layer's failure when it cannot be written or serialised."""
    try:
        return append_run(record, log_path)
    except OSError as error:
        raise runlog_failure(error) from error
    except ValueError as error:  # a value JSON cannot hold (NaN, inf): the line is refused whole, the log untouched
        raise LayerFailure(
            "runlog",
            f"the run's line could not be written as JSON: {error}",
            "report this as a bug, with the output above",
        ) from error
