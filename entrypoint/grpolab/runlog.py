"""The run log: one JSON line per run, appended whole or not at all.

The line is serialised completely before anything touches the file, then written with one write() on a
descriptor opened with O_APPEND under an exclusive lock. A crash or Ctrl-C before that call leaves the
log untouched; the call itself either lands the whole line or nothing a reader would accept.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

from .paths import runlog_path

# Version of a run-log line's fields, written into every line as "schema". Lines without it are schema 1
# (written before it existed); grpolab.report reads both. 2 added the smoke test's "before_scaling_up".
SCHEMA_VERSION = 2


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def append_run(record: dict, path: Path | None = None) -> Path:
    path = Path(path or runlog_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({**record, "schema": SCHEMA_VERSION}, sort_keys=True, default=str, allow_nan=False).encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A previous writer killed mid-line (by something we could not catch) must not glue onto ours.
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read_runs(path: Path | None = None) -> list[dict]:
    """Every whole line of the log; a line that is not valid JSON is skipped, never fatal."""
    path = Path(path or runlog_path())
    if not path.exists():
        return []
    runs = []
    for raw in path.read_text().splitlines():
        try:
            runs.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return runs


def last_passing_smoke(path: Path | None = None) -> dict | None:
    for run in reversed(read_runs(path)):
        if run.get("kind") == "smoke" and run.get("status") == "passed":
            return run
    return None
