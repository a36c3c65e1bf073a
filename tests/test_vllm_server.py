"""The checks on a vLLM server before training starts (a fake server answering vLLM's endpoints)."""

import time

import pytest
from fake_server import FakeServer, free_port
from grpolab.common.errors import LayerFailure
from grpolab.rollouts.vllm import wait_for_vllm_server

# --- vLLM server checks --------------------------------------------------------------------------------


def vllm_routes(version="0.30.0", weight_transfer=True, dev_mode=True):
    routes = {"/health": (200, {}), "/version": (200, {"version": version})}
    if dev_mode:
        routes["/server_info"] = (
            200,
            {"vllm_config": {"weight_transfer_config": {"backend": "nccl"} if weight_transfer else None}},
        )
    return routes


def test_vllm_server_ready():
    with FakeServer(vllm_routes()) as server:
        info = wait_for_vllm_server(server.url, timeout_s=5)
    assert info["vllm_version"] == "0.30.0"


def test_vllm_server_outside_trls_range_is_refused():
    with FakeServer(vllm_routes(version="0.33.0")) as server:
        with pytest.raises(LayerFailure, match=r"0\.33\.0.*outside the range"):
            wait_for_vllm_server(server.url, timeout_s=5)


def test_vllm_server_without_weight_transfer_is_refused():
    with FakeServer(vllm_routes(weight_transfer=False)) as server:
        with pytest.raises(LayerFailure, match="weight-transfer") as error:
            wait_for_vllm_server(server.url, timeout_s=5)
    assert "--weight-transfer-config" in str(error.value)
    with FakeServer(vllm_routes(dev_mode=False)) as server:
        with pytest.raises(LayerFailure, match="VLLM_SERVER_DEV_MODE=1"):
            wait_for_vllm_server(server.url, timeout_s=5)


def test_vllm_server_for_another_model_is_refused():
    routes = {**vllm_routes(), "/v1/models": (200, {"data": [{"id": "Qwen/Qwen3-0.6B", "root": "Qwen/Qwen3-0.6B"}]})}
    with FakeServer(routes) as server:
        assert wait_for_vllm_server(server.url, timeout_s=5, model="Qwen/Qwen3-0.6B")["vllm_version"] == "0.30.0"
        with pytest.raises(LayerFailure, match="serves Qwen/Qwen3-0.6B, but the lab trains Qwen/Qwen3-1.7B") as error:
            wait_for_vllm_server(server.url, timeout_s=5, model="Qwen/Qwen3-1.7B")
    assert "grpolab serve --model Qwen/Qwen3-1.7B" in str(error.value)


def test_vllm_server_unreachable_is_bounded():
    started = time.monotonic()
    with pytest.raises(LayerFailure, match="vLLM server"):
        wait_for_vllm_server(f"http://127.0.0.1:{free_port()}", timeout_s=1.0, interval_s=0.2)
    assert time.monotonic() - started < 5
