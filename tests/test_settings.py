import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.settings.allowed_values import parse_weights
from grpolab.settings.lab_settings import LabSettings, resolve_settings, smoke_settings
from grpolab.common.tracks import get_track

REPO = Path(__file__).resolve().parents[1]


def test_defaults_are_the_lessons():
    s = LabSettings()
    assert (s.model, s.lora_rank, s.num_generations, s.max_completion_length, s.max_steps, s.beta) == (
        "Qwen/Qwen3-1.7B",
        16,
        8,
        512,
        200,
        0.0,
    )
    assert s.reward_weights == {"numeric_reward": 1.0, "format_reward": 0.25}
    assert s.vllm_gpu_memory_utilization == 0.3


def test_precedence_lesson_track_file_flags(tmp_path):
    config = tmp_path / "lab.toml"
    config.write_text('max_steps = 50\nlearning_rate = 2e-4\n')
    s = resolve_settings(get_track("c"), config_file=config, overrides={"learning_rate": 5e-4, "beta": None})
    assert s.model == "tiny" and s.max_completion_length == 16  # track row over the lesson
    assert s.max_steps == 50  # file over the track row
    assert s.learning_rate == 5e-4  # flag over the file
    assert resolve_settings(get_track("m")).dtype == "float32"  # the lesson's Track M
    assert resolve_settings(get_track("s")).rollout == "vllm-colocate"


def test_smoke_is_the_lessons_first_run():
    s = resolve_settings(get_track("n"), smoke=True)
    assert (s.model, s.train_size, s.num_generations, s.max_steps) == ("Qwen/Qwen3-0.6B", 10, 4, 10)


def test_smoke_flags_are_honoured_or_refused_in_words():
    s = resolve_settings(
        get_track("c"), smoke=True, overrides={"max_steps": 3, "num_generations": 2, "learning_rate": 5e-4}
    )
    assert (s.max_steps, s.num_generations, s.per_device_train_batch_size, s.learning_rate) == (3, 2, 4, 5e-4)
    assert (
        resolve_settings(
            get_track("c"), smoke=True, overrides={"per_device_train_batch_size": 16}
        ).per_device_train_batch_size
        == 16
    )
    with pytest.raises(ValueError, match="does not evaluate held-out problems, so --heldout-size would change nothing"):
        resolve_settings(get_track("c"), smoke=True, overrides={"heldout_size": 50})


def test_the_labs_smoke_test_runs_what_the_lab_runs():
    track = get_track("n")
    lab = resolve_settings(
        track, overrides={"reward_weights": {"numeric_reward": 1.0}, "dtype": "float32", "temperature": 0.7}
    )
    smoke = smoke_settings(lab, track)
    assert (smoke.rollout, smoke.reward_weights, smoke.dtype, smoke.temperature) == (
        "vllm-colocate",
        {"numeric_reward": 1.0},
        "float32",
        0.7,
    )
    assert (smoke.model, smoke.train_size, smoke.max_steps, smoke.heldout_size) == (
        "Qwen/Qwen3-0.6B",
        10,
        10,
        0,
    )  # the track's smoke model
    # Server mode: the server holds the lab's model, so the smoke test streams into that same model.
    server = smoke_settings(resolve_settings(track, overrides={"rollout": "vllm-server"}), track)
    assert (server.rollout, server.model) == ("vllm-server", "Qwen/Qwen3-1.7B")
    # A model of the user's own choosing is smoke-tested itself.
    assert smoke_settings(resolve_settings(track, overrides={"model": "my/model"}), track).model == "my/model"


def test_unknown_setting_in_a_config_file_is_named(tmp_path):
    config = tmp_path / "lab.json"
    config.write_text(json.dumps({"max_step": 3}))
    with pytest.raises(
        ValueError, match=r"unknown setting 'max_step' in --config .*lab\.json: did you mean max_steps\?"
    ):
        resolve_settings(get_track("c"), config_file=config)


def test_reward_weights_from_the_command_line():
    assert parse_weights("numeric_reward=1,format_reward=0.5") == {"numeric_reward": 1.0, "format_reward": 0.5}
    assert parse_weights('{"mymod:score": 2}') == {"mymod:score": 2.0}


def test_help_answers_questions():
    env = {"PYTHONPATH": str(REPO / "entrypoint")}
    out = subprocess.run(
        [sys.executable, "-m", "grpolab", "lab", "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    for words in ("--max-steps", "--rollout", "--smoke", "--config", "exit status", "10 device", "13 first_step"):
        assert words in out
