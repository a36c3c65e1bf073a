"""Every setting's bad values, through the real command line, from each source (a flag, a config file, the
track's row): exit 2, one [input] line naming the setting, no traceback, one whole failed run-log line, and
nothing loaded (no torch, transformers or datasets imported; the process done in well under 5 s).

BAD_INPUTS is also the table in docs/faults.md, "Settings refused before anything loads"
(test_the_faults_page_lists_every_refused_setting)."""

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ENTRY_SAYING_WHAT_LOADED
from grpolab.settings.lab_settings import SETTING_NAMES, SettingsRefused, check_settings, flag, resolve_settings
from grpolab.common.tracks import TRACKS_FILE, get_track

REPO = Path(__file__).resolve().parents[1]

WALL_LIMIT_S = 5.0  # the whole process, Python's start-up included, on a shared 2-core machine

# (setting refused, source, what is given, a phrase the message must hold). Source "flag": command-line arguments;
# "config": (file name, its text); "track": lines put into [tracks.c.lab] of a copy of images/tracks.toml.
BAD_INPUTS = [
    # what the issue found
    ("max_steps", "flag", ["--max-steps", "-3"], "at least 1"),
    ("max_steps", "flag", ["--max-steps", "0"], "at least 1"),
    ("lora_rank", "flag", ["--lora-rank", "0"], "at least 1"),
    ("temperature", "flag", ["--temperature", "-1"], "above 0"),
    ("max_completion_length", "flag", ["--max-completion-length", "0"], "at least 1"),
    ("config", "config", ("README.md", "# not settings\n"), "TOML (a name ending .toml) or JSON (.json)"),
    # every setting: below, above, of the wrong type
    ("model", "flag", ["--model", "./no-such-model-folder"], "no such folder"),
    ("model", "flag", ["--model", "not a model"], "neither a Hugging Face id"),
    ("dataset", "flag", ["--dataset", "math problems"], "neither a built-in dataset"),
    ("train_size", "flag", ["--train-size", "0"], "at least 1"),
    ("train_size", "flag", ["--train-size", "9000"], "8500 training problems"),
    (
        "train_size",
        "flag",
        ["--train-size", "4", "--per-device-train-batch-size", "64", "--num-generations", "8"],
        "never makes one",
    ),
    ("train_size", "flag", ["--train-size", "ten"], "expected an integer"),
    ("heldout_size", "flag", ["--heldout-size", "-1"], "at least 0"),
    ("heldout_size", "flag", ["--heldout-size", "0"], "measures pass@1 on held-out problems"),
    ("heldout_size", "flag", ["--heldout-size", "1001"], "1000 held-out problems with no twin"),
    ("heldout_size", "flag", ["--heldout-size", "all"], "expected an integer"),
    ("seed", "flag", ["--seed", "-1"], "from 0 to 4294967295"),
    ("seed", "flag", ["--seed", "4294967296"], "from 0 to 4294967295"),
    ("seed", "flag", ["--seed", "1.5"], "expected an integer"),
    ("dtype", "flag", ["--dtype", "float8"], "one of auto, float32, bfloat16, float16"),
    ("lora_rank", "flag", ["--lora-rank", "sixteen"], "expected an integer"),
    ("lora_alpha", "flag", ["--lora-alpha", "0"], "at least 1"),
    ("lora_alpha", "flag", ["--lora-alpha", "1.5"], "expected an integer"),
    ("lora_dropout", "flag", ["--lora-dropout", "-0.1"], "at least 0 and below 1"),
    ("lora_dropout", "flag", ["--lora-dropout", "1"], "at least 0 and below 1"),
    ("lora_dropout", "flag", ["--lora-dropout", "none"], "expected a number"),
    ("lora_target_modules", "flag", ["--lora-target-modules", "q_proj,lm_head"], "lm_head cannot carry the adapter"),
    ("lora_target_modules", "flag", ["--lora-target-modules", ",,"], "no module name"),
    ("num_generations", "flag", ["--num-generations", "1"], "at least 2"),
    ("num_generations", "flag", ["--num-generations", "eight"], "expected an integer"),
    ("max_prompt_length", "flag", ["--max-prompt-length", "0"], "at least 1"),
    ("max_prompt_length", "flag", ["--model", "{context 128}", "--max-prompt-length", "200"], "context of 128 tokens"),
    ("max_prompt_length", "flag", ["--max-prompt-length", "long"], "expected an integer"),
    (
        "max_completion_length",
        "flag",
        ["--model", "{context 128}", "--max-completion-length", "200"],
        "context of 128 tokens",
    ),
    ("max_completion_length", "flag", ["--max-completion-length", "16.5"], "expected an integer"),
    ("max_steps", "flag", ["--max-steps", "many"], "expected an integer"),
    ("per_device_train_batch_size", "flag", ["--per-device-train-batch-size", "0"], "at least 1"),
    (
        "per_device_train_batch_size",
        "flag",
        ["--per-device-train-batch-size", "12", "--num-generations", "8"],
        "whole groups per batch",
    ),
    ("per_device_train_batch_size", "flag", ["--per-device-train-batch-size", "x"], "expected an integer"),
    ("learning_rate", "flag", ["--learning-rate", "0"], "above 0"),
    ("learning_rate", "flag", ["--learning-rate", "nan"], "not a finite number"),
    ("learning_rate", "flag", ["--learning-rate", "fast"], "expected a number"),
    ("beta", "flag", ["--beta", "inf"], "not a finite number"),
    ("beta", "flag", ["--beta", "none"], "expected a number"),
    ("temperature", "flag", ["--temperature", "0"], "above 0"),
    ("temperature", "flag", ["--temperature", "hot"], "expected a number"),
    ("logging_steps", "flag", ["--logging-steps", "0"], "at least 1"),
    ("logging_steps", "flag", ["--logging-steps", "500"], "no step would ever be logged"),
    ("logging_steps", "flag", ["--logging-steps", "1.5"], "expected an integer"),
    ("reward_weights", "flag", ["--reward-weights", "numeric_reward"], "NAME=WEIGHT"),
    ("reward_weights", "flag", ["--reward-weights", "numeric_reward=0"], "every weight is 0"),
    ("reward_weights", "flag", ["--reward-weights", "no such reward=1"], "neither a built-in reward"),
    ("reward_weights", "flag", ["--reward-weights", "numeric_reward=inf"], "not a finite number"),
    (
        "reward_weights",
        "flag",
        ["--reward-weights", '{"numeric_reward": null}'],
        "a weight in the JSON is not a number",
    ),
    ("rollout", "flag", ["--rollout", "vllm"], "one of inprocess, vllm-colocate, vllm-server, llamacpp"),
    ("vllm_gpu_memory_utilization", "flag", ["--vllm-gpu-memory-utilization", "0"], "between 0 and 1"),
    ("vllm_gpu_memory_utilization", "flag", ["--vllm-gpu-memory-utilization", "1.5"], "between 0 and 1"),
    ("vllm_gpu_memory_utilization", "flag", ["--vllm-gpu-memory-utilization", "half"], "expected a number"),
    (
        "vllm_importance_sampling_correction",
        "flag",
        ["--vllm-importance-sampling-correction", "true"],
        "one of auto, on, off",
    ),
    ("vllm_server_url", "flag", ["--vllm-server-url", "localhost:8000"], "http://HOST[:PORT]"),
    ("vllm_server_url", "flag", ["--vllm-server-url", "http://gpu-box:99999"], "Port out of range"),
    ("llamacpp_refresh_every", "flag", ["--llamacpp-refresh-every", "-1"], "at least 0"),
    ("llamacpp_refresh_every", "flag", ["--llamacpp-refresh-every", "often"], "expected an integer"),
    ("report_to", "flag", ["--report-to", "mlflow"], "one of none, tensorboard, trackio, wandb"),
    ("eval_max_new_tokens", "flag", ["--eval-max-new-tokens", "-1"], "at least 0"),
    (
        "eval_max_new_tokens",
        "flag",
        ["--model", "{context 128}", "--max-prompt-length", "64", "--eval-max-new-tokens", "100"],
        "context of 128 tokens",
    ),
    ("eval_max_new_tokens", "flag", ["--eval-max-new-tokens", "x"], "expected an integer"),
    ("track", "flag", ["--track", "z"], "unknown track 'z'"),
    # from a config file
    ("max_steps", "config", ("lab.toml", "max_steps = -3\n"), "lab.toml line 1"),
    ("max_steps", "config", ("lab.toml", "max_steps = 1.5\n"), "expected an integer"),
    ("lora_rank", "config", ("lab.toml", 'lora_rank = "16"\n'), "expected an integer (this is text in quotes"),
    ("temperature", "config", ("lab.toml", "temperature = nan\n"), "not a finite number"),
    (
        "reward_weights",
        "config",
        ("lab.toml", '[reward_weights]\nnumeric_reward = "one"\n'),
        "a number as the weight of numeric_reward",
    ),
    ("max_steps", "config", ("lab.toml", "max_step = 30\n"), "did you mean max_steps"),
    ("track", "config", ("lab.toml", 'track = "n"\n'), "the track is chosen with --track"),
    ("config", "config", ("lab.toml", "max_steps = 30\nlearning_rate = = 1e-3\n"), "not valid TOML at line 2, column"),
    ("config", "config", ("lab.json", '{"max_steps": 30,\n "beta": }\n'), "not valid JSON at line 2, column 10"),
    ("config", "config", ("lab.json", "[1, 2]\n"), "must be an object of settings"),
    ("dtype", "config", ("lab.json", '{"dtype": "fp8", "seed": -5}\n'), "lab.json line 1"),
    # from the track's row
    ("max_steps", "track", "max_steps = 0", "[tracks.c.lab] in"),
    ("learning_rate", "track", 'learning_rate = "1e-3"', "expected a number"),
    ("lora_rank", "track", "lora_rnak = 8", "did you mean lora_rank"),
    ("logging_steps", "track", "logging_steps = 500", "no step would ever be logged"),
]


def case_id(case) -> str:
    name, source, given, _ = case
    shown = " ".join(given) if source == "flag" else given[1] if source == "config" else given
    return f"{source}:{name}:{shown.strip()[:40]}"


def small_context_model(folder: Path, context: int = 128) -> Path:
    """A model folder whose config says a context of `context` tokens (its weights are never read)."""
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": context}))
    (folder / "model.safetensors").write_bytes(b"never loaded")
    return folder


def tracks_with_row(tmp_path: Path, line: str) -> Path:
    """A copy of the tracks table whose [tracks.c.lab] row has `line` in place of any line for the same key."""
    text = TRACKS_FILE.read_text()
    start = text.index("[tracks.c.lab]\n") + len("[tracks.c.lab]\n")
    end = text.find("\n[", start)
    key = line.split("=")[0].strip()
    row = [kept for kept in text[start:end].splitlines() if kept.split("=")[0].strip() != key]
    path = tmp_path / "tracks.toml"
    path.write_text(text[:start] + "\n".join([line, *row]) + text[end:])
    return path


def run_bad_input(case, tmp_path: Path, command: str = "lab") -> dict:
    name, source, given, _ = case
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "entrypoint"),
        "GRPOLAB_RUNS_DIR": str(tmp_path / "runs"),
        "GRPOLAB_TRACK": "c",
    }
    argv = [command, "--track", "c"]
    if source == "flag":
        given = [str(small_context_model(tmp_path / "model")) if arg == "{context 128}" else arg for arg in given]
        argv = [command, *given] if given[0] == "--track" else [*argv, *given]
    elif source == "config":
        config = tmp_path / given[0]
        config.write_text(given[1])
        argv += ["--config", str(config)]
    else:
        env["GRPOLAB_TRACKS_FILE"] = str(tracks_with_row(tmp_path, given))
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY_SAYING_WHAT_LOADED, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = tmp_path / "runs" / "runlog.jsonl"
    return {
        "proc": proc,
        "wall_s": time.perf_counter() - started,
        "log_lines": log.read_text().splitlines() if log.exists() else [],
    }


def assert_refused_in_words(case, result: dict, kind: str = "lab") -> None:
    name, _, _, phrase = case
    proc = result["proc"]
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "Traceback" not in output, output
    input_lines = [line for line in proc.stderr.splitlines() if "[input]" in line]
    assert len(input_lines) == 1, output
    message = proc.stderr[proc.stderr.index("[input]"):]
    # The refusal itself names the setting (as a flag, or as the key a file used): not the "what to do" line, which
    # names --config and the track's row whatever was refused.
    refusal = message.split("what to do:")[0]
    named = {"config": ("--config",), "track": ("track",)}.get(name, (flag(name), name))
    assert any(word in refusal for word in named), output
    assert phrase in message, output
    assert "imported: []" in proc.stderr, output  # refused before torch, transformers, datasets, TRL or PEFT loaded
    assert result["wall_s"] < WALL_LIMIT_S, f"{result['wall_s']:.1f} s"
    (line,) = result["log_lines"]  # one whole line: the failed run, no start line
    run = json.loads(line)
    assert (run["kind"], run["status"], run["failed_layer"]) == (kind, "failed", "input"), run
    assert "[input]" in run["error"] and phrase in run["error"]
    assert not {"model_path", "model_identity", "device", "fingerprint", "layers_passed"} & set(run), (
        run
    )  # nothing was loaded


def test_every_setting_has_bad_inputs_below_above_and_of_the_wrong_type_in_the_table():
    refused = {name for name, *_ in BAD_INPUTS}
    assert SETTING_NAMES <= refused, SETTING_NAMES - refused
    assert {"flag", "config", "track"} == {source for _, source, *_ in BAD_INPUTS}
    wrong_type = {name for name, _, _, phrase in BAD_INPUTS if "expected" in phrase}
    typed = SETTING_NAMES - {
        "track",
        "model",
        "dataset",
        "dtype",
        "lora_target_modules",
        "rollout",
        "vllm_server_url",
        "report_to",
        "reward_weights",
        "vllm_importance_sampling_correction",
    }
    assert typed <= wrong_type, typed - wrong_type


def test_every_bad_input_is_one_input_line_exit_2_and_one_failed_run_log_line(tmp_path):
    folders = [tmp_path / f"case{index}" for index in range(len(BAD_INPUTS))]
    for folder in folders:
        folder.mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run_bad_input, BAD_INPUTS, folders))
    failures = []
    for case, result in zip(BAD_INPUTS, results):
        try:
            assert_refused_in_words(case, result)
        except AssertionError as error:
            failures.append(f"{case_id(case)}: {error}")
    assert not failures, "\n\n".join(failures)


def test_the_smoke_test_refuses_the_same_way(tmp_path):
    case = ("max_steps", "flag", ["--max-steps", "0", "--temperature", "-2"], "at least 1")
    result = run_bad_input(case, tmp_path, command="smoke")
    assert_refused_in_words(case, result, kind="smoke")
    assert "2 settings cannot be used" in result["proc"].stderr and "--temperature -2" in result["proc"].stderr


def test_every_bad_value_is_reported_in_one_message():
    with pytest.raises(SettingsRefused) as refused:
        resolve_settings(
            get_track("c"),
            overrides={
                "max_steps": "-3",
                "lora_rank": "0",
                "temperature": "-1",
                "max_completion_length": "0",
                "learning_rate": "fast",
                "seed": "1.5",
            },
        )
    assert set(refused.value.names) == {
        "max_steps",
        "lora_rank",
        "temperature",
        "max_completion_length",
        "learning_rate",
        "seed",
    }
    assert str(refused.value).startswith("6 settings cannot be used (nothing was loaded):")
    for line in ("--max-steps -3 (from the command line): outside the range; allowed: an integer, at least 1",
                 "--learning-rate fast (from the command line): the wrong type; expected a number"):
        assert line in str(refused.value)


def test_a_relation_is_judged_only_when_its_settings_passed_their_own_check():
    checked = check_settings({"num_generations": 1, "per_device_train_batch_size": 7})
    assert [problem.names for problem in checked.problems] == [("num_generations",)]  # not also "not a multiple of 1"


def test_the_models_context_is_read_from_its_config_before_anything_loads(tmp_path):
    folder = small_context_model(tmp_path / "small-context-model")
    with pytest.raises(SettingsRefused, match=r"together 272 tokens, more than model .* context of 128 tokens"):
        resolve_settings(
            get_track("c"), overrides={"model": str(folder), "max_prompt_length": 256, "max_completion_length": 16}
        )
    settings = resolve_settings(
        get_track("c"), overrides={"model": str(folder), "max_prompt_length": 100, "max_completion_length": 28}
    )
    assert settings.max_prompt_length + settings.max_completion_length == 128


def test_unwise_values_warn_and_reach_the_run_log(tmp_path):
    """Legal but unwise: the run goes on, the warnings printed, and a run's line carries them in `warnings`."""
    from grpolab.run.record import new_record

    settings = resolve_settings(
        get_track("c"),
        overrides={
            "learning_rate": "0.5",
            "beta": "-0.1",
            "temperature": "0.1",
            "lora_rank": "512",
            "vllm_server_url": "http://gpu-box:8000",
        },
    )
    warnings = new_record("lab", settings)["warnings"]
    assert len(warnings) == 5, warnings
    assert any(w.startswith("--learning-rate 0.5 (from the command line) is outside 1e-06 to 0.01") for w in warnings)
    assert any(w.startswith("--beta -0.1") and "negative beta" in w for w in warnings)
    assert any("--vllm-server-url http://gpu-box:8000" in w and "has no effect" in w for w in warnings)
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint"), "GRPOLAB_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run(
        [sys.executable, "-m", "grpolab", "estimate", "--track", "c", "--learning-rate", "0.5"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: --learning-rate 0.5 (from the command line) is outside 1e-06 to 0.01" in proc.stderr


def test_help_shows_each_settings_range_from_the_declaration():
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint")}
    for command in ("lab", "smoke"):
        out = subprocess.run(
            [sys.executable, "-m", "grpolab", command, "--help"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
        flat = re.sub(r"\s+", " ", out)
        assert "--max-steps STEPS allowed: an integer, at least 1; lesson default: 200" in flat
        assert (
            "allowed: a number, above 0 (finite); usual: 1e-06 to 0.01 (outside, a warning); lesson default: 1e-05"
            in flat
        )


def test_the_faults_page_lists_every_refused_setting():
    page = (REPO / "docs" / "faults.md").read_text()
    faults = page[page.index("## Faults"):]
    table = faults[faults.index("### Settings refused"):]
    for name in sorted({name for name, *_ in BAD_INPUTS} - {"config"}):
        assert f"`{flag(name)}`" in table or f"`{name}`" in table, name


# --- a default gives way to what the user chose ------------------------------------------------------------------


def test_a_default_that_the_users_value_makes_impossible_takes_the_nearest_value_and_says_so(tmp_path):
    """`grpolab lab --track c --max-steps 2`: the track row's logging_steps 10 would log no step. The user never
    chose 10, so it becomes 2, with one note; both values the user's own are still refused."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint"), "GRPOLAB_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run(
        [sys.executable, "-m", "grpolab", "estimate", "--track", "c", "--max-steps", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert (
        len(notes) == 1
        and notes[0].startswith("note: --logging-steps 10 (from [tracks.c.lab]")
        and "became 2" in notes[0]
    ), proc.stderr
    assert "to fit --max-steps 2 (from the command line)" in notes[0]
    settings = resolve_settings(get_track("c"), overrides={"max_steps": "2"})
    assert (settings.max_steps, settings.logging_steps) == (2, 2) and settings.notes() == [
        notes[0].removeprefix("note: ")
    ]
    with pytest.raises(SettingsRefused, match="no step would ever be logged"):
        resolve_settings(get_track("c"), overrides={"max_steps": "2", "logging_steps": "5"})


def test_each_relation_bends_the_default_side_only(tmp_path):
    track = get_track("c")  # its row: 64 completions per step, groups of 8 (the lesson's), 120 steps
    group = resolve_settings(track, overrides={"per_device_train_batch_size": "12"})
    assert (group.per_device_train_batch_size, group.num_generations) == (12, 6)  # the nearest divisor of 12 to 8
    batch = resolve_settings(track, overrides={"num_generations": "3"})
    assert (batch.per_device_train_batch_size, batch.num_generations) == (63, 3)  # the nearest multiple of 3 to 64
    fewer = resolve_settings(track, overrides={"train_size": "4"})
    assert (fewer.per_device_train_batch_size, fewer.train_size) == (32, 4)  # 4 prompts of 8 completions per step
    # The row's 16-token completions cannot make room for 256 prompt tokens in a 128-token context: the prompt's
    # budget (a default too) gives way instead.
    shorter = resolve_settings(track, overrides={"model": str(small_context_model(tmp_path / "model"))})
    assert (shorter.max_prompt_length, shorter.max_completion_length) == (
        112,
        resolve_settings(track).max_completion_length,
    )
    assert len(shorter.notes()) == 1 and shorter.notes()[0].startswith(
        "--max-prompt-length 256 (from the lesson's default) became 112"
    )
    from grpolab.run.record import new_record

    assert shorter.notes()[0] in new_record("lab", shorter)["warnings"]  # the run log keeps what was changed
    # max_steps never gives way: a run is only as long as asked for.
    with pytest.raises(SettingsRefused, match="--logging-steps 500 \\(from the command line\\) and --max-steps 120"):
        resolve_settings(track, overrides={"logging_steps": "500"})
    # Both sides the user's own (a flag and their --config): refused as before.
    config = tmp_path / "lab.toml"
    config.write_text("num_generations = 8\n")
    with pytest.raises(SettingsRefused, match="whole groups per batch"):
        resolve_settings(track, config_file=config, overrides={"per_device_train_batch_size": "12"})

