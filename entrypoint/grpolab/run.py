"""One run (smoke or lab) from start to its run-log line, whatever happens in between."""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import datetime, timezone

from .errors import LayerFailure
from .runlog import append_run, append_start, describe_unfinished, new_run_id, unfinished_runs
from .settings import LabSettings


def is_out_of_memory(error: BaseException) -> bool:
    return type(error).__name__ == "OutOfMemoryError" or "out of memory" in str(error).lower()


def runlog_failure(error: OSError) -> LayerFailure:
    return LayerFailure(
        "runlog", f"could not write the run log: {error}",
        "make runs/ (or GRPOLAB_RUNS_DIR) writable by this user and free some disk space; in a container, "
        "check the runs volume's owner",
    )  # fmt: skip


def log_start(record: dict, log_path=None, say=print) -> None:
    """Name earlier runs that never finished, then write this run's start record, so that a run killed where
    nothing can be caught (SIGKILL) still shows, as unfinished. A log we can't write fails now, before training."""
    try:
        earlier = unfinished_runs(log_path)
        for run in earlier[-3:]:
            say("note: " + describe_unfinished(run))
        append_start(record, log_path)
    except OSError as error:
        raise runlog_failure(error) from error


@contextmanager
def recorded_run(kind: str, settings: LabSettings, log_path=None, say=print):
    """Yields the record to fill in; appends it to the run log on success, failure, crash or Ctrl-C.

    A LayerFailure keeps its layer; an out-of-memory error becomes the out_of_memory layer, logged with
    the prediction; Ctrl-C is logged as interrupted. The exception still propagates to the caller.
    """
    started = time.time()
    record: dict = {
        "run_id": new_run_id(),
        "kind": kind,
        "track": settings.track,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "status": "running",
        "failed_layer": None,
        "error": None,
        "settings": settings.as_dict(),
        "model": settings.model,
    }
    log_start(record, log_path, say)
    outcome: BaseException | None = None
    try:
        yield record
        record["status"] = "passed"
    except LayerFailure as failure:
        outcome = failure
        record.update(status="failed", failed_layer=failure.layer, error=str(failure))
    except KeyboardInterrupt as interrupt:
        outcome = interrupt
        record.update(status="interrupted", failed_layer="interrupted", error="interrupted by the user (Ctrl-C)")
    except BaseException as error:  # noqa: BLE001 - logged, then re-raised
        if is_out_of_memory(error):
            predicted = record.get("peak_memory_gb_predicted")
            outcome = LayerFailure(
                "out_of_memory",
                f"out of memory ({str(error).splitlines()[0][:200]}); the estimate before the run was "
                f"{predicted if predicted is not None else 'unknown'} GB",
                "run `grpolab estimate` with these settings; lower num_generations or max_completion_length, keep beta 0, "
                "or lower vllm_gpu_memory_utilization",
            )
            outcome.__cause__ = error
            record.update(status="failed", failed_layer="out_of_memory", error=str(outcome))
        else:
            outcome = error
            record.update(status="crashed", failed_layer=None, error=f"{type(error).__name__}: {error}")
    finally:
        record["wall_clock_s"] = round(time.time() - started, 3)
        record["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if "fingerprint" not in record:
            from .fingerprint import environment_fingerprint

            record["fingerprint"] = environment_fingerprint()
        try:
            path = append_run(record, log_path)
            say(f"run log: {record['status']} -> {path} ({record['run_id']})")
        except OSError as error:
            failure = runlog_failure(error)
            if outcome is None:
                outcome = failure
            else:
                say(str(failure))
    if outcome is not None:
        raise outcome
