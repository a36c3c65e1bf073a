"""The built-in tiny model: its tokenizer, a real build, reload, and the cache's atomic build."""

import json

import pytest

from grpolab import tiny_model
from grpolab.data import arithmetic_splits
from grpolab.tiny_model import (
    BUILD_FACTS_FILE,
    QWEN2_SPLIT_REGEX,
    TINY_MODEL,
    build_tiny_model,
    build_tokenizer,
    ensure_tiny_model,
    resolve_model_name,
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


def test_build_reloads_with_auto_classes_and_answers(tiny_model_path):
    """The cached build (conftest's tiny_model_path: built once per cache through ensure_tiny_model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpolab.evaluate import pass_at_1

    tiny_model_dir = tiny_model_path
    assert (tiny_model_dir / "model.safetensors").is_file()
    facts = json.loads((tiny_model_dir / BUILD_FACTS_FILE).read_text())
    assert facts["seed"] == 0 and facts["steps"] > 0
    assert facts["validation_pass_at_1"] >= 0.2
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert 0.4e6 < sum(p.numel() for p in model.parameters()) < 0.7e6
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert "<answer>" not in tokenizer.all_special_tokens
    heldout = arithmetic_splits()["heldout"][:200]
    assert pass_at_1(model, tokenizer, heldout, max_new_tokens=8) > 0.2


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


def _fake_build(out_dir, seed=0, progress=print):
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        (out_dir / name).write_text("{}")
    (out_dir / BUILD_FACTS_FILE).write_text(json.dumps({"recipe": tiny_model.RECIPE_VERSION, "seed": seed}))
    return out_dir


def test_ensure_builds_once_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(tiny_model, "build_tiny_model", lambda out, **kw: calls.append(out) or _fake_build(out))
    path = ensure_tiny_model(progress=lambda line: None)
    assert path == tmp_path / "models" / "tiny-qwen3"
    assert (path / BUILD_FACTS_FILE).is_file()
    assert ensure_tiny_model(progress=lambda line: None) == path
    assert len(calls) == 1
    assert resolve_model_name(TINY_MODEL) == str(path)
    assert resolve_model_name("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert [p.name for p in path.parent.iterdir()] == ["tiny-qwen3"]  # no staging folder left behind


def test_the_build_says_where_the_model_ends_up_not_its_staging_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path))
    lines = []
    path = ensure_tiny_model(progress=lines.append, max_steps=2)  # a real build, cut short
    (built,) = [line for line in lines if line.startswith("tiny model: built in")]
    assert built.endswith(f"-> {path}") and ".building-" not in built


def test_interrupted_build_is_not_mistaken_for_a_finished_one(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path))

    def interrupted(out_dir, **kwargs):
        (out_dir / "model.safetensors").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(tiny_model, "build_tiny_model", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ensure_tiny_model(progress=lambda line: None)
    models = tmp_path / "models"
    assert list(models.iterdir()) == []  # neither a target nor a staging folder
    # a leftover incomplete folder at the target (from an older, non-atomic copy) is rebuilt
    (models / "tiny-qwen3").mkdir()
    (models / "tiny-qwen3" / "model.safetensors").write_text("half")
    monkeypatch.setattr(tiny_model, "build_tiny_model", lambda out, **kw: _fake_build(out))
    path = ensure_tiny_model(progress=lambda line: None)
    assert json.loads((path / BUILD_FACTS_FILE).read_text())["recipe"] == tiny_model.RECIPE_VERSION


def test_pass_at_1_leaves_the_tokenizer_and_model_as_it_found_them(tokenizer):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from grpolab.evaluate import pass_at_1

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **tiny_model.MODEL_CONFIG)
    model = Qwen3ForCausalLM(config).train()
    tokenizer.padding_side = "right"
    rows = arithmetic_splits()["heldout"][:5]
    assert 0.0 <= pass_at_1(model, tokenizer, rows, max_new_tokens=4, batch_size=2) <= 1.0
    assert tokenizer.padding_side == "right" and model.training
    with pytest.raises(ValueError, match="no rows"):
        pass_at_1(model, tokenizer, [], max_new_tokens=4)
