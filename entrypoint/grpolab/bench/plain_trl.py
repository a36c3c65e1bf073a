"""Plain TRL on the lab's settings, for the side-by-side benchmark (`invoke bench.versus-trl`).

    python -m grpolab.bench plain-trl --track c --max-steps 40 --seed 0 [--device cuda] [--observers meter,sampler,...]
    [--out FILE]

The same model, data, rewards and settings as `grpolab lab --track c`, trained the way TRL's documentation
shows it: a GRPOConfig, a GRPOTrainer given the model's path, the reward functions and a PEFT LoraConfig,
then trainer.train(). Nothing of the lab runs in the loop unless named in --observers, each of which adds one
of the lab's observers, so that the benchmark can price them one at a time:

    meter     the peak-memory meter (grpolab.memory.peak.PeakMemoryMeter), started before the model loads, as the lab
              runs it on this device (a CPU: no sampling thread; a GPU: mem_get_info polled every 20 ms)
    sampler   the meter with its sampling thread forced on (every 20 ms)
    unsampled the meter with its sampling thread forced off (on a GPU: the price of the polling, against meter)
    recorder  the lab's step recorder: per-step wall clock split into generation, reward and update
    checks    the recorder plus the lab's per-step checks and its one printed line per logged step

Writes its result as JSON to --out, and prints it as the last line of stdout: seconds per step (transformers' own
train_runtime over the steps run, the basis the benchmark also reads from the lab's run log), and the split when the
recorder ran.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

OBSERVERS = ("meter", "sampler", "unsampled", "recorder", "checks")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`python -m grpolab.bench plain-trl`'s options (commands.py builds the parser; the text above is its --help)."""
    parser.description = __doc__.split("\n\n")[0]
    parser.epilog = __doc__.split("\n\n", 2)[2]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--track", default="c", help="whose lab settings (default c)")
    parser.add_argument("--max-steps", type=int, default=40, help="training steps (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu; the lab's dtype for it)"
    )
    parser.add_argument(
        "--observers",
        type=observer_list,
        default=[],
        help=f"comma-separated, any of {', '.join(OBSERVERS)} (default none: plain TRL)",
    )
    parser.add_argument("--out", type=Path, help="also write the result's JSON to this file")


def observer_list(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    unknown = set(names) - set(OBSERVERS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown observer(s) {', '.join(sorted(unknown))}: choose from {', '.join(OBSERVERS)}"
        )
    return names


def lab_inputs(track_name: str, max_steps: int, seed: int):
    """(settings, model folder, training rows, reward functions in the lab's order): exactly what the lab
    would train on. Made before anything is timed."""
    from ..task.reward_choice import resolve_reward
    from ..task.problems import load_lab_datasets
    from ..settings.lab_settings import resolve_settings
    from ..model.tiny import resolve_model_name
    from ..common.tracks import get_track

    settings = resolve_settings(get_track(track_name), overrides={"max_steps": max_steps, "seed": seed})
    train, _ = load_lab_datasets(settings.dataset, settings.train_size, 0, settings.seed)
    rewards = [resolve_reward(name) for name in settings.reward_weights]
    return settings, resolve_model_name(settings.model), train, rewards


def documented_trainer(settings, model_path: str, train, rewards, device_type: str, output_dir: str, callbacks=()):
    """GRPOTrainer as TRL's documentation builds it (the model by its path, a PEFT LoraConfig), on the lab's settings:
    the GRPOConfig is the lab's own (grpolab.run.training.grpo_config), so that the two cannot differ in a setting."""
    from peft import LoraConfig
    from trl import GRPOTrainer

    from ..run.training import grpo_config, torch_dtype

    # TRL loads the model itself here: in the dtype the lab would load it in on this device.
    args = grpo_config(settings, list(settings.reward_weights), device_type, output_dir,
                       {"model_init_kwargs": {"dtype": torch_dtype(settings, device_type)}})
    peft_config = LoraConfig(r=settings.lora_rank, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                             target_modules=settings.lora_target_modules, task_type="CAUSAL_LM")
    return GRPOTrainer(
        model=model_path,
        reward_funcs=rewards,
        args=args,
        train_dataset=train,
        peft_config=peft_config,
        callbacks=list(callbacks),
    )


def timed_generation(trainer) -> None:
    """The lab's generation timer (TimedGRPOTrainer's), put on this trainer."""
    generate = trainer._generate
    trainer.generation_seconds = 0.0

    def timed(prompts):
        started = time.perf_counter()
        try:
            return generate(prompts)
        finally:
            trainer.generation_seconds += time.perf_counter() - started

    trainer._generate = timed


def make_meter(observers: set[str], device_type: str):
    """The meter the observers ask for (None for none): as the lab runs it, or its sampling forced on or off."""
    from ..memory.peak import PeakMemoryMeter

    if "sampler" in observers or "unsampled" in observers:
        class Meter(PeakMemoryMeter):
            needs_sampling = "sampler" in observers

        return Meter(device_type)
    return PeakMemoryMeter(device_type) if "meter" in observers else None


def run(args: argparse.Namespace) -> dict:
    from contextlib import nullcontext

    from ..run.training import guarded_reward, step_recorder

    settings, model_path, train, rewards = lab_inputs(args.track, args.max_steps, args.seed)
    observers = set(args.observers)
    if "checks" in observers:
        observers.add("recorder")
    meter = make_meter(observers, args.device)
    recorder = None
    if "recorder" in observers:
        from ..run.pipeline_shapes import LAB
        from ..run.pipeline_train import step_check

        rewards = [guarded_reward(name, func) for name, func in zip(settings.reward_weights, rewards)]
        on_record = (
            step_check(settings, LAB, lambda line: print(line, file=sys.stderr)) if "checks" in observers else None
        )
        recorder = step_recorder(rewards, on_record=on_record)
    with meter if meter else nullcontext(), tempfile.TemporaryDirectory() as out:
        trainer = documented_trainer(
            settings, model_path, train, rewards, args.device, out, callbacks=[recorder] if recorder else []
        )
        if recorder:
            timed_generation(trainer)
            recorder.trainer = trainer
        output = trainer.train()
    steps = trainer.state.global_step
    result = {
        "device": args.device,
        "observers": sorted(args.observers),
        "steps": steps,
        "train_runtime_s": round(output.metrics["train_runtime"], 3),
        "seconds_per_step": round(output.metrics["train_runtime"] / max(1, steps), 4),
        "last_reward": next((log["reward"] for log in reversed(trainer.state.log_history) if "reward" in log), None),
    }
    if recorder and recorder.records:
        from ..run.pipeline_record import step_averages

        result["recorder"] = step_averages(recorder.records)
    if meter:
        result["peak_memory_gb_measured"] = meter.fields()["peak_memory_gb_measured"]
    return result


def main(args: argparse.Namespace) -> int:
    text = json.dumps(run(args))
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0
