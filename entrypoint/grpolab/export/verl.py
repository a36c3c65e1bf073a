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

What each lab setting becomes in verl, or why it is refused, is `grpolab.export.verl_mapping` (the table `MAPPING`
and the rest), and nothing else; this module writes the bundle from it.

Checked against verl 0.9.1 (lockfiles/verl-check.txt): tests/test_verl_export.py composes the overrides onto
verl's own ppo_trainer.yaml, runs verl's config validation, loads reward.py through verl's reward loader
and reads the parquet through verl's RLHFDataset. This module imports nothing from verl.
"""

from __future__ import annotations

import ast
import inspect
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..model.tiny import verify_tiny_model
from ..settings.lab_settings import LabSettings
from ..task import rewards
from ..task.problems import load_lab_datasets
from .verl_mapping import (
    ANSWER_COLUMN,
    BUNDLE_PLACEHOLDER,
    DATA_FILES,
    FIXED,
    MAPPING,
    NOT_MAPPED,
    REWARD_FUNCTION_NAME,
    TINY_MODEL,
    VERL_DTYPE,
    VERL_VERSION,
    Context,
    ExportRefused,
    check_covered,
    data_source,
    format_override,
    refusals,
    verl_overrides,
)


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

    train, heldout = load_lab_datasets(settings.dataset, settings.train_size, settings.heldout_size, settings.seed)
    for split, dataset in (("train", train), ("heldout", heldout)):
        if ANSWER_COLUMN not in dataset.column_names or "prompt" not in dataset.column_names:
            raise ExportRefused(
                f"dataset {settings.dataset!r} ({split}) has columns {sorted(dataset.column_names)}: the export needs "
                f"'prompt' (a chat list) and '{ANSWER_COLUMN}' (the exact final number), the ground truth verl's "
                "reward gets"
            )
    if len(train) == 0:
        raise ExportRefused(
            f"dataset {settings.dataset!r} gave no training problems (train_size {settings.train_size})"
        )
    if len(heldout) == 0:
        raise ExportRefused(
            "heldout_size is 0: verl's validation set is our held-out set, so it needs at least one problem"
        )

    reward_source = reward_module_source(settings.reward_weights)  # refuses before anything is written
    out.mkdir(parents=True, exist_ok=True)
    model_path = _bundle_model(settings, out)
    ctx = Context(nodes=nodes, gpus_per_node=gpus_per_node, model_path=model_path)
    overrides = verl_overrides(settings, ctx)

    (out / "data").mkdir(exist_ok=True)
    _write_parquet(train, "train", data_source(settings), out / DATA_FILES["train"])
    _write_parquet(heldout, "heldout", data_source(settings), out / DATA_FILES["heldout"])
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


def bundle_readme(
    settings: LabSettings, ctx: Context, overrides: list[tuple[str, Any, str]], n_train: int, n_heldout: int
) -> str:
    """The bundle's README.md, its sections in the order the user reads them."""
    return "\n".join(
        [
            _readme_intro(settings, ctx, n_train, n_heldout),
            _readme_running(settings),
            _readme_mapping(settings),
            _readme_differences(settings),
            _readme_command(overrides),
        ]
    )


def _readme_intro(settings: LabSettings, ctx: Context, n_train: int, n_heldout: int) -> str:
    """The README's title, the run it makes and how far the bundle was checked."""
    return f"""# The GRPO lab, handed to verl {VERL_VERSION}

This bundle runs the lab's GRPO run (model `{settings.model}`, LoRA rank {settings.lora_rank},
{settings.num_generations} rollouts per prompt, {settings.max_completion_length}-token completions,
{settings.max_steps} steps, beta {settings.beta}, rewards {settings.reward_weights}, {n_train} training and
{n_heldout} held-out problems from `{settings.dataset}`) on verl, on {ctx.nodes} node(s) x {ctx.gpus_per_node} GPU(s).

**Status: run by verl on a CPU, not yet on a GPU.** The overrides were composed onto verl {VERL_VERSION}'s own
`ppo_trainer.yaml` and passed verl's config validation, `reward.py` was loaded through verl's reward loader, and
the parquet was read through verl's `RLHFDataset` (grpolab's tests/test_verl_export.py). A bundle like this one, on
grpolab's tiny model, is also trained for 2 steps by verl {VERL_VERSION}'s own `main_ppo` on a CPU, with vLLM's CPU
build and a weight sync after each step, on every commit of grpolab (its CI, `invoke verl-cpu`). Run
`python3 check.py` in the cluster's environment to repeat the offline check there before spending GPU time.
"""


def _readme_running(settings: LabSettings) -> str:
    """The README's "Run it" (one machine, a Ray cluster, containers) and "After the run" (the run-log line)."""
    return f"""## Run it

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

where IMAGE is the cluster track's image (`grpolab:cluster`; its entrypoint's `shell` runs bash). Held-out pass@1
is logged as `val-core/{settings.dataset}/acc/mean@1`, before the first step and after the last; the training reward as
`critic/score/mean`.

## After the run

verl writes its step metrics to `verl-metrics.jsonl` here (run.sh and ray.sh set `VERL_FILE_LOGGER_PATH`) and the
last step's checkpoint to `checkpoints/global_step_N/actor`. On the node where they are, in the cluster image:

    docker run --rm --gpus all -v "$PWD:$PWD" -e GRPOLAB_RUNS_DIR="$PWD/runs" IMAGE verl-result "$PWD"

takes the LoRA adapter out of the checkpoint with verl's own model merger (into `checkpoints/merged/lora_adapter`),
scores held-out pass@1 with grpolab's evaluator on the base model and with that adapter, and appends one run-log line
(kind `lab`, engine `verl`) to `runs/runlog.jsonl`. Give that log to `invoke report` beside your other machines' logs
(`invoke report --logs "runs/runlog.jsonl cluster/runlog.jsonl"`): the run is a row like the TRL lab's.
"""


def _readme_mapping(settings: LabSettings) -> str:
    """The README's "What maps to what": the lab settings' table and the fixed overrides' table."""
    mapping_lines = _mapping_rows(settings)
    fixed_lines = [f"| `{format_override(k, v)}` | {why} |" for k, v, why in FIXED]
    return f"""## What maps to what

| lab setting = value | verl key(s) | notes |
| --- | --- | --- |
{chr(10).join(mapping_lines)}

Overrides no lab setting decides, set so verl runs the lab's algorithm:

| override | why |
| --- | --- |
{chr(10).join(fixed_lines)}
"""


def _readme_differences(settings: LabSettings) -> str:
    """The README's "What differs from the lab on one machine"."""
    return f"""## What differs from the lab on one machine

- The rollouts always come from vLLM colocated with training (verl's hybrid engine, synchronous trainer);
  after every step verl hands vLLM the updated LoRA adapter. The async trainer modes are avoided on purpose:
  with LoRA they never deliver the adapter (verl#7495).
- The learning rate is constant (verl's FSDP optimizer offers constant or cosine); TRL decays it linearly.
- Training computes in {VERL_DTYPE.get(settings.dtype, settings.dtype)} with float32 master weights (FSDP mixed
  precision).
- Prompts longer than max_prompt_length are dropped; the lab keeps every prompt.
- Sampling is plain temperature sampling in both (no top-k, top-p or min-p).
- With beta > 0 verl's k3 KL estimate is clamped to [-10, 10]; TRL's is not.
- On vLLM, TRL masks completions whose vLLM-vs-trainer probability ratio leaves its bounds
  (vllm_importance_sampling_mode sequence_mask, cap 3); the bundle leaves verl's rollout correction off
  (algorithm.rollout_correction, verl's default): with synchronous colocated rollouts the two differ only
  numerically, and verl logs the gap as training/rollout_probs_diff_mean.
- Held-out pass@1 is verl's validation: greedy decoding (temperature 0) through vLLM, scored by the same
  `numeric_reward` as the lab's evaluation.
"""


def _readme_command(overrides: list[tuple[str, Any, str]]) -> str:
    """The README's "The full command": verl's command line with every override, as run.sh builds it."""
    command = " \\\n    ".join(["python3 -m verl.trainer.main_ppo"] + [format_override(k, v) for k, v, _ in overrides])
    return f"""## The full command

run.sh builds it from overrides.txt ({BUNDLE_PLACEHOLDER} is this folder):

    {command}
"""
