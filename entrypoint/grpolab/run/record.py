"""One run (smoke or lab) from start to its run-log line, whatever happens in between."""

from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from .diskspace import LineRoom, disk_full_failure, free_bytes, is_disk_full, run_log_line_bytes, save_elsewhere
from ..common.errors import LayerFailure
from ..model.identity import model_identity
from ..common.paths import runlog_path
from ..common.runlog import (
    SCHEMA_VERSION,
    append_start,
    describe_unfinished,
    new_run_id,
    runlog_failure,
    unfinished_runs,
)
from ..settings.lab_settings import LabSettings


def is_out_of_memory(error: BaseException) -> bool:
    return type(error).__name__ == "OutOfMemoryError" or "out of memory" in str(error).lower()


def new_record(kind: str, settings: LabSettings) -> dict:
    return {
        "run_id": new_run_id(),
        "kind": kind,
        "track": settings.track,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "status": "running",
        "failed_layer": None,
        "error": None,
        "warnings": settings.warnings(kind)
        + settings.notes(),  # legal but unwise values, and defaults that gave way, as printed at the start
        "settings": settings.as_dict(),
        "model": settings.model,
        "model_identity": model_identity(settings.model),  # refreshed once the model has loaded (a Hub download)
    }


def log_refused(
    kind: str, track: str, given: dict, failure: LayerFailure, warnings=(), log_path=None, say=print
) -> None:
    """The run-log line of a run whose settings were refused before anything loaded: one whole failed line (no
    start line: nothing ran that could be killed), the values as given, and no device, model or fingerprint
    fields, since none was looked at. A run log that cannot be written is said, and the input verdict stands."""
    from .checks import check_runlog

    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record = {
        "run_id": new_run_id(),
        "kind": kind,
        "track": track,
        "started_at": now,
        "finished_at": now,
        "status": "failed",
        "failed_layer": failure.layer,
        "error": str(failure),
        "settings": as_given(given),
        "warnings": list(warnings),
        "wall_clock_s": 0.0,
    }
    try:
        path = check_runlog(record, log_path)
        say(f"run log: failed -> {path} ({record['run_id']})")
    except LayerFailure as unwritable:  # the input verdict stands; the log's failure is only said
        say(str(unwritable))


def as_given(value):
    """A refused value as JSON can hold it: NaN and infinity (a JSON config file may hold them) as text."""
    if isinstance(value, dict):
        return {str(k): as_given(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value if isinstance(value, (str, int, float, bool, type(None), list)) else str(value)


def log_start(record: dict, settings: LabSettings, log_path=None, say=print) -> LineRoom:
    """Name earlier runs that never finished, write this run's start record (so that a run killed where nothing
    can be caught, SIGKILL, still shows, as unfinished), and hold room for its last line on the log's disk. A log we
    can't write, or a disk without that room, fails now, before training."""
    path = Path(log_path or runlog_path())
    room = LineRoom(path, record["run_id"], run_log_line_bytes(settings))
    try:
        for run in unfinished_runs(log_path)[-3:]:
            say("note: " + describe_unfinished(run))
        room.hold()  # first: a disk without room for the last line refuses the run before it writes anything
        append_start(record, log_path)
        return room
    except OSError as error:
        room.release()
        if is_disk_full(error):
            raise disk_full_failure(path.parent, error, run_log_line_bytes(settings), free_bytes(path.parent),
                                    "Nothing was trained or written.") from error
        raise runlog_failure(error) from error


def out_of_memory(error: BaseException, record: dict) -> LayerFailure:
    predicted = record.get("peak_memory_gb_predicted")
    failure = LayerFailure(
        "out_of_memory",
        f"out of memory ({str(error).splitlines()[0][:200]}); the estimate before the run was "
        f"{predicted if predicted is not None else 'unknown'} GB",
        "run `grpolab estimate` with these settings; lower num_generations or max_completion_length, keep beta 0, "
        "or lower vllm_gpu_memory_utilization",
    )
    failure.__cause__ = error
    return failure


def crashed(error: BaseException) -> LayerFailure:
    """An error no layer check expected: its own status and exit status, never mistaken for bad input."""
    failure = LayerFailure(
        "crashed",
        f"the run crashed: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}",
        "this is not one of the layers' verdicts: read the traceback above; if the settings are supported, report it "
        "as a bug with that traceback",
    )
    failure.__cause__ = error
    return failure


def outcome_of(error: BaseException, record: dict) -> BaseException:
    """Fill in the record's status for how the run ended; returns what the caller is to see raised."""
    if isinstance(error, KeyboardInterrupt):
        record.update(status="interrupted", failed_layer="interrupted", error="interrupted by the user (Ctrl-C)")
        return error
    if not isinstance(error, LayerFailure):
        if is_disk_full(error):  # a write anywhere in the run (a checkpoint, a log, an export) met a full disk
            error = disk_full_while_running(error)
        elif not is_out_of_memory(error):
            record.update(status="crashed", failed_layer=None, error=f"{type(error).__name__}: {error}")
            return crashed(error)
        error = out_of_memory(error, record)
    record.update(status="failed", failed_layer=error.layer, error=str(error))
    return error


@contextmanager
def recorded_run(kind: str, settings: LabSettings, log_path=None, say=print):
    """Yields the record to fill in; appends it to the run log on success, failure, crash or Ctrl-C.

    A LayerFailure keeps its layer; an out-of-memory error becomes the out_of_memory layer, logged with
    the prediction; any other error is logged as `crashed` and raised as the `crashed` failure (exit 17);
    Ctrl-C is logged as interrupted. The failure still propagates to the caller.
    """
    from .checks import check_runlog

    started = time.time()
    record = new_record(kind, settings)
    room = log_start(record, settings, log_path, say)
    outcome: BaseException | None = None
    try:
        yield record
        record["status"] = "passed"
    except BaseException as error:  # noqa: BLE001 - logged, then raised
        outcome = outcome_of(error, record)
    finally:
        ended = time.time()
        record["wall_clock_s"] = round(ended - started, 3)
        record["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        record["finished_at_unix_s"] = round(
            ended, 3
        )  # to the millisecond: a caller timing a command around the run (the projection bench)
        if "fingerprint" not in record:
            from ..environment.fingerprint import environment_fingerprint

            record["fingerprint"] = environment_fingerprint()
        room.release()  # the line's room, held since the start: a disk that filled meanwhile still takes the line
        try:
            path = check_runlog(record, log_path)
            say(f"run log: {record['status']} -> {path} ({record['run_id']})")
        except LayerFailure as failure:
            keep_line_elsewhere(record, log_path, say)
            if outcome is None:
                outcome = failure
            else:
                say(str(failure))
    if outcome is not None:
        raise outcome


def disk_full_while_running(error: BaseException) -> LayerFailure:
    """A full disk met by a write no save of ours guards (a library's checkpoint or log): the run-log layer's verdict,
    naming the file's folder and what is free there."""
    filename = getattr(error, "filename", None)
    folder = Path(filename).parent if filename else Path(runlog_path()).parent
    return disk_full_failure(
        folder, error, None, free_bytes(folder), "The run stopped there; what it had trained was not saved."
    )


def keep_line_elsewhere(record: dict, log_path, say) -> None:
    """The run's line when the run log cannot take it: saved whole beside the run's rescued outputs (the cache, else
    /tmp), with the command that appends it to the log once there is room. The start record in the log shows the
    run as unfinished meanwhile."""
    try:
        line = json.dumps({**record, "schema": SCHEMA_VERSION}, sort_keys=True, default=str, allow_nan=False) + "\n"
    except ValueError:  # a value JSON cannot hold: the run-log layer's verdict already says so
        return
    folder, tried = save_elsewhere(
        record["run_id"], lambda into: (into / "runlog-line.json").write_text(line), len(line)
    )
    log = Path(log_path or runlog_path())
    if folder is None:
        say(
            f"the run's line is lost: the run log and every other place refused it ({'; '.join(tried)}); its start "
            "record shows it unfinished"
        )
    else:
        say(
            f"the run's line was saved to {folder / 'runlog-line.json'}: once {log.parent} has room, "
            f"`cat {folder / 'runlog-line.json'} >> {log}` puts it in the run log (its start record shows it "
            "unfinished until then)"
        )
