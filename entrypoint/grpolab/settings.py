"""The lab's settings: one dataclass whose defaults are the lesson's.

Precedence, lowest first: the lesson's defaults below, the track's [tracks.T.lab] row in
images/tracks.toml, a config file (--config, TOML or JSON), then command-line flags.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .tracks import Track

ROLLOUT_PATHS = ("inprocess", "vllm-colocate", "vllm-server", "llamacpp")
# Live logging backends TRL's report_to accepts that we offer, each with the package it needs.
REPORT_TO_PACKAGES = {"none": None, "tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class LabSettings:
    # Which machine, model and data.
    track: str = "c"
    model: str = "Qwen/Qwen3-1.7B"  # a Hugging Face id, a local path, or "tiny" (the built-in model)
    dataset: str = "arithmetic"  # the built-in generator, or a Hugging Face dataset id (openai/gsm8k)
    train_size: int = 1000  # training prompts drawn from the dataset
    heldout_size: int = 200  # held-out problems for pass@1, never seen in training
    seed: int = 0
    dtype: str = "auto"  # auto: bf16 on CUDA/ROCm, float32 on MPS and CPU

    # The adapter: rank-16 LoRA on every linear layer.
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: str = "all-linear"  # comma-separated names, or all-linear

    # GRPO, with TRL's defaults where the lesson does not say otherwise.
    num_generations: int = 8  # rollouts per prompt (G)
    max_prompt_length: int = 256
    max_completion_length: int = 512
    max_steps: int = 200
    per_device_train_batch_size: int = 8  # completions per step; must be a multiple of num_generations
    learning_rate: float = 1e-5
    beta: float = 0.0  # 0: no reference model is loaded and no kl is logged
    temperature: float = 1.0
    logging_steps: int = 1
    reward_weights: dict[str, float] = field(default_factory=lambda: {"numeric_reward": 1.0, "format_reward": 0.25})

    # Where completions come from.
    rollout: str = "inprocess"
    vllm_gpu_memory_utilization: float = 0.3  # colocate only; TRL's default
    vllm_server_url: str = "http://localhost:8000"
    llamacpp_refresh_every: int = 0  # 0: never refresh the sampler (stale); K: re-export every K steps

    # Live logging: TRL's report_to, into the run's folder (none, tensorboard, trackio, wandb where installed).
    report_to: str = "none"

    # Evaluation.
    eval_max_new_tokens: int = 0  # 0: same as max_completion_length

    def validate(self) -> None:
        """Raise ValueError with an actionable sentence for settings that cannot run."""
        if self.num_generations < 2:
            raise ValueError(f"num_generations is {self.num_generations}: GRPO compares completions within a group, so it needs at least 2")
        if self.per_device_train_batch_size % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size {self.per_device_train_batch_size} is not a multiple of num_generations "
                f"{self.num_generations}: TRL needs whole groups per batch; try {self.num_generations * max(1, self.per_device_train_batch_size // self.num_generations)}"
            )
        if self.rollout not in ROLLOUT_PATHS:
            raise ValueError(f"unknown rollout path {self.rollout!r}: choose one of {', '.join(ROLLOUT_PATHS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            raise ValueError("vllm_gpu_memory_utilization must be between 0 and 1")
        self.validate_report_to()
        if not self.reward_weights:
            raise ValueError("reward_weights is empty: a run needs at least one reward function")

    def validate_report_to(self) -> None:
        """Refuse a live-logging backend that is unknown or not installed, before any model loads."""
        import importlib.util

        if self.report_to not in REPORT_TO_PACKAGES:
            raise ValueError(f"unknown --report-to {self.report_to!r}: choose one of {', '.join(REPORT_TO_PACKAGES)}")
        package = REPORT_TO_PACKAGES[self.report_to]
        if package and importlib.util.find_spec(package) is None:
            raise ValueError(
                f"--report-to {self.report_to} needs the {package} package, which this environment does not have; "
                f"install it (pip install {package}) or use a track whose lock has it, or leave --report-to at none"
            )

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """Every setting, one per line, for the top of each run."""
        width = max(len(f.name) for f in fields(self))
        return "\n".join(f"  {f.name:<{width}}  {getattr(self, f.name)!r}" for f in fields(self))


SETTING_NAMES = {f.name for f in fields(LabSettings)}


def read_config_file(path: Path) -> dict:
    text = Path(path).read_bytes()
    data = tomllib.loads(text.decode()) if str(path).endswith(".toml") else json.loads(text)
    unknown = set(data) - SETTING_NAMES
    if unknown:
        raise ValueError(f"{path}: unknown settings {', '.join(sorted(unknown))}; known: {', '.join(sorted(SETTING_NAMES))}")
    return data


def resolve_settings(track: Track, config_file: Path | None = None, overrides: dict | None = None, smoke: bool = False) -> LabSettings:
    """Lesson defaults < track row < config file < overrides (None values in overrides are ignored).

    smoke: the smoke test of the lab those settings describe (smoke_settings), the flags in `overrides`
    honoured over its sizes.
    """
    values: dict = {"track": track.name, "rollout": track.rollout}
    values.update({key: value for key, value in track.lab.items() if key != "smoke_model"})
    if config_file:
        values.update(read_config_file(config_file))
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    values.update(flags)
    unknown = set(values) - SETTING_NAMES
    if unknown:
        raise ValueError(f"unknown settings {', '.join(sorted(unknown))}")
    settings = LabSettings(**values)
    if smoke:
        return smoke_settings(settings, track, flags)
    settings.validate()
    return settings


# The lesson's first run on a new machine: ten prompts, four rollouts, ten steps, every step logged.
SMOKE_SIZES = {"train_size": 10, "num_generations": 4, "max_steps": 10, "logging_steps": 1}
# The smoke test trains but does not evaluate: flags for the held-out evaluation are refused, not ignored.
LAB_ONLY_SETTINGS = ("heldout_size", "eval_max_new_tokens")


def smoke_settings(lab: LabSettings, track: Track, flags: dict | None = None) -> LabSettings:
    """The smoke test of the lab `lab` describes: its rollout path, rewards, dtype, adapter and sampling, on
    the track's smoke_model where the lab uses the track's model (same family, smaller), at the lesson's
    first-run sizes. `flags` (what the user typed) win over those sizes; none is silently overwritten.

    Server mode keeps the lab's model: the vLLM server holds that model and the trainer streams its weights
    into it, so a smaller model could not be smoke-tested against it.
    """
    flags = flags or {}
    refused = [name for name in LAB_ONLY_SETTINGS if name in flags]
    if refused:
        raise ValueError(
            f"the smoke test does not evaluate held-out problems, so {', '.join('--' + n.replace('_', '-') for n in refused)} "
            "would change nothing: leave it out, or give it to `grpolab lab`"
        )
    values = {**lab.as_dict(), **SMOKE_SIZES, "heldout_size": 0}
    smoke_model = track.lab.get("smoke_model")
    uses_track_model = lab.model == track.lab.get("model", LabSettings.model)
    if smoke_model and uses_track_model and lab.rollout != "vllm-server":
        values["model"] = smoke_model
    # Two groups per step, whatever the group size: TRL needs whole groups per batch.
    values["per_device_train_batch_size"] = 2 * flags.get("num_generations", SMOKE_SIZES["num_generations"])
    values.update(flags)
    settings = LabSettings(**values)
    settings.validate()
    return settings
