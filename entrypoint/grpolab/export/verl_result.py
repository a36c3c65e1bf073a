"""A verl run of an exported bundle as a run-log line (kind "lab", engine "verl"), so that `grpolab report` shows it
beside the TRL lab's rows.

    python -m grpolab verl-result BUNDLE [--metrics BUNDLE/verl-metrics.jsonl] [--checkpoints BUNDLE/checkpoints]

It reads what verl wrote and nothing else:
- its file logger's step metrics (trainer.logger=[console,file]; VERL_FILE_LOGGER_PATH names the file): reward,
  seconds and their split, the actor's peak memory, and the held-out accuracy verl's own validation measured;
- the actor's checkpoint of the last step (the bundle saves one at its last step: trainer.save_freq). The LoRA adapter
  comes out of it through verl's own model merger (`python -m verl.model_merger merge --backend fsdp`), as a cluster
  user gets it; our evaluator (grpolab.task.evaluate, greedy, the numeric reward) then scores held-out pass@1 on the
  bundle's held-out problems for the base model and for the base model with that adapter.

It runs where verl ran, on any device, in an environment with torch, transformers and peft; it imports neither TRL
nor verl (the merger runs as verl's own command).
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..common.runlog import append_run, new_run_id
from ..environment.fingerprint import environment_fingerprint
from ..model.identity import model_identity
from ..common.dtypes import dtype_on
from ..task.evaluate import pass_at_1
from .verl_mapping import DATA_FILES

ENGINE = "verl"
METRICS_FILE = "verl-metrics.jsonl"  # in the bundle, where its run.sh and ray.sh have verl's file logger write
ROLLOUT_PATH = "verl+vllm"  # the report's rollout column: verl's own vLLM rollout, weights synced before each step
STEP_METRIC = "timing_s/step"
# verl's validation logs the reward's `acc` as val-core/<data source>/acc/mean@1: held-out pass@1 as verl measures it
VALIDATION_PREFIX, VALIDATION_SUFFIX = "val-core/", "/acc/mean@1"
# verl's timers (trainer/ppo/v1/trainer_base.py) behind the lab's split of a step; verl also times old_log_prob, ref,
# adv, update_weights and save_checkpoint, which the line keeps per step under "verl_timing_s"
SPLIT = {"generation": "timing_s/gen", "reward": "timing_s/reward", "update": "timing_s/update_actor"}


# The first line of verl's output that names an exception ("TypeError: can't assign a str to a torch.FloatTensor"):
# in a Ray run the cause, raised in some actor, is printed long before the driver's own traceback, which names only
# its consequence ("ValueError: Received an empty list as keys." for a reward that returned a string)
FIRST_ERROR = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_error(output_log: Path | None) -> str | None:
    """The first exception named in verl's output, with the Ray actor that printed it ("(AgentLoopWorkerTQ) TypeError:
    ...")."""
    if output_log is None or not output_log.is_file():
        return None
    for line in output_log.read_text(errors="replace").splitlines():
        line = ANSI.sub("", line)
        found = FIRST_ERROR.search(line)
        if found:
            actor = re.match(r"\((\w+) pid=\d+\)", line)
            return (f"({actor.group(1)}) " if actor else "") + f"{found.group(1)}: {found.group(2).strip()}"
    return None


class VerlResultError(Exception):
    """What verl left cannot be read as a run: the message says what is missing and what to do."""


def read_metrics(metrics_file: Path) -> tuple[list[dict], list[float]]:
    """verl's training steps (each its metrics dict, in order) and the held-out accuracies its validations logged."""
    if not metrics_file.is_file():
        raise VerlResultError(f"{metrics_file} does not exist: run verl with trainer.logger=[console,file] and "
                              "VERL_FILE_LOGGER_PATH naming this file")
    lines = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    steps = [line["data"] for line in lines if STEP_METRIC in line.get("data", {})]
    validations = [value for line in lines for key, value in line.get("data", {}).items()
                   if key.startswith(VALIDATION_PREFIX) and key.endswith(VALIDATION_SUFFIX)]
    return steps, validations


def step_records(steps: list[dict]) -> list[dict]:
    """The lab's per-step fields from verl's metrics; verl's own timers kept beside them."""
    return [
        {
            "step": int(data.get("training/global_step", number)),
            "reward": data.get("critic/score/mean"),
            "reward_std": data.get("critic/score/std"),
            "seconds": round(data[STEP_METRIC], 4),
            **{f"{name}_s": round(data[key], 4) for name, key in SPLIT.items() if key in data},
            "completion_tokens_mean": data.get("response_length/mean"),
            "actor_peak_memory_gb": data.get("actor/perf/max_memory_allocated_gb"),
            "verl_timing_s": {
                key.removeprefix("timing_s/"): round(value, 4)
                for key, value in data.items()
                if key.startswith("timing_s/")
            },
        }
        for number, data in enumerate(steps, start=1)
    ]


def last_actor_checkpoint(checkpoints: Path) -> Path:
    """The actor folder of verl's last saved step (CHECKPOINTS/global_step_N/actor)."""
    saved = sorted(checkpoints.glob("global_step_*/actor"), key=lambda path: int(path.parent.name.rsplit("_", 1)[1]))
    if not saved:
        raise VerlResultError(
            f"no checkpoint under {checkpoints} (global_step_N/actor): the bundle saves the adapter at its "
            "last step (trainer.save_freq); was trainer.default_local_dir changed, or did verl stop before it?"
        )
    return saved[-1]


def merged_adapter(actor_checkpoint: Path, target: Path) -> Path:
    """The LoRA adapter verl's model merger writes from a sharded FSDP checkpoint (target/lora_adapter)."""
    adapter = target / "lora_adapter"
    if not (adapter / "adapter_config.json").is_file():
        command = [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(actor_checkpoint),
            "--target_dir",
            str(target),
        ]
        merged = subprocess.run(command, capture_output=True, text=True)
        if merged.returncode != 0 or not (adapter / "adapter_config.json").is_file():
            raise VerlResultError(f"verl's model merger did not write {adapter} (exit {merged.returncode}): "
                                  f"{' '.join(command)}\n{(merged.stdout + merged.stderr)[-3000:]}")
    return adapter


def heldout_rows(bundle: Path) -> list[dict]:
    """The bundle's held-out problems (verl's validation set) as the evaluator's rows: prompt (chat list) and answer."""
    table = pq.read_table(bundle / DATA_FILES["heldout"]).to_pylist()
    return [{"prompt": row["prompt"], "answer": row["reward_model"]["ground_truth"]} for row in table]


def eval_dtype(settings: dict) -> torch.dtype:
    """The lab's dtype for the evaluation: the bundle's setting; "auto" as the lab reads it (bf16 on CUDA, else
    float32)."""
    return getattr(torch, dtype_on(settings.get("dtype") or "auto", "cuda" if torch.cuda.is_available() else "cpu"))


def bundle_model_path(bundle: Path, settings: dict) -> str:
    """The model the bundle trained: the copy it carries (the built-in tiny model), else the Hub id or path it names."""
    carried = bundle / "model"
    return str(carried) if carried.is_dir() else settings["model"]


def trained_model_identity(model_path: str, settings: dict) -> dict:
    """The model's identity (grpolab.model.identity) under the lab's name for it: the tiny model the bundle carries is
    "tiny", weights and all, so the report puts verl's row beside the TRL rows of the same model."""
    return {**model_identity(model_path), "name": settings["model"]}


def heldout_pass_at_1(model_path: str, adapter: Path | None, rows: list[dict], settings: dict) -> float:
    """Our evaluator on the base model, or on the base model with verl's adapter."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=eval_dtype(settings)).to(device)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    max_new_tokens = settings.get("eval_max_new_tokens") or settings["max_completion_length"]
    return pass_at_1(model, tokenizer, rows, max_new_tokens)


def verl_run_record(
    bundle: Path,
    metrics_file: Path,
    checkpoints: Path,
    verl_exit_status: int = 0,
    wall_clock_s: float | None = None,
    started_at: str | None = None,
    output_log: Path | None = None,
    say=print,
) -> dict:
    """The run-log line of a verl run of `bundle`: passed when verl exited 0 and its steps, checkpoint and adapter are
    all
    there (then with pass@1 by our evaluator), else failed, naming what is missing."""
    if not (bundle / "settings.json").is_file():
        raise VerlResultError(
            f"{bundle} is not an exported bundle: it has no settings.json (`invoke export --engine verl` writes one)"
        )
    exported = json.loads((bundle / "settings.json").read_text())
    settings = exported["settings"]
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    model = bundle_model_path(bundle, settings)
    record = _running_record(
        bundle, exported, model, metrics_file, verl_exit_status, wall_clock_s, started_at or now, output_log
    )
    try:
        steps = _verl_steps(record, metrics_file, verl_exit_status, output_log)
        if not steps:
            raise VerlResultError(f"verl exited 0 but {metrics_file} holds no training step")
        summarise_steps(record)
        _evaluate_adapter(record, bundle, checkpoints, model, settings, say)
        record["status"] = "passed"
    except VerlResultError as error:
        record.update(status="failed", failed_layer="first_step" if verl_exit_status else "runlog", error=str(error))
    record["fingerprint"] = environment_fingerprint()
    record["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return record


def _running_record(
    bundle: Path,
    exported: dict,
    model: str,
    metrics_file: Path,
    verl_exit_status: int,
    wall_clock_s: float | None,
    started_at: str,
    output_log: Path | None,
) -> dict:
    """The line's head, status "running": the run's identity, settings, model, rollout and how verl was run."""
    settings = exported["settings"]
    return {
        "run_id": new_run_id(),
        "kind": "lab",
        "engine": ENGINE,
        "track": settings.get("track"),
        "started_at": started_at,
        "status": "running",
        "failed_layer": None,
        "error": None,
        "settings": settings,
        "model": settings.get("model"),
        "model_identity": trained_model_identity(model, settings),
        "wall_clock_s": wall_clock_s,
        "rollout": {
            "path": ROLLOUT_PATH,
            "engine": ENGINE,
            "stale": False,
            "max_lag_steps": 0,
            "lag_basis": "by verl's design, not measured: its sync trainer mode updates vLLM's weights before each "
                         "step's generation",
        },
        "verl": {
            "version": exported.get("verl"),
            "exit_status": verl_exit_status,
            "metrics_file": str(metrics_file),
            "bundle": str(bundle),
            "output_log": str(output_log) if output_log else None,
        },
    }


def _verl_steps(record: dict, metrics_file: Path, verl_exit_status: int, output_log: Path | None) -> list[dict]:
    """verl's steps and validations into the line; raises VerlResultError, naming the first error in verl's output,
    when verl did not exit 0. Returns verl's steps."""
    # a failed verl may have stopped before its logger wrote anything: then its exit status is the news
    steps, validations = read_metrics(metrics_file) if verl_exit_status == 0 or metrics_file.is_file() else ([], [])
    record["steps"] = step_records(steps)
    record["verl"]["heldout_accuracy"] = (
        validations  # verl's validation: before the first step, then after each test_freq
    )
    if verl_exit_status != 0:
        cause = first_error(output_log)
        raise VerlResultError(f"verl exited {verl_exit_status} after {len(steps)} step(s); "
                              + (f"the first error in its output: {cause}" if cause else "its own output says why")
                              + (f" (all of it: {output_log})" if output_log else ""))
    return steps


def _evaluate_adapter(record: dict, bundle: Path, checkpoints: Path, model: str, settings: dict, say) -> None:
    """verl's adapter, merged out of its last checkpoint, and held-out pass@1 by our evaluator before and after it,
    into the line."""
    adapter = merged_adapter(last_actor_checkpoint(checkpoints), checkpoints / "merged")
    record["adapter"] = str(adapter)
    rows = heldout_rows(bundle)
    say(
        f"held-out pass@1 by grpolab's evaluator ({len(rows)} problems, greedy): the base model, then with verl's "
        f"adapter {adapter}"
    )
    started = time.perf_counter()
    record["pass_at_1_before"] = heldout_pass_at_1(model, None, rows, settings)
    record["pass_at_1_after"] = heldout_pass_at_1(model, adapter, rows, settings)
    record["evaluation_s"] = round(time.perf_counter() - started, 1)


def summarise_steps(record: dict) -> None:
    """The lab's per-run figures from the steps: mean seconds and split, first and last reward, the actor's peak."""
    steps = record["steps"]
    mean = lambda values: round(sum(values) / len(values), 4)  # noqa: E731
    record["seconds_per_step"] = mean([s["seconds"] for s in steps])
    record["time_split_s_per_step"] = {
        name: mean([s[f"{name}_s"] for s in steps]) for name in SPLIT if all(f"{name}_s" in s for s in steps)
    }
    record["first_reward"], record["last_reward"] = steps[0]["reward"], steps[-1]["reward"]
    peaks = [s["actor_peak_memory_gb"] for s in steps if s["actor_peak_memory_gb"] is not None]
    record["peak_memory_gb_measured"] = round(max(peaks), 3) if peaks else None
    record["peak_memory_basis"] = (
        "verl's actor worker alone (its device's peak; on a CPU its resident set), vLLM's rollout not included"
    )


def summary(record: dict) -> dict:
    """What the command prints: the line's figures without the settings and fingerprint."""
    keys = (
        "run_id",
        "status",
        "failed_layer",
        "error",
        "track",
        "wall_clock_s",
        "seconds_per_step",
        "time_split_s_per_step",
        "first_reward",
        "last_reward",
        "peak_memory_gb_measured",
        "pass_at_1_before",
        "pass_at_1_after",
        "evaluation_s",
        "adapter",
    )
    return {
        **{key: record.get(key) for key in keys},
        "reward_per_step": [s["reward"] for s in record.get("steps") or []],
        "seconds_per_step_each": [s["seconds"] for s in record.get("steps") or []],
        "verl_heldout_accuracy": record["verl"].get("heldout_accuracy"),
        "machine": platform.machine(),
    }


def record_verl_run(
    bundle: Path, metrics_file: Path, checkpoints: Path | None = None, log_path=None, say=print, **given
) -> dict:
    """verl_run_record, appended to the run log (grpolab's, or `log_path`); returns the line."""
    bundle = bundle.resolve()
    record = verl_run_record(bundle, metrics_file, checkpoints or bundle / "checkpoints", say=say, **given)
    path = append_run(record, log_path)
    say(f"run log: {record['status']} -> {path} ({record['run_id']}, kind lab, engine verl)")
    return record
