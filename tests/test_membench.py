"""The benchmarks' code (grpolab.bench) on small inputs: the memory benchmark's case table, the record it writes built
from a stub measurement, its command end to end with the case's run stubbed, the smallest case once for real (seconds),
and the arguments of every `python -m grpolab.bench` command. No test here runs a whole benchmark: `invoke bench` and
the GPU scripts do, on the machines they measure. The GPU scripts' refusal without a GPU is tested here too (it comes
before any run)."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpolab.bench import commands, memory_cases
from grpolab.bench.memory_cases import ALL_CASES, CASES, GPU_CASES, case_settings
from grpolab.bench.plain_trl import OBSERVERS, make_meter, observer_list
from grpolab.memory.estimate import estimate_memory
from grpolab.memory.peak import PeakMemoryMeter

REPO = Path(__file__).resolve().parents[1]


def test_cases_are_the_issues():
    assert set(CASES) >= {"tiny-track-c", "qwen3-0.6b-shape", "qwen3-1.7b-shape"}
    for name in GPU_CASES:
        settings = case_settings(ALL_CASES[name])
        assert settings.dtype == "bfloat16" and settings.rollout == "inprocess"
    assert case_settings(CASES["qwen3-0.6b-shape"]).dtype == "float32"


def stub_meter(baseline_gb: float, peak_gb: float) -> PeakMemoryMeter:
    """A meter that never ran, holding what a CPU run's would: its baseline and the resident peak."""
    meter = PeakMemoryMeter("cpu")
    meter.baseline_gb = baseline_gb
    meter.parts = {"runtime_baseline_gb": baseline_gb, "peak_gb": peak_gb}
    meter.sources = {"peak_gb": "VmHWM", "baseline": "resident set (VmRSS) after imports, before the model loads"}
    return meter


def test_a_cases_record_holds_the_predicted_terms_the_measured_parts_and_their_ratio():
    """The record `invoke bench --memory` keeps, from the small shape's real estimate and a stub measurement."""
    name = "small-shape"
    settings = case_settings(ALL_CASES[name])
    source = memory_cases.case_shape_source(ALL_CASES[name], None)
    assert "num_parameters" not in source and source["_name_or_path"] == "small-shape"  # the shape summed, not a card's
    estimate = estimate_memory(source, settings, device_total_gb=16.0, runtime_baseline_gb=0.5, device_type="cpu",
                               prompt_tokens=40)
    measured_gb = estimate.modelled_gb * 1.1  # the stub measured 10 % more than predicted
    meter = stub_meter(0.5, 0.5 + measured_gb)
    steps = [SimpleNamespace(metrics={"completions/mean_length": 12.0}), SimpleNamespace(metrics={})]
    record = memory_cases.case_record(name, settings, "cpu", estimate, meter.fields(predicted_gb=estimate.modelled_gb),
                                      1234, steps)
    assert (record["case"], record["model"], record["device"]) == (name, "small-shape", "cpu")
    assert record["dtype"] == "float32"
    assert record["steps_run"] == 2 and record["completion_mean_length"] == [12.0, None]
    assert record["trainable_parameters"] == 1234
    assert record["settings"]["num_generations"] == 4 and record["settings"]["max_steps"] == 2
    names = [t["name"] for t in record["predicted"]["terms"]]
    # On a CPU the resident set counts the freed heap glibc keeps: its own term.
    assert names == ["Policy weights, FP32", "Adapter, gradients and Adam states",
                     "Rollout key-value cache, 4 sequences", "Logits and activations for the update",
                     "Allocator's retained heap (glibc, CPU)"]
    measured = record["measured"]
    assert measured["runtime_baseline_gb"] == 0.5
    assert measured["peak_memory_gb_measured"] == pytest.approx(measured_gb, abs=1e-3)
    assert {"runtime_baseline_gb", "peak_gb"} <= set(measured["peak_memory_parts"])
    assert record["ratio_predicted_over_measured"] == pytest.approx(1 / 1.1, abs=2e-3)
    assert record["within_15_percent"] is True
    json.dumps(record)  # written as JSON as it is


def test_a_gpu_cases_record_holds_predicted_against_measured_per_phase():
    """The per-phase table images/gpu/memory_check.sh prints, from the 0.6B GPU case's estimate on CUDA (made here, no
    GPU) and the phase peaks the H200 measured with it (bench/gpu-h200-20261204/memory.out) as a stub measurement."""
    name = "qwen3-0.6b-shape-bf16"
    predicted = memory_cases.predict_case(name, "cuda")
    assert predicted["predicted"]["cuda_terms"]["status"] == "predicted, not yet checked on a GPU"
    settings = case_settings(ALL_CASES[name])
    estimate = estimate_memory(memory_cases.case_shape_source(ALL_CASES[name], None), settings, device_total_gb=143.7,
                               device_type="cuda", prompt_tokens=18)
    assert estimate.modelled_gb == pytest.approx(predicted["predicted"]["modelled_gb"], abs=1e-3)  # the same 18 tokens
    fields = {"peak_memory_gb_measured": 1.498,
              "peak_memory_parts": {"peak_load_gb": 1.233, "peak_rollout_gb": 1.464, "peak_update_gb": 1.498}}
    table = memory_cases.phase_table(estimate, fields)
    assert list(table) == ["generation", "update", "total"]
    assert table["generation"]["measured_gb"] == 1.464 and table["update"]["measured_gb"] == 1.498
    for phase in ("generation", "update"):
        assert table[phase]["predicted_gb"] == round(estimate.phases_gb[phase], 3)
        assert table[phase]["ratio"] == round(estimate.phases_gb[phase] / table[phase]["measured_gb"], 3)
    assert table["total"]["predicted_gb"] == table["update"]["predicted_gb"]  # the cache freed: the larger phase
    assert memory_cases.phase_table(estimate, {"peak_memory_gb_measured": 1.5, "peak_memory_parts": {}})[
        "generation"] == {"predicted_gb": table["generation"]["predicted_gb"], "measured_gb": None, "ratio": None}


def test_the_memory_command_writes_its_record_and_prints_it_on_one_line(monkeypatch, tmp_path, capsys):
    """`python -m grpolab.bench memory` end to end, the case's run stubbed: the file and the MEMORY-BENCH line agree."""
    record = {"case": "small-shape", "model": "small-shape", "device": "cpu", "ratio_predicted_over_measured": 0.97}
    ran = []
    monkeypatch.setattr(memory_cases, "run_case",
                        lambda name, device, unified: ran.append((name, device, unified)) or record)
    out = tmp_path / "small.json"
    status = commands.main(["memory", "--case", "small-shape", "--out", str(out), "--track", "c", "--unified-memory"])
    assert status == 0 and ran == [("small-shape", "cpu", True)]
    assert json.loads(out.read_text()) == record
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("MEMORY-BENCH "))
    assert json.loads(line.removeprefix("MEMORY-BENCH ")) == record


def test_a_skipped_case_says_why(monkeypatch, capsys):
    skipped = {"case": "qwen3-1.7b-shape", "model": "Qwen/Qwen3-1.7B",
               "skipped": "needs about 9.0 GB and this machine has 3.0 GB available"}
    monkeypatch.setattr(memory_cases, "run_case", lambda *args: skipped)
    assert commands.main(["memory", "--case", "qwen3-1.7b-shape"]) == 0
    assert "qwen3-1.7b-shape: skipped, needs about 9.0 GB" in capsys.readouterr().out


def test_the_smallest_case_for_real_in_a_process_of_its_own(tiny_model_env, tmp_path):
    """One real case, the smallest (a 4 M-parameter shape, 2 steps: seconds on 2 cores), through the command the host
    runs: the meter measured something above a real baseline, and the ratio is the record's own figures'."""
    out = tmp_path / "small.json"
    command = [sys.executable, "-m", "grpolab.bench", "memory", "--case", "small-shape", "--out", str(out)]
    result = subprocess.run(command, cwd=REPO, env={**tiny_model_env, "HF_HUB_OFFLINE": "1"}, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["dtype"] == "float32" and record["steps_run"] == 2
    measured = record["measured"]
    assert measured["runtime_baseline_gb"] > 0.1  # torch, transformers, PEFT and TRL were imported first
    assert measured["peak_memory_gb_measured"] > 0
    ratio = record["predicted"]["modelled_gb"] / measured["peak_memory_gb_measured"]
    assert record["ratio_predicted_over_measured"] == pytest.approx(ratio, rel=0.02)


def test_mark_phases_splits_the_peak_at_each_generation():
    """The first generation closes the model's loading, each later one an update; each ends a rollout phase."""
    marks = []
    trainer = SimpleNamespace(_generate=lambda prompts: f"completions of {prompts}")
    memory_cases.mark_phases(trainer, SimpleNamespace(mark=marks.append))
    assert trainer._generate("a") == "completions of a" and trainer._generate("b") == "completions of b"
    assert marks == ["load", "rollout", "update", "rollout"]


@pytest.mark.parametrize("argv, wanted", [
    (["memory", "--case", "tiny-track-c"],
     {"case": "tiny-track-c", "device": "cpu", "out": None, "unified_memory": False}),
    (["shape-folder", "--case", "qwen3-0.6b-shape", "--out", "folder"], {"case": "qwen3-0.6b-shape", "out": "folder"}),
    (["smoke-for-lab", "--track", "c", "--lab-model", "folder", "--lab-setting", "max_steps=40",
      "--lab-setting", "seed=1"],
     {"track": "c", "lab_model": "folder", "lab_setting": ["max_steps=40", "seed=1"]}),
    (["plain-trl", "--max-steps", "3", "--observers", "meter,checks", "--out", "r.json"],
     {"track": "c", "max_steps": 3, "seed": 0, "device": "cpu", "observers": ["meter", "checks"],
      "out": Path("r.json")}),
])
def test_each_bench_command_parses_what_the_host_passes(argv, wanted):
    args = commands.build_parser().parse_args(argv)
    assert {key: getattr(args, key) for key in wanted} == wanted
    assert args.func.__name__ == "cmd_" + argv[0].replace("-", "_")


def test_an_unknown_case_or_observer_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as refused:
        commands.build_parser().parse_args(["memory", "--case", "no-such-case"])
    assert refused.value.code == 2 and "invalid choice: 'no-such-case'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        commands.build_parser().parse_args(["plain-trl", "--observers", "meter,stopwatch"])
    assert "unknown observer(s) stopwatch" in capsys.readouterr().err
    assert observer_list("meter,,recorder") == ["meter", "recorder"] and set(OBSERVERS) >= {"meter", "checks"}


def test_plain_trl_meters_only_when_an_observer_asks():
    assert make_meter(set(), "cpu") is None
    assert type(make_meter({"meter"}, "cpu")) is PeakMemoryMeter
    assert make_meter({"sampler"}, "cpu").needs_sampling is True
    assert make_meter({"unsampled"}, "cuda").needs_sampling is False  # the GPU's polling thread, forced off


def test_the_verl_harness_gets_the_bundle_steps_and_overrides_in_any_order():
    """The harness parses its arguments again (grpolab.bench.verl_cpu_proof.main, intermixed): what the bench command
    hands it keeps the bundle first, and a later --steps wins there, as one given after the overrides does."""
    parsed = commands.build_parser().parse_args(["verl-cpu", "runs/bundle", "--steps", "3", "trainer.seed=1"])
    assert parsed.bundle == Path("runs/bundle")
    argv = commands.verl_cpu_argv(parsed)
    assert argv[0] == "runs/bundle" and argv[-2:] == ["3", "trainer.seed=1"] and argv.count("--steps") == 2
    assert commands.verl_cpu_argv(commands.build_parser().parse_args(["verl-cpu", "b"])) == ["b", "--steps", "2"]


@pytest.mark.parametrize("script", ["memory_check.sh", "versus_trl_check.sh", "colocate_check.sh"])
def test_gpu_checks_refuse_clearly_without_a_gpu(tmp_path, script):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the script would run its cases")
    result = subprocess.run(
        ["bash", f"images/gpu/{script}"],
        cwd=REPO,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "FAIL  no CUDA GPU visible to torch" in result.stdout and "--dry-run" in result.stdout
