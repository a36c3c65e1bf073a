"""`invoke bench.colocate --case qwen3-0.6b-shape`: vLLM colocate against in-process generation at a real model's
size on the CPU, each step split into generation, weight sync, sync check, TRL's importance-sampling pass and
update, with the DDP wrapper's costs measured by running without each fix (JSON under bench/)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from grpolab.common.runlog import read_runs
from grpolab.common.tracks import get_track

from .. import REPO, HostError
from ..host.console import say
from ..host.runs import runlog_in
from ..run.lab import lab_command, lab_env, venv_python
from .labs import _write

SHAPE_CASE = "qwen3-0.6b-shape"
ROUNDS = 2
# The command (a learner's first try at a real size): 2 prompts x 4 completions of up to 32 tokens per step.
SETTINGS = {
    "num_generations": 4,
    "per_device_train_batch_size": 8,
    "max_completion_length": 32,
    "max_steps": 6,
    "logging_steps": 1,
    "train_size": 16,
    "heldout_size": 1,
    "seed": 0,
}
STEADY_FROM_STEP = 2  # step 1 carries one-off costs (the first sync, allocator growth): steps 2 onwards are compared
# What the lab did before issue 29, so that each fix's share is measured, not assumed: the rank variables set before
# the trainer is built (as TRL's docs have single-process colocate users do) make accelerate wrap the model in DDP
# at world size 1 on a CPU; GRPOLAB_DDP_FIND_UNUSED_PARAMETERS=auto leaves it to transformers again
# (True on a CPU, where checkpointing is off).
RANKS_SET_BEFORE = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
# The comparison as the lab runs now, and with TRL's importance-sampling correction back on (TRL's default; the lab's
# `auto` turns it off where vLLM's CPU build samples in float32); the last two variants measure the DDP causes.
CORRECTION_ON = "vllm-colocate, TRL's importance-sampling correction on"
FIXED = ("inprocess", "vllm-colocate", CORRECTION_ON)
VARIANTS = {
    # name: (rollout path, extra environment, extra lab settings)
    "inprocess": ("inprocess", {}, {}),
    "vllm-colocate": ("vllm-colocate", {}, {}),
    CORRECTION_ON: ("vllm-colocate", {}, {"vllm_importance_sampling_correction": "on"}),
    "vllm-colocate, DDP at world size 1": ("vllm-colocate", RANKS_SET_BEFORE, {}),
    "vllm-colocate, DDP at world size 1, find_unused_parameters": (
        "vllm-colocate",
        {**RANKS_SET_BEFORE, "GRPOLAB_DDP_FIND_UNUSED_PARAMETERS": "auto"},
        {},
    ),
}
PARTS = ("generation", "weight_sync", "sync_check", "old_logprobs", "reward", "update")
# Each cause of colocate's slower update: (what, the variant with the cause, the variant without it, part compared).
CAUSES = [
    (
        "DDP's find_unused_parameters (graph walk each backward)",
        "vllm-colocate, DDP at world size 1, find_unused_parameters",
        "vllm-colocate, DDP at world size 1",
        "update",
    ),
    (
        "DDP wrapper at world size 1 (gloo all-reduce, buckets)",
        "vllm-colocate, DDP at world size 1",
        "vllm-colocate",
        "update",
    ),
    ("what is left: the engine's threads and memory beside the trainer", "vllm-colocate", "inprocess", "update"),
    (
        "TRL's importance-sampling correction on (its default), against the lab's auto (off on the CPU in float32)",
        CORRECTION_ON,
        "vllm-colocate",
        "seconds_per_step",
    ),
]
# Parts that were counted in the update before they had columns of their own: their seconds are each a share.
OWN_COLUMNS = {
    "weight_sync": "weight sync (TRL's sync_weights + the CPU build's layerwise reload)",
    "sync_check": "the lab's lag-0 probe (a lab probes its first sync; TRL's importance-sampling pass checks every "
                  "other)",
    "old_logprobs": "TRL's importance-sampling pass (vllm_importance_sampling_correction: one no-grad forward)",
}


def _cv_python() -> tuple[Path, dict]:
    track = get_track("cv")
    python = venv_python(track)
    if not python.exists():
        raise HostError(
            "track cv's venv is missing: `invoke venv --track cv` makes it (vLLM's CPU build with track n's trainer "
            "stack)"
        )
    return python, lab_env(track)


def write_shape_folder(python: Path, env: dict, case: str, out: Path) -> Path:
    """The shape case's randomly initialised model saved as a folder, by track cv's Python (torch lives there)."""
    say(f"writing a random {case} folder to {out}")
    subprocess.run(
        [str(python), "-m", "grpolab.bench", "shape-folder", "--case", case, "--out", str(out)],
        cwd=REPO,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


def run_variant(name: str, model: Path, runs_dir: Path, python: Path, env: dict) -> dict:
    """One lab run (smoke test skipped) of a variant; what its run-log line says about time and memory."""
    path, extra_env, extra_settings = VARIANTS[name]
    argv = lab_command(
        "lab", "cv", {**SETTINGS, "model": str(model), "rollout": path, "smoke": "never", **extra_settings}, []
    )
    argv[0] = str(python)
    say(f"{name}: $ {' '.join(f'{k}={v}' for k, v in extra_env.items())} {' '.join(argv)}")
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env={**env, **extra_env, "GRPOLAB_RUNS_DIR": str(runs_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = {
        "variant": name,
        "command": " ".join(argv[1:]),
        "environment": extra_env,
        "exit_status": proc.returncode,
        "wall_clock_s": round(time.monotonic() - started, 1),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }  # above 2 on 2 cores: another job ran beside it
    lab = next((line for line in reversed(read_runs(runlog_in(runs_dir))) if line.get("kind") == "lab"), None)
    if proc.returncode or lab is None:
        return {**out, "error": proc.stdout[-3000:]}
    steps = lab.get("steps") or []
    steady = [s for s in steps if s["step"] >= STEADY_FROM_STEP]
    rollout = lab.get("rollout") or {}
    return {
        **out,
        "steps": [
            {"step": s["step"], "seconds": s["seconds"], **{part: s.get(f"{part}_s", 0.0) for part in PARTS}}
            for s in steps
        ],
        "steady_seconds_per_step": _median([s["seconds"] for s in steady]),
        # Every step, the first included: the one-off costs (colocate's engine warm-up and its one probe) counted too.
        "mean_seconds_per_step_all_steps": round(statistics.fmean(s["seconds"] for s in steps), 3) if steps else None,
        "steady_split_s_per_step": {part: _median([s.get(f"{part}_s", 0.0) for s in steady]) for part in PARTS},
        **{
            key: lab.get(key)
            for key in (
                "peak_memory_gb_measured",
                "peak_memory_gb_predicted",
                "peak_memory_ratio",
                "runtime_baseline_gb",
                "peak_memory_parts",
            )
        },
        "trainer_model_wrapper": lab.get("trainer_model_wrapper"),
        "torch_threads_after_engine_start": rollout.get("torch_threads_after_engine_start"),
        "sync_checks": rollout.get("sync_checks"),
        "sync_failures": rollout.get("sync_failures"),
        "sync_max_logprob_diff": rollout.get("sync_max_logprob_diff"),
        "sync_probes": rollout.get("sync_probes"),
        "sync_sampled_tokens_max_logprob_diff": rollout.get("sync_sampled_tokens_max_logprob_diff"),
        "importance_sampling_correction": rollout.get("importance_sampling_correction"),
        "engine_env": rollout.get("engine_env"),
    }


def _median(values: list[float]) -> float | None:
    """The median over a run's steady steps: a step slowed by another job on the shared machine moves it least."""
    return round(statistics.median(values), 3) if values else None


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Medians over the rounds of each variant's steady seconds per step and split; each cause's share of colocate's
    update before the fixes; colocate against in-process after them."""
    median = {}
    for name, results in runs.items():
        ok = [r for r in results if "steady_split_s_per_step" in r]
        if ok:
            median[name] = {
                "seconds_per_step": round(statistics.median(r["steady_seconds_per_step"] for r in ok), 3),
                "mean_seconds_per_step_all_steps": round(
                    statistics.median(r["mean_seconds_per_step_all_steps"] for r in ok), 3
                ),
                **{part: round(statistics.median(r["steady_split_s_per_step"][part] for r in ok), 3) for part in PARTS},
            }
    causes = [
        {
            "cause": what,
            "s_per_step": round(median[a][part] - median[b][part], 3),
            "measured_as": f"{part}: [{a}] - [{b}]",
        }
        for what, a, b, part in CAUSES
        if a in median and b in median
    ]
    if "vllm-colocate" in median:
        causes += [
            {
                "cause": what,
                "s_per_step": median["vllm-colocate"][part],
                "measured_as": f"its own column ({part}) of [vllm-colocate]",
            }
            for part, what in OWN_COLUMNS.items()
        ]
    before = "vllm-colocate, DDP at world size 1, find_unused_parameters"
    ratios = {}
    if "inprocess" in median:
        base = median["inprocess"]
        for name in ("vllm-colocate", CORRECTION_ON, before):
            if name in median:
                ratios[name] = {
                    "update_over_inprocess_update": round(median[name]["update"] / base["update"], 3),
                    "step_over_inprocess_step": round(median[name]["seconds_per_step"] / base["seconds_per_step"], 3),
                    "step_without_sync_check_over_inprocess_step": round(
                        (median[name]["seconds_per_step"] - median[name]["sync_check"]) / base["seconds_per_step"], 3
                    ),
                    "all_steps_over_inprocess_all_steps": round(
                        median[name]["mean_seconds_per_step_all_steps"] / base["mean_seconds_per_step_all_steps"], 3
                    ),
                }
    return {"median_steady": median, "causes_of_the_slower_update": causes, "against_inprocess": ratios}


def colocate_size_bench(
    case: str = SHAPE_CASE, rounds: int = ROUNDS, variants: tuple[str, ...] = tuple(VARIANTS)
) -> Path:
    python, env = _cv_python()
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="grpolab-colocate-size-") as tmp:
        model = write_shape_folder(python, env, case, Path(tmp) / case)
        for round_index in range(rounds):
            for index, name in enumerate(variants):
                say(f"[round {round_index + 1}/{rounds}] {name}")
                result = run_variant(name, model, Path(tmp) / f"runs-{round_index}-{index}", python, env)
                say(
                    f"  steady {result.get('steady_seconds_per_step', 'failed')} s/step "
                    f"{json.dumps(result.get('steady_split_s_per_step'))}"
                    + (f"\n{result['error'][-1500:]}" if "error" in result else "")
                )
                runs[name].append(result)
    summary = summarise(runs)
    causes = [name for name in variants if name not in FIXED]  # the runs that price what makes the update slower
    return _write(
        "lab-colocate-size",
        tracks=("cv",),
        models={case: None},
        case=case + ("-causes" if causes else ""),
        record={
            "track": "cv",
            "rounds": rounds,
            "settings": SETTINGS,
            "where": "host python, track cv's venv (.venvs/cv), this checkout's code; variants interleaved round by "
                     "round, one run at a time",
            "basis": f"the median over steps {STEADY_FROM_STEP}-{SETTINGS['max_steps']} of each run (the lab's step "
                     "recorder), then the median over the rounds",
            "goal": "colocate's update within 10% of in-process's, and colocate no slower per step",
            "load_average": {
                "before": [round(x, 2) for x in load_before],
                "after": [round(x, 2) for x in os.getloadavg()],
            },
            **summary,
            "runs": runs,
        },
    )
