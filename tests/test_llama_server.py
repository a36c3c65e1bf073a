"""The llama-server client: the shapes of served responses, sampling over HTTP, and bounded waits (a fake server)."""

import json
import socket
import time

import pytest
from fake_server import FakeServer, free_port
from grpolab.common import health
from grpolab.common.errors import LayerFailure
from grpolab.rollouts.llamacpp_server import LlamaServerClient, parse_completion_response

# --- served responses --------------------------------------------------------------------------------


GOOD = {
    "content": "<answer>7</answer>",
    "tokens": [11, 12, 2],
    "stop_type": "eos",
    "completion_probabilities": [
        {"id": 11, "token": "<answer>", "bytes": [60], "logprob": -0.5, "top_logprobs": []},
        {"id": 12, "token": "7", "bytes": [55], "logprob": -1.25, "top_logprobs": []},
        {"id": 2, "token": "<|im_end|>", "bytes": [], "logprob": -0.01, "top_logprobs": []},
    ],
}


def test_parse_good_response():
    ids, logprobs = parse_completion_response(GOOD, stop_ids=(2,))
    assert ids == [11, 12, 2] and logprobs == [-0.5, -1.25, -0.01]


def test_parse_appends_eos_the_server_left_out():
    body = json.loads(json.dumps(GOOD))
    body["completion_probabilities"].pop()
    body["tokens"] = [11, 12]
    ids, logprobs = parse_completion_response(body, stop_ids=(2,))
    assert ids == [11, 12, 2] and logprobs[-1] == 0.0


def test_token_strings_instead_of_ids_are_refused():
    # What an OpenAI-style server (llama-cpp-python's) returns: strings and their logprobs, no ids.
    body = {"choices": [{"text": "7", "logprobs": {"tokens": ["<answer>", "7"], "token_logprobs": [-0.5, -1.2]}}]}
    with pytest.raises(LayerFailure, match="completion_probabilities") as error:
        parse_completion_response(body)
    assert error.value.layer == "rollout"
    strings = {"completion_probabilities": [{"token": "<answer>", "logprob": -0.5}]}
    with pytest.raises(LayerFailure, match="token strings instead of token ids"):
        parse_completion_response(strings)
    bad_tokens = dict(GOOD, tokens=["<answer>", "7", "<|im_end|>"])
    with pytest.raises(LayerFailure, match="not token ids"):
        parse_completion_response(bad_tokens)
    with pytest.raises(LayerFailure, match="not a JSON object"):
        parse_completion_response("<html>502</html>")


def test_llama_server_client_samples_ids_with_grpo_settings():
    seen = []

    def completion(payload):
        seen.append(payload)
        return GOOD

    with FakeServer({"/health": (200, {"status": "ok"}), "/completion": (200, completion)}) as server:
        client = LlamaServerClient(server.url, wait_s=5)
        ids, logprobs = client.sample_batch([[1, 2, 3], [1, 2, 3]], max_tokens=8, temperature=1.0, stop_ids=(2,))
    assert ids == [[11, 12, 2]] * 2
    payload = seen[0]
    assert payload["prompt"] == [1, 2, 3] and payload["n_probs"] >= 1 and payload["return_tokens"] is True
    assert (
        payload["temperature"],
        payload["top_k"],
        payload["top_p"],
        payload["min_p"],
        payload["repeat_penalty"],
    ) == (1.0, 0, 1.0, 0.0, 1.0)
    assert seen[0]["seed"] != seen[1]["seed"]  # a group's completions are independent draws


def test_llama_server_with_string_tokens_is_refused():
    openai_style = {"choices": [{"text": "7", "logprobs": {"tokens": ["7"], "token_logprobs": [-1.0]}}]}
    with FakeServer({"/health": (200, {}), "/completion": (200, openai_style)}) as server:
        client = LlamaServerClient(server.url, wait_s=5)
        with pytest.raises(LayerFailure, match="response"):
            client.sample([1, 2], 4, 1.0)


def test_unreachable_server_fails_within_the_bound():
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(LayerFailure, match=r"did not answer /health within 1\.5 s") as error:
        LlamaServerClient(url, wait_s=1.5)
    assert time.monotonic() - started < 5
    assert "llama-server" in str(error.value)


def test_silent_server_fails_within_the_bound():
    # Accepts connections and never answers: the request timeout bounds the wait.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(LayerFailure, match="did not answer"):
            health.wait_for_health(url, timeout_s=1.0, what="llama-server", interval_s=0.2)
        assert time.monotonic() - started < 10


def test_refresh_on_a_running_llama_server_needs_a_restart():
    with FakeServer({"/health": (200, {})}) as server:
        client = LlamaServerClient(server.url, wait_s=5)
        with pytest.raises(LayerFailure, match="restart"):
            client.load("policy.gguf")


def test_both_llama_cpp_samplers_share_one_batch_logic():
    from grpolab.rollouts.llamacpp_inprocess import InProcessLlama
    from grpolab.rollouts.sampler import LlamaSampler

    for sampler in (InProcessLlama, LlamaServerClient):
        assert issubclass(sampler, LlamaSampler) and sampler.sample_batch is LlamaSampler.sample_batch
