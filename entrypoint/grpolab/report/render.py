"""The report's rows as the reader sees them (grpolab.report.table): the cells of one row, the Markdown table and
report, the CSV, and the one self-contained HTML page with every plot inline."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..common.durations import duration
from .lesson import LESSON_SMOKE, LESSON_SMOKE_S, against_lesson
from .rows import COLUMNS
from .runlogs import LoadedRuns


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
