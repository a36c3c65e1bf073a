"""grpolab report: the lesson's validation table from the run logs of every track.

Track c's lines are made for real (the lab and its smoke test on the CPU with the tiny model, and a smoke test
that fails its device layer); the lines of tracks s, x, n and m are that real lab line with the fingerprint and
figures of hardware we do not have, written by hand. Track m's line is kept in the older schema (no "schema",
no "before_scaling_up") so the report reads both.
"""

import base64
import copy
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_CACHE
from grpolab.run.calibration import CALIBRATION_STEPS
from grpolab.report.lesson import LESSON_TRACKS
from grpolab.report.runlogs import load_runs
from grpolab.report.table import run_report
from grpolab.common.runlog import SCHEMA_VERSION, read_runs
from grpolab.model.tiny import FIXTURE_SHA256

REPO = Path(__file__).resolve().parents[1]
PLOTS = ("reward_per_step.png", "time_split.png", "peak_memory.png", "pass_at_1.png")
PLOT_PX = (1000, 600)

# What each machine's fingerprint would say (hardware we lack here): fixtures, not measurements.
HARDWARE = {
    "s": {
        "rollout": "vllm-colocate",
        "fingerprint": {
            "device_type": "cuda",
            "device_name": "NVIDIA GB10",
            "device_arch": "sm_121",
            "machine": "aarch64",
            "torch_version": "2.13.0+cu130",
            "torch_build": "cuda",
            "torch_cuda": "13.0",
            "torch_hip": None,
            "driver": "580.95.05",
        },
        "vllm": "0.31.0",
        "peak": (52.0, 50.9),
        "pass": (0.31, 0.47),
    },
    "x": {
        "rollout": "inprocess",
        "fingerprint": {
            "device_type": "cuda",
            "device_name": "AMD Radeon 8060S",
            "device_arch": "gfx1151",
            "machine": "x86_64",
            "torch_version": "2.13.0+rocm7.2",
            "torch_build": "hip",
            "torch_cuda": None,
            "torch_hip": "7.2",
            "driver": "6.18.4",
        },
        "vllm": None,
        "peak": (7.1, 6.4),
        "pass": (0.30, 0.41),
    },
    "n": {
        "rollout": "vllm-colocate",
        "fingerprint": {
            "device_type": "cuda",
            "device_name": "NVIDIA GeForce RTX 4090",
            "device_arch": "sm_89",
            "machine": "x86_64",
            "torch_version": "2.13.0+cu130",
            "torch_build": "cuda",
            "torch_cuda": "13.0",
            "torch_hip": None,
            "driver": "580.82.07",
        },
        "vllm": "0.31.0",
        "peak": (13.2, 11.0),
        "pass": (0.30, 0.44),
    },
    "m": {
        "rollout": "inprocess",
        "fingerprint": {
            "device_type": "mps",
            "device_name": "arm",
            "device_arch": "mps",
            "machine": "arm64",
            "torch_version": "2.13.0",
            "torch_build": "mps",
            "torch_cuda": None,
            "torch_hip": None,
            "driver": None,
        },
        "vllm": None,
        "peak": (9.5, 8.0),
        "pass": (0.29, 0.35),
    },
}


def python_grpolab(*args, env, cwd=REPO):
    return subprocess.run(
        [sys.executable, "-m", "grpolab", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def track_c(tiny_model_path, tmp_path_factory):
    """Track c's run log, made for real: the smoke test, a short lab, then a smoke test failing its device layer.

    The smoke test runs at the first of seeds 1, 2, 3 whose first step has reward spread: at seed 0 the tiny
    model (recipe 2) collapses on its first step here (torch 2.13.0+cpu, and 2.15.0 in the image), which is the
    smoke test's business (tests/test_smoke.py), not the report's."""
    import os

    runs = tmp_path_factory.mktemp("runs-c")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "entrypoint"), str(REPO / "tests")]),
           "GRPOLAB_CACHE_DIR": str(TEST_CACHE), "GRPOLAB_TRACK": "c", "GRPOLAB_RUNS_DIR": str(runs)}
    for seed in ("1", "2", "3"):
        smoke = python_grpolab("smoke", "--track", "c", "--seed", seed, env=env)
        if smoke.returncode != 13:  # 13: group collapse on the first step; try the next seed
            break
        (runs / "runlog.jsonl").unlink()
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    lab = python_grpolab(
        "lab",
        "--track",
        "c",
        "--smoke",
        "never",
        "--max-steps",
        "4",
        "--logging-steps",
        "2",
        "--heldout-size",
        "20",
        "--train-size",
        "100",
        "--per-device-train-batch-size",
        "16",
        env=env,
    )
    assert lab.returncode == 0, lab.stdout[-3000:] + lab.stderr[-3000:]
    failed = python_grpolab("smoke", "--track", "c", "--expect-device", "cuda", env=env)
    assert failed.returncode == 10, failed.stdout[-3000:] + failed.stderr[-3000:]
    return {"log": runs / "runlog.jsonl", "smoke_output": smoke.stdout, "env": env}


def hardware_lines(real_lab: dict, real_smoke: dict, track: str, hardware: dict) -> list[dict]:
    """A smoke and a lab line for `track`: the real lines of track c, with that machine's fingerprint and figures."""
    lines = []
    for real in (real_smoke, real_lab):
        line = copy.deepcopy(real)
        line["run_id"] = f"{real['run_id']}-{track}"
        line["track"] = line["settings"]["track"] = track
        line["settings"]["rollout"] = hardware["rollout"]
        line["rollout"]["path"] = hardware["rollout"]
        line["fingerprint"] = {
            **line["fingerprint"],
            **hardware["fingerprint"],
            "packages": {**line["fingerprint"]["packages"], "vllm": hardware["vllm"]},
        }
        lines.append(line)
    smoke, lab = lines
    lab["peak_memory_gb_measured"], lab["peak_memory_gb_predicted"] = hardware["peak"]
    lab["pass_at_1_before"], lab["pass_at_1_after"] = hardware["pass"]
    if track == "m":  # the older schema: written before "schema" and the smoke test's notes existed
        for line in lines:
            line.pop("schema")
        smoke.pop("before_scaling_up")
    return lines


@pytest.fixture(scope="module")
def every_track(track_c, tmp_path_factory):
    """A folder of logs as a reader gathers them: one per machine, copied to one place."""
    folder = tmp_path_factory.mktemp("machines")
    real = read_runs(track_c["log"])
    real_smoke, real_lab = real[0], real[1]
    (folder / "cpu-box").mkdir()
    (folder / "cpu-box" / "runlog.jsonl").write_bytes(track_c["log"].read_bytes())
    for track, hardware in HARDWARE.items():
        lines = hardware_lines(real_lab, real_smoke, track, hardware)
        (folder / f"{track}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return {"folder": folder, "smoke": real_smoke, "lab": real_lab, "failed": real[2], **track_c}


def test_every_line_names_the_model_by_its_weights(track_c):
    """Start records and full records alike: the committed tiny model's sha256, the one FIXTURE_SHA256 gives."""
    lines = [json.loads(line) for line in track_c["log"].read_text().splitlines()]
    assert len(lines) == 6 and {line.get("record") for line in lines} == {"start", None}
    for line in lines:
        identity = line["model_identity"]
        assert identity["name"] == "tiny" and identity["weights_sha256"] == FIXTURE_SHA256["model.safetensors"]
        assert identity["revision"] is None and identity["source"].startswith("committed tiny model")


def test_smoke_test_ends_with_what_to_write_down(track_c):
    smoke = read_runs(track_c["log"])[0]
    out = track_c["smoke_output"]
    assert "what to write down before you scale up:" in out
    assert re.search(r"seconds per step +\d+\.\d{3} s x 10 steps", out)
    assert (
        f"calibration        {CALIBRATION_STEPS} steps at the lab's shape" in out
        and "rollout path       inprocess" in out
    )
    noted = smoke["before_scaling_up"]
    assert smoke["schema"] == SCHEMA_VERSION
    assert noted["steps"] == 10 and noted["steps_s"] == pytest.approx(smoke["seconds_per_step"] * 10, rel=1e-3)
    # Track c's lab: the same tiny model, 64 x 16 completion tokens per step, 120 steps: measured by the calibration.
    assert noted["model_size_s_per_step"] == 0.0 and noted["lab_completions_per_step"] == 64
    calibration = smoke["calibration"]
    assert noted["projected_lab_wall_clock_s"] == pytest.approx(
        calibration["seconds_per_step"] * 120 + calibration["first_step_extra_s"], abs=0.1
    )
    assert noted["peak_memory_gb_measured"] > 0 and noted["peak_memory_gb_predicted"] > 0
    assert noted["peak_memory_ratio"] == pytest.approx(
        noted["peak_memory_gb_measured"] / noted["peak_memory_gb_predicted"], rel=1e-2
    )
    assert noted["rollout_path"] == "inprocess" and noted["stale"] is False


def test_report_of_every_track(every_track, tmp_path):
    out = tmp_path / "report"
    result = python_grpolab(
        "report", str(every_track["folder"]), "--against-lesson", "--out", str(out), env=every_track["env"]
    )
    assert result.returncode == 0, result.stderr
    rows = {row["track"]: row for row in csv.DictReader((out / "report.csv").open())}
    assert sorted(rows) == ["c", "m", "n", "s", "x"]
    smoke, lab = every_track["smoke"], every_track["lab"]

    c = rows["c"]  # the real runs; the latest is the smoke test that failed its device layer
    assert c["machine"].startswith("CPU ") and c["rollout"] == "inprocess" and c["runs"] == "3"
    assert c["model"] == f"tiny (weights {FIXTURE_SHA256['model.safetensors'][:8]})"
    assert c["status"] == "latest failed" and c["failed_layer"] == "device" and "cuda" in c["error"].lower()
    assert float(c["smoke_steps_s"]) == pytest.approx(smoke["before_scaling_up"]["steps_s"])
    assert float(c["projected_lab_wall_clock_s"]) == pytest.approx(
        smoke["before_scaling_up"]["projected_lab_wall_clock_s"]
    )
    assert int(c["lab_steps"]) == 4 and float(c["lab_seconds_per_step"]) == pytest.approx(lab["seconds_per_step"])
    split = lab["time_split_s_per_step"]
    assert [float(c[k]) for k in ("generation_s", "reward_s", "update_s")] == pytest.approx(
        [split["generation"], split["reward"], split["update"]]
    )
    assert float(c["peak_memory_ratio"]) == pytest.approx(
        lab["peak_memory_gb_measured"] / lab["peak_memory_gb_predicted"], rel=1e-2
    )
    assert float(c["pass_at_1_after"]) == pytest.approx(lab["pass_at_1_after"])
    assert float(c["collapse_first_step"]) == pytest.approx(lab["steps"][0]["frac_reward_zero_std"])
    assert c["stale"] == "False" and c["torch"] == lab["fingerprint"]["torch_version"]

    s = rows["s"]
    assert s["machine"] == "NVIDIA GB10 (sm_121)" and s["rollout"] == "vllm-colocate" and s["status"] == "passed"
    assert s["vllm"] == "0.31.0" and s["driver"] == "580.95.05" and s["torch_build"] == "cuda 13.0"
    assert float(s["peak_memory_ratio"]) == pytest.approx(52.0 / 50.9, rel=1e-3)
    assert rows["x"]["machine"] == "AMD Radeon 8060S (gfx1151)" and rows["x"]["torch_build"] == "hip 7.2"
    m = rows["m"]  # schema 1: no notes from the smoke test, so its ten steps come from seconds per step x steps
    assert (
        float(m["smoke_steps_s"]) == pytest.approx(smoke["seconds_per_step"] * 10)
        and m["projected_lab_wall_clock_s"] == ""
    )

    table = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(rows)  # header + one line per row
    assert "| lab / projected |" in table[0] and "| more than 25 % off |" in table[0]
    assert (out / "report.md").read_text() in result.stdout + "\n"
    lesson_s = next(line for line in table if "| s |" in line)
    assert (
        "lesson 50.9-58.9 GB, ours 52.00 GB (inside" in lesson_s
        and "rollout: lesson vllm-colocate (agrees)" in lesson_s
    )
    assert "not one of the lesson's four tracks" in next(line for line in table if "| c |" in line)
    assert set(LESSON_TRACKS) == {"s", "x", "n", "m"}
    check_plots_and_page(out)


def check_plots_and_page(out: Path):
    import matplotlib.image

    page = (out / "index.html").read_text()
    inline = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(inline) == len(PLOTS) and "src=\"http" not in page  # self-contained
    for name, data in zip(PLOTS, inline):
        png = out / name
        assert base64.b64decode(data) == png.read_bytes()
        height, width = matplotlib.image.imread(png).shape[:2]
        assert (width, height) == PLOT_PX
    assert "<table>" in page and page.count("<tr>") == 1 + page.count("<td>") // len(re.findall("<th>", page))


def test_all_lists_every_run_with_failures(every_track, tmp_path):
    out = tmp_path / "all"
    assert run_report([every_track["folder"]], out=out, every_run=True, say=lambda _: None, warn=lambda _: None) == 0
    rows = list(csv.DictReader((out / "report.csv").open()))
    assert len(rows) == 3 + 2 * len(HARDWARE)
    failed = [row for row in rows if row["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["failed_layer"] == "device" and failed[0]["smoke_run_id"] == ""


def test_invoke_report_on_the_host(every_track, tmp_path):
    out = tmp_path / "host"
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "report", "--logs", str(every_track["folder"]), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "| s | vllm-colocate |" in result.stdout.replace("NVIDIA GB10 (sm_121) ", "")
    assert all((out / name).exists() for name in ("report.md", "report.csv", "index.html", *PLOTS))


# --- bad input: each is a message, and a report wherever one good line exists ------------------------------------


def good_line(run_id="20261201T000000Z-aaaaaa", **fields) -> dict:
    line = {
        "schema": SCHEMA_VERSION,
        "run_id": run_id,
        "kind": "lab",
        "track": "c",
        "status": "passed",
        "finished_at": "2026-12-01T00:00:00+00:00",
        "settings": {"model": "tiny", "rollout": "inprocess", "max_steps": 4},
        "rollout": {"path": "inprocess", "stale": False, "max_lag_steps": 0},
        "seconds_per_step": 0.2,
        "time_split_s_per_step": {"generation": 0.1, "reward": 0.01, "update": 0.09},
        "steps": [
            {"step": 2, "reward": 0.5, "reward_std": 0.2, "frac_reward_zero_std": 0.25},
            {"step": 4, "reward": 0.7, "reward_std": 0.2, "frac_reward_zero_std": 0.0},
        ],
        "pass_at_1_before": 0.4,
        "pass_at_1_after": 0.5,
        "first_reward": 0.5,
        "last_reward": 0.7,
        "peak_memory_gb_measured": 1.1,
        "peak_memory_gb_predicted": 1.0,
        "fingerprint": {"device_type": "cpu", "machine": "x86_64"},
    }
    line.update(fields)
    return line


def report_of(*paths, tmp_path):
    said, warned = [], []
    status = run_report(list(paths), out=tmp_path / "out", say=said.append, warn=warned.append)
    rows = list(csv.DictReader((tmp_path / "out" / "report.csv").open())) if status == 0 else []
    return status, rows, "\n".join(warned)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_newer_schema_with_unknown_fields(tmp_path):
    log = write(
        tmp_path / "new.jsonl",
        json.dumps(
            good_line(
                schema=SCHEMA_VERSION + 1,
                gpu_watts=[140, 150],
                settings={"model": "tiny", "rollout": "inprocess", "new_knob": 1},
            )
        )
        + "\n",
    )
    status, rows, warned = report_of(log, tmp_path=tmp_path)
    assert status == 0 and len(rows) == 1 and rows[0]["lab_seconds_per_step"] == "0.2"
    assert f"schema {SCHEMA_VERSION + 1} from a newer project version" in warned


def test_truncated_last_line_is_named_and_skipped(tmp_path):
    log = write(tmp_path / "cut.jsonl", json.dumps(good_line()) + "\n" + json.dumps(good_line(run_id="b"))[:40])
    status, rows, warned = report_of(log, tmp_path=tmp_path)
    assert status == 0 and len(rows) == 1
    assert f"{log}:2: skipped, truncated" in warned


def test_only_failed_runs_say_which_layer(tmp_path):
    lines = [
        good_line(
            run_id="f1",
            kind="smoke",
            status="failed",
            failed_layer="device",
            error="[device] torch 2.13.0 sees no GPU\n  what to do: ...",
        ),
        good_line(
            run_id="f2",
            kind="smoke",
            status="crashed",
            error="RuntimeError: boom",
            finished_at="2026-12-02T00:00:00+00:00",
            fingerprint={"device_type": "cuda", "device_name": "NVIDIA GB10", "device_arch": "sm_121"},
        ),
    ]
    log = write(tmp_path / "failed.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    status, rows, _ = report_of(log, tmp_path=tmp_path)
    assert status == 0 and [(r["status"], r["failed_layer"], r["error"]) for r in rows] == [
        ("failed", "device", "[device] torch 2.13.0 sees no GPU"), ("crashed", "", "RuntimeError: boom")]
    assert rows[0]["lab_seconds_per_step"] == ""  # a failed run's figures are not reported as results


def test_same_run_ids_in_two_logs_count_once(tmp_path):
    text = (
        json.dumps(good_line())
        + "\n"
        + json.dumps(good_line(run_id="other", finished_at="2026-12-01T01:00:00+00:00"))
        + "\n"
    )
    status, rows, warned = report_of(
        write(tmp_path / "a.jsonl", text), write(tmp_path / "b.jsonl", text), tmp_path=tmp_path
    )
    assert status == 0 and len(rows) == 1 and rows[0]["runs"] == "2"
    assert "2 line(s) repeated a run id" in warned
    assert len(load_runs([tmp_path / "a.jsonl", tmp_path / "b.jsonl"]).runs) == 2


def test_runs_of_different_models_are_different_rows_each_naming_its_model(tmp_path):
    """Two "tiny" models with different weights (built on two machines) and one Hub model at a revision: three
    rows on one machine, track and rollout path; a line from before model_identity says its weights were not
    recorded."""

    def identity(name, weights, revision=None):
        return {"name": name, "weights_sha256": weights, "revision": revision, "source": "test"}

    lines = [
        good_line("20261201T000000Z-aaaaaa", model_identity=identity("tiny", "953354a3" + "0" * 56)),
        good_line("20261201T000001Z-bbbbbb", model_identity=identity("tiny", "fb79d1be" + "1" * 56)),
        good_line(
            "20261201T000002Z-cccccc",
            settings={"model": "Qwen/Qwen3-0.6B", "rollout": "inprocess"},
            model_identity=identity(
                "Qwen/Qwen3-0.6B", "0123abcd" + "2" * 56, "c1899de289a04d12100db370d81485cdf75e47ca"
            ),
        ),
        good_line("20261201T000003Z-dddddd"),
    ]
    log = write(tmp_path / "models.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    status, rows, _ = report_of(log, tmp_path=tmp_path)
    assert status == 0
    assert [row["model"] for row in rows] == [
        "tiny (weights 953354a3)",
        "tiny (weights fb79d1be)",
        "Qwen/Qwen3-0.6B@c1899de2 (weights 0123abcd)",
        "tiny (weights not recorded)",
    ]
    assert [row["lab_run_id"][-6:] for row in rows] == ["aaaaaa", "bbbbbb", "cccccc", "dddddd"]


def test_start_record_gives_way_to_the_finished_one(tmp_path):
    start = {
        "run_id": "r1",
        "kind": "lab",
        "track": "c",
        "status": "running",
        "started_at": "2026-12-01T00:00:00+00:00",
    }
    killed = {
        "run_id": "r2",
        "kind": "lab",
        "track": "c",
        "status": "running",
        "started_at": "2026-12-01T02:00:00+00:00",
    }
    log = write(
        tmp_path / "log.jsonl", "".join(json.dumps(line) + "\n" for line in (start, good_line(run_id="r1"), killed))
    )
    loaded = load_runs([log])
    assert [run["status"] for run in loaded.runs] == ["passed", "running"]
    status, rows, _ = report_of(log, tmp_path=tmp_path)
    assert status == 0 and len(rows) == 2 and rows[1]["status"] == "unfinished"  # no fingerprint: its own machine


def test_folder_without_logs_and_missing_path(tmp_path):
    (tmp_path / "empty").mkdir()
    status, _, warned = report_of(tmp_path / "empty", tmp_path / "nowhere.jsonl", tmp_path=tmp_path)
    assert status == 1
    assert (
        f"{tmp_path / 'empty'}: a folder with no run log" in warned
        and f"{tmp_path / 'nowhere.jsonl'}: no such file or folder" in warned
    )
    assert "nothing to report" in warned


def test_not_json_at_all(tmp_path):
    junk = write(tmp_path / "notes.jsonl", "".join(f"this is line {n} of my notes\n" for n in range(1, 11)))
    status, _, warned = report_of(junk, tmp_path=tmp_path)
    assert status == 1 and f"{junk}:1: skipped, not JSON" in warned and f"{junk}:6:" not in warned
    assert "5 more line(s) skipped (10 of 10): is it a run log?" in warned
    good = write(tmp_path / "good.jsonl", json.dumps(good_line()) + "\n")
    status, rows, _ = report_of(junk, good, tmp_path=tmp_path)
    assert status == 0 and len(rows) == 1


def test_cli_exit_status_when_nothing_to_report(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "grpolab", "report", str(tmp_path / "missing")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "entrypoint"), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    assert result.returncode == 1 and "no such file or folder" in result.stderr and "Traceback" not in result.stderr


# --- --report-to -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend, message",
    [
        ("mlflow", "--report-to mlflow (from the command line): not one of the choices"),
        ("wandb", "needs the wandb package"),
    ],
)
def test_report_to_refused_before_the_model_loads(backend, message, tiny_model_env, tmp_path):
    import importlib.util

    if backend == "wandb" and importlib.util.find_spec("wandb"):
        pytest.skip("wandb is installed here: nothing to refuse")
    result = python_grpolab(
        "lab",
        "--track",
        "c",
        "--report-to",
        backend,
        "--smoke",
        "never",
        env={**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path)},
    )
    assert result.returncode == 2 and message in result.stderr
    assert "memory estimate" not in result.stdout
    (line,) = (tmp_path / "runlog.jsonl").read_text().splitlines()  # the refused run's one line, nothing loaded
    assert json.loads(line)["failed_layer"] == "input" and "model_path" not in json.loads(line)


def test_report_to_tensorboard_writes_into_the_run_folder(tiny_model_env, tmp_path):
    import os

    tensorboard = pytest.importorskip(
        "tensorboard", reason="tensorboard is not installed here (it is in the s and n locks)"
    )
    where = str(Path(tensorboard.__path__[0]).parent)  # the lab sees the tensorboard this test sees
    env = {
        **tiny_model_env,
        "GRPOLAB_RUNS_DIR": str(tmp_path),
        "PYTHONPATH": tiny_model_env["PYTHONPATH"] + os.pathsep + where,
    }
    result = python_grpolab(
        "lab",
        "--track",
        "c",
        "--report-to",
        "tensorboard",
        "--smoke",
        "never",
        "--max-steps",
        "2",
        "--logging-steps",
        "1",
        "--heldout-size",
        "10",
        "--train-size",
        "64",
        "--per-device-train-batch-size",
        "16",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = read_runs(tmp_path / "runlog.jsonl")[-1]
    assert run["settings"]["report_to"] == "tensorboard"
    assert list((tmp_path / run["run_id"]).glob("events.out.tfevents.*"))
