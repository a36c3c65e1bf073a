"""The lab's settings as verl's configuration: the table `MAPPING` (our setting -> verl's Hydra keys), `FIXED` (the
overrides no setting decides), `NOT_MAPPED` (each setting with no verl key, and why that loses nothing), and
`refusals`: a setting verl cannot express is refused with a sentence (`ExportRefused`), never dropped.

This is the mapping and nothing else; `grpolab.export.verl` writes the bundle from it. Checked against verl 0.9.1
(lockfiles/verl-check.txt) by tests/test_verl_export.py. This module imports nothing from verl.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ..common.rollout_paths import rollout_path
from ..settings.lab_settings import LabSettings
from ..task.rewards import REWARD_COLUMNS, REWARD_FUNCS

SUPPORTED_ENGINES = ("verl",)
VERL_VERSION = "0.9.1"  # the version this mapping is checked against; the cluster track pins the same

BUNDLE_PLACEHOLDER = "@BUNDLE@"  # stands for the bundle's absolute path; run.sh and check.py fill it in
REWARD_FUNCTION_NAME = "compute_score"
DATA_FILES = {"train": "data/train.parquet", "heldout": "data/heldout.parquet"}
ANSWER_COLUMN = "answer"
TINY_MODEL = "tiny"  # grpolab.model.tiny.TINY_MODEL: the built-in model travels inside the bundle


class ExportRefused(ValueError):
    """The settings cannot be handed to the engine as they are. `str()` says which and what to do."""


@dataclass(frozen=True)
class Context:
    """What the overrides depend on besides the lab settings."""

    nodes: int
    gpus_per_node: int
    model_path: str  # the model as the cluster sees it (the tiny model is copied into the bundle)

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Row:
    """One line of the mapping: our setting, the verl keys it sets, and how."""

    setting: str
    verl_keys: tuple[str, ...]
    values: Callable[[LabSettings, Context], dict[str, Any]]
    note: str = ""


def data_source(settings: LabSettings) -> str:
    return settings.dataset


def _lora_targets(settings: LabSettings) -> Any:
    if settings.lora_target_modules == "all-linear":
        return "all-linear"
    return [name.strip() for name in settings.lora_target_modules.split(",") if name.strip()]


def _train_batch_prompts(settings: LabSettings, ctx: Context) -> int:
    # TRL: per_device_train_batch_size completions per device per step, in whole groups of num_generations.
    # verl counts prompts per step across all GPUs; each prompt is sampled rollout.n times.
    return settings.per_device_train_batch_size * ctx.gpus // settings.num_generations


VERL_DTYPE = {"auto": "bfloat16", "bfloat16": "bfloat16", "float16": "float16"}

# Our setting -> verl override keys. The one place the mapping lives; README.md is written from it.
MAPPING: tuple[Row, ...] = (
    Row(
        "model",
        ("actor_rollout_ref.model.path",),
        lambda s, c: {"actor_rollout_ref.model.path": c.model_path},
        "a Hugging Face id as is; the built-in tiny model is copied into the bundle (model/)",
    ),
    Row(
        "dataset",
        ("data.train_files", "data.val_files"),
        lambda s, c: {
            "data.train_files": f"{BUNDLE_PLACEHOLDER}/{DATA_FILES['train']}",
            "data.val_files": f"{BUNDLE_PLACEHOLDER}/{DATA_FILES['heldout']}",
        },
        "the problems are written into the bundle as parquet (data_source = the dataset name)",
    ),
    Row("train_size", ("data.train_files",), lambda s, c: {}, "rows in data/train.parquet"),
    Row(
        "heldout_size",
        ("data.val_files",),
        lambda s, c: {},
        "rows in data/heldout.parquet: verl's validation set is our held-out set",
    ),
    Row(
        "seed",
        ("data.seed",),
        lambda s, c: {"data.seed": s.seed},
        "which training problems were drawn (baked into the parquet) and verl's shuffle of them",
    ),
    Row(
        "dtype",
        ("actor_rollout_ref.actor.fsdp_config.dtype", "actor_rollout_ref.rollout.dtype"),
        lambda s, c: {
            "actor_rollout_ref.actor.fsdp_config.dtype": VERL_DTYPE[s.dtype],
            "actor_rollout_ref.rollout.dtype": VERL_DTYPE[s.dtype],
        },
        "auto is bfloat16 on a GPU, as in the lab; verl keeps float32 master weights under FSDP mixed precision",
    ),
    Row(
        "lora_rank",
        ("actor_rollout_ref.model.lora_rank",),
        lambda s, c: {"actor_rollout_ref.model.lora_rank": s.lora_rank},
    ),
    Row(
        "lora_alpha",
        ("actor_rollout_ref.model.lora_alpha",),
        lambda s, c: {"actor_rollout_ref.model.lora_alpha": s.lora_alpha},
    ),
    Row("lora_dropout", (), lambda s, c: {}, "verl's FSDP LoRA has no dropout: only 0.0 is exported"),
    Row(
        "lora_target_modules",
        ("actor_rollout_ref.model.target_modules",),
        lambda s, c: {"actor_rollout_ref.model.target_modules": _lora_targets(s)},
    ),
    Row(
        "num_generations",
        ("actor_rollout_ref.rollout.n",),
        lambda s, c: {"actor_rollout_ref.rollout.n": s.num_generations},
    ),
    Row(
        "max_prompt_length",
        ("data.max_prompt_length",),
        lambda s, c: {"data.max_prompt_length": s.max_prompt_length},
        "the lab sets no prompt limit (TRL 1.16 has none; the setting sizes the memory estimate); verl needs one and "
        "drops longer prompts (data.filter_overlong_prompts=True; its log says how many are left)",
    ),
    Row(
        "max_completion_length",
        ("data.max_response_length",),
        lambda s, c: {"data.max_response_length": s.max_completion_length},
    ),
    Row(
        "max_steps",
        ("trainer.total_training_steps", "trainer.test_freq", "trainer.save_freq"),
        # verl validates and saves at its last step whatever the frequency: held-out pass@1 after training, and the
        # trained adapter (as the lab keeps its own), once each
        lambda s, c: {
            "trainer.total_training_steps": s.max_steps,
            "trainer.test_freq": s.max_steps,
            "trainer.save_freq": s.max_steps,
        },
        "held-out pass@1 is measured before the first step and after the last, as in the lab; the adapter is saved at "
        "the last step",
    ),
    Row(
        "per_device_train_batch_size",
        (
            "data.train_batch_size",
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        ),
        lambda s, c: {
            "data.train_batch_size": _train_batch_prompts(s, c),
            "actor_rollout_ref.actor.ppo_mini_batch_size": _train_batch_prompts(s, c),
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": s.per_device_train_batch_size,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": s.per_device_train_batch_size,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": s.per_device_train_batch_size,
        },
        "completions per GPU per step, as in TRL: verl's train_batch_size counts prompts over all GPUs "
        "(per_device_train_batch_size x GPUs / num_generations); one optimizer step per batch, like TRL's defaults",
    ),
    Row(
        "learning_rate",
        ("actor_rollout_ref.actor.optim.lr",),
        lambda s, c: {"actor_rollout_ref.actor.optim.lr": s.learning_rate},
        "verl keeps it constant; TRL decays it linearly to 0 over max_steps",
    ),
    Row(
        "beta",
        (
            "algorithm.use_kl_in_reward",
            "actor_rollout_ref.actor.use_kl_loss",
            "actor_rollout_ref.actor.kl_loss_coef",
            "actor_rollout_ref.actor.kl_loss_type",
        ),
        lambda s, c: (
            {"algorithm.use_kl_in_reward": False, "actor_rollout_ref.actor.use_kl_loss": False}
            if s.beta == 0
            else {
                "algorithm.use_kl_in_reward": False,
                "actor_rollout_ref.actor.use_kl_loss": True,
                "actor_rollout_ref.actor.kl_loss_coef": s.beta,
                "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
            }
        ),
        "0: no KL and no reference model, as in the lab; otherwise a KL loss (k3, clamped to [-10, 10] by verl) with "
        "coefficient beta",
    ),
    Row(
        "temperature",
        ("actor_rollout_ref.rollout.temperature",),
        lambda s, c: {"actor_rollout_ref.rollout.temperature": s.temperature},
        "sampling temperature; verl, like TRL, divides the training logits by it too",
    ),
    Row(
        "reward_weights",
        ("reward.custom_reward_function.path", "reward.custom_reward_function.name"),
        lambda s, c: {
            "reward.custom_reward_function.path": f"{BUNDLE_PLACEHOLDER}/reward.py",
            "reward.custom_reward_function.name": REWARD_FUNCTION_NAME,
        },
        "the weights are written into reward.py; score = sum of weight x reward, acc = numeric correctness",
    ),
    Row(
        "rollout",
        ("actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.load_format"),
        lambda s, c: {"actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.load_format": "safetensors"},
        "inprocess and vllm-colocate both become verl's vLLM rollout colocated with training (hybrid engine), "
        "which receives the updated adapter after every step; vllm-server and llamacpp are refused",
    ),
    Row(
        "vllm_gpu_memory_utilization",
        ("actor_rollout_ref.rollout.gpu_memory_utilization",),
        lambda s, c: {"actor_rollout_ref.rollout.gpu_memory_utilization": s.vllm_gpu_memory_utilization},
    ),
)

# Lab settings with no verl key, and why that loses nothing.
NOT_MAPPED: dict[str, str] = {
    "track": "the cluster runs the cluster track's image (images/tracks.toml, row cluster)",
    "logging_steps": "verl logs every step",
    "vllm_server_url": "only used by rollout vllm-server, which the export refuses",
    "llamacpp_refresh_every": "only used by rollout llamacpp, which the export refuses",
    "vllm_importance_sampling_correction": "TRL's correction of vLLM's sampling; the bundle leaves verl's rollout "
                                           "correction off, as "
    "for every setting of it (its vLLM rollout is the trainer's own process's, refreshed each step)",
    "report_to": "verl logs through its own trainer.logger (console, file, tensorboard, wandb and others): add it to "
                 "the launch command",
    "eval_max_new_tokens": "verl validates with the training response length; only 0 or max_completion_length is "
                           "exported",
}

# Overrides that no setting of ours decides: they make verl run the lab's algorithm, on the lab's terms.
FIXED: tuple[tuple[str, Any, str], ...] = (
    ("algorithm.adv_estimator", "grpo", "GRPO: group-relative advantages, no critic"),
    (
        "algorithm.norm_adv_by_std_in_grpo",
        True,
        "advantages divided by the group's std, as TRL's scale_rewards='group'",
    ),
    (
        "actor_rollout_ref.actor.loss_agg_mode",
        "token-mean",
        "token-level mean over the batch, as TRL's loss_type='dapo'",
    ),
    ("actor_rollout_ref.actor.clip_ratio", 0.2, "TRL's epsilon"),
    ("actor_rollout_ref.actor.ppo_epochs", 1, "one pass over each batch, as TRL's num_iterations=1"),
    ("actor_rollout_ref.actor.entropy_coeff", 0, "no entropy bonus, as in TRL"),
    ("actor_rollout_ref.actor.optim.weight_decay", 0.0, "TRL's default"),
    ("actor_rollout_ref.model.enable_gradient_checkpointing", True, "as the lab on an accelerator"),
    ("actor_rollout_ref.model.use_remove_padding", False, "needs flash-attn, which the cluster image does not carry"),
    (
        "+actor_rollout_ref.model.override_config.attn_implementation",
        "sdpa",
        "PyTorch's attention: no flash-attn needed",
    ),
    ("actor_rollout_ref.hybrid_engine", True, "training and vLLM share the GPUs"),
    (
        "trainer.v1.trainer_mode",
        "sync",
        "synchronous: the async modes never deliver the LoRA adapter to vLLM (verl#7495)",
    ),
    (
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        1,
        "one vLLM replica per GPU: the lab's models fit on one",
    ),
    ("data.prompt_key", "prompt", "the chat list in the parquet"),
    ("data.filter_overlong_prompts", True, "drop prompts over data.max_prompt_length instead of failing"),
    ("data.truncation", "error", "never cut a prompt silently"),
    ("data.shuffle", True, "draw training batches in a seeded random order"),
    ("trainer.val_before_train", True, "held-out pass@1 before training"),
    (
        "trainer.logger",
        ["console", "file"],
        "the file: verl's step metrics as JSON lines (VERL_FILE_LOGGER_PATH), which `grpolab verl-result` "
        "turns into a run-log line; add wandb here (trainer.logger=[console,file,wandb])",
    ),
    ("trainer.project_name", "grpolab", ""),
    (
        "trainer.default_local_dir",
        f"{BUNDLE_PLACEHOLDER}/checkpoints",
        "the last step's checkpoint, from which `grpolab verl-result` takes the adapter",
    ),
)


def verl_overrides(settings: LabSettings, ctx: Context) -> list[tuple[str, Any, str]]:
    """(key, value, why) for every override, in table order: FIXED first, then MAPPING."""
    out = [(key, value, why) for key, value, why in FIXED]
    out.append(("trainer.experiment_name", _experiment_name(settings), "settings.json says which settings"))
    out.append(("trainer.nnodes", ctx.nodes, "--nodes"))
    out.append(("trainer.n_gpus_per_node", ctx.gpus_per_node, "--gpus-per-node"))
    for row in MAPPING:
        values = row.values(settings, ctx)
        unknown = set(values) - set(row.verl_keys)
        assert not unknown, f"MAPPING row {row.setting} sets keys it does not list: {unknown}"
        out.extend((key, value, row.setting) for key, value in values.items())
    return out


def format_override(key: str, value: Any) -> str:
    """One Hydra command-line override, `key=value`, in Hydra's own value grammar."""
    return f"{key}={_hydra_value(value)}"


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if isinstance(value, int) or re.fullmatch(r"[\w./@:+~-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"  # Hydra's quoted string


def _experiment_name(settings: LabSettings) -> str:
    model = settings.model.rstrip("/").rsplit("/", 1)[-1]
    dataset = settings.dataset.rsplit("/", 1)[-1]
    return f"{model}-{dataset}-r{settings.lora_rank}-g{settings.num_generations}-s{settings.seed}"


# ---------------------------------------------------------------------------------------------------------
# What verl cannot express


def refusals(settings: LabSettings, engine: str, nodes: int, gpus_per_node: int) -> list[str]:
    """Every reason the export cannot carry these settings, as sentences; empty when it can."""
    reasons = []
    if engine not in SUPPORTED_ENGINES:
        reasons.append(f"unknown engine {engine!r}: the supported engines are {', '.join(SUPPORTED_ENGINES)}")
        return reasons
    if nodes < 1 or gpus_per_node < 1:
        reasons.append(f"nodes ({nodes}) and gpus_per_node ({gpus_per_node}) must be at least 1")
    why = rollout_path(settings.rollout).VERL_REFUSAL  # each path says whether verl can run it
    if why:
        reasons.append(f"rollout {settings.rollout!r} cannot be exported to verl: {why}; use --rollout vllm-colocate")
    if settings.dtype not in VERL_DTYPE:
        reasons.append(
            f"dtype {settings.dtype!r}: verl's FSDP trainer computes in bfloat16 or float16 (with float32 master "
            "weights); "
            "use --dtype bfloat16 (or auto)"
        )
    if settings.lora_rank <= 0:
        reasons.append(f"lora_rank {settings.lora_rank}: the export hands over a LoRA run; use a rank of at least 1")
    elif settings.lora_rank > 512:
        reasons.append(f"lora_rank {settings.lora_rank}: vLLM serves LoRA ranks up to 512")
    if settings.lora_dropout != 0:
        reasons.append(
            f"lora_dropout {settings.lora_dropout}: verl's FSDP LoRA has no dropout setting; use --lora-dropout 0"
        )
    if not _lora_targets(settings):
        reasons.append("lora_target_modules is empty: name the modules (q_proj,v_proj) or use all-linear")
    if settings.temperature <= 0:
        reasons.append(f"temperature {settings.temperature}: GRPO samples, so it must be above 0")
    if settings.eval_max_new_tokens not in (0, settings.max_completion_length):
        reasons.append(
            f"eval_max_new_tokens {settings.eval_max_new_tokens}: verl evaluates with the training response length "
            f"({settings.max_completion_length}); use 0"
        )
    if settings.per_device_train_batch_size % settings.num_generations:
        reasons.append(
            f"per_device_train_batch_size {settings.per_device_train_batch_size} is not a multiple of num_generations "
            f"{settings.num_generations}: verl samples whole groups"
        )
    if settings.max_steps < 1:
        reasons.append(f"max_steps {settings.max_steps}: verl needs at least one step")
    for name, weight in settings.reward_weights.items():
        if name not in REWARD_FUNCS:
            reasons.append(
                f"reward {name!r}: the export inlines only the built-in rewards ({', '.join(REWARD_FUNCS)}) into "
                "reward.py; "
                "your own reward would have to be importable on every node"
            )
        elif set(REWARD_COLUMNS.get(name, [])) - {ANSWER_COLUMN}:
            extra = sorted(set(REWARD_COLUMNS[name]) - {ANSWER_COLUMN})
            reasons.append(
                f"reward {name!r} needs the columns {extra}: verl passes each reward only the answer (ground_truth)"
            )
        if not isinstance(weight, (int, float)) or isinstance(weight, bool):
            reasons.append(f"reward weight for {name!r} is {weight!r}: it must be a number")
    return reasons


def check_covered() -> None:
    """Every LabSettings field is mapped or explained: a new setting cannot slip through unexported."""
    names = {f.name for f in fields(LabSettings)}
    covered = {row.setting for row in MAPPING} | set(NOT_MAPPED)
    missing, stale = names - covered, covered - names
    if missing or stale:
        raise AssertionError(
            f"grpolab.export.verl_mapping.MAPPING is out of date: unmapped settings {sorted(missing)}, unknown "
            f"{sorted(stale)}"
        )
