"""The lesson's per-track validation table, built from run logs gathered on one or several machines.

    grpolab report [LOGS...] [--all] [--against-lesson] [--out runs/report]

Reads run-log lines of every schema the project has written (runlog.SCHEMA_VERSION; lines without "schema"
are schema 1), merges logs from different machines, counts a run id once, and writes report.md, report.csv,
the plots (plots.py) and one self-contained index.html. Pure Python and matplotlib: it runs on the
host (`invoke report`) as well as in the images, and never imports torch or TRL.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..common.paths import runlog_path, runs_dir
from ..common.durations import duration
from ..common.runlog import SCHEMA_VERSION, short_model_identity
from ..common.tolerance import off_by_more_than_25_percent, ratio

FINISHED = ("passed", "failed", "crashed", "interrupted")
SKIPPED_SHOWN = 5  # bad lines named one by one per log; the rest are counted

# The lesson's figures per track ("What each track can run", the two memory diagrams, "The first run on a new
# machine"), quoted for --against-lesson. The memory figures are the sums of the lesson's own diagram rows
# without the operating system's share and the free space: 16 GB diagram (Qwen3-1.7B, rank 16, 8 rollouts of
# 512 tokens) 3.4 + 3.4 + 0.3 + 0.7 + 2 = 9.8 GB, or 6.4 GB at beta 0; 128 GB diagram (Qwen3-4B, vLLM colocate
# at 0.3) 8 + 8 + 0.5 + 38.4 + 4 = 58.9 GB, or 50.9 GB at beta 0.
LESSON_SMOKE = "ten steps of a 0.6B model take a couple of minutes on any track"
LESSON_SMOKE_S = 180  # "a couple of minutes", read as at most three
LESSON_TRACKS = {
    "s": {
        "rollout": "vllm-colocate",
        "memory_gb": (50.9, 58.9),
        "memory": "128 GB diagram, Qwen3-4B with vLLM colocate: 50.9 GB at beta 0, 58.9 GB with a reference model",
    },
    "n": {
        "rollout": "vllm-colocate",
        "memory_gb": (6.4, 9.8),
        "memory": "16 GB diagram, Qwen3-1.7B: 6.4 GB at beta 0 ('a 16 GB card runs it with beta at zero'), 9.8 GB with "
                  "a reference model",
    },
    "x": {
        "rollout": "inprocess",
        "memory_gb": (6.4, 9.8),
        "memory": "16 GB diagram, Qwen3-1.7B in-process: 6.4 GB at beta 0, 9.8 GB with a reference model",
    },
    "m": {
        "rollout": "inprocess",
        "memory_gb": None,
        "memory": "no diagram for MPS float32 (float32 doubles the weight terms); 'expect this to be the slowest of "
                  "the four tracks'",
    },
}


class ReportError(Exception):
    """No report can be made: the message says why and what to do."""


# --- reading the logs ----------------------------------------------------------------------------------------


@dataclass
class LoadedRuns:
    runs: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def log_files(paths: list[Path], warnings: list[str]) -> list[Path]:
    """The run logs named, or found (*.jsonl, recursively) in the folders named; a missing path is a warning."""
    found = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            inside = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
            if not inside:
                warnings.append(f"{path}: a folder with no run log in it (no *.jsonl file at any depth)")
            found.extend(inside)
        else:
            warnings.append(f"{path}: no such file or folder")
    return list(dict.fromkeys(found))


def read_log(path: Path, warnings: list[str]) -> list[dict]:
    """The run records of one log; a line that is not a JSON object is skipped with a warning naming it."""
    data = path.read_bytes()
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    runs, newer, skipped = [], set(), []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            run = json.loads(raw)
        except json.JSONDecodeError as error:
            last = number == len(lines) and not data.endswith(b"\n")
            why = (
                "truncated (the last line has no end: a copy cut short, or a run killed while writing)"
                if last
                else f"not JSON ({error.msg})"
            )
            skipped.append(f"{path}:{number}: skipped, {why}")
            continue
        if not isinstance(run, dict) or not ("run_id" in run or "kind" in run):
            skipped.append(
                f"{path}:{number}: skipped, not a run record (a JSON {type(run).__name__} without run_id or kind)"
            )
            continue
        if isinstance(run.get("schema"), int) and run["schema"] > SCHEMA_VERSION:
            newer.add(run["schema"])
        run["_source"] = f"{path}:{number}"
        runs.append(run)
    warnings.extend(skipped[:SKIPPED_SHOWN])
    if len(skipped) > SKIPPED_SHOWN:
        warnings.append(
            f"{path}: {len(skipped) - SKIPPED_SHOWN} more line(s) skipped ({len(skipped)} of {len(lines)}): is it a "
            "run log?"
        )
    if newer:
        warnings.append(
            f"{path}: lines of run-log schema {', '.join(map(str, sorted(newer)))} from a newer project version "
            f"(this one knows {SCHEMA_VERSION}): fields it does not know are ignored"
        )
    return runs


def finished(run: dict) -> bool:
    return run.get("status") in FINISHED


def load_runs(paths: list[Path] | None = None) -> LoadedRuns:
    """Every run of every log, each run id once (its finished record over a start record, else the first seen)."""
    loaded = LoadedRuns()
    loaded.files = log_files([Path(p) for p in (paths or [runlog_path()])], loaded.warnings)
    by_id: dict[str, dict] = {}
    duplicates = 0
    for path in loaded.files:
        for run in read_log(path, loaded.warnings):
            key = str(run.get("run_id") or run["_source"])
            kept = by_id.get(key)
            if kept is None:
                by_id[key] = run
                continue
            duplicates += finished(run) == finished(kept)
            if finished(run) and not finished(kept):
                by_id[key] = run
    if duplicates:
        loaded.warnings.append(
            f"{duplicates} line(s) repeated a run id already read (the same run in two logs): counted once"
        )
    loaded.runs = sorted(by_id.values(), key=when)
    return loaded


def when(run: dict) -> str:
    return str(run.get("finished_at") or run.get("started_at") or run.get("run_id") or "")


# --- one row per machine x track x rollout path x model --------------------------------------------------------


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


# --- the lesson's figures beside each row -----------------------------------------------------------------------


def against_lesson(row: dict) -> str:
    """What the lesson predicts for the row's track, and whether this machine agrees."""
    lesson = LESSON_TRACKS.get(row["track"])
    if lesson is None:
        return f"track {row['track']} is not one of the lesson's four tracks; smoke: {smoke_verdict(row)}"
    parts = [f"smoke: {smoke_verdict(row)}"]
    same = "agrees" if lesson["rollout"] == row["rollout"] else "differs"
    parts.append(f"rollout: lesson {lesson['rollout']} ({same})")
    measured, band = row["peak_memory_gb_measured"], lesson["memory_gb"]
    if band is None or measured is None:
        parts.append(f"memory: {lesson['memory']}")
    else:
        low, high = band
        verdict = "inside" if low <= measured <= high else "below" if measured < low else "above"
        parts.append(f"memory: lesson {low:g}-{high:g} GB, ours {measured:.2f} GB ({verdict}; {lesson['memory']})")
    return "; ".join(parts)


def smoke_verdict(row: dict) -> str:
    seconds = row["smoke_wall_clock_s"]
    if seconds is None:
        return "no passing smoke test"
    agrees = "agrees" if seconds <= LESSON_SMOKE_S else "slower than the lesson says"
    return f"lesson a couple of minutes, ours {duration(seconds)} ({agrees})"


# --- rendering ------------------------------------------------------------------------------------------------


def show(value, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


def cells(row: dict, with_lesson: bool = False) -> dict[str, str]:
    """The row as the Markdown and HTML tables show it."""
    status = row["status"]
    if row["failed_layer"]:
        status += f" at {row['failed_layer']}"
    if row["error"]:
        status += f": {row['error'][:160]}"
    split = "–"
    if row["lab_seconds_per_step"] is not None:
        split = (
            f"{row['lab_seconds_per_step']:.3f} ({show(row['generation_s'])} / {show(row['reward_s'])} / "
            f"{show(row['update_s'])}); "
            f"{row['lab_steps']} steps, run {duration(row['lab_wall_clock_s'])}"
        )
    peak = "–"
    if row["peak_memory_gb_measured"] is not None:
        ratio = f", x{row['peak_memory_ratio']:.2f}" if row["peak_memory_ratio"] else ""
        peak = (f"{row['peak_memory_gb_measured']:.3g} / {show(row['peak_memory_gb_predicted'], '.3g')}{ratio} "
                f"({row['peak_memory_from']})")
    stale = "–" if row["stale"] is None else f"stale, lag {row['max_lag_steps']}" if row["stale"] else "on-policy"
    env = [f"torch {row['torch']} ({row['torch_build']})" if row["torch"] else None,
           f"driver {row['driver']}" if row["driver"] else None,
           f"vLLM {row['vllm']}" if row["vllm"] else None,
           f"lock {row['lock']}" if row["lock"] else None,
           f"image {row['image']}" if row["image"] else None]
    shown = {
        "machine": row["machine"],
        "track": row["track"],
        "rollout": row["rollout"],
        "model": row["model"],
        "status": status,
        "smoke: steps": f"{row['smoke_steps']} in {duration(row['smoke_steps_s'])} (run "
                        f"{duration(row['smoke_wall_clock_s'])})"
        if row["smoke_steps"]
        else "–",
        "lab s/step projected by the smoke test": projected(row),
        "lab s/step (generation / reward / update); wall clock": split,
        "lab / projected": show(row["lab_over_projection"], ".2f"),
        "peak GB measured / predicted": peak,
        "more than 25 % off": row["flags"] or "–",
        "pass@1": f"{show(row['pass_at_1_before'])} -> {show(row['pass_at_1_after'])}"
        if row["pass_at_1_before"] is not None
        else "–",
        "reward first -> last": f"{show(row['first_reward'])} -> {show(row['last_reward'])}"
        if row["first_reward"] is not None
        else "–",
        "collapse, step 1": show(row["collapse_first_step"], ".0%"),
        "rollouts": stale,
        "environment": ", ".join(filter(None, env)) or "–",
    }
    if with_lesson:
        shown["lesson says"] = against_lesson(row)
    return shown


def projected(row: dict) -> str:
    """The smoke test's projection of a lab step (and of the configured lab's wall clock), saying when the
    lab that was measured ran a different step (another model, batch or completion length)."""
    if row["projected_lab_seconds_per_step"] is None:
        return "–"
    text = (f"{row['projected_lab_seconds_per_step']:.3f} ({duration(row['projected_lab_wall_clock_s'])} for "
            f"{row['projected_lab_steps']} steps)")
    if row["projected_for"] and row["lab_ran"] and row["projected_for"] != row["lab_ran"]:
        text += f", for {row['projected_for']}; the lab ran {row['lab_ran']}"
    return text


def markdown_table(rows: list[dict], with_lesson: bool = False) -> str:
    table = [cells(row, with_lesson) for row in rows]
    header = list(table[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for shown in table:
        lines.append("| " + " | ".join(shown[h].replace("|", "\\|").replace("\n", " ") for h in header) + " |")
    return "\n".join(lines)


def markdown(rows: list[dict], loaded: LoadedRuns, with_lesson: bool, every_run: bool) -> str:
    what = (
        "every run" if every_run else "the latest passing smoke test and lab per machine, track, rollout path and model"
    )
    text = [
        "# GRPO validation table",
        "",
        f"From {len(loaded.runs)} run(s) in {len(loaded.files)} log(s): {', '.join(str(f) for f in loaded.files)}. "
        f"Rows: {what}. Seconds per step split into generation / reward / update; peak memory measured against "
        "the estimate made before the run (x the ratio); the lab's seconds per step projected by the smoke test "
        "(measured at the lab's shape on the smoke model, scaled only for the model's size) beside the lab's "
        "measurement; "
        "a projection or peak more than 25 % off is flagged.",
        "",
        markdown_table(rows, with_lesson),
    ]
    if with_lesson:
        text += [
            "",
            f'The lesson: "{LESSON_SMOKE}" (read as at most {LESSON_SMOKE_S // 60} minutes for the whole smoke run); '
            "memory from its two diagrams (sums of their rows, without the operating system's share). "
            "Track c is this project's CPU track, not one of the lesson's.",
        ]
    if loaded.warnings:
        text += ["", "Skipped or merged:", ""] + [f"- {warning}" for warning in loaded.warnings]
    return "\n".join(text) + "\n"


def csv_text(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def html_page(rows: list[dict], loaded: LoadedRuns, plots: dict[str, Path | None], with_lesson: bool) -> str:
    """One page, readable offline: the table and every plot inline as data: URIs."""
    import base64
    from html import escape

    table = [cells(row, with_lesson) for row in rows]
    header = "".join(f"<th>{escape(h)}</th>" for h in table[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in shown.values()) + "</tr>" for shown in table)
    figures = []
    for title, path in plots.items():
        if path is None:
            figures.append(f"<h2>{escape(title)}</h2><p>Nothing to draw: no run in these logs has these figures.</p>")
            continue
        data = base64.b64encode(path.read_bytes()).decode()
        figures.append(f'<h2>{escape(title)}</h2><img alt="{escape(title)}" src="data:image/png;base64,{data}">')
    warnings = "".join(f"<li>{escape(w)}</li>" for w in loaded.warnings)
    sources = escape(", ".join(str(f) for f in loaded.files))
    return (
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>GRPO validation table</title><style>"
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:0.85em}"
        "td,th{border:1px solid #ccc;padding:4px;vertical-align:top}th{background:#eee}img{max-width:100%}"
        "</style></head><body>\n<h1>GRPO validation table</h1>\n"
        f"<p>{len(loaded.runs)} run(s) from {sources}.</p>\n<table><tr>{header}</tr>{body}</table>\n"
        + (f"<h2>Skipped or merged</h2><ul>{warnings}</ul>\n" if warnings else "")
        + "\n".join(figures) + "\n</body></html>\n"
    )


def memory_points(runs: list[dict]) -> list[tuple[str, float, float]]:
    """(label, predicted GB, measured GB) of every passing run that has both: labs, and smoke tests of schema 2."""
    points = []
    for run in runs:
        if run.get("status") != "passed":
            continue
        figures = (
            run.get("before_scaling_up")
            if run.get("kind") == "smoke" and isinstance(run.get("before_scaling_up"), dict)
            else run
        )
        predicted, measured = (
            number(figures.get("peak_memory_gb_predicted")),
            number(figures.get("peak_memory_gb_measured")),
        )
        if predicted and measured:
            points.append((f"track {run.get('track')} · {run.get('kind')} · {machine_of(run)}", predicted, measured))
    return points


def write_report(
    loaded: LoadedRuns, out_dir: Path, with_lesson: bool = False, every_run: bool = False
) -> tuple[str, list[Path]]:
    """Write report.md, report.csv, the plots and index.html into out_dir; returns (the Markdown, files written)."""
    from . import plots as report_plots

    rows = build_rows(loaded.runs, every_run)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, loaded, with_lesson, every_run)
    labs = [run for run in loaded.runs if run.get("kind") == "lab" and run.get("status") == "passed"]
    plots = {
        "Reward per step": report_plots.reward_per_step(labs, machine_of, out_dir / "reward_per_step.png"),
        "Time per step: generation, reward, update": report_plots.time_split(rows, out_dir / "time_split.png"),
        "Peak memory: measured against predicted": report_plots.peak_memory(
            memory_points(loaded.runs), out_dir / "peak_memory.png"
        ),
        "Held-out pass@1 before and after": report_plots.pass_at_1(rows, out_dir / "pass_at_1.png"),
    }
    written = [out_dir / "report.md", out_dir / "report.csv", out_dir / "index.html"]
    written[0].write_text(text)
    written[1].write_text(csv_text(rows))
    written[2].write_text(html_page(rows, loaded, plots, with_lesson))
    return text, written + [path for path in plots.values() if path]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "logs",
        nargs="*",
        type=Path,
        help="run logs, or folders holding them (*.jsonl at any depth); default: runs/runlog.jsonl",
    )
    parser.add_argument(
        "--all",
        dest="every_run",
        action="store_true",
        help="one row per run, failed ones included, instead of the latest passing per machine, track, rollout path "
             "and model",
    )
    parser.add_argument(
        "--against-lesson",
        action="store_true",
        help="beside each row, what the lesson predicts for that track and whether this machine agrees",
    )
    parser.add_argument(
        "--out", type=Path, help="where to write report.md, report.csv, the plots and index.html (default: runs/report)"
    )


def run_report(
    logs: list[Path],
    out: Path | None = None,
    against_lesson: bool = False,
    every_run: bool = False,
    say=print,
    warn=None,
) -> int:
    """Print the table and write the report. 0: written; 1: no run line anywhere in the input (the warnings say why)."""
    warn = warn or (lambda text: print(f"warning: {text}", file=sys.stderr))
    loaded = load_runs(logs or None)
    for warning in loaded.warnings:
        warn(warning)
    if not loaded.runs:
        named = ", ".join(str(p) for p in (logs or [runlog_path()]))
        warn(f"no run record in {named}: nothing to report. Run `grpolab smoke` or `grpolab lab` first "
             "(they append to runs/runlog.jsonl), or name the logs or folders copied from other machines")
        return 1
    text, written = write_report(loaded, out or runs_dir() / "report", against_lesson, every_run)
    say(text)
    say("written: " + ", ".join(str(path) for path in written))
    return 0
