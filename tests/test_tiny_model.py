"""The built-in tiny model: its tokenizer, the committed model (hashes, context, reload, answers), and the recipe
that made it (deterministic, and still making a model of the same shape that adds)."""

import json

import pytest

from grpolab.model import tiny as tiny_model
from grpolab.task.problems import arithmetic_splits
from grpolab.model.tiny import (
    BUILD_FACTS_FILE,
    FIXTURE_SHA256,
    QWEN2_SPLIT_REGEX,
    TINY_MODEL,
    build_tiny_model,
    build_tokenizer,
    fixture_hashes,
    rebuild_tiny_model,
    resolve_model_name,
    tiny_model_dir,
)

PROMPT = [{"role": "user", "content": "What is 40 plus 52?"}]


@pytest.fixture(scope="module")
def tokenizer():
    rows = arithmetic_splits()["train"]
    return build_tokenizer([f"user\n{r['prompt'][0]['content']}\nassistant\n{r['answer']}\n" for r in rows])


def test_tokenizer_round_trips(tokenizer):
    for text in ["What is 40 plus 52?", "<answer>92</answer>", "Sam has 12 apples. ünïcödé ✓ 😀\n\tend", ""]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text


def test_digits_are_split_one_per_token(tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("12345 plus 0", add_special_tokens=False)["input_ids"])
    assert [t for t in tokens if any(c.isdigit() for c in t)] == ["1", "2", "3", "4", "5", "0"]


def test_answer_is_an_ordinary_single_token(tokenizer):
    ids = tokenizer("<answer>92</answer><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["<answer>", "9", "2", "</answer>", "<|im_end|>"]
    assert "<answer>" not in tokenizer.all_special_tokens
    # skip_special_tokens (what TRL does to completions) keeps the tags and drops the end of turn
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<answer>92</answer>"


def test_chat_template_is_chatml(tokenizer):
    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nWhat is 40 plus 52?<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert 250 <= len(tokenizer) <= 320


def test_pre_tokenizer_is_qwen2s(tokenizer):
    pre = json.loads(tokenizer.backend_tokenizer.to_str())["pre_tokenizer"]
    split, byte_level = pre["pretokenizers"]
    assert split == {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT_REGEX}, "behavior": "Isolated", "invert": False}
    assert byte_level == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def test_the_committed_model_is_checked_reloads_with_auto_classes_and_answers(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpolab.task.evaluate import pass_at_1

    assert tiny_model_path == tiny_model_dir() and resolve_model_name(TINY_MODEL) == str(tiny_model_path)
    assert fixture_hashes(tiny_model_path) == FIXTURE_SHA256  # every file the recipe writes, and only those
    assert sorted(p.name for p in tiny_model_path.iterdir()) == sorted(FIXTURE_SHA256)
    facts = json.loads((tiny_model_path / BUILD_FACTS_FILE).read_text())
    assert facts["seed"] == 0 and facts["steps"] > 0 and facts["recipe"] == tiny_model.RECIPE_VERSION
    assert facts["validation_pass_at_1"] >= tiny_model.WARMUP_TARGET_PASS_AT_1
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert 0.4e6 < sum(p.numel() for p in model.parameters()) < 0.7e6
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert "<answer>" not in tokenizer.all_special_tokens
    heldout = arithmetic_splits()["heldout"][:200]
    assert pass_at_1(model, tokenizer, heldout, max_new_tokens=8) > 0.2


GREEDY_HELDOUT = """
import hashlib, json, sys
import torch
from grpolab.task.problems import load_lab_datasets
from grpolab.task.evaluate import greedy_completions
from grpolab.task.rewards import numeric_reward
from grpolab.settings.lab_settings import resolve_settings
from grpolab.model.tiny import resolve_model_name
from grpolab.common.tracks import get_track
from grpolab.run.training import load_model, load_tokenizer

settings = resolve_settings(get_track("c"))
rows = list(load_lab_datasets(settings.dataset, settings.train_size, settings.heldout_size, settings.seed)[1])
path = resolve_model_name("tiny")
tokenizer, model = load_tokenizer(path), load_model(path, torch.float32)
for threads in sys.argv[1:]:  # one process per kernel set (they are chosen at import), each thread count in it
    torch.set_num_threads(int(threads))
    new_tokens = settings.eval_max_new_tokens or settings.max_completion_length
    done = greedy_completions(model, tokenizer, [r["prompt"] for r in rows], new_tokens)
    rewards = numeric_reward(done, answer=[r["answer"] for r in rows])
    completions = hashlib.sha256("\\n".join(done).encode()).hexdigest()
    print(json.dumps({"threads": torch.get_num_threads(), "kernels": torch.backends.cpu.get_cpu_capability(),
                      "rows": len(rows), "pass_at_1": sum(rewards) / len(rewards), "completions": completions}))
"""
# torch's CPU kernel sets, narrowed the way a machine without AVX-512 (or without AVX) has them: ATen's own
# kernels (ATEN_CPU_CAPABILITY), MKL's (MKL_ENABLE_INSTRUCTIONS) and oneDNN's (ONEDNN_MAX_CPU_ISA).
KERNEL_SETS = {
    "best": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}


@pytest.mark.slow
def test_the_labs_pass_at_1_before_training_is_the_same_whatever_the_cpus_kernels(tiny_model_env):
    """The committed model's greedy completions of track c's held-out problems, as the lab scores them before
    training: the same text (so the same pass@1, 0.290) with torch's AVX-512, AVX2 and plain kernels, on 1 and 2
    threads. (The recipe's *training* is what differed between CPUs; greedy decoding of fixed weights does not.)"""
    import subprocess
    import sys

    seen = {}
    for name, kernels in KERNEL_SETS.items():
        proc = subprocess.run([sys.executable, "-c", GREEDY_HELDOUT, "1", "2"], env={**tiny_model_env, **kernels},
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        for line in proc.stdout.splitlines()[-2:]:
            result = json.loads(line)
            seen[name, str(result["threads"])] = result
    assert sorted(seen) == sorted((name, threads) for name in KERNEL_SETS for threads in ("1", "2"))
    assert seen["avx2", "1"]["kernels"] == "AVX2" and seen["default", "1"]["kernels"] == "DEFAULT"
    assert {(r["completions"], r["pass_at_1"], r["rows"]) for r in seen.values()} == {
        (seen["best", "1"]["completions"], 0.29, 200)
    }


def test_its_context_holds_track_c_prompt_and_completion(tiny_model_path):
    """vLLM refuses a max_model_len beyond max_position_embeddings: track c's prompt plus completion must fit."""
    from grpolab.settings.lab_settings import resolve_settings
    from grpolab.common.tracks import get_track

    config = json.loads((tiny_model_path / "config.json").read_text())
    settings = resolve_settings(get_track("c"))
    assert config["max_position_embeddings"] >= settings.max_prompt_length + settings.max_completion_length


@pytest.mark.slow
def test_the_recipe_still_makes_a_model_of_the_committed_shape_that_adds(tmp_path, tiny_model_path):
    """The whole recipe (about 600 warm-up steps, 1.5-2.5 minutes on 2 cores: a shortened one answers nothing,
    validation
    pass@1 stays under 0.1 until step ~580 here). Its weights need not be the committed bytes (they differ between
    CPUs),
    but the tokenizer, config and every tensor's name and shape must be, and it must add as well as the recipe asks."""
    from safetensors import safe_open

    from grpolab.task.evaluate import pass_at_1

    built = build_tiny_model(tmp_path / "tiny", seed=0, progress=lambda line: None)
    assert sorted(p.name for p in built.iterdir()) == sorted(FIXTURE_SHA256)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (built / name).read_bytes() == (tiny_model_path / name).read_bytes(), name

    def written_by_any_transformers(path):  # transformers stamps its own version into these; the lock moves it
        return {key: value for key, value in json.loads(path.read_text()).items() if key != "transformers_version"}

    for name in ("config.json", "generation_config.json"):
        assert written_by_any_transformers(built / name) == written_by_any_transformers(tiny_model_path / name), name

    def shapes(folder):
        with safe_open(folder / "model.safetensors", "pt") as weights:
            return {key: tuple(weights.get_slice(key).get_shape()) for key in weights.keys()}

    assert shapes(built) == shapes(tiny_model_path)
    facts = json.loads((built / BUILD_FACTS_FILE).read_text())
    assert (
        facts["validation_pass_at_1"] >= tiny_model.WARMUP_TARGET_PASS_AT_1
        and facts["steps"] < tiny_model.WARMUP_MAX_STEPS
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(built), AutoTokenizer.from_pretrained(built)
    assert pass_at_1(model, tokenizer, arithmetic_splits()["heldout"][:200], max_new_tokens=8) > 0.2


@pytest.mark.slow
def test_build_is_deterministic(tmp_path):
    """Same seed, same tokenizer and weights (a few warm-up steps are enough to show the data order and init)."""
    import hashlib

    quiet = lambda line: None  # noqa: E731
    builds = [build_tiny_model(tmp_path / name, seed=0, progress=quiet, max_steps=3) for name in ("a", "b")]
    digest = lambda path: hashlib.sha256(path.read_bytes()).hexdigest()  # noqa: E731
    for name in ("model.safetensors", "tokenizer.json"):
        assert digest(builds[0] / name) == digest(builds[1] / name)
    assert json.loads((builds[0] / BUILD_FACTS_FILE).read_text())["steps"] == 3


def test_rebuild_prints_the_new_hashes_and_never_overwrites_the_committed_model(tmp_path):
    lines = []
    hashes = rebuild_tiny_model(tmp_path / "rebuilt", progress=lines.append, max_steps=2)  # the recipe, cut short
    assert sorted(hashes) == sorted(FIXTURE_SHA256)
    assert f'    "model.safetensors": "{hashes["model.safetensors"]}",' in lines[-1].splitlines()
    with pytest.raises(ValueError, match="not over the committed model"):
        rebuild_tiny_model(tiny_model_dir(), progress=lines.append, max_steps=2)
    with pytest.raises(ValueError, match="not empty"):
        rebuild_tiny_model(tmp_path / "rebuilt", progress=lines.append, max_steps=2)


def test_pass_at_1_leaves_the_tokenizer_and_model_as_it_found_them(tokenizer):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from grpolab.task.evaluate import pass_at_1

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **tiny_model.MODEL_CONFIG,
    )
    model = Qwen3ForCausalLM(config).train()
    tokenizer.padding_side = "right"
    rows = arithmetic_splits()["heldout"][:5]
    assert 0.0 <= pass_at_1(model, tokenizer, rows, max_new_tokens=4, batch_size=2) <= 1.0
    assert tokenizer.padding_side == "right" and model.training
    with pytest.raises(ValueError, match="no rows"):
        pass_at_1(model, tokenizer, [], max_new_tokens=4)
