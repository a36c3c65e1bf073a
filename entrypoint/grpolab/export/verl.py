"""Hand the lab to verl on Ray: a self-contained bundle that runs the same GRPO run on a cluster.

`export_bundle(settings, out_dir, engine="verl", nodes=1, gpus_per_node=1)` writes

    README.md         what maps to what (our setting -> verl key), what differs, how to run it
    overrides.txt     the Hydra overrides for `python3 -m verl.trainer.main_ppo`, one per line
    run.sh            the launch command (one machine, or the entrypoint `ray job submit` runs)
    ray.sh            start a Ray head, join workers, submit the job
    reward.py         our reward code, inlined, behind verl's `compute_score`
    check.py          checks the bundle offline against the installed verl (no GPU needed;
                      a copy of grpolab/export/verl_check.py)
    data/train.parquet, data/heldout.parquet   the lab's problems in verl's format
    model/            the built-in tiny model, when the lab uses it
    settings.json     the lab settings the bundle was made from

The mapping from our settings to verl's configuration keys is the table `MAPPING` below, and nothing
else: every lab setting is either mapped there or listed in `NOT_MAPPED` with the reason, and a setting
verl cannot express is refused with a sentence (`ExportRefused`), never dropped.

Checked against verl 0.9.1 (lockfiles/verl-check.txt): tests/test_verl_export.py composes the overrides onto
verl's own ppo_trainer.yaml, runs verl's config validation, loads reward.py through verl's reward loader
and reads the parquet through verl's RLHFDataset. This module imports nothing from verl.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..settings.lab_settings import LabSettings

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


def _data_source(settings: LabSettings) -> str:
    return settings.dataset


def _lora_targets(settings: LabSettings) -> Any:
    if settings.lora_target_modules == "all-linear":
        return "all-linear"
    return [name.strip() for name in settings.lora_target_modules.split(",") if name.strip()]


def _train_batch_prompts(settings: LabSettings, ctx: Context) -> int:
    # TRL: per_device_train_batch_size completions per device per step, in whole groups of num_generations.
    # verl counts prompts per step across all GPUs; each prompt is sampled rollout.n times.
    return settings.per_device_train_batch_size * ctx.gpus // settings.num_generations


_DTYPE = {"auto": "bfloat16", "bfloat16": "bfloat16", "float16": "float16"}

# Our setting -> verl override keys. The one place the mapping lives; README.md is written from it.
MAPPING: tuple[Row, ...] = (
    Row("model", ("actor_rollout_ref.model.path",), lambda s, c: {"actor_rollout_ref.model.path": c.model_path},
        "a Hugging Face id as is; the built-in tiny model is copied into the bundle (model/)"),
    Row("dataset", ("data.train_files", "data.val_files"),
        lambda s, c: {"data.train_files": f"{BUNDLE_PLACEHOLDER}/{DATA_FILES['train']}",
                      "data.val_files": f"{BUNDLE_PLACEHOLDER}/{DATA_FILES['heldout']}"},
        "the problems are written into the bundle as parquet (data_source = the dataset name)"),
    Row("train_size", ("data.train_files",), lambda s, c: {}, "rows in data/train.parquet"),
    Row("heldout_size", ("data.val_files",), lambda s, c: {}, "rows in data/heldout.parquet: verl's validation set is our held-out set"),
    Row("seed", ("data.seed",), lambda s, c: {"data.seed": s.seed},
        "which training problems were drawn (baked into the parquet) and verl's shuffle of them"),
    Row("dtype", ("actor_rollout_ref.actor.fsdp_config.dtype", "actor_rollout_ref.rollout.dtype"),
        lambda s, c: {"actor_rollout_ref.actor.fsdp_config.dtype": _DTYPE[s.dtype], "actor_rollout_ref.rollout.dtype": _DTYPE[s.dtype]},
        "auto is bfloat16 on a GPU, as in the lab; verl keeps float32 master weights under FSDP mixed precision"),
    Row("lora_rank", ("actor_rollout_ref.model.lora_rank",), lambda s, c: {"actor_rollout_ref.model.lora_rank": s.lora_rank}),
    Row("lora_alpha", ("actor_rollout_ref.model.lora_alpha",), lambda s, c: {"actor_rollout_ref.model.lora_alpha": s.lora_alpha}),
    Row("lora_dropout", (), lambda s, c: {}, "verl's FSDP LoRA has no dropout: only 0.0 is exported"),
    Row("lora_target_modules", ("actor_rollout_ref.model.target_modules",),
        lambda s, c: {"actor_rollout_ref.model.target_modules": _lora_targets(s)}),
    Row("num_generations", ("actor_rollout_ref.rollout.n",), lambda s, c: {"actor_rollout_ref.rollout.n": s.num_generations}),
    Row("max_prompt_length", ("data.max_prompt_length",), lambda s, c: {"data.max_prompt_length": s.max_prompt_length},
        "the lab sets no prompt limit (TRL 1.16 has none; the setting sizes the memory estimate); verl needs one and "
        "drops longer prompts (data.filter_overlong_prompts=True; its log says how many are left)"),
    Row("max_completion_length", ("data.max_response_length",), lambda s, c: {"data.max_response_length": s.max_completion_length}),
    Row("max_steps", ("trainer.total_training_steps", "trainer.test_freq", "trainer.save_freq"),
        # verl validates and saves at its last step whatever the frequency: held-out pass@1 after training, and the
        # trained adapter (as the lab keeps its own), once each
        lambda s, c: {"trainer.total_training_steps": s.max_steps, "trainer.test_freq": s.max_steps, "trainer.save_freq": s.max_steps},
        "held-out pass@1 is measured before the first step and after the last, as in the lab; the adapter is saved at the last step"),
    Row("per_device_train_batch_size",
        ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"),
        lambda s, c: {
            "data.train_batch_size": _train_batch_prompts(s, c),
            "actor_rollout_ref.actor.ppo_mini_batch_size": _train_batch_prompts(s, c),
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": s.per_device_train_batch_size,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": s.per_device_train_batch_size,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": s.per_device_train_batch_size,
        },
        "completions per GPU per step, as in TRL: verl's train_batch_size counts prompts over all GPUs "
        "(per_device_train_batch_size x GPUs / num_generations); one optimizer step per batch, like TRL's defaults"),
    Row("learning_rate", ("actor_rollout_ref.actor.optim.lr",), lambda s, c: {"actor_rollout_ref.actor.optim.lr": s.learning_rate},
        "verl keeps it constant; TRL decays it linearly to 0 over max_steps"),
    Row("beta", ("algorithm.use_kl_in_reward", "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.kl_loss_coef",
                 "actor_rollout_ref.actor.kl_loss_type"),
        lambda s, c: ({"algorithm.use_kl_in_reward": False, "actor_rollout_ref.actor.use_kl_loss": False} if s.beta == 0 else
                      {"algorithm.use_kl_in_reward": False, "actor_rollout_ref.actor.use_kl_loss": True,
                       "actor_rollout_ref.actor.kl_loss_coef": s.beta, "actor_rollout_ref.actor.kl_loss_type": "low_var_kl"}),
        "0: no KL and no reference model, as in the lab; otherwise a KL loss (k3, clamped to [-10, 10] by verl) with coefficient beta"),
    Row("temperature", ("actor_rollout_ref.rollout.temperature",),
        lambda s, c: {"actor_rollout_ref.rollout.temperature": s.temperature},
        "sampling temperature; verl, like TRL, divides the training logits by it too"),
    Row("reward_weights", ("reward.custom_reward_function.path", "reward.custom_reward_function.name"),
        lambda s, c: {"reward.custom_reward_function.path": f"{BUNDLE_PLACEHOLDER}/reward.py",
                      "reward.custom_reward_function.name": REWARD_FUNCTION_NAME},
        "the weights are written into reward.py; score = sum of weight x reward, acc = numeric correctness"),
    Row("rollout", ("actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.load_format"),
        lambda s, c: {"actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.load_format": "safetensors"},
        "inprocess and vllm-colocate both become verl's vLLM rollout colocated with training (hybrid engine), "
        "which receives the updated adapter after every step; vllm-server and llamacpp are refused"),
    Row("vllm_gpu_memory_utilization", ("actor_rollout_ref.rollout.gpu_memory_utilization",),
        lambda s, c: {"actor_rollout_ref.rollout.gpu_memory_utilization": s.vllm_gpu_memory_utilization}),
)

# Lab settings with no verl key, and why that loses nothing.
NOT_MAPPED: dict[str, str] = {
    "track": "the cluster runs the cluster track's image (images/tracks.toml, row cluster)",
    "logging_steps": "verl logs every step",
    "vllm_server_url": "only used by rollout vllm-server, which the export refuses",
    "llamacpp_refresh_every": "only used by rollout llamacpp, which the export refuses",
    "vllm_importance_sampling_correction": "TRL's correction of vLLM's sampling; the bundle leaves verl's rollout correction off, as "
                                           "for every setting of it (its vLLM rollout is the trainer's own process's, refreshed each step)",
    "report_to": "verl logs through its own trainer.logger (console, file, tensorboard, wandb and others): add it to the launch command",
    "eval_max_new_tokens": "verl validates with the training response length; only 0 or max_completion_length is exported",
}

# Overrides that no setting of ours decides: they make verl run the lab's algorithm, on the lab's terms.
FIXED: tuple[tuple[str, Any, str], ...] = (
    ("algorithm.adv_estimator", "grpo", "GRPO: group-relative advantages, no critic"),
    ("algorithm.norm_adv_by_std_in_grpo", True, "advantages divided by the group's std, as TRL's scale_rewards='group'"),
    ("actor_rollout_ref.actor.loss_agg_mode", "token-mean", "token-level mean over the batch, as TRL's loss_type='dapo'"),
    ("actor_rollout_ref.actor.clip_ratio", 0.2, "TRL's epsilon"),
    ("actor_rollout_ref.actor.ppo_epochs", 1, "one pass over each batch, as TRL's num_iterations=1"),
    ("actor_rollout_ref.actor.entropy_coeff", 0, "no entropy bonus, as in TRL"),
    ("actor_rollout_ref.actor.optim.weight_decay", 0.0, "TRL's default"),
    ("actor_rollout_ref.model.enable_gradient_checkpointing", True, "as the lab on an accelerator"),
    ("actor_rollout_ref.model.use_remove_padding", False, "needs flash-attn, which the cluster image does not carry"),
    ("+actor_rollout_ref.model.override_config.attn_implementation", "sdpa", "PyTorch's attention: no flash-attn needed"),
    ("actor_rollout_ref.hybrid_engine", True, "training and vLLM share the GPUs"),
    ("trainer.v1.trainer_mode", "sync", "synchronous: the async modes never deliver the LoRA adapter to vLLM (verl#7495)"),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1, "one vLLM replica per GPU: the lab's models fit on one"),
    ("data.prompt_key", "prompt", "the chat list in the parquet"),
    ("data.filter_overlong_prompts", True, "drop prompts over data.max_prompt_length instead of failing"),
    ("data.truncation", "error", "never cut a prompt silently"),
    ("data.shuffle", True, "draw training batches in a seeded random order"),
    ("trainer.val_before_train", True, "held-out pass@1 before training"),
    ("trainer.logger", ["console", "file"], "the file: verl's step metrics as JSON lines (VERL_FILE_LOGGER_PATH), which `grpolab verl-result` "
     "turns into a run-log line; add wandb here (trainer.logger=[console,file,wandb])"),
    ("trainer.project_name", "grpolab", ""),
    ("trainer.default_local_dir", f"{BUNDLE_PLACEHOLDER}/checkpoints", "the last step's checkpoint, from which `grpolab verl-result` takes the adapter"),
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
    return f"{model}-{settings.dataset.rsplit('/', 1)[-1]}-r{settings.lora_rank}-g{settings.num_generations}-s{settings.seed}"


# ---------------------------------------------------------------------------------------------------------
# What verl cannot express


def refusals(settings: LabSettings, engine: str, nodes: int, gpus_per_node: int) -> list[str]:
    """Every reason the export cannot carry these settings, as sentences; empty when it can."""
    from ..task.rewards import REWARD_COLUMNS, REWARD_FUNCS

    reasons = []
    if engine not in SUPPORTED_ENGINES:
        reasons.append(f"unknown engine {engine!r}: the supported engines are {', '.join(SUPPORTED_ENGINES)}")
        return reasons
    if nodes < 1 or gpus_per_node < 1:
        reasons.append(f"nodes ({nodes}) and gpus_per_node ({gpus_per_node}) must be at least 1")
    if settings.rollout in ("llamacpp", "vllm-server"):
        why = {
            "llamacpp": "llama.cpp has no weight sync, so its rollouts go stale; verl has no such rollout",
            "vllm-server": "verl's separate rollout server is its async trainer, which never delivers a LoRA adapter (verl#7495)",
        }[settings.rollout]
        reasons.append(f"rollout {settings.rollout!r} cannot be exported to verl: {why}; use --rollout vllm-colocate")
    if settings.dtype not in _DTYPE:
        reasons.append(
            f"dtype {settings.dtype!r}: verl's FSDP trainer computes in bfloat16 or float16 (with float32 master weights); "
            "use --dtype bfloat16 (or auto)"
        )
    if settings.lora_rank <= 0:
        reasons.append(f"lora_rank {settings.lora_rank}: the export hands over a LoRA run; use a rank of at least 1")
    elif settings.lora_rank > 512:
        reasons.append(f"lora_rank {settings.lora_rank}: vLLM serves LoRA ranks up to 512")
    if settings.lora_dropout != 0:
        reasons.append(f"lora_dropout {settings.lora_dropout}: verl's FSDP LoRA has no dropout setting; use --lora-dropout 0")
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
                f"reward {name!r}: the export inlines only the built-in rewards ({', '.join(REWARD_FUNCS)}) into reward.py; "
                "your own reward would have to be importable on every node"
            )
        elif set(REWARD_COLUMNS.get(name, [])) - {ANSWER_COLUMN}:
            extra = sorted(set(REWARD_COLUMNS[name]) - {ANSWER_COLUMN})
            reasons.append(f"reward {name!r} needs the columns {extra}: verl passes each reward only the answer (ground_truth)")
        if not isinstance(weight, (int, float)) or isinstance(weight, bool):
            reasons.append(f"reward weight for {name!r} is {weight!r}: it must be a number")
    return reasons


def check_covered() -> None:
    """Every LabSettings field is mapped or explained: a new setting cannot slip through unexported."""
    names = {f.name for f in fields(LabSettings)}
    covered = {row.setting for row in MAPPING} | set(NOT_MAPPED)
    missing, stale = names - covered, covered - names
    if missing or stale:
        raise AssertionError(f"export_verl.MAPPING is out of date: unmapped settings {sorted(missing)}, unknown {sorted(stale)}")


# ---------------------------------------------------------------------------------------------------------
# The bundle


def export_bundle(settings: LabSettings, out_dir, engine: str = "verl", nodes: int = 1, gpus_per_node: int = 1) -> Path:
    """Write the bundle for `settings` into `out_dir` (created; must be empty or absent). Returns its path.

    Raises ExportRefused, naming every setting verl cannot express, before writing anything.
    """
    check_covered()
    reasons = refusals(settings, engine, nodes, gpus_per_node)
    if reasons:
        raise ExportRefused("cannot export the lab to " + engine + ":\n  - " + "\n  - ".join(reasons))
    out = Path(out_dir).resolve()
    if out.exists() and any(out.iterdir()):
        raise ExportRefused(f"{out} is not empty: export into a new folder (or remove the old bundle first)")

    from ..task.problems import load_lab_datasets

    train, heldout = load_lab_datasets(settings.dataset, settings.train_size, settings.heldout_size, settings.seed)
    for split, dataset in (("train", train), ("heldout", heldout)):
        if ANSWER_COLUMN not in dataset.column_names or "prompt" not in dataset.column_names:
            raise ExportRefused(
                f"dataset {settings.dataset!r} ({split}) has columns {sorted(dataset.column_names)}: the export needs "
                f"'prompt' (a chat list) and '{ANSWER_COLUMN}' (the exact final number), the ground truth verl's reward gets"
            )
    if len(train) == 0:
        raise ExportRefused(f"dataset {settings.dataset!r} gave no training problems (train_size {settings.train_size})")
    if len(heldout) == 0:
        raise ExportRefused("heldout_size is 0: verl's validation set is our held-out set, so it needs at least one problem")

    reward_source = reward_module_source(settings.reward_weights)  # refuses before anything is written
    out.mkdir(parents=True, exist_ok=True)
    model_path = _bundle_model(settings, out)
    ctx = Context(nodes=nodes, gpus_per_node=gpus_per_node, model_path=model_path)
    overrides = verl_overrides(settings, ctx)

    (out / "data").mkdir(exist_ok=True)
    _write_parquet(train, "train", _data_source(settings), out / DATA_FILES["train"])
    _write_parquet(heldout, "heldout", _data_source(settings), out / DATA_FILES["heldout"])
    (out / "reward.py").write_text(reward_source)
    (out / "overrides.txt").write_text(_overrides_text(overrides))
    _write_script(out / "run.sh", RUN_SH)
    _write_script(out / "ray.sh", RAY_SH.replace("@GPUS_PER_NODE@", str(gpus_per_node)))
    shutil.copyfile(Path(__file__).with_name("verl_check.py"), out / "check.py")
    (out / "settings.json").write_text(
        json.dumps({"engine": engine, "verl": VERL_VERSION, "nodes": nodes, "gpus_per_node": gpus_per_node,
                    "settings": settings.as_dict()}, indent=2) + "\n"
    )
    (out / "README.md").write_text(bundle_readme(settings, ctx, overrides, len(train), len(heldout)))
    return out


def _bundle_model(settings: LabSettings, out: Path) -> str:
    """The model path the cluster uses: the built-in tiny model travels in the bundle, anything else by name."""
    if settings.model != TINY_MODEL:
        return settings.model
    from ..model.tiny import verify_tiny_model

    source = verify_tiny_model()
    shutil.copytree(source, out / "model")
    return f"{BUNDLE_PLACEHOLDER}/model"


def verl_row(row: dict, split: str, index: int, data_source: str) -> dict:
    """One lab row (prompt, answer) as verl's RL data row."""
    return {
        "data_source": data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(row[ANSWER_COLUMN])},
        "extra_info": {"split": split, "index": index, ANSWER_COLUMN: str(row[ANSWER_COLUMN])},
    }


def _write_parquet(dataset, split: str, data_source: str, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [verl_row(row, split, i, data_source) for i, row in enumerate(dataset)]
    pq.write_table(pa.Table.from_pylist(rows), path)


def _overrides_text(overrides: list[tuple[str, Any, str]]) -> str:
    lines = [
        "# Hydra overrides for `python3 -m verl.trainer.main_ppo`, one per line; run.sh and check.py read this file.",
        f"# {BUNDLE_PLACEHOLDER} stands for this folder's absolute path (it must be the same on every node).",
        "# Written by grpolab's export; README.md says which lab setting each line comes from.",
    ]
    lines += [format_override(key, value) for key, value, _ in overrides]
    return "\n".join(lines) + "\n"


def _write_script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


# ---------------------------------------------------------------------------------------------------------
# reward.py: our reward code, unchanged, behind verl's entry point

REWARD_ENTRY_POINT = '''

# ---------------------------------------------------------------------------------------------------------
# verl's entry point (added by grpolab's export; everything above is grpolab/rewards.py, unchanged).
# verl calls it once per completion with the decoded response. `score` is the lab's weighted reward;
# `acc` is numeric correctness, logged on the held-out set as val-core/<data_source>/acc/mean@1 (pass@1).

REWARD_WEIGHTS = {weights!r}


def {name}(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    completions = [[{{"role": "assistant", "content": solution_str}}]]  # as TRL passes a chat completion
    columns = {{"answer": [ground_truth]}}
    parts = {{
        reward: float(REWARD_FUNCS[reward](completions, **{{c: columns[c] for c in REWARD_COLUMNS[reward]}})[0])
        for reward in REWARD_WEIGHTS
    }}
    score = sum(weight * parts[reward] for reward, weight in REWARD_WEIGHTS.items())
    acc = float(numeric_reward(completions, answer=[ground_truth])[0])
    return {{"score": score, "acc": acc, **parts}}
'''


def reward_module_source(reward_weights: dict[str, float]) -> str:
    """reward.py: the text of grpolab/rewards.py, then `compute_score`. It must import only the standard library."""
    from ..task import rewards

    source = inspect.getsource(rewards)
    outside = _non_stdlib_imports(source)
    if outside:
        raise ExportRefused(
            f"grpolab/rewards.py imports {', '.join(outside)}: reward.py runs on cluster nodes without grpolab, "
            "so the rewards module may import only the standard library"
        )
    header = (
        "# The lab's reward for verl, written by grpolab's export. Self-contained: it runs on every node of the\n"
        "# cluster, where grpolab is not installed. Change the rewards in grpolab and export again.\n"
    )
    weights = {name: float(weight) for name, weight in reward_weights.items()}
    return header + source.rstrip("\n") + "\n" + REWARD_ENTRY_POINT.format(weights=weights, name=REWARD_FUNCTION_NAME)


def _non_stdlib_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")] if node.level else [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if name.startswith(".") or (top not in sys.stdlib_module_names and top != "__future__"):
                found.append(name)
    return sorted(set(found))


# ---------------------------------------------------------------------------------------------------------
# Scripts and README

RUN_SH = """#!/usr/bin/env bash
# The lab on verl: run it on one machine (bash run.sh), or let Ray run it (bash ray.sh submit HEAD).
# Extra arguments are more Hydra overrides, e.g. trainer.logger=[console,wandb].
set -euo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mapfile -t OVERRIDES < <(grep -v -e '^#' -e '^[[:space:]]*$' "$BUNDLE/overrides.txt" | sed "s|@BUNDLE@|$BUNDLE|g")
# verl's step metrics, for `python -m grpolab verl-result "$BUNDLE"` afterwards
export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$BUNDLE/verl-metrics.jsonl}"
exec python3 -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@"
"""

RAY_SH = """#!/usr/bin/env bash
# The lab on a Ray cluster. The bundle must sit at the same path on every node (a shared filesystem,
# or the same copy everywhere), and every node needs the cluster image or the same verl environment.
#   bash ray.sh head               on the head node (also trains: it has GPUs too)
#   bash ray.sh worker HEAD_ADDR   on each other node
#   bash ray.sh submit HEAD_ADDR   from any machine with ray installed: runs run.sh on the cluster
#   bash ray.sh stop               on each node, afterwards
set -euo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GPUS_PER_NODE="${GPUS_PER_NODE:-@GPUS_PER_NODE@}"
case "${1:-}" in
  # --block keeps Ray in the foreground, so a container running it stays up (Ctrl-C or `docker stop` ends it).
  head) ray start --head --port=6379 --dashboard-host=0.0.0.0 --num-gpus="$GPUS_PER_NODE" --block ;;
  worker) ray start --address="${2:?usage: ray.sh worker HEAD_ADDR}:6379" --num-gpus="$GPUS_PER_NODE" --block ;;
  submit) shift; head="${1:?usage: ray.sh submit HEAD_ADDR [overrides...]}"; shift
          # verl's metrics file from every node's actors (Ray gives them the job's environment, not run.sh's)
          ray job submit --address="http://$head:8265" \\
            --runtime-env-json "{\\"env_vars\\": {\\"VERL_FILE_LOGGER_PATH\\": \\"$BUNDLE/verl-metrics.jsonl\\"}}" \\
            -- bash "$BUNDLE/run.sh" "$@" ;;
  stop) ray stop ;;
  *) echo "usage: ray.sh head | worker HEAD_ADDR | submit HEAD_ADDR [overrides...] | stop" >&2; exit 2 ;;
esac
"""


def _mapping_rows(settings: LabSettings) -> list[str]:
    """The README's table rows: each lab setting, its value, the verl keys it sets (or none) and why."""
    rows = []
    for row in MAPPING:
        value = getattr(settings, row.setting)
        keys = ", ".join(f"`{k}`" for k in row.verl_keys) or "(none)"
        rows.append(f"| `{row.setting}` = `{value!r}` | {keys} | {row.note} |")
    for name, why in NOT_MAPPED.items():
        rows.append(f"| `{name}` = `{getattr(settings, name)!r}` | (none) | {why} |")
    return rows


# Over 60 lines because it is one template: the bundle's README.md, read top to bottom as the user will.
def bundle_readme(settings: LabSettings, ctx: Context, overrides: list[tuple[str, Any, str]], n_train: int, n_heldout: int) -> str:
    mapping_lines = _mapping_rows(settings)
    fixed_lines = [f"| `{format_override(k, v)}` | {why} |" for k, v, why in FIXED]
    command = " \\\n    ".join(["python3 -m verl.trainer.main_ppo"] + [format_override(k, v) for k, v, _ in overrides])
    return f"""# The GRPO lab, handed to verl {VERL_VERSION}

This bundle runs the lab's GRPO run (model `{settings.model}`, LoRA rank {settings.lora_rank}, {settings.num_generations}
rollouts per prompt, {settings.max_completion_length}-token completions, {settings.max_steps} steps, beta {settings.beta},
rewards {settings.reward_weights}, {n_train} training and {n_heldout} held-out problems from `{settings.dataset}`) on verl,
on {ctx.nodes} node(s) x {ctx.gpus_per_node} GPU(s).

**Status: run by verl on a CPU, not yet on a GPU.** The overrides were composed onto verl {VERL_VERSION}'s own
`ppo_trainer.yaml` and passed verl's config validation, `reward.py` was loaded through verl's reward loader, and
the parquet was read through verl's `RLHFDataset` (grpolab's tests/test_verl_export.py). A bundle like this one, on
grpolab's tiny model, is also trained for 2 steps by verl {VERL_VERSION}'s own `main_ppo` on a CPU, with vLLM's CPU
build and a weight sync after each step, on every commit of grpolab (its CI, `invoke verl-cpu`). Run
`python3 check.py` in the cluster's environment to repeat the offline check there before spending GPU time.

## Run it

One machine with verl (the cluster image, `invoke build --track cluster`):

    bash run.sh                        # extra Hydra overrides may follow

A Ray cluster, the bundle at the same path on every node:

    bash ray.sh head                   # on the head node (stays in the foreground)
    bash ray.sh worker HEAD_ADDR       # on every other node (stays in the foreground)
    bash ray.sh submit HEAD_ADDR       # runs run.sh as a Ray job

In containers (host networking so Ray's ports are reachable; the bundle mounted at the same path):

    docker run -d --gpus all --network host --shm-size 16g -v "$PWD:$PWD" IMAGE shell "$PWD/ray.sh" head
    docker run -d --gpus all --network host --shm-size 16g -v "$PWD:$PWD" IMAGE shell "$PWD/ray.sh" worker HEAD_ADDR
    docker run --rm --network host -v "$PWD:$PWD" IMAGE shell "$PWD/ray.sh" submit HEAD_ADDR

where IMAGE is the cluster track's image (`grpolab:cluster`; its entrypoint's `shell` runs bash). Held-out pass@1 is logged as
`val-core/{settings.dataset}/acc/mean@1`, before the first step and after the last; the training reward as
`critic/score/mean`.

## After the run

verl writes its step metrics to `verl-metrics.jsonl` here (run.sh and ray.sh set `VERL_FILE_LOGGER_PATH`) and the
last step's checkpoint to `checkpoints/global_step_N/actor`. On the node where they are, in the cluster image:

    docker run --rm --gpus all -v "$PWD:$PWD" -e GRPOLAB_RUNS_DIR="$PWD/runs" IMAGE verl-result "$PWD"

takes the LoRA adapter out of the checkpoint with verl's own model merger (into `checkpoints/merged/lora_adapter`),
scores held-out pass@1 with grpolab's evaluator on the base model and with that adapter, and appends one run-log line
(kind `lab`, engine `verl`) to `runs/runlog.jsonl`. Give that log to `invoke report` beside your other machines' logs
(`invoke report --logs "runs/runlog.jsonl cluster/runlog.jsonl"`): the run is a row like the TRL lab's.

## What maps to what

| lab setting = value | verl key(s) | notes |
| --- | --- | --- |
{chr(10).join(mapping_lines)}

Overrides no lab setting decides, set so verl runs the lab's algorithm:

| override | why |
| --- | --- |
{chr(10).join(fixed_lines)}

## What differs from the lab on one machine

- The rollouts always come from vLLM colocated with training (verl's hybrid engine, synchronous trainer);
  after every step verl hands vLLM the updated LoRA adapter. The async trainer modes are avoided on purpose:
  with LoRA they never deliver the adapter (verl#7495).
- The learning rate is constant (verl's FSDP optimizer offers constant or cosine); TRL decays it linearly.
- Training computes in {_DTYPE.get(settings.dtype, settings.dtype)} with float32 master weights (FSDP mixed precision).
- Prompts longer than max_prompt_length are dropped; the lab keeps every prompt.
- Sampling is plain temperature sampling in both (no top-k, top-p or min-p).
- With beta > 0 verl's k3 KL estimate is clamped to [-10, 10]; TRL's is not.
- On vLLM, TRL masks completions whose vLLM-vs-trainer probability ratio leaves its bounds
  (vllm_importance_sampling_mode sequence_mask, cap 3); the bundle leaves verl's rollout correction off
  (algorithm.rollout_correction, verl's default): with synchronous colocated rollouts the two differ only
  numerically, and verl logs the gap as training/rollout_probs_diff_mean.
- Held-out pass@1 is verl's validation: greedy decoding (temperature 0) through vLLM, scored by the same
  `numeric_reward` as the lab's evaluation.

## The full command

run.sh builds it from overrides.txt ({BUNDLE_PLACEHOLDER} is this folder):

    {command}
"""
