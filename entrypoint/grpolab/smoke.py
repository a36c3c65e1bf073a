"""The lesson's first run on a new machine: six layers checked in order, one line each, stop at the first failure.

Each layer is one function. They raise LayerFailure (errors.py) naming the layer and what to do.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from .errors import LayerFailure
from .run import recorded_run
from .settings import LabSettings
from .tracks import Track


def say_layer(say, layer: str, text: str) -> None:
    say(f"  ok  {layer:<11} {text}")


# --- layer 1: accelerator, driver and PyTorch build ------------------------------------------------------


def torch_build() -> dict:
    """What this PyTorch was built for: cuda, hip, mps or cpu, with the toolkit version."""
    import torch

    if torch.version.hip:
        return {"build": "hip", "version": torch.version.hip, "torch": torch.__version__}
    if torch.version.cuda:
        return {"build": "cuda", "version": torch.version.cuda, "torch": torch.__version__}
    if torch.backends.mps.is_built():
        return {"build": "mps", "version": None, "torch": torch.__version__}
    return {"build": "cpu", "version": None, "torch": torch.__version__}


def arch_covered(arch: str, arch_list: list[str]) -> str | None:
    """The entry of torch's compiled arch list that runs on `arch`, or None.

    CUDA: a cubin built for sm_XY runs on sm_XZ with Z >= Y (same major), and PTX (compute_XY) is
    compiled at load time for any newer device; so sm_120 kernels serve GB10's sm_121. ROCm: gfx targets
    must match exactly.
    """
    if arch in arch_list:
        return arch
    match = re.fullmatch(r"sm_(\d+)(\d)", arch)
    if not match:
        return None
    major, minor = int(match[1]), int(match[2])
    usable = []  # (prefer native cubins over PTX, newest first)
    for entry in arch_list:
        found = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", entry)
        if not found:
            continue
        kind, entry_major, entry_minor = found[1], int(found[2]), int(found[3])
        if kind == "sm" and entry_major == major and entry_minor <= minor:
            usable.append(((1, entry_major, entry_minor), entry))
        elif kind == "compute" and (entry_major, entry_minor) <= (major, minor):
            usable.append(((0, entry_major, entry_minor), entry))
    return max(usable)[1] if usable else None


def check_device(track: Track, expect_device: str | None = None) -> tuple[str, str]:
    """Layer 1. Returns (device type to train on, the line to print)."""
    try:
        import torch
    except Exception as error:  # noqa: BLE001
        raise LayerFailure("device", f"PyTorch does not import: {error}", "reinstall the environment from its lock (invoke build / invoke venv)") from error
    build = torch_build()
    expected = expect_device or track.expected_device
    built = f"torch {build['torch']} ({build['build']}{' ' + build['version'] if build['version'] else ''} build)"
    if expected == "cpu":
        return "cpu", f"{built} · cpu, as track {track.name} expects"
    if expected == "mps":
        if not torch.backends.mps.is_available():
            raise LayerFailure(
                "device", f"{built} sees no MPS device: training would fall back to the CPU",
                "this is the PyTorch build or macOS, not the trainer: use macOS 14+ on Apple silicon and the arm64 torch from lockfiles/m.txt (invoke venv --track m)",
            )
        return "mps", f"{built} · mps"
    # cuda: NVIDIA (CUDA build) or AMD (HIP build; ROCm devices appear as cuda in torch).
    wanted_build = track.expected_build
    if wanted_build in ("cuda", "hip") and build["build"] != wanted_build:
        raise LayerFailure(
            "device", f"{built}, but track {track.name} needs a {wanted_build.upper()} build of PyTorch",
            f"this is the PyTorch build, not the trainer: reinstall from lockfiles/{track.name}.txt (invoke build --track {track.name})",
        )
    if not torch.cuda.is_available():
        raise LayerFailure(
            "device",
            f"{built} sees no GPU: the device is cpu on a track that expects {expected} ({track.description})",
            "cpu on a machine with an accelerator is the PyTorch build or the driver, not the trainer: check "
            + ("nvidia-smi on the host, the NVIDIA Container Toolkit, and a driver new enough for this CUDA (>= 580 for CUDA 13)"
               if wanted_build != "hip" else "/dev/kfd and /dev/dri are passed to the container and your user is in the video and render groups")
            + "; run `grpolab doctor` for the details",
        )
    name = torch.cuda.get_device_name(0)
    if build["build"] == "hip":
        arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
    else:
        major, minor = torch.cuda.get_device_capability(0)
        arch = f"sm_{major}{minor}"
    arch_list = torch.cuda.get_arch_list()
    covered = arch_covered(arch, arch_list)
    if covered is None:
        raise LayerFailure(
            "device", f"{built} has no kernels for {name} ({arch}); it was compiled for {', '.join(arch_list) or 'nothing'}",
            "this is the PyTorch build: install one whose arch list covers this device (the track's lock)",
        )
    if track.expected_arch and arch != track.expected_arch:
        note = f" (track {track.name} was made for {track.expected_arch}; it runs, but the track's defaults may not fit)"
    else:
        note = ""
    return "cuda", f"{built} · cuda:0 {name} ({arch}, kernels from {covered}){note}"


# --- layer 2: the adapter ------------------------------------------------------------------------------


def check_adapter(model, settings: LabSettings) -> tuple[object, str]:
    from .training import add_adapter

    peft_model, trainable, total = add_adapter(model, settings)
    return peft_model, f"LoRA rank {settings.lora_rank} on {settings.lora_target_modules}: {trainable:,} trainable of {total:,} parameters ({100 * trainable / total:.2f}%)"


# --- layer 3: the reward functions ----------------------------------------------------------------------


def check_rewards(settings: LabSettings, columns: list[str]) -> tuple[list, str]:
    """Resolve each reward, check the dataset has the columns it needs (before any model loads)."""
    from .rewardset import resolve_reward, reward_columns
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
                "rewards", f"reward {name} needs dataset column(s) {', '.join(missing)}, which dataset {settings.dataset!r} lacks (it has {', '.join(columns)})",
                "use a dataset with those columns, or map yours to them",
            )
        funcs.append(guarded_reward(name, func))
    listed = ", ".join(f"{name} x {weight:g}" for name, weight in settings.reward_weights.items())
    return funcs, f"{listed}"


# --- layer 4: the first logged step ---------------------------------------------------------------------


def group_collapsed(record) -> bool:
    """Every group's rewards identical: no advantage, no gradient. Judged with our own tolerance
    (TRL's frac_reward_zero_std uses 1e-8 and misses weights floats cannot represent exactly)."""
    return record.frac_reward_zero_std >= 1.0 or record.reward_std <= 1e-6


def check_first_step(records) -> str:
    if not records:
        raise LayerFailure("first_step", "training logged no step", "check the trainer's output above")
    first = records[0]
    if group_collapsed(first):
        raise LayerFailure(
            "first_step",
            f"group collapse on step {first.step}: reward {first.reward:.3f} with std {first.reward_std:.3g} "
            f"(frac_reward_zero_std {first.frac_reward_zero_std:.2f}): every completion in every group scored the same, so there is nothing to learn",
            "the model cannot yet produce any rewarded answer, or the reward is constant: check the rewards on a few completions, "
            "raise num_generations, or start from a model that sometimes succeeds",
        )
    return f"step {first.step}: reward {first.reward:.3f} ± {first.reward_std:.3f}, groups with no spread {first.frac_reward_zero_std:.0%}"


# --- layer 5: the rollout engine ------------------------------------------------------------------------


def vllm_range_note() -> str:
    """Where vLLM is installed: is its version inside the range TRL's own metadata declares?"""
    from importlib.metadata import PackageNotFoundError, version

    from .doctor import trl_vllm_range, vllm_in_trl_range

    try:
        installed = version("vllm")
    except PackageNotFoundError:
        return "vLLM not installed"
    inside = vllm_in_trl_range(installed)
    verdict = "inside" if inside else "OUTSIDE" if inside is False else "unknown against"
    return f"vLLM {installed} {verdict} TRL's declared range {trl_vllm_range()}"


def check_rollout(settings: LabSettings, track: Track, device_type: str, model_path: str, tokenizer, out_dir: Path) -> tuple[dict, str]:
    """Configure the rollout path (refusing what cannot run) and say which engine produces completions.

    Returns (GRPOTrainer keyword arguments, possibly with rollout_func and a "log" dict, the line to print).
    """
    if settings.rollout == "inprocess":
        return {}, f"in-process: the policy's own generate(), always on-policy; {vllm_range_note()}"
    from .rollouts import configure_rollout

    return configure_rollout(settings, track, device_type=device_type, model_path=model_path, tokenizer=tokenizer, out_dir=out_dir)


def close_rollout(rollout: dict) -> None:
    """Free a rollout engine the run started (llama.cpp's sampler and its GGUF copies)."""
    func = rollout.get("rollout_func")
    if func is not None and hasattr(func, "close"):
        func.close()


def train_with_rollout(settings: LabSettings, track: Track, device_type: str, model_path: str, peft_model, tokenizer, train,
                       reward_funcs, output_dir: Path, recorder, record: dict, before_training=None):
    """Set up the rollout path, train, and free the rollout engine; what the smoke test and the lab share.

    Records the rollout path (with `stale` and the largest lag) in `record`; calls before_training(rollout line)
    once the engine is ready. Returns (the trainer, the rollout line).
    """
    from .training import make_trainer

    rollout, rollout_line = check_rollout(settings, track, device_type, model_path, tokenizer, Path(output_dir) / "gguf")
    record["rollout"] = {"path": settings.rollout, **rollout.pop("log", {})}
    if before_training:
        before_training(rollout_line)
    try:
        trainer = make_trainer(settings, peft_model, tokenizer, train, reward_funcs, device_type, Path(output_dir) / "trainer", rollout, [recorder])
        recorder.trainer = trainer
        trainer.train()
    finally:
        close_rollout(rollout)
    ledger = getattr(trainer, "rollout_ledger", None)
    record["rollout"].update(ledger.summary() if ledger else {"stale": False, "max_lag_steps": 0})
    return trainer, rollout_line


# --- the smoke test ------------------------------------------------------------------------------------


def run_smoke(settings: LabSettings, track: Track, expect_device: str | None = None, log_path=None, say=print) -> dict:
    """Run the six layers. Returns the run-log record; raises LayerFailure at the first failing layer."""
    from .data import load_lab_datasets
    from .estimate import run_estimate
    from .fingerprint import environment_fingerprint
    from .memory import PeakMemoryMeter, peak_memory_line
    from .tiny_model import resolve_model_name
    from .training import load_model, load_tokenizer, step_recorder, torch_dtype

    say(f"smoke test, track {track.name}: {settings.model}, {settings.train_size} prompts, {settings.num_generations} rollouts, {settings.max_steps} steps")
    with recorded_run("smoke", settings, log_path=log_path, say=say) as record:
        record["layers_passed"] = passed = []
        device_type, line = check_device(track, expect_device)
        record["device"] = device_type
        say_layer(say, "device", line)
        passed.append("device")

        train, _ = load_lab_datasets(settings.dataset, settings.train_size, 0, settings.seed)
        reward_funcs, rewards_line = check_rewards(settings, train.column_names)

        model_path = resolve_model_name(settings.model)
        record["model_path"] = model_path
        tokenizer = load_tokenizer(model_path)
        meter = PeakMemoryMeter(device_type, unified_memory=track.unified_memory).start()  # before the model loads
        estimate = run_estimate(model_path, settings, meter, tokenizer, train, say, show_table=False)
        model = load_model(model_path, torch_dtype(settings, device_type))
        peft_model, line = check_adapter(model, settings)
        say_layer(say, "adapter", line)
        passed.append("adapter")
        say_layer(say, "rewards", rewards_line)
        passed.append("rewards")

        # Stop at once when the first logged step collapsed: the verdict is in, the rest would be wasted.
        recorder = step_recorder(reward_funcs, stop_on=lambda record: len(recorder.records) == 1 and group_collapsed(record))
        with tempfile.TemporaryDirectory() as output_dir:
            _, rollout_line = train_with_rollout(settings, track, device_type, model_path, peft_model, tokenizer, train, reward_funcs, Path(output_dir), recorder, record)
        record["first_reward"] = recorder.records[0].reward if recorder.records else None
        line = check_first_step(recorder.records)
        say_layer(say, "first step", line)
        passed.append("first_step")
        say_layer(say, "rollout", rollout_line)
        passed.append("rollout")
        steps = recorder.records
        record["seconds_per_step"] = round(sum(r.seconds for r in steps) / len(steps), 4)
        record["last_reward"] = steps[-1].reward
        meter.stop()
        record.update(meter.fields(predicted_gb=estimate and estimate.modelled_gb))
        say(f"  peak memory {peak_memory_line(record)}")
        record["fingerprint"] = environment_fingerprint()
        passed.append("runlog")
    return record
