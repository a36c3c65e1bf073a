"""The built-in problems and the Hugging Face mapping."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.task.problems import (
    arithmetic_splits,
    hf_row_to_lab,
    load_lab_datasets,
)
from grpolab.task.rewards import numeric_reward

ENTRYPOINT = Path(__file__).resolve().parents[1] / "entrypoint"


def _key(row):
    return row["prompt"][0]["content"]


@pytest.mark.parametrize("style", ["arithmetic", "arithmetic-words"])
def test_splits_are_disjoint_complete_and_fixed(style):
    splits = arithmetic_splits(style=style)
    assert {k: len(v) for k, v in splits.items()} == {"train": 8500, "validation": 500, "heldout": 1000}
    keys = {name: {_key(r) for r in rows} for name, rows in splits.items()}
    assert sum(len(k) for k in keys.values()) == 10_000  # every prompt distinct, nothing shared
    assert not keys["train"] & keys["heldout"]
    assert not keys["train"] & keys["validation"]
    assert not keys["validation"] & keys["heldout"]
    assert arithmetic_splits(style=style) == splits  # deterministic
    assert arithmetic_splits(seed=1, style=style)["heldout"] != splits["heldout"]


@pytest.mark.parametrize("style", ["arithmetic", "arithmetic-words"])
def test_no_heldout_problem_has_a_twin_in_train_or_validation(style):
    """Two problems are the same question when they use the same two numbers, in either order ("3 plus 5"
    and "5 plus 3"; a subtraction's operands in the text). Read from the prompt text itself, not the split code."""

    def operands(row):
        return tuple(sorted(int(n) for n in re.findall(r"\d+", _key(row))))

    splits = arithmetic_splits(style=style)
    seen = {name: {operands(r) for r in splits[name]} for name in ("train", "validation")}
    twins = [_key(r) for r in splits["heldout"] if operands(r) in seen["train"] | seen["validation"]]
    assert not twins, f"{len(twins)} held-out problems have a twin, e.g. {twins[:3]}"
    assert not seen["train"] & seen["validation"]
    # The commuted twin of a held-out problem is held out too (the split keeps both orders together).
    heldout = {_key(r) for r in splits["heldout"]}
    if style == "arithmetic":
        assert "What is 58 plus 52?" in heldout and "What is 52 plus 58?" in heldout


def test_rows_have_the_contract_shape_and_correct_answers():
    row = arithmetic_splits()["train"][0]
    assert set(row) == {"prompt", "answer"}
    assert row["prompt"][0]["role"] == "user"
    content = row["prompt"][0]["content"]
    a, b = (int(x) for x in content.removeprefix("What is ").removesuffix("?").split(" plus "))
    assert row["answer"] == str(a + b)
    for row in arithmetic_splits(style="arithmetic-words")["heldout"][:50]:
        assert "<answer></answer>" in row["prompt"][0]["content"]
        assert int(row["answer"]) >= 0
        assert numeric_reward([f"<answer>{row['answer']}</answer>"], answer=[row["answer"]]) == [1.0]


def test_load_lab_datasets_builtin():
    train, heldout = load_lab_datasets("arithmetic", train_size=20, heldout_size=10, seed=3)
    assert (len(train), len(heldout)) == (20, 10)
    assert train.column_names == ["prompt", "answer"] and heldout.column_names == ["prompt", "answer"]
    splits = arithmetic_splits()
    train_keys = {_key(r) for r in splits["train"]}
    assert all(_key(r) in train_keys for r in train)
    assert [_key(r) for r in heldout] == [_key(r) for r in splits["heldout"][:10]]
    # the seed picks the training problems; the held-out problems stay the same
    train2, heldout2 = load_lab_datasets("arithmetic", train_size=20, heldout_size=10, seed=4)
    assert train2["answer"] != train["answer"] or train2["prompt"] != train["prompt"]
    assert heldout2["prompt"] == heldout["prompt"]
    assert load_lab_datasets("arithmetic", 20, 10, 3)[0]["prompt"] == train["prompt"]
    _, empty = load_lab_datasets("arithmetic", train_size=10, heldout_size=0, seed=0)
    assert len(empty) == 0 and empty.column_names == ["prompt", "answer"]


def test_load_lab_datasets_rejects_too_many():
    with pytest.raises(ValueError, match="held-out"):
        load_lab_datasets("arithmetic", train_size=10, heldout_size=5000, seed=0)


def test_gsm8k_row_mapping():
    row = {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
        "altogether in April and May.\n#### 1,072",
    }
    mapped = hf_row_to_lab(row)
    assert mapped["answer"] == "1072"
    assert mapped["prompt"][0]["role"] == "user"
    assert mapped["prompt"][0]["content"].startswith("Natalia sold clips")
    assert "<answer></answer>" in mapped["prompt"][0]["content"]
    with pytest.raises(ValueError):
        hf_row_to_lab({"question": "q", "answer": "no marker"})


def test_hub_dataset_offline_error_names_the_offline_choice(tmp_path):
    # huggingface_hub reads HF_HUB_OFFLINE when it is imported, so the check runs in a fresh interpreter
    code = (
        "from grpolab.task.problems import DatasetUnavailable, load_lab_datasets\n"
        "try:\n"
        "    load_lab_datasets('openai/gsm8k', train_size=10, heldout_size=10, seed=0)\n"
        "except DatasetUnavailable as err:\n"
        "    assert isinstance(err, ValueError)\n"
        "    print(err)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PYTHONPATH": str(ENTRYPOINT)}
    env.pop("HF_DATASETS_CACHE", None)  # an empty cache: nothing to fall back on
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "openai/gsm8k" in result.stdout
    assert "can't be loaded offline" in result.stdout
    assert "--dataset arithmetic works offline" in result.stdout
