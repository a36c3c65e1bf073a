"""A verl run as a run-log line (grpolab.export.verl_result) and its row in the report.

tests/verl_cpu_run/ holds what one real run left: verl 0.9.1's file-logger output (verl-metrics.jsonl) and the run-log
line `grpolab verl-result` wrote from it, with pass@1 by our evaluator on verl's adapter. That run: `python -m
grpolab.export.verl_cpu BUNDLE --steps 2` on the tiny model at 9dda6a0 plus this change, in a venv synced from
lockfiles/clustercpu.txt (sha256 a7791487...), on a 2-core AMD EPYC without a GPU. CI makes a new one each time
(`invoke verl-cpu`, hostlab/ci/testcommand.py); the tests here read the committed one, where verl itself is not
installed.
That harness is CI's proof, not a product command: it is now grpolab/bench/verl_cpu_proof.py, run as `python -m
grpolab.bench verl-cpu BUNDLE --steps 2`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from grpolab.cli import main
from grpolab.common.errors import EXIT_STATUS
from grpolab.common.runlog import read_runs
from grpolab.export.verl import export_bundle
from grpolab.export.verl_result import read_metrics, record_verl_run, step_records, summarise_steps
from grpolab.model.tiny import FIXTURE_SHA256
from grpolab.report.table import run_report
from grpolab.settings.lab_settings import LabSettings

RUN = Path(__file__).resolve().parent / "verl_cpu_run"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, tiny_model_path):
    settings = LabSettings(
        model="tiny",
        dtype="bfloat16",
        track="clustercpu",
        train_size=16,
        heldout_size=8,
        max_steps=2,
        num_generations=4,
        per_device_train_batch_size=8,
        max_prompt_length=64,
        max_completion_length=16,
        rollout="vllm-colocate",
    )
    return export_bundle(settings, tmp_path_factory.mktemp("verl") / "bundle")


def test_verls_metrics_become_the_labs_fields():
    """Each training step of verl's log, with the numbers verl wrote, and the held-out accuracy of both validations."""
    raw = [json.loads(line)["data"] for line in (RUN / "verl-metrics.jsonl").read_text().splitlines()]
    steps, validations = read_metrics(RUN / "verl-metrics.jsonl")
    assert len(steps) == 2 and validations == [
        raw[0]["val-core/arithmetic/acc/mean@1"],
        raw[2]["val-core/arithmetic/acc/mean@1"],
    ]
    record = {"steps": step_records(steps)}
    summarise_steps(record)
    assert [s["reward"] for s in record["steps"]] == [raw[1]["critic/score/mean"], raw[2]["critic/score/mean"]]
    assert [s["seconds"] for s in record["steps"]] == [
        round(raw[1]["timing_s/step"], 4),
        round(raw[2]["timing_s/step"], 4),
    ]
    assert record["steps"][1]["verl_timing_s"]["save_checkpoint"] == round(raw[2]["timing_s/save_checkpoint"], 4)
    assert record["time_split_s_per_step"]["generation"] == round(
        (raw[1]["timing_s/gen"] + raw[2]["timing_s/gen"]) / 2, 4
    )
    assert "reward" not in record["time_split_s_per_step"]  # verl scores inside its rollout: no timer of its own
    peak = max(raw[1]["actor/perf/max_memory_allocated_gb"], raw[2]["actor/perf/max_memory_allocated_gb"])
    assert record["peak_memory_gb_measured"] == round(peak, 3)
    assert record["first_reward"] < record["last_reward"]


def test_a_failed_verl_run_is_a_failed_line_in_the_trainer_layer(bundle, tmp_path):
    """verl stopped before its logger wrote anything: the line says so by verl's exit status; the report shows it."""
    log = tmp_path / "runlog.jsonl"
    record = record_verl_run(
        bundle, tmp_path / "absent.jsonl", tmp_path / "none", verl_exit_status=1, log_path=log, say=lambda _: None
    )
    assert record["status"] == "failed" and record["failed_layer"] == "first_step"
    assert record["error"].startswith("verl exited 1 after 0 step(s)")
    assert (
        record["engine"] == "verl"
        and record["track"] == "clustercpu"
        and [line["run_id"] for line in read_runs(log)] == [record["run_id"]]
    )
    assert run_report([log], out=tmp_path / "report") == 0
    row = next(csv.DictReader((tmp_path / "report" / "report.csv").open()))
    assert row["engine"] == "verl" and row["status"] == "failed" and row["failed_layer"] == "first_step"


def test_a_run_without_its_checkpoint_names_what_is_missing(bundle, tmp_path):
    """verl exited 0 and logged its steps, but no checkpoint is where the bundle saves: failed, naming where."""
    (tmp_path / "checkpoints").mkdir()
    record = record_verl_run(
        bundle,
        RUN / "verl-metrics.jsonl",
        tmp_path / "checkpoints",
        log_path=tmp_path / "runlog.jsonl",
        say=lambda _: None,
    )
    assert record["status"] == "failed" and record["failed_layer"] == "runlog"
    assert (
        f"no checkpoint under {tmp_path / 'checkpoints'}" in record["error"] and "trainer.save_freq" in record["error"]
    )
    assert len(record["steps"]) == 2 and record["seconds_per_step"] is not None  # what verl measured is kept


def test_verls_row_stands_beside_the_trl_rows(tmp_path):
    """The real line: its own row (rollout verl+vllm, engine verl) for the same tiny model as the lab's, with pass@1 by
    our evaluator before and after, and verl's figures; a TRL line keeps its row and engine."""
    verl_line = read_runs(RUN / "runlog.jsonl")[-1]
    assert (
        verl_line["model_identity"]["name"] == "tiny"
        and verl_line["model_identity"]["weights_sha256"] == FIXTURE_SHA256["model.safetensors"]
    )
    trl_line = {
        "run_id": "20261201T000000Z-aaaaaa",
        "kind": "lab",
        "track": "c",
        "status": "passed",
        "settings": {"model": "tiny", "rollout": "inprocess"},
        "rollout": {"path": "inprocess"},
        "model_identity": verl_line["model_identity"],
        "fingerprint": verl_line["fingerprint"],
    }
    log = tmp_path / "runlog.jsonl"
    log.write_text(json.dumps(trl_line) + "\n" + (RUN / "runlog.jsonl").read_text())
    assert run_report([log], out=tmp_path / "report") == 0
    rows = {row["track"]: row for row in csv.DictReader((tmp_path / "report" / "report.csv").open())}
    assert rows["c"]["engine"] == "trl" and rows["c"]["rollout"] == "inprocess"
    verl = rows["clustercpu"]
    assert (
        verl["engine"] == "verl"
        and verl["rollout"] == "verl+vllm"
        and verl["model"] == rows["c"]["model"]
        and verl["status"] == "passed"
    )
    assert (
        float(verl["pass_at_1_before"]) == verl_line["pass_at_1_before"]
        and float(verl["pass_at_1_after"]) == verl_line["pass_at_1_after"]
    )
    assert verl["lab_steps"] == "2" and float(verl["lab_seconds_per_step"]) == verl_line["seconds_per_step"]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "| clustercpu | verl+vllm |" in markdown


def test_a_reward_returning_a_string_is_named_by_its_first_error(bundle, tmp_path):
    """verl's output when the bundle's compute_score returned a string (broken by hand once; excerpt of the real run in
    tests/verl_cpu_run/broken-reward-output.log): the driver's traceback names only the consequence, an empty
    validation batch; the line names the cause, raised first in the agent loop's actor."""
    output = RUN / "broken-reward-output.log"
    assert "ValueError: Received an empty list as keys." in output.read_text()
    record = record_verl_run(
        bundle,
        tmp_path / "absent.jsonl",
        tmp_path / "none",
        verl_exit_status=1,
        output_log=output,
        log_path=tmp_path / "runlog.jsonl",
        say=lambda _: None,
    )
    assert record["status"] == "failed" and record["failed_layer"] == "first_step"
    assert (
        "the first error in its output: (AgentLoopWorkerTQ) TypeError: can't assign a str to a torch.FloatTensor"
        in record["error"]
    )
    assert str(output) in record["error"]


def test_the_command_line_says_what_failed_in_which_layer(bundle, tmp_path, monkeypatch, capsys):
    """`grpolab verl-result` on a folder that is no bundle: one FAILED [input] line, exit 2, nothing recorded. On a
    bundle whose runs folder cannot be written: the lab's own [runlog] verdict and what to do, exit 15. No traceback."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("GRPOLAB_RUNS_DIR", str(runs))
    assert main(["verl-result", str(tmp_path)]) == EXIT_STATUS["input"]
    said = capsys.readouterr().err
    assert (
        f"FAILED [input] {tmp_path} is not an exported bundle: it has no settings.json" in said
        and "Traceback" not in said
    )
    assert not runs.exists()

    runs.write_text("a file where the runs folder should be\n")
    assert main(["verl-result", str(bundle), "--verl-exit-status", "1"]) == EXIT_STATUS["runlog"]
    said = capsys.readouterr().err
    assert (
        "FAILED [runlog] could not write the run log:" in said
        and "what to do: make runs/ (or GRPOLAB_RUNS_DIR) writable" in said
    )
    assert "Traceback" not in said
