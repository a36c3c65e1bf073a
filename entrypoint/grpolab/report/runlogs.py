"""Reading run logs for the report (grpolab.report.table): the logs named or found in folders, each line read
whatever schema wrote it (a bad line skipped with a warning naming it), logs from several machines merged, each run
id counted once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..common.paths import runlog_path
from ..common.runlog import SCHEMA_VERSION

FINISHED = ("passed", "failed", "crashed", "interrupted")
SKIPPED_SHOWN = 5  # bad lines named one by one per log; the rest are counted


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
