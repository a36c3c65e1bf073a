"""The llama.cpp rollout path for real, with the tiny model: GGUF export, tokenisation and log-probability
parity with the HF model, and a short TRL GRPOTrainer run sampling through rollout_func with the
staleness ledger (the lag grows without refresh and stays below K with refresh_every=K).

Needs llama-cpp-python, an sdist: CI installs the compile of track c's llama.cpp image (`invoke source-wheels --track c
--into DIR`, then `uv pip install DIR/wheels/*.whl`; about 2 minutes on 2 cores the first time, cached with the image).
The GGUF converter comes
from the llama-cpp-python sdist (see grpolab/model/gguf.py).
"""

import math
import sys
from pathlib import Path

import pytest

llama_cpp = pytest.importorskip(
    "llama_cpp",
    reason="llama-cpp-python is not installed (.ci/run installs the image's compile: invoke source-wheels --track c)",
)

from grpolab.common.errors import LayerFailure  # noqa: E402
from grpolab.model.gguf import check_gguf, export_gguf, uses_qwen2_pretokenizer  # noqa: E402
from grpolab.rollouts.llamacpp import LlamaCppRollout, encode_prompts  # noqa: E402
from grpolab.rollouts.llamacpp_inprocess import InProcessLlama  # noqa: E402
from hostlab.locks.sourcebuilds import SOURCE_BUILD_FILES, SOURCE_BUILDS  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_path):
    return tiny_model_path  # conftest builds it once into .cache/tests


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def tiny_gguf(tiny_dir, tmp_path_factory):
    return export_gguf(tiny_dir, tmp_path_factory.mktemp("gguf") / "tiny.gguf", progress=lambda *_: None)


@pytest.fixture(scope="module")
def sampler(tiny_gguf):
    s = InProcessLlama(tiny_gguf, n_ctx=256, n_threads=1, seed=0)
    yield s
    s.close()


def gguf_metadata(path) -> dict:
    from grpolab.model.gguf import _converter_on_path, converter_dir

    with _converter_on_path(converter_dir()) as (_, gguf):
        reader = gguf.GGUFReader(str(path))
        out = {}
        for key in ("general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre"):
            field = reader.fields[key]
            out[key] = bytes(field.parts[field.data[0]]).decode()
        return out


def test_export_names_qwen2_pretokenizer(tiny_dir, tiny_gguf):
    assert uses_qwen2_pretokenizer(tiny_dir)
    assert check_gguf(tiny_gguf) == tiny_gguf
    assert gguf_metadata(tiny_gguf) == {
        "general.architecture": "qwen3",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
    }


def test_unknown_pretokenizer_is_refused(tiny_dir, tmp_path):
    import json
    import shutil

    copy = tmp_path / "other"
    shutil.copytree(tiny_dir, copy)
    spec = json.loads((copy / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    assert not uses_qwen2_pretokenizer(copy)
    with pytest.raises(LayerFailure, match="does not know the tokenizer"):
        export_gguf(copy, tmp_path / "other.gguf", progress=lambda *_: None)


TEXTS = [
    "What is 12 plus 47? Put only the final number inside <answer></answer>.",
    "<|im_start|>user\nWhat is 99 plus 0?<|im_end|>\n<|im_start|>assistant\n<answer>99</answer><|im_end|>\n",
    "  spaces,\tTabs\n\nand 1234567 digits; it's 3.5 (or 'so')!",
    "Ünïcode wörds 和 emoji 🦙 too",
]


@pytest.mark.parametrize("text", TEXTS)
def test_llamacpp_tokenises_like_the_hf_tokenizer(sampler, tokenizer, text):
    assert sampler.tokenize(text) == tokenizer(text, add_special_tokens=False)["input_ids"]


def test_chat_prompts_tokenise_like_trl(tokenizer):
    prompts = [[{"role": "user", "content": "What is 3 plus 4?"}]] * 2
    ids = encode_prompts(prompts, tokenizer)
    text = tokenizer.apply_chat_template(prompts[0], add_generation_prompt=True, tokenize=False)
    assert ids[0] == ids[1] == tokenizer(text, add_special_tokens=False)["input_ids"]


def hf_logprobs(model, prompt_ids, completion_ids):
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


def test_samples_and_logprobs_match_the_hf_model(sampler, tokenizer, tiny_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    prompt = encode_prompts(
        [[{"role": "user", "content": "What is 23 plus 41? Put only the final number inside <answer></answer>."}]],
        tokenizer,
    )[0]
    groups = [
        sampler.sample(prompt, max_tokens=8, temperature=1.0, stop_ids=(tokenizer.eos_token_id,)) for _ in range(8)
    ]
    for ids, logprobs in groups:
        assert 1 <= len(ids) <= 8 and len(logprobs) == len(ids)
        assert ids[-1] == tokenizer.eos_token_id or len(ids) == 8
        expected = hf_logprobs(model, prompt, ids)
        # f32 weights; llama.cpp keeps its KV cache in f16, hence ~1e-3 differences (a wrong model is off by > 0.1)
        assert max(abs(a - b) for a, b in zip(logprobs, expected)) < 1e-2
    # independent draws (each completion gets its own seed): a group is not 8 copies of one completion
    assert len({tuple(ids) for ids, _ in groups}) > 1 or all(math.exp(sum(lp)) > 0.9 for _, lp in groups)


def test_missing_and_corrupt_gguf_fail_clearly(tmp_path, tiny_gguf):
    with pytest.raises(LayerFailure, match="does not exist"):
        InProcessLlama(tmp_path / "absent.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<html>not a model</html>")
    with pytest.raises(LayerFailure, match="not a GGUF file"):
        InProcessLlama(junk)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[:4096])
    with pytest.raises(LayerFailure, match="could not load") as error:
        InProcessLlama(truncated)
    assert error.value.layer == "rollout" and "export the policy again" in error.value.action


def test_refresh_exports_the_merged_adapter(tiny_dir, tokenizer, tmp_path):
    """After a refresh the sampler computes the PEFT policy's own distribution (LoRA merged into a copy)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")
    )
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)  # an adapter that changes the policy
    s = InProcessLlama(export_gguf(tiny_dir, tmp_path / "base.gguf", progress=lambda *_: None), n_ctx=128, n_threads=1)
    rollout = LlamaCppRollout(s, tokenizer, max_completion_length=6, refresh_every=1, export_dir=tmp_path)
    refresh = rollout.refresh(peft_model, trainer_step=1)
    assert rollout.policy_version == 1 and refresh.export_seconds > 0 and refresh.reload_seconds > 0
    assert hasattr(peft_model, "peft_config")  # the trained model is untouched (merged copy)
    prompt = encode_prompts([[{"role": "user", "content": "What is 5 plus 6?"}]], tokenizer)[0]
    ids, logprobs = s.sample(prompt, 6, 1.0, (tokenizer.eos_token_id,))
    assert max(abs(a - b) for a, b in zip(logprobs, hf_logprobs(peft_model.eval(), prompt, ids))) < 1e-2
    base = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    assert max(abs(a - b) for a, b in zip(logprobs, hf_logprobs(base, prompt, ids))) > 5e-2  # and not the base's
    s.close()


def grpo_run(tiny_dir, tokenizer, tmp_path, refresh_every, steps=4):
    from datasets import Dataset
    from grpolab.task.problems import arithmetic_splits
    from grpolab.task.rewards import format_reward, numeric_reward
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    train = Dataset.from_list(arithmetic_splits()["train"][:32])
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_dir),
        LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    sampler = InProcessLlama(
        export_gguf(tiny_dir, tmp_path / "policy-step000000.gguf", progress=lambda *_: None), n_ctx=128, n_threads=1
    )
    rollout = LlamaCppRollout(
        sampler, tokenizer, temperature=1.0, max_completion_length=8, refresh_every=refresh_every, export_dir=tmp_path
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=steps,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        gradient_checkpointing=False,
        seed=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[numeric_reward, format_reward], args=args, train_dataset=train,
                          processing_class=tokenizer, rollout_func=rollout)
    trainer.train()
    sampler.close()
    return trainer, rollout


@pytest.fixture(autouse=True)
def _quiet_trl(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def test_grpo_run_without_refresh_goes_stale(tiny_dir, tokenizer, tmp_path):
    trainer, rollout = grpo_run(tiny_dir, tokenizer, tmp_path, refresh_every=0)
    ledger = trainer.rollout_ledger
    assert ledger is rollout.ledger
    assert [b.trainer_step for b in ledger.batches] == [0, 1, 2, 3]
    assert ledger.lags == [0, 1, 2, 3] and ledger.summary()["stale"] and ledger.max_lag_steps == 3
    assert all(b.completions == 8 for b in ledger.batches)
    assert any("reward" in entry for entry in trainer.state.log_history)


def test_grpo_run_with_refresh_stays_within_k(tiny_dir, tokenizer, tmp_path):
    trainer, rollout = grpo_run(tiny_dir, tokenizer, tmp_path, refresh_every=2, steps=5)
    ledger = rollout.ledger
    assert ledger.lags == [0, 1, 0, 1, 0] and ledger.max_lag_steps < 2
    assert [r.trainer_step for r in ledger.refreshes] == [2, 4]
    summary = ledger.summary()
    assert summary["refreshes"] == 2 and summary["refresh_seconds_mean"] > 0


def test_configure_rollout_for_the_lab(tiny_dir, tokenizer, tmp_path):
    """What the lab calls: GRPOTrainer kwargs with the rollout_func, a log dict, and the line it prints."""
    from types import SimpleNamespace

    from grpolab.rollouts import configure_rollout
    from grpolab.settings.lab_settings import LabSettings
    from grpolab.common.tracks import get_track

    settings = LabSettings(
        track="c",
        model=str(tiny_dir),
        rollout="llamacpp",
        llamacpp_refresh_every=3,
        max_completion_length=8,
        dtype="float32",
    )
    kwargs, line = configure_rollout(
        settings, get_track("c"), "cpu", tiny_dir, tokenizer, out_dir=tmp_path / "gguf", progress=lambda *_: None
    )
    rollout, log = kwargs.pop("rollout_func"), kwargs.pop("log")
    assert kwargs == {} and "refreshed every 3 steps" in line
    assert log["refresh_every"] == 3 and log["sampling"] == {
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_penalty": 1.0,
    }
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), model=None)
    out = rollout([[{"role": "user", "content": "What is 1 plus 1?"}]] * 4, trainer)
    assert len(out["completion_ids"]) == 4 and trainer.rollout_ledger.summary()["rollout_batches"] == 1
    rollout.close()
    assert not (tmp_path / "gguf").exists()


def test_the_test_venvs_llama_cpp_holds_only_the_libraries_it_loads():
    """llama.cpp's `common` library, which llama-cpp-python forces on, is not compiled
    (images/llama-cpp-libraries-only.cmake,
    the same option in the image and in CI's compile): the package still loads, and no libllama-common is anywhere."""
    assert llama_cpp.llama_cpp.llama_print_system_info()  # libllama and libggml loaded and answer
    assert not list(Path(sys.prefix).rglob("libllama-common*"))
    assert f"CMAKE_PROJECT_llama.cpp_INCLUDE={SOURCE_BUILD_FILES}/llama-cpp-libraries-only.cmake" in " ".join(
        SOURCE_BUILDS["llama-cpp-python"].config_settings)
