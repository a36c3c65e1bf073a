"""The report's rows (grpolab.report.table): one per machine x track x rollout path x model (or one per run), each
from the latest passing smoke test and lab and the status of the latest run, with their environment, and the
lab's measurements judged against the smoke test's projection and the memory estimate (the 25 % flags)."""

from __future__ import annotations

import math

from ..common.runlog import short_model_identity
from ..common.tolerance import off_by_more_than_25_percent, ratio
from .runlogs import finished


def fingerprint(run: dict) -> dict:
    value = run.get("fingerprint")
    return value if isinstance(value, dict) else {}


def machine_of(run: dict) -> str:
    """The machine in words, from the fingerprint: its accelerator and arch, or its CPU architecture."""
    fp = fingerprint(run)
    arch = fp.get("device_arch") or fp.get("machine")
    if fp.get("device_type") in (None, "cpu"):
        name = fp.get("device_name")
        cpu = f"CPU {fp.get('machine') or arch or '?'}"
        return cpu if not name or name in (arch, fp.get("machine")) else f"{cpu} ({name})"
    return f"{fp.get('device_name') or fp.get('device_type')} ({arch})"


def rollout_of(run: dict) -> str:
    rollout = run.get("rollout")
    if isinstance(rollout, dict) and rollout.get("path"):
        return str(rollout["path"])
    if isinstance(rollout, str):
        return rollout
    settings = run.get("settings") if isinstance(run.get("settings"), dict) else {}
    return str(settings.get("rollout") or "?")


def model_of(run: dict) -> str:
    """Which model the run ran, in a few words: its name, Hub revision and weights' sha256 (schema 3), so that
    two models of one name ("tiny" built on two machines, a Hub id at two revisions) are two rows."""
    settings = run.get("settings") if isinstance(run.get("settings"), dict) else {}
    return short_model_identity(run.get("model_identity"), settings.get("model") or run.get("model"))


def group_key(run: dict) -> tuple[str, str, str, str]:
    return machine_of(run), str(run.get("track") or "?"), rollout_of(run), model_of(run)


def number(value) -> float | None:
    """A finite number, or None (missing, text, or a value a newer or broken writer left)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def environment(run: dict) -> dict:
    fp = fingerprint(run)
    packages = fp.get("packages") if isinstance(fp.get("packages"), dict) else {}
    build = fp.get("torch_build")
    toolkit = fp.get("torch_cuda") or fp.get("torch_hip")
    lock = fp.get("lock_sha256")
    return {
        "torch": fp.get("torch_version") or packages.get("torch"),
        "torch_build": f"{build} {toolkit}" if build and toolkit else build,
        "driver": fp.get("driver"),
        "device": fp.get("device_name"),
        "arch": fp.get("device_arch"),
        "vllm": packages.get("vllm"),
        "lock": str(lock)[:12] if lock else None,
        # The image's id, as Docker shows it (12 hex digits): two rows with the same one ran the same bytes.
        "image": str(fp["image_id"]).removeprefix("sha256:")[:12] if fp.get("image_id") else None,
    }


def latest(runs: list[dict], kind: str) -> dict | None:
    passing = [run for run in runs if run.get("kind") == kind and run.get("status") == "passed"]
    return passing[-1] if passing else None


def status_of(run: dict) -> tuple[str, str | None, str | None]:
    """(status, failed layer, first line of the error) of one run."""
    status = str(run.get("status") or "unknown")
    if not finished(run):
        return "unfinished", None, "no end record: the run was killed, or is still running"
    error = str(run.get("error") or "").splitlines()
    return status, run.get("failed_layer"), (error[0] if error else None)


def smoke_figures(smoke: dict) -> dict:
    """The smoke test's ten steps: schema 2 wrote them down; older lines give seconds per step and the step count."""
    noted = smoke.get("before_scaling_up") if isinstance(smoke.get("before_scaling_up"), dict) else {}
    settings = smoke.get("settings") if isinstance(smoke.get("settings"), dict) else {}
    per_step = number(noted.get("seconds_per_step")) or number(smoke.get("seconds_per_step"))
    steps = number(noted.get("steps")) or number(settings.get("max_steps"))
    return {
        "smoke_run_id": smoke.get("run_id"),
        "smoke_model": settings.get("model"),
        "smoke_steps": int(steps) if steps else None,
        "smoke_steps_s": number(noted.get("steps_s")) or (per_step * steps if per_step and steps else None),
        "smoke_wall_clock_s": number(smoke.get("wall_clock_s")),
        "projected_lab_seconds_per_step": number(noted.get("projected_lab_seconds_per_step")),
        "projected_lab_wall_clock_s": number(noted.get("projected_lab_wall_clock_s")),
        "projected_for": lab_shape(
            noted.get("lab_model"), noted.get("lab_completions_per_step"), noted.get("lab_completion_tokens")
        ),
        "projected_lab_steps": noted.get("lab_steps"),
        "projection": noted.get("projection"),
        "peak_memory_gb_measured": number(noted.get("peak_memory_gb_measured")),
        "peak_memory_gb_predicted": number(noted.get("peak_memory_gb_predicted")),
        "peak_memory_from": "smoke" if noted.get("peak_memory_gb_measured") is not None else None,
    }


def lab_shape(model, completions, tokens) -> str | None:
    """A lab step's size in one string, to tell whether a projection and a measurement are of the same step."""
    return f"{model}, {completions} x {tokens} tokens" if model and completions and tokens else None


def lab_figures(lab: dict) -> dict:
    settings = lab.get("settings") if isinstance(lab.get("settings"), dict) else {}
    split = lab.get("time_split_s_per_step") if isinstance(lab.get("time_split_s_per_step"), dict) else {}
    steps = [s for s in lab.get("steps") or [] if isinstance(s, dict)]
    rollout = lab.get("rollout") if isinstance(lab.get("rollout"), dict) else {}
    return {
        "lab_run_id": lab.get("run_id"),
        "lab_model": settings.get("model") or lab.get("model"),
        "lab_steps": steps[-1].get("step") if steps else settings.get("max_steps"),
        "lab_ran": lab_shape(
            settings.get("model"), settings.get("per_device_train_batch_size"), settings.get("max_completion_length")
        ),
        "lab_wall_clock_s": number(lab.get("wall_clock_s")),
        "lab_seconds_per_step": number(lab.get("seconds_per_step")),
        "generation_s": number(split.get("generation")),
        "reward_s": number(split.get("reward")),
        "update_s": number(split.get("update")),
        "peak_memory_gb_measured": number(lab.get("peak_memory_gb_measured")),
        "peak_memory_gb_predicted": number(lab.get("peak_memory_gb_predicted")),
        "peak_memory_from": "lab",
        "pass_at_1_before": number(lab.get("pass_at_1_before")),
        "pass_at_1_after": number(lab.get("pass_at_1_after")),
        "first_reward": number(lab.get("first_reward")),
        "last_reward": number(lab.get("last_reward")),
        "collapse_first_step": number(steps[0].get("frac_reward_zero_std")) if steps else None,
        "stale": rollout.get("stale"),
        "max_lag_steps": rollout.get("max_lag_steps"),
    }


COLUMNS = (
    "machine",
    "track",
    "rollout",
    "engine",
    "model",
    "status",
    "failed_layer",
    "error",
    "runs",
    "smoke_run_id",
    "smoke_model",
    "smoke_steps",
    "smoke_steps_s",
    "smoke_wall_clock_s",
    "projected_lab_seconds_per_step",
    "projected_lab_wall_clock_s",
    "projected_lab_steps",
    "projected_for",
    "projection",
    "lab_run_id",
    "lab_model",
    "lab_ran",
    "lab_steps",
    "lab_wall_clock_s",
    "lab_seconds_per_step",
    "generation_s",
    "reward_s",
    "update_s",
    "peak_memory_gb_measured",
    "peak_memory_gb_predicted",
    "peak_memory_ratio",
    "peak_memory_from",
    "lab_over_projection",
    "flags",
    "pass_at_1_before",
    "pass_at_1_after",
    "first_reward",
    "last_reward",
    "collapse_first_step",
    "stale",
    "max_lag_steps",
    "torch",
    "torch_build",
    "driver",
    "device",
    "arch",
    "vllm",
    "lock",
    "image",
)


def make_row(key: tuple[str, str, str, str], runs: list[dict]) -> dict:
    """One row from the runs of one machine x track x rollout path x model: the latest passing smoke test and
    lab, and the status of the latest run (a failure names its layer and message)."""
    machine, track, rollout, model = key
    smoke, lab, last = latest(runs, "smoke"), latest(runs, "lab"), runs[-1]
    status, layer, error = status_of(last)
    if status != "passed" and (smoke or lab):
        status = f"latest {status}"
    row = dict.fromkeys(COLUMNS)
    # the trainer: TRL's GRPOTrainer (the lab), or a distributed engine that ran an exported bundle
    # (grpolab.export.verl_result)
    engine = (lab or last).get("engine") or "trl"
    row.update(
        machine=machine,
        track=track,
        rollout=rollout,
        engine=engine,
        model=model,
        status=status,
        failed_layer=layer,
        error=error,
        runs=len(runs),
    )
    if smoke:
        row.update(smoke_figures(smoke))
    if lab:
        lab_row = lab_figures(lab)
        if lab_row["peak_memory_gb_measured"] is None:  # keep the smoke test's peak rather than nothing
            for name in ("peak_memory_gb_measured", "peak_memory_gb_predicted", "peak_memory_from"):
                lab_row.pop(name)
        row.update(lab_row)
    measured, predicted = row["peak_memory_gb_measured"], row["peak_memory_gb_predicted"]
    row["peak_memory_ratio"] = round(measured / predicted, 3) if measured and predicted else None
    row.update(environment(lab or smoke or last))
    row["lab_over_projection"], row["flags"] = judged(row)
    return row


def judged(row: dict) -> tuple[float | None, str | None]:
    """The lab's measured seconds per step over the smoke test's projection of that same step (None when the lab
    ran another step than the one projected), and what is more than 25 % off (grpolab.common.tolerance): the projection,
    the peak memory against its estimate."""
    flags = []
    same_step = row["projected_for"] is not None and row["projected_for"] == row["lab_ran"]
    over = ratio(row["lab_seconds_per_step"], row["projected_lab_seconds_per_step"]) if same_step else None
    if over is not None and off_by_more_than_25_percent(
        row["lab_seconds_per_step"], row["projected_lab_seconds_per_step"]
    ):
        flags.append(f"projection more than 25 % off: the lab measured x{over:.2f} of it")
    if off_by_more_than_25_percent(row["peak_memory_gb_measured"], row["peak_memory_gb_predicted"]):
        flags.append(
            f"peak memory more than 25 % off its estimate: x{row['peak_memory_ratio']:.2f} ({row['peak_memory_from']})"
        )
    return (round(over, 3) if over is not None else None), ("; ".join(flags) or None)


def build_rows(runs: list[dict], every_run: bool = False) -> list[dict]:
    """The table: one row per machine x track x rollout path x model (or, with every_run, one per run), in log order."""
    if every_run:
        return [make_row(group_key(run), [run]) for run in runs]
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(group_key(run), []).append(run)
    return [make_row(key, group) for key, group in groups.items()]
