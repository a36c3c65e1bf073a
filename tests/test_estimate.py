"""The memory estimate reproduces the lesson's two tables ("The memory arithmetic") term by term."""

import json
import sys

import pytest

from grpolab.estimate import (
    QWEN3_MODELS,
    UnknownModel,
    estimate_memory,
    lora_trainable_parameters,
    measured_peak_memory,
    measured_peak_memory_gb,
    model_shape,
    os_reserved_default_gb,
    parameters_from_shape,
)
from grpolab.settings import LabSettings


def lesson_settings(**changes) -> LabSettings:
    """The lesson's run: rank-16 all-linear LoRA, 8 rollouts of 512 tokens after 256-token prompts, BF16, beta > 0."""
    values = dict(
        track="n", dtype="bfloat16", beta=0.04, lora_rank=16, lora_target_modules="all-linear", num_generations=8,
        per_device_train_batch_size=8, max_prompt_length=256, max_completion_length=512, rollout="inprocess",
    )
    values.update(changes)
    return LabSettings(**values)


def rounded(estimate) -> list[tuple[str, float]]:
    return [(name, round(gb, 1)) for name, gb, _ in estimate.terms]


def test_lesson_table_16gb_qwen3_1_7b():
    e = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16)
    assert rounded(e) == [
        ("Policy weights, BF16", 3.4),
        ("Reference model, BF16", 3.4),
        ("Adapter, gradients and Adam states", 0.3),
        ("Rollout key-value cache, 8 sequences", 0.7),
        ("Logits and activations for the update", 2.0),
    ]
    assert e.os_reserved_gb == 2
    assert round(e.free_gb, 1) == 4.2
    assert e.total_gb == 16
    assert e.fits


def test_lesson_table_128gb_qwen3_4b_colocate():
    e = estimate_memory("Qwen/Qwen3-4B", lesson_settings(rollout="vllm-colocate", track="s"), device_total_gb=128)
    assert rounded(e) == [
        ("Policy weights, BF16", 8.0),
        ("Reference model, BF16", 8.0),
        ("Adapter, gradients and Adam states", 0.5),
        ("vLLM allocation at a 0.3 memory fraction", 38.4),
        ("Logits and activations for the update", 4.0),
    ]
    assert e.os_reserved_gb == 4
    assert round(e.free_gb, 1) == 65.1
    assert e.total_gb == 128


def test_lesson_notes_figures():
    """The lesson's footnote: 112 KiB per token, about twenty million adapter parameters, ~1.2 GB of logits."""
    shape = model_shape("Qwen/Qwen3-1.7B")
    assert shape.kv_bytes_per_token(2) == 112 * 1024
    assert 15e6 < lora_trainable_parameters(shape, 16, "all-linear") < 21e6
    e = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16)
    assert "1.24 GB of logits" in e.terms[-1][2]


def test_beta_zero_drops_the_reference_model():
    with_ref = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16)
    without = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(beta=0.0), device_total_gb=16)
    assert not any(name.startswith("Reference") for name, _, _ in without.terms)
    assert len(without.terms) == len(with_ref.terms) - 1
    assert without.free_gb == pytest.approx(with_ref.free_gb + 3.4)


def test_colocate_term_scales_with_the_fraction():
    def vllm_gb(fraction, total):
        e = estimate_memory("Qwen/Qwen3-4B", lesson_settings(rollout="vllm-colocate", vllm_gpu_memory_utilization=fraction), device_total_gb=total)
        return e.term("vLLM")

    assert vllm_gb(0.3, 128) == pytest.approx(38.4)
    assert vllm_gb(0.6, 128) == pytest.approx(76.8)
    assert vllm_gb(0.3, 64) == pytest.approx(19.2)


def test_os_reservation_rule():
    assert os_reserved_default_gb(16) == 2
    assert os_reserved_default_gb(24) == 2
    assert os_reserved_default_gb(128) == 4
    assert os_reserved_default_gb(256) == 8
    e = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16, os_reserved_gb=3)
    assert e.os_reserved_gb == 3


def test_local_config_json(tmp_path):
    config = {k: v for k, v in QWEN3_MODELS["Qwen/Qwen3-1.7B"].items() if k != "num_parameters"}
    config.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    for model in (str(tmp_path), str(tmp_path / "config.json")):
        e = estimate_memory(model, lesson_settings(), device_total_gb=16)
        assert e.model_source == str(tmp_path / "config.json")
        # Summed from the shape: 1.72B parameters, 3.44 GB at BF16.
        assert e.term("Policy weights") == pytest.approx(parameters_from_shape(config) * 2 / 1e9)
        assert round(e.term("Policy weights"), 1) == 3.4
        assert round(e.term("Rollout"), 1) == 0.7


def test_config_dict_and_shape_sum_match_the_model_cards():
    # Summing the published shapes lands on each model card's count.
    for model_id, card in (("Qwen/Qwen3-0.6B", 0.6e9), ("Qwen/Qwen3-1.7B", 1.7e9), ("Qwen/Qwen3-4B", 4.0e9), ("Qwen/Qwen3-8B", 8.2e9)):
        assert parameters_from_shape(QWEN3_MODELS[model_id]) == pytest.approx(card, rel=0.02)
    e = estimate_memory(dict(QWEN3_MODELS["Qwen/Qwen3-4B"]), lesson_settings(), device_total_gb=128)
    assert round(e.term("Policy weights"), 1) == 8.0


def test_unknown_model_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(UnknownModel, match="local path"):
        estimate_memory("nobody/NoSuchModel-7B", lesson_settings(), device_total_gb=16)


def test_hf_cache_config_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snap = tmp_path / "hub" / "models--someone--Small" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(QWEN3_MODELS["Qwen/Qwen3-0.6B"]))
    assert model_shape("someone/Small").hidden_size == 1024


def test_target_modules():
    shape = model_shape("Qwen/Qwen3-1.7B")
    qv = lora_trainable_parameters(shape, 16, "q_proj, v_proj")
    assert qv == 28 * 16 * ((2048 + 2048) + (2048 + 1024))
    assert lora_trainable_parameters(shape, 16, "q,v") == qv
    with pytest.raises(ValueError, match="unknown LoRA target"):
        lora_trainable_parameters(shape, 16, "lm_head")


def test_auto_dtype_follows_the_track():
    assert estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(dtype="auto", track="s"), 16).dtype == "bfloat16"
    cpu = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(dtype="auto", track="c"), 16)
    assert cpu.dtype == "float32" and round(cpu.term("Policy weights"), 1) == 6.8


def test_render_and_json():
    e = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16)
    text = e.render()
    for line in ("Policy weights, BF16", "Reference model, BF16", "Reserved for the operating system", "Free", "Total"):
        assert line in text
    assert "4.2 GB" in text and "16.0 GB" in text
    d = json.loads(json.dumps(e.as_dict()))
    assert [t["name"] for t in d["terms"]][0] == "Policy weights, BF16"
    assert d["free_gb"] == pytest.approx(4.2, abs=0.05) and d["fits"] is True


def test_does_not_fit_says_what_to_do():
    e = estimate_memory("Qwen/Qwen3-8B", lesson_settings(), device_total_gb=16)
    assert not e.fits
    assert "beta to 0" in e.render()


def test_measured_device_total_and_peak():
    e = estimate_memory("Qwen/Qwen3-0.6B", lesson_settings())
    assert e.total_gb > 0.5 and e.device_total_source
    peak = measured_peak_memory()
    assert peak["gb"] > 0.01 and peak["source"]
    assert measured_peak_memory_gb() > 0.01
    if "torch" not in sys.modules:
        assert "ru_maxrss" in peak["source"]


def test_tiny_model_and_settings_model(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path))
    with pytest.raises(UnknownModel, match="grpolab tiny-model"):
        estimate_memory("tiny", lesson_settings(), device_total_gb=16)
    tiny = tmp_path / "models" / "tiny-qwen3"
    tiny.mkdir(parents=True)
    config = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
              "head_dim": 32, "intermediate_size": 512, "vocab_size": 300, "tie_word_embeddings": True}
    (tiny / "config.json").write_text(json.dumps(config))
    e = estimate_memory(None, lesson_settings(model="tiny", dtype="float32"), device_total_gb=16)
    assert e.model == "tiny" and e.term("Policy weights") < 0.01
