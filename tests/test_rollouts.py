"""Choosing the rollout path: the vLLM configuration and refusals (every fact passed in: no GPU or vLLM is needed)."""

from dataclasses import replace

import pytest
from grpolab.common.errors import LayerFailure
from grpolab.rollouts.base import importance_sampling_correction
from grpolab.rollouts.choice import choose_rollout
from grpolab.rollouts.vllm import colocate_memory_fraction, server_is_on_this_machine
from grpolab.settings.lab_settings import LabSettings
from grpolab.common.tracks import get_track

# --- choosing the path ---------------------------------------------------------------------------------


def lab(track, **overrides):
    return replace(LabSettings(track=track, model="Qwen/Qwen3-1.7B", dtype="bfloat16"), **overrides)


def test_inprocess_and_llamacpp_need_no_config():
    assert choose_rollout(lab("c"), get_track("c"), device_type="cpu").grpo_kwargs == {}
    assert choose_rollout(lab("c", rollout="llamacpp"), get_track("c"), device_type="cpu").grpo_kwargs == {}


def test_vllm_on_macos_is_refused():
    with pytest.raises(LayerFailure, match="macOS") as error:
        choose_rollout(lab("m", rollout="vllm-colocate"), get_track("m"), device_type="mps", platform="darwin")
    assert error.value.exit_status == 14


def test_vllm_without_a_gpu_is_refused():
    with pytest.raises(LayerFailure, match="on cpu"):
        choose_rollout(
            lab("c", rollout="vllm-colocate"),
            get_track("c"),
            device_type="cpu",
            platform="linux",
            vllm_version="0.30.0",
        )


def test_vllm_not_installed_is_refused():
    with pytest.raises(LayerFailure, match="not installed"):
        choose_rollout(
            lab("n", rollout="vllm-colocate"),
            get_track("n"),
            device_type="cuda",
            platform="linux",
            vllm_version=None,
            device_total_gb=24,
        )


def test_vllm_outside_trls_range_is_refused():
    with pytest.raises(LayerFailure, match=r"outside the range installed TRL declares \(>=0\.22\.0,<=0\.31\.0\)"):
        choose_rollout(
            lab("n", rollout="vllm-colocate"),
            get_track("n"),
            device_type="cuda",
            platform="linux",
            vllm_version="0.33.0",
            device_total_gb=24,
        )


def test_server_mode_on_one_gpu_suggests_colocate():
    with pytest.raises(LayerFailure, match="second GPU") as error:
        choose_rollout(
            lab("n", rollout="vllm-server"),
            get_track("n"),
            device_type="cuda",
            platform="linux",
            vllm_version="0.30.0",
            gpu_count=1,
        )
    assert "vllm-colocate" in error.value.action


@pytest.mark.parametrize("url", ["http://vllm:8000", "http://gpu-box.lab.example:8000"])
def test_server_mode_without_a_cuda_gpu_names_nccl_and_colocate(url):
    """On a CPU (track cv: vLLM's CPU build, a server that generates) TRL still can't stream weights: refused first."""
    with pytest.raises(LayerFailure, match="NCCL, which needs CUDA GPUs") as error:
        choose_rollout(
            lab("cv", rollout="vllm-server", vllm_server_url=url),
            get_track("cv"),
            device_type="cpu",
            platform="linux",
            vllm_version="0.31.0",
            vllm_build="cpu",
            gpu_count=0,
        )
    assert error.value.layer == "rollout" and "--rollout vllm-colocate" in error.value.action


@pytest.mark.parametrize("url, local", [
    ("http://localhost:8000", True), ("http://127.0.0.1:8000", True), ("http://0.0.0.0:8000", True),
    ("http://vllm:8000", True),  # a Compose service: same machine, same GPUs
    ("http://gpu-box.lab.example:8000", False), ("http://10.0.0.7:8000", False),
])
def test_which_servers_share_this_machine(url, local):
    assert server_is_on_this_machine(url) is local


def test_compose_service_on_one_gpu_is_refused():
    with pytest.raises(LayerFailure, match="second GPU"):
        choose_rollout(
            lab("n", rollout="vllm-server", vllm_server_url="http://vllm:8000"),
            get_track("n"),
            device_type="cuda",
            platform="linux",
            gpu_count=1,
        )


def test_server_mode_with_two_gpus_or_a_remote_server():
    two = choose_rollout(
        lab("n", rollout="vllm-server"),
        get_track("n"),
        device_type="cuda",
        platform="linux",
        vllm_version="0.30.0",
        gpu_count=2,
    )
    assert two.grpo_kwargs == {
        "use_vllm": True,
        "vllm_mode": "server",
        "vllm_server_base_url": "http://localhost:8000",
        "vllm_server_timeout": 240.0,
        "vllm_importance_sampling_correction": True,
    }
    remote = choose_rollout(
        lab("n", rollout="vllm-server", vllm_server_url="http://gpu-box.lab.example:8000/"),
        get_track("n"),
        device_type="cuda",
        platform="linux",
        gpu_count=1,
    )
    assert remote.grpo_kwargs["vllm_server_base_url"] == "http://gpu-box.lab.example:8000"


def test_colocate_on_a_discrete_card_keeps_trls_default_when_it_fits():
    choice = choose_rollout(
        lab("n", rollout="vllm-colocate"),
        get_track("n"),
        device_type="cuda",
        platform="linux",
        vllm_version="0.30.0",
        device_total_gb=24,
    )
    assert choice.grpo_kwargs == {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.3,
        "vllm_importance_sampling_correction": True,
    }
    assert "fits" in choice.reason and "0.30.0 inside" in choice.reason


@pytest.mark.parametrize("setting, engine_cpu_float32, expected", [
    ("auto", False, True),  # vLLM on a GPU: TRL's default
    ("auto", True, False),  # vLLM's CPU build in float32: the ratio is 1 there
    ("on", True, True), ("off", False, False),  # what the learner set, wherever
])
def test_trls_importance_sampling_correction_is_off_by_default_only_where_vllm_samples_in_float32_on_the_cpu(
    setting, engine_cpu_float32, expected
):
    on, why = importance_sampling_correction(setting, engine_cpu_float32)
    assert on is expected and why.startswith(
        ("on" if expected else "off") + f" ({'set' if setting != 'auto' else 'auto'}"
    )
    gpu = choose_rollout(
        lab("n", rollout="vllm-colocate", vllm_importance_sampling_correction=setting),
        get_track("n"),
        device_type="cuda",
        platform="linux",
        vllm_version="0.30.0",
        device_total_gb=24,
    )
    assert gpu.grpo_kwargs["vllm_importance_sampling_correction"] is (setting != "off")
    assert gpu.log["importance_sampling_correction"] is (setting != "off")


def test_colocate_on_unified_memory_is_capped_by_the_estimate():
    # 16 GB of unified memory, Qwen3-1.7B, beta 0: policy 3.4 + adapter + activations, OS 2 GB, 5% headroom.
    settings = lab("s", rollout="vllm-colocate", vllm_gpu_memory_utilization=0.9)
    fraction, why = colocate_memory_fraction(settings, "Qwen/Qwen3-1.7B", 16.0, unified_memory=True)
    assert 0.3 < fraction < 0.6
    assert "capped from 0.9" in why and "unified memory" in why and "vllm#46307" in why
    # beta > 0 loads a reference copy: less left for the engine
    without_ref, _ = colocate_memory_fraction(settings, "Qwen/Qwen3-1.7B", 24.0, unified_memory=True)
    with_ref, _ = colocate_memory_fraction(replace(settings, beta=0.04), "Qwen/Qwen3-1.7B", 24.0, unified_memory=True)
    assert with_ref < without_ref - 0.1
    # the whole choice carries the fraction into GRPOConfig
    choice = choose_rollout(
        settings, get_track("s"), device_type="cuda", platform="linux", vllm_version="0.31.0", device_total_gb=16.0
    )
    assert choice.grpo_kwargs["vllm_gpu_memory_utilization"] == fraction and choice.log["memory_reason"] == why


def test_colocate_on_the_lessons_128_gb_machine_keeps_the_default():
    settings = lab("s", rollout="vllm-colocate", model="Qwen/Qwen3-4B", beta=0.04)
    fraction, why = colocate_memory_fraction(settings, "Qwen/Qwen3-4B", 128.0, unified_memory=True)
    assert fraction == 0.3 and "fits" in why


def test_colocate_that_cannot_fit_is_refused():
    settings = lab("s", rollout="vllm-colocate", model="Qwen/Qwen3-8B", beta=0.04)
    with pytest.raises(LayerFailure, match="does not fit"):
        colocate_memory_fraction(settings, "Qwen/Qwen3-8B", 16.0, unified_memory=True)
