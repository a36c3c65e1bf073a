"""The GRPO lab: pass@1 before, GRPO with a LoRA adapter, pass@1 after, one run-log line and a plot."""

from __future__ import annotations

import time

from .errors import LayerFailure
from .paths import runs_dir
from .run import recorded_run
from .settings import LabSettings, resolve_settings
from .smoke import check_adapter, check_device, check_rewards, group_collapsed, run_smoke, say_layer, train_with_rollout
from .tracks import Track

SMOKE_MODES = ("auto", "always", "never")


def smoke_needed(mode: str, log_path=None) -> list[str]:
    """Why the smoke test must run before the lab (empty: it need not).

    auto: when no smoke test has passed, or the driver, the torch build or a pinned package changed since
    the last one that did (the lesson: re-run the small one after every environment change).
    """
    from .fingerprint import environment_fingerprint, fingerprint_drift
    from .runlog import last_passing_smoke

    if mode == "never":
        return []
    if mode == "always":
        return ["asked for (--smoke always)"]
    last = last_passing_smoke(log_path)
    if last is None:
        return ["no smoke test has passed in this environment yet"]
    return fingerprint_drift(last.get("fingerprint", {}), environment_fingerprint())


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
            f"(generation {record.generation_seconds:.2f}, reward {record.reward_seconds:.3f}, update {record.update_seconds:.2f})  "
            f"ETA {format_duration(remaining)}"
        )

    return show


def run_lab(settings: LabSettings, track: Track, smoke: str = "auto", log_path=None, say=print) -> dict:
    from .data import load_lab_datasets
    from .estimate import run_estimate
    from .evaluate import pass_at_1
    from .fingerprint import environment_fingerprint
    from .memory import PeakMemoryMeter, peak_memory_line
    from .plot import plot_run
    from .tiny_model import resolve_model_name
    from .training import load_model, load_tokenizer, step_recorder, torch_dtype

    reasons = smoke_needed(smoke, log_path)
    if reasons:
        say("running the smoke test first: " + "; ".join(reasons))
        run_smoke(resolve_settings(track, smoke=True), track, log_path=log_path, say=say)
        say("smoke test passed; starting the lab\n")

    say(f"GRPO lab, track {track.name}. Settings:\n{settings.describe()}")
    with recorded_run("lab", settings, log_path=log_path, say=say) as record:
        device_type, line = check_device(track)
        record["device"] = device_type
        say_layer(say, "device", line)

        train, heldout = load_lab_datasets(settings.dataset, settings.train_size, settings.heldout_size, settings.seed)
        reward_funcs, rewards_line = check_rewards(settings, train.column_names)
        heldout_rows = list(heldout)
        if not heldout_rows:
            raise LayerFailure("input", "heldout_size is 0: the lab measures pass@1 on held-out problems before and after", "set --heldout-size to 50 or more")

        model_path = resolve_model_name(settings.model)
        record["model_path"] = model_path
        tokenizer = load_tokenizer(model_path)
        meter = PeakMemoryMeter(device_type, unified_memory=track.unified_memory).start()  # before the model loads
        estimate = run_estimate(model_path, settings, meter, tokenizer, train, say)
        record["peak_memory_gb_predicted"] = estimate and round(estimate.modelled_gb, 3)
        model = load_model(model_path, torch_dtype(settings, device_type))
        if device_type != "cpu":
            model.to(device_type)
        eval_tokens = settings.eval_max_new_tokens or settings.max_completion_length
        say(f"held-out pass@1 before training ({len(heldout_rows)} problems, greedy)...")
        record["pass_at_1_before"] = before = pass_at_1(model, tokenizer, heldout_rows, eval_tokens)
        say(f"  pass@1 before: {before:.3f}")

        peft_model, line = check_adapter(model, settings)
        say_layer(say, "adapter", line)
        say_layer(say, "rewards", rewards_line)
        run_dir = runs_dir() / record["run_id"]
        recorder = step_recorder(reward_funcs, on_record=progress_printer(settings, say))

        def announce(rollout_line):
            say_layer(say, "rollout", rollout_line)
            say(f"training {settings.max_steps} steps...")

        trainer, _ = train_with_rollout(settings, track, device_type, model_path, peft_model, tokenizer, train, reward_funcs, run_dir, recorder, record, announce)
        steps = recorder.records
        if steps and group_collapsed(steps[0]):
            say("  warning: the first logged step had no reward spread in any group (group collapse)")

        say("held-out pass@1 after training...")
        record["pass_at_1_after"] = after = pass_at_1(trainer.model, tokenizer, heldout_rows, eval_tokens)
        say(f"  pass@1 after: {after:.3f} (before {before:.3f})")

        record["steps"] = [
            {"step": r.step, "reward": r.reward, "reward_std": r.reward_std, "frac_reward_zero_std": r.frac_reward_zero_std,
             "seconds": round(r.seconds, 4), "generation_s": round(r.generation_seconds, 4), "reward_s": round(r.reward_seconds, 4), "update_s": round(r.update_seconds, 4)}
            for r in steps
        ]
        if steps:
            record["first_reward"], record["last_reward"] = steps[0].reward, steps[-1].reward
            count = len(steps)
            record["seconds_per_step"] = round(sum(r.seconds for r in steps) / count, 4)
            record["time_split_s_per_step"] = split = {
                "generation": round(sum(r.generation_seconds for r in steps) / count, 4),
                "reward": round(sum(r.reward_seconds for r in steps) / count, 4),
                "update": round(sum(r.update_seconds for r in steps) / count, 4),
            }
        meter.stop()
        record.update(meter.fields(predicted_gb=estimate and estimate.modelled_gb))
        record["fingerprint"] = environment_fingerprint()
        plot = plot_run(record, run_dir / "reward.png")
        record["plot"] = str(plot)
        adapter_dir = run_dir / "adapter"
        trainer.model.save_pretrained(adapter_dir)
        record["adapter"] = str(adapter_dir)

        say("\nsummary")
        say(f"  pass@1          {before:.3f} -> {after:.3f} on {len(heldout_rows)} held-out problems")
        if steps:
            say(f"  reward          {steps[0].reward:.3f} (step {steps[0].step}) -> {steps[-1].reward:.3f} (step {steps[-1].step})")
            total = split["generation"] + split["reward"] + split["update"] or 1.0
            say(f"  seconds/step    {record['seconds_per_step']:.3f}: generation {split['generation']:.3f} ({split['generation'] / total:.0%}), "
                f"reward {split['reward']:.3f} ({split['reward'] / total:.0%}), update {split['update']:.3f} ({split['update'] / total:.0%})")
        say(f"  peak memory     {peak_memory_line(record)}")
        say(f"  rollout path    {settings.rollout}{' (stale: max lag ' + str(record['rollout'].get('max_lag_steps')) + ' steps)' if record['rollout'].get('stale') else ''}")
        if record["rollout"].get("stale"):
            say("                  stale rollouts: the reward above is the old sampler's; held-out pass@1 is what training did")
        say(f"  plot            {plot}")
        say(f"  adapter         {adapter_dir}")
    return record
