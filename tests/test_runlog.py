import signal
from pathlib import Path

import pytest

from conftest import lab_in_training
from grpolab.common.errors import LayerFailure
from grpolab.run.record import recorded_run
from grpolab.common.runlog import SCHEMA_VERSION, append_run, last_passing_smoke, read_runs
from grpolab.settings.lab_settings import LabSettings

REPO = Path(__file__).resolve().parents[1]


# Concurrent appends: tests/test_faults.py (eight processes, a hundred lines each).


def test_line_after_a_torn_line_starts_on_its_own(tmp_path):
    path = tmp_path / "runlog.jsonl"
    path.write_text('{"kind": "smoke", "status": "pass')  # a writer killed by SIGKILL mid-line
    append_run({"kind": "smoke", "status": "passed"}, path)
    written = {"kind": "smoke", "status": "passed", "schema": SCHEMA_VERSION}  # every line says its schema
    assert read_runs(path) == [written]
    assert last_passing_smoke(path) == written


def test_unserialisable_record_leaves_the_log_untouched(tmp_path):
    path = tmp_path / "runlog.jsonl"
    append_run({"n": 1}, path)
    with pytest.raises(ValueError):
        append_run({"n": float("nan")}, path)
    assert path.read_text() == f'{{"n": 1, "schema": {SCHEMA_VERSION}}}\n'


def test_recorded_run_logs_failures_with_their_layer(tmp_path):
    path = tmp_path / "runlog.jsonl"
    with pytest.raises(LayerFailure):
        with recorded_run("smoke", LabSettings(), log_path=path, say=lambda *_: None) as record:
            record["seen"] = True
            raise LayerFailure("adapter", "matched nothing", "fix it")
    (run,) = read_runs(path)
    assert run["status"] == "failed" and run["failed_layer"] == "adapter" and run["seen"]
    assert run["fingerprint"]["torch_version"]


def test_recorded_run_logs_ctrl_c_as_interrupted(tmp_path):
    path = tmp_path / "runlog.jsonl"
    with pytest.raises(KeyboardInterrupt):
        with recorded_run("lab", LabSettings(), log_path=path, say=lambda *_: None):
            raise KeyboardInterrupt
    (run,) = read_runs(path)
    assert run["status"] == "interrupted"


def test_unwritable_log_is_the_runlog_layer(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the runs folder should be")
    with pytest.raises(LayerFailure) as failure:
        with recorded_run("smoke", LabSettings(), log_path=blocked / "runlog.jsonl", say=lambda *_: None):
            pass
    assert failure.value.layer == "runlog"


@pytest.mark.slow
def test_sigint_during_a_lab_run_logs_interrupted(tmp_path, tiny_model_env):
    process, output = lab_in_training(tiny_model_env, tmp_path)
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=120)
    output += rest
    assert process.returncode == 130, output
    runs = read_runs(tmp_path / "runlog.jsonl")
    assert [r["status"] for r in runs] == ["interrupted"], output
    assert all(line.endswith("}") for line in (tmp_path / "runlog.jsonl").read_text().splitlines())
