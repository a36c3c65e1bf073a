"""The lesson's per-track validation table, built from run logs gathered on one or several machines.

    grpolab report [LOGS...] [--all] [--against-lesson] [--out runs/report]

Reads run-log lines of every schema the project has written (runlog.SCHEMA_VERSION; lines without "schema"
are schema 1), merges logs from different machines, counts a run id once, and writes report.md, report.csv,
the plots (plots.py) and one self-contained index.html. Pure Python and matplotlib: it runs on the
host (`invoke report`) as well as in the images, and never imports torch or TRL.

This module holds the command (its arguments, run_report, write_report); the logs are read by runlogs.py, the rows
made by rows.py, the lesson's figures are in lesson.py, and the Markdown, CSV and HTML are rendered by render.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..common.paths import runlog_path, runs_dir
from .render import csv_text, html_page, markdown
from .rows import build_rows, machine_of, number
from .runlogs import LoadedRuns, load_runs


class ReportError(Exception):
    """No report can be made: the message says why and what to do."""


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
