"""Load the model, wrap it in a LoRA adapter and run TRL's GRPOTrainer: shared by the smoke test and the lab.

This module is where TRL is used, through its public surface; what the lab still takes from TRL's private methods
and attributes is in trl_private.py, with the TRL version it was read from. The host side never imports either.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..common.errors import LayerFailure
from ..common.dtypes import dtype_on
from ..settings.lab_settings import LabSettings

# PEFT 0.21 (get_peft_model: `getattr(model, "is_gradient_checkpointing", True)`) and TRL 1.16 (its
# disable_gradient_checkpointing, around every generation) read the model's `is_gradient_checkpointing`, which
# transformers 5 keeps as a deprecated alias of `is_activation_checkpointing` and warns about on every read: a
# library warning about another library, nothing our code passes. Filtered exactly (this message, this category,
# raised in transformers.modeling_utils); remove once PEFT and TRL read is_activation_checkpointing (transformers
# v6 removes the alias, and any remaining reader fails loudly then).
warnings.filterwarnings(
    "ignore",
    message=r"`is_gradient_checkpointing` is deprecated",
    category=FutureWarning,
    module=r"transformers\.modeling_utils",
)


@dataclass
class StepRecord:
    step: int
    reward: float
    reward_std: float
    frac_reward_zero_std: float
    seconds: float  # wall clock of this optimiser step
    generation_seconds: float  # producing completions, the weight sync excluded
    reward_seconds: float
    metrics: dict = field(default_factory=dict)
    # The parts only a vLLM path has (0 in-process), each outside generation and update:
    sync_seconds: float = 0.0  # TRL's sync_weights into the engine (on vLLM's CPU build with its layerwise reload)
    sync_check_seconds: float = 0.0  # the lab's lag-0 probe after a synced generation (rollouts/vllm_sync.py)
    old_logprobs_seconds: float = (
        0.0  # TRL's no-grad forward for old_per_token_logps: with vLLM, its importance-sampling correction
    )

    @property
    def update_seconds(self) -> float:
        return max(
            0.0,
            self.seconds
            - self.generation_seconds
            - self.reward_seconds
            - self.sync_seconds
            - self.sync_check_seconds
            - self.old_logprobs_seconds,
        )


def torch_dtype(settings: LabSettings, device_type: str):
    import torch

    return getattr(torch, dtype_on(settings.dtype, device_type))


def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except Exception as error:  # noqa: BLE001 - every loader failure means the same thing to the user
        raise model_not_loadable(model_path, error) from error
    if tokenizer.chat_template is None:
        raise LayerFailure(
            "input",
            f"model {model_path} has no chat template",
            "use a chat model (the lesson: the smallest model with a chat template)",
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model_path: str, dtype):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    except Exception as error:  # noqa: BLE001
        raise model_not_loadable(model_path, error) from error


def model_not_loadable(model_path: str, error: Exception) -> LayerFailure:
    where = (
        "a local folder"
        if Path(model_path).exists()
        else "neither a local folder nor in the Hugging Face cache, and could not be downloaded"
    )
    return LayerFailure(
        "input",
        f"model {model_path!r} could not be loaded: it is {where} ({type(error).__name__}: "
        f"{str(error).splitlines()[0][:300]})",
        "check the id or path; offline, download it first where the Hub is reachable (`hf download MODEL`) "
        "or use --model tiny, the built-in model",
    )


def add_adapter(model, settings: LabSettings):
    """Wrap the model in a LoRA adapter; returns (peft_model, trainable_parameters, total_parameters)."""
    from peft import LoraConfig, get_peft_model

    targets = settings.lora_target_modules
    target_modules = (
        targets if targets == "all-linear" else [name.strip() for name in targets.split(",") if name.strip()]
    )
    config = LoraConfig(
        r=settings.lora_rank,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as error:
        if "not found in the base model" not in str(error) and "matched" not in str(error):
            raise
        peft_model = None
    trainable, total = (
        peft_model.get_nb_trainable_parameters()
        if peft_model is not None
        else (0, sum(p.numel() for p in model.parameters()))
    )
    if trainable == 0:
        names = sorted(
            {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if type(module).__name__ == "Linear"}
        )
        raise LayerFailure(
            "adapter",
            f"0 trainable parameters: lora_target_modules={targets!r} matched no module of this model "
            f"(a name mismatch, not a memory problem). Its linear layers are named: {', '.join(names)}",
            "set --lora-target-modules to some of those names, or all-linear",
        )
    return peft_model, trainable, total


def guarded_reward(name: str, func):
    """Wrap a reward so that a failure names the function and the row, and its time is counted."""

    @functools.wraps(func)
    def reward(completions, **kwargs):
        started = time.perf_counter()
        try:
            values = func(completions, **kwargs)
        except Exception as error:  # noqa: BLE001 - re-raised with the layer and the row
            row = _failing_row(func, completions, kwargs)
            raise LayerFailure(
                "rewards", f"reward function {name} raised {type(error).__name__}: {error} (batch row {row})",
                f"fix {name}; rewards must return one float per completion and never raise",
            ) from error
        finally:
            reward.seconds += time.perf_counter() - started
        if len(values) != len(completions):
            raise LayerFailure(
                "rewards",
                f"reward function {name} returned {len(values)} values for {len(completions)} completions",
                "return one float per completion",
            )
        return values

    reward.seconds = 0.0
    reward.__name__ = name
    return reward


def _failing_row(func, completions, kwargs) -> str:
    for index in range(len(completions)):
        row_kwargs = {
            key: value[index : index + 1] if isinstance(value, list) and len(value) == len(completions) else value
            for key, value in kwargs.items()
        }
        try:
            func(completions[index : index + 1], **row_kwargs)
        except Exception:  # noqa: BLE001
            shown = {
                key: value[0]
                for key, value in row_kwargs.items()
                if isinstance(value, list) and value and key != "prompts"
            }
            return f"{index}: completion {completions[index]!r}, columns {shown}"
    return "unknown"


FIND_UNUSED_VARIABLE = "GRPOLAB_DDP_FIND_UNUSED_PARAMETERS"
LIVE_LOG_DIR_VARIABLES = {"tensorboard": "TENSORBOARD_LOGGING_DIR", "wandb": "WANDB_DIR"}
_live_log_dirs_set: set[str] = set()


def log_live_into(report_to: str, run_dir: Path) -> None:
    """Point the live-logging backend at the run's folder. transformers 5 reads these variables (it has no
    logging_dir argument); one the user set before the run wins. trackio keeps its own store."""
    import os

    variable = LIVE_LOG_DIR_VARIABLES.get(report_to)
    if variable and (variable not in os.environ or variable in _live_log_dirs_set):
        os.environ[variable] = str(run_dir)
        _live_log_dirs_set.add(variable)


def grpo_config(settings: LabSettings, reward_names: list[str], device_type: str, output_dir: Path, rollout: dict):
    """GRPOConfig from the lab's settings, the rewards' weights in `reward_names` order; `rollout` adds the
    rollout path's keyword arguments."""
    import torch
    from trl import GRPOConfig

    dtype = torch_dtype(settings, device_type)
    # Checkpointing trades compute for memory: worth it on an accelerator, only slower on a CPU. transformers 5.24
    # (track c) names it activation_checkpointing (gradient_checkpointing is its deprecated alias, a FutureWarning
    # whenever TRL's default True is left set); 5.17 (tracks n, s, cv: TRL's vLLM stack) knows only the old name.
    checkpointing_field = (
        "activation_checkpointing"
        if "activation_checkpointing" in GRPOConfig.__dataclass_fields__
        else "gradient_checkpointing"
    )
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.per_device_train_batch_size,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate,
        beta=settings.beta,
        temperature=settings.temperature,
        reward_weights=[settings.reward_weights[name] for name in reward_names],
        logging_steps=settings.logging_steps,
        seed=settings.seed,
        use_cpu=device_type == "cpu",
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        **{checkpointing_field: device_type != "cpu"},
        # Every trainable parameter is a LoRA weight on a layer of a text-only causal LM, and every layer runs in
        # every forward: none is unused. transformers' default is "unused ones may exist" whenever checkpointing is
        # off (the CPU), which costs a walk of the autograd graph on every backward under DDP (colocate on a CPU
        # with LOCAL_RANK set before the run; any run on several processes). GRPOLAB_DDP_FIND_UNUSED_PARAMETERS=auto
        # leaves it to transformers again, for `invoke bench.colocate --case ...` to measure what this saves.
        ddp_find_unused_parameters=None if os.environ.get(FIND_UNUSED_VARIABLE) == "auto" else False,
        save_strategy="no",
        report_to=settings.report_to,
        disable_tqdm=True,
        **rollout,
    )


def make_trainer(
    settings: LabSettings,
    peft_model,
    tokenizer,
    train_dataset,
    reward_funcs,
    device_type: str,
    output_dir: Path,
    rollout: dict,
    callbacks=(),
    probe_every_sync: bool = False,
    sync_check_steps: int | None = None,
):
    """Build the GRPOTrainer. `rollout` holds GRPOConfig keyword arguments and an optional rollout_func.
    probe_every_sync: vLLM colocate's lag-0 probe after every weight sync (the smoke test), not on a lab's schedule
    (rollouts/vllm_sync.py). sync_check_steps: that schedule for a run of so many steps (default: this one's; the smoke
    test's calibration probes as the lab it times will)."""
    from ..rollouts.vllm_cpu import engine_arguments, sync_through_vllm_reload
    from ..rollouts.vllm_sync import VllmSyncLedger, probe_prompt_ids
    from .trl_private import TimedGRPOTrainer  # TRL's private methods the lab overrides: one module, its TRL version

    rollout = dict(rollout)
    rollout_func = rollout.pop("rollout_func", None)
    engine_dtype = rollout.pop("engine_dtype", None)  # vLLM colocate on CPU: engine arguments TRL does not expose
    log_live_into(settings.report_to, Path(output_dir).parent)
    try:
        args = grpo_config(settings, [func.__name__ for func in reward_funcs], device_type, output_dir, rollout)
    except ValueError as error:  # TRL's own checks of the settings, before anything runs
        raise LayerFailure("input", f"TRL refused these settings: {error}", "change the setting it names") from error

    with engine_arguments(engine_dtype) if engine_dtype else contextlib.nullcontext():
        trainer = TimedGRPOTrainer(
            model=peft_model,
            reward_funcs=list(reward_funcs),
            args=args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            callbacks=list(callbacks),
            rollout_func=rollout_func,
        )
    if engine_dtype:  # vLLM's CPU build: TRL's sync inside vLLM's own reload protocol
        sync_through_vllm_reload(trainer.vllm_generation)
    if args.use_vllm:
        time_weight_syncs(trainer)
    if args.use_vllm and args.vllm_mode == "colocate":
        probe_ids = probe_prompt_ids(tokenizer, train_dataset)
        attach_sync_ledger(trainer, VllmSyncLedger(probe_ids, sync_check_steps or settings.max_steps, probe_every_sync))
    from transformers import PrinterCallback

    # Our step recorder prints one readable line per logged step; the raw log dicts would bury it.
    trainer.remove_callback(PrinterCallback)
    return trainer


def model_wrapper(trainer) -> str:
    """What the trainer wrapped the policy in for training: "none", or DDP with its find_unused_parameters. accelerate
    wraps in DDP only on several processes, except on a CPU whenever LOCAL_RANK is set (world size 1 included)."""
    wrapped = getattr(trainer, "model_wrapped", None)
    if wrapped is None or wrapped is trainer.model:
        return "none"
    unused = getattr(wrapped, "find_unused_parameters", None)
    return (
        f"{type(wrapped).__name__} (find_unused_parameters={unused})" if unused is not None else type(wrapped).__name__
    )


def time_weight_syncs(trainer) -> None:
    """Count the seconds of every weight sync into vLLM (TRL's sync_weights, with whatever wraps it) on the trainer."""
    sync = trainer.vllm_generation.sync_weights

    def timed_sync():
        started = time.perf_counter()
        try:
            return sync()
        finally:
            trainer.sync_seconds += time.perf_counter() - started

    trainer.vllm_generation.sync_weights = timed_sync


def attach_sync_ledger(trainer, ledger) -> None:
    """vLLM colocate's sync ledger (rollouts/vllm_sync.py), on TRL's public hooks where they serve: it follows the
    weight-sync client for which step's weights vLLM holds, and a callback hands it TRL's check of the sampled tokens
    at each step's end. TimedGRPOTrainer._generate (run/trl_private.py) calls it after each generation."""
    from transformers import TrainerCallback

    from .trl_private import logged_train_metrics

    class SampledTokensToLedger(TrainerCallback):
        # At on_step_end the step's generation is scored and TRL has not logged (and cleared) its metrics yet, and
        # the next step's sync, whose probe schedule depends on what this hands over, is still to come.
        def on_step_end(self, args, state, control, **kwargs):
            ledger.after_scoring(trainer, logged_train_metrics(trainer))

    ledger.follow_weight_syncs(trainer)
    trainer.rollout_ledger = ledger
    trainer.add_callback(SampledTokensToLedger())


def release_vllm_engine(trainer) -> bool:
    """Shut down a colocated vLLM engine the trainer started (TRL keeps it at trainer.vllm_generation.llm), so that a
    trainer built after it in this process does not run beside it, holding the memory and the cores of both. Whether
    there was one."""
    generation = getattr(trainer, "vllm_generation", None)
    llm = getattr(generation, "llm", None)
    if llm is None:
        return False
    engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if hasattr(engine_core, "shutdown"):
        engine_core.shutdown()
    generation.llm = None
    return True


def as_number(value) -> float:
    """A logged metric as a float; NaN when TRL logged None or nothing (run.checks.check_step_metrics says so)."""
    return float(value) if isinstance(value, (int, float)) else math.nan


# The seconds TimedGRPOTrainer (run/trl_private.py) counts, by the StepRecord field each becomes.
TRAINER_PARTS = ("generation_seconds", "sync_seconds", "sync_check_seconds", "old_logprobs_seconds")


def step_recorder(reward_funcs, on_record=None, stop_on=None):
    """A TrainerCallback that turns TRL's logs into StepRecords (and can stop training on a verdict)."""
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        def __init__(self):
            self.records: list[StepRecord] = []
            self.trainer = None
            self._step_started = None
            self._seconds = self._reward = 0.0
            self._parts = dict.fromkeys(TRAINER_PARTS, 0.0)  # per logged step, summed over its optimiser steps

        def _trainer_parts(self) -> dict[str, float]:
            return {part: getattr(self.trainer, part, 0.0) if self.trainer else 0.0 for part in TRAINER_PARTS}

        def on_step_begin(self, args, state, control, **kwargs):
            self._step_started = time.perf_counter()
            self._parts_before = self._trainer_parts()
            self._reward_before = sum(func.seconds for func in reward_funcs)

        def on_step_end(self, args, state, control, **kwargs):
            self._seconds += time.perf_counter() - self._step_started
            for part, seconds in self._trainer_parts().items():
                self._parts[part] += seconds - self._parts_before[part]
            self._reward += sum(func.seconds for func in reward_funcs) - self._reward_before

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs:
                return
            steps = max(1, args.logging_steps)
            record = StepRecord(
                step=state.global_step,
                reward=as_number(logs.get("reward")),
                reward_std=as_number(logs.get("reward_std")),
                frac_reward_zero_std=as_number(logs.get("frac_reward_zero_std")),
                seconds=self._seconds / steps,
                reward_seconds=self._reward / steps,
                # None too: TRL logs a metric it could not compute (a NaN mean) as None.
                metrics={
                    key: as_number(value) if value is not None else None
                    for key, value in logs.items()
                    if value is None or isinstance(value, (int, float))
                },
                **{part: seconds / steps for part, seconds in self._parts.items()},
            )
            self._seconds = self._reward = 0.0
            self._parts = dict.fromkeys(TRAINER_PARTS, 0.0)
            self.records.append(record)
            if on_record:
                on_record(record, state)
            if stop_on and stop_on(record):
                control.should_training_stop = True

    return Recorder()
