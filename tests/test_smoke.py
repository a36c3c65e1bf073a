"""The smoke test, for real on the CPU with the tiny model: it passes, and each layer's failure is provoked
and named with its own exit status."""

import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.common.errors import EXIT_STATUS, LayerFailure
from grpolab.common.rollout_paths import rollout_path
from grpolab.common.runlog import read_runs
from grpolab.settings.lab_settings import resolve_settings
from grpolab.run.smoke import run_smoke
from grpolab.common.tracks import get_track, load_tracks

REPO = Path(__file__).resolve().parents[1]
quiet = lambda *_: None  # noqa: E731


def smoke(args, env):
    return subprocess.run(
        [sys.executable, "-m", "grpolab", "smoke", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_smoke_passes_every_layer_on_cpu(tiny_model_env, tmp_path):
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path)}
    result = smoke(["--track", "c"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    layer_lines = [line.split()[1] for line in lines if line.startswith("  ok  ")]
    assert layer_lines == ["device", "adapter", "rewards", "first", "rollout"], result.stdout
    assert "in-process" in result.stdout
    (run,) = read_runs(tmp_path / "runlog.jsonl")
    assert run["kind"] == "smoke" and run["status"] == "passed" and run["track"] == "c"
    assert run["layers_passed"] == ["device", "adapter", "rewards", "first_step", "rollout", "runlog"]
    assert (
        run["settings"]["train_size"] == 10
        and run["settings"]["num_generations"] == 4
        and run["settings"]["max_steps"] == 10
    )
    assert run["rollout"] == {
        "path": "inprocess",
        "stale": False,
        "max_lag_steps": 0,
        "lag_basis": rollout_path("inprocess").LAG_BASIS,
    }
    assert run["device_checked"] is True and run["seconds_per_step"] > 0
    assert run["fingerprint"]["torch_version"]
    # Peak memory measured and predicted on one basis (above the runtime baseline), in the line and on screen.
    assert (
        run["peak_memory_gb_measured"] > 0 and run["peak_memory_gb_predicted"] > 0 and run["runtime_baseline_gb"] > 0.1
    )
    assert run["peak_memory_ratio"] == pytest.approx(
        run["peak_memory_gb_predicted"] / run["peak_memory_gb_measured"], rel=0.05
    )
    assert "VmHWM" in run["peak_memory_basis"]
    assert "  peak memory " in result.stdout and "above a runtime baseline" in result.stdout
    # A second run reports what changed since the first pass: nothing.
    again = smoke(["--track", "c"], env)
    assert again.returncode == 0 and "nothing changed" in again.stdout


def test_wrong_expected_device_fails_the_device_layer(tiny_model_env, tmp_path):
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path)}
    result = smoke(["--track", "n"], env)  # track n expects CUDA; this machine has no GPU
    assert result.returncode == EXIT_STATUS["device"], result.stdout + result.stderr
    assert "[device]" in result.stderr and "not the trainer" in result.stderr
    (run,) = read_runs(tmp_path / "runlog.jsonl")
    assert run["status"] == "failed" and run["failed_layer"] == "device"


def test_lora_target_matching_nothing_fails_the_adapter_layer(tiny_model_path, runs_dir):
    settings = resolve_settings(get_track("c"), smoke=True, overrides={"lora_target_modules": "query_proj,value_proj"})
    with pytest.raises(LayerFailure) as failure:
        run_smoke(settings, get_track("c"), say=quiet)
    assert failure.value.layer == "adapter"
    assert "0 trainable parameters" in str(failure.value) and "q_proj" in str(failure.value)


def test_constant_reward_is_group_collapse_on_the_first_step(tiny_model_path, runs_dir):
    settings = resolve_settings(
        get_track("c"), smoke=True, overrides={"reward_weights": {"rewards_for_tests:constant_reward": 1.0}}
    )
    with pytest.raises(LayerFailure) as failure:
        run_smoke(settings, get_track("c"), say=quiet)
    assert failure.value.layer == "first_step" and "group collapse" in str(failure.value)
    (run,) = read_runs(runs_dir / "runlog.jsonl")
    assert run["failed_layer"] == "first_step" and run["layers_passed"] == ["device", "adapter", "rewards"]


def test_metrics_that_are_not_numbers_fail_the_first_step_layer_with_a_runlog_line(tiny_model_path, runs_dir):
    # An infinite reward makes TRL log reward inf and reward_std None (a NaN): NaN passes every threshold
    # comparison, so without its own check the collapse verdict passes and the run log cannot be written.
    settings = resolve_settings(
        get_track("c"), smoke=True, overrides={"reward_weights": {"rewards_for_tests:infinite_reward": 1.0}}
    )
    with pytest.raises(LayerFailure) as failure:
        run_smoke(settings, get_track("c"), say=quiet)
    assert (
        failure.value.layer == "first_step"
        and "not numbers" in str(failure.value)
        and "reward inf" in str(failure.value)
    )
    (run,) = read_runs(runs_dir / "runlog.jsonl")
    assert run["status"] == "failed" and run["failed_layer"] == "first_step"


def test_a_crash_during_training_is_crashed_not_bad_input(tiny_model_env, tmp_path):
    # A reward returning text passes our checks (one value per completion) and breaks inside TRL's training
    # step with a ValueError: that is a crash, with its own exit status, not an input error.
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path)}
    result = smoke(["--track", "c", "--reward-weights", "rewards_for_tests:text_reward=1"], env)
    assert result.returncode == EXIT_STATUS["crashed"] == 17, result.stdout + result.stderr
    assert "[crashed] the run crashed" in result.stderr and "Traceback" in result.stderr
    (run,) = read_runs(tmp_path / "runlog.jsonl")
    assert run["status"] == "crashed" and run["failed_layer"] is None


def test_missing_column_fails_the_rewards_layer_before_the_model_loads(runs_dir):
    settings = resolve_settings(
        get_track("c"),
        smoke=True,
        overrides={"model": "nobody/no-such-model", "reward_weights": {"rewards_for_tests:needs_missing_column": 1.0}},
    )
    with pytest.raises(LayerFailure) as failure:
        run_smoke(settings, get_track("c"), say=quiet)
    assert failure.value.layer == "rewards" and "difficulty" in str(failure.value)


def test_raising_reward_is_named_with_its_row(tiny_model_path, runs_dir):
    settings = resolve_settings(
        get_track("c"), smoke=True, overrides={"reward_weights": {"rewards_for_tests:raising_reward": 1.0}}
    )
    with pytest.raises(LayerFailure) as failure:
        run_smoke(settings, get_track("c"), say=quiet)
    assert failure.value.layer == "rewards"
    assert "rewards_for_tests:raising_reward raised ZeroDivisionError" in str(failure.value) and "row" in str(
        failure.value
    )


def test_model_that_cannot_be_loaded_offline_is_bad_input(tiny_model_env, tmp_path):
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    result = smoke(["--track", "c", "--model", "Qwen/Qwen3-0.6B"], env)
    assert result.returncode == EXIT_STATUS["input"], result.stdout + result.stderr
    assert "could not be loaded" in result.stderr and "--model tiny" in result.stderr


def test_unknown_track_and_bad_groups_are_refused(tiny_model_env):
    result = smoke(["--track", "z"], tiny_model_env)
    assert result.returncode == 2 and "unknown track 'z'" in result.stderr
    assert "the tracks are " + ", ".join(sorted(load_tracks())) in result.stderr
    with pytest.raises(ValueError, match="at least 2"):
        resolve_settings(get_track("c"), overrides={"num_generations": 1})
    with pytest.raises(ValueError, match="multiple of num_generations"):
        resolve_settings(get_track("c"), overrides={"num_generations": 3, "per_device_train_batch_size": 64})
