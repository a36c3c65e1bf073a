"""The run log: JSON lines, each appended whole or not at all.

A run writes two lines: a start record (`"record": "start"`, its run_id, kind, track, start time, pid) when it
begins, and its full record when it ends, however it ends. A run killed where nothing can be caught (SIGKILL,
the OOM killer, a power cut) leaves only its start record: the reader names it unfinished instead of
forgetting it.

Each line is serialised completely before anything touches the file, then written under an exclusive lock
on a descriptor opened with O_APPEND. A crash or Ctrl-C before the write leaves the log untouched; a write
that fails part-way (the disk full, a file size limit) is cut back to where the log ended before it, so the
log never holds a partial line of ours, and the error goes to the caller (the run-log layer).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import uuid
from datetime import datetime, timezone
from pathlib import Path

from .errors import LayerFailure
from .paths import runlog_path

# Version of a run-log line's fields, written into every line as "schema". Lines without it are schema 1
# (written before it existed); grpolab.report.table reads both. 2 added the smoke test's "before_scaling_up"; 3 added
# "model_identity" (grpolab.model.identity: the weights' sha256 and Hub revision), in start records too; 4 added
# "warnings" (legal but unwise settings) and the line of a run whose settings were refused before anything loaded
# (grpolab.run.record.log_refused: failed at input, no start line, the settings as given, no model or device fields);
# 5 added "engine" and the lab line of an exported bundle's run on a distributed engine (grpolab.export.verl_result:
# engine "verl", rollout path "verl+vllm", verl's own figures under "verl"). A line without "engine" is TRL's.
SCHEMA_VERSION = 5


def runlog_failure(error: OSError) -> LayerFailure:
    """The runlog layer's verdict on a run log that could not be written, and what to do."""
    return LayerFailure(
        "runlog", f"could not write the run log: {error}",
        "make runs/ (or GRPOLAB_RUNS_DIR) writable by this user and free some disk space; in a container, "
        "check the runs volume's owner",
    )


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def append_run(record: dict, path: Path | None = None) -> Path:
    path = Path(path or runlog_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (
        json.dumps({**record, "schema": SCHEMA_VERSION}, sort_keys=True, default=str, allow_nan=False).encode() + b"\n"
    )
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)  # read: the last byte
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A previous writer killed mid-line (by something we could not catch) must not glue onto ours.
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        _write_whole(fd, line, size)
    finally:
        os.close(fd)
    return path


def _write_whole(fd: int, data: bytes, size_before: int) -> None:
    """Write all of `data` and fsync, or cut the file back to `size_before` and raise the OSError."""
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, data[written:])  # a short write (disk almost full) returns less
        os.fsync(fd)
    except OSError:
        os.ftruncate(fd, size_before)  # we hold the lock: nobody else appended since size_before
        raise


def append_start(record: dict, path: Path | None = None) -> Path:
    """The start record of a run that `record` (its run_id, kind, track, started_at) describes."""
    start = {key: record.get(key) for key in ("run_id", "kind", "track", "started_at", "model", "model_identity")}
    start.update(record="start", pid=os.getpid(), host=socket.gethostname())
    return append_run(start, path)


def _read_lines(path: Path | None) -> list[dict]:
    """Every whole line of the log; a line that is not valid JSON is skipped, never fatal."""
    path = Path(path or runlog_path())
    if not path.exists():
        return []
    lines = []
    for raw in path.read_bytes().decode(errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


def _is_start(line: dict) -> bool:
    return line.get("record") == "start"


def read_runs(path: Path | None = None) -> list[dict]:
    """The runs that ended (their full records), in the order they ended."""
    return [line for line in _read_lines(path) if not _is_start(line)]


def runs_with_unfinished(path: Path | None = None) -> list[dict]:
    """Every run once, in the order they started: a finished run as its full record, a run whose start record
    has no full record after it as that start record with status "unfinished" (killed where nothing could be
    caught, or still running)."""
    lines = _read_lines(path)
    ends = {line.get("run_id"): line for line in lines if not _is_start(line)}
    started = {line.get("run_id") for line in lines if _is_start(line)}
    runs = []
    for line in lines:
        if _is_start(line):
            runs.append(ends.get(line.get("run_id")) or {**line, "status": "unfinished"})
        elif line.get("run_id") not in started:  # logged without a start record (older logs)
            runs.append(line)
    return runs


def unfinished_runs(path: Path | None = None) -> list[dict]:
    """Runs that wrote a start record and no full record: killed by SIGKILL, the OOM killer or a power cut,
    or still running (a run in another terminal). Each is its start record with status "unfinished"."""
    return [run for run in runs_with_unfinished(path) if run.get("status") == "unfinished"]


def still_running(run: dict) -> bool | None:
    """Is the run's process alive? True or False on the machine (or container) that started it; None elsewhere: each
    `docker compose run` is a container of its own, whose processes another cannot see."""
    if run.get("host") != socket.gethostname() or not isinstance(run.get("pid"), int):
        return None
    try:
        os.kill(run["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def describe_unfinished(run: dict) -> str:
    """One line for a person: which run, when, and what probably happened (still running, where this process can
    tell; killed where nothing could be logged, where it can tell it is gone)."""
    which = (f"run {run.get('run_id')} ({run.get('kind')}, track {run.get('track')}, started {run.get('started_at')}, "
             f"pid {run.get('pid')} on {run.get('host')})")
    alive = still_running(run)
    if alive:
        return f"{which} is still running: its line comes when it ends"
    if alive is False:
        return (f"{which} never finished: it was killed where nothing could be logged (SIGKILL, the OOM killer, a "
                "power cut)")
    return (f"{which} has not finished: it runs in another terminal or container, or it was killed where nothing "
            "could be logged (SIGKILL, the OOM killer, a power cut)")


def last_passing_smoke(path: Path | None = None) -> dict | None:
    for run in reversed(read_runs(path)):
        if run.get("kind") == "smoke" and run.get("status") == "passed":
            return run
    return None


def short_model_identity(identity: dict | None, fallback_name: str | None = None) -> str:
    """A run-log line's model_identity in a few words for a table: "tiny (weights 953354a3)", "Qwen/Qwen3-0.6B@c1899de2
    (weights …)"."""
    if not isinstance(identity, dict):
        return f"{fallback_name or '?'} (weights not recorded)"
    text = str(identity.get("name") or fallback_name or "?")
    if identity.get("revision"):
        text += f"@{str(identity['revision'])[:8]}"
    weights = identity.get("weights_sha256")
    return text + (f" (weights {str(weights)[:8]})" if weights else " (weights unknown)")
