"""Rollout paths without an engine: the staleness ledger, refresh logic, served-response shapes, bounded
waits, and the vLLM configuration and refusals (every fact passed in, so no GPU or vLLM is needed)."""

import hashlib
import json
import socket
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from grpolab import rollouts
from grpolab.errors import LayerFailure
from grpolab.rollouts import (
    LlamaCppRollout,
    LlamaServerClient,
    RolloutLedger,
    choose_rollout,
    colocate_memory_fraction,
    parse_completion_response,
    wait_for_vllm_server,
)
from grpolab.settings import LabSettings
from grpolab.tracks import get_track

# --- the ledger and refresh ----------------------------------------------------------------------------


def test_ledger_lag_and_summary():
    ledger = RolloutLedger(refresh_every=0, engine="fake")
    for step in range(4):
        ledger.record(trainer_step=step, policy_version=0, completions=8)
    assert ledger.lags == [0, 1, 2, 3]
    summary = ledger.summary()
    assert summary["stale"] is True and summary["max_lag_steps"] == 3 and summary["rollout_batches"] == 4
    assert summary["mean_lag_steps"] == 1.5 and summary["refreshes"] == 0
    assert "STALE" in ledger.describe()


def test_empty_and_on_policy_ledger_is_not_stale():
    assert RolloutLedger().summary()["stale"] is False
    ledger = RolloutLedger()
    ledger.record(3, 3)
    assert not ledger.stale and ledger.max_lag_steps == 0


class FakeSampler:
    engine = "fake"

    def __init__(self):
        self.loaded = []
        self.gguf_path = None

    def load(self, path):
        self.loaded.append(path)
        self.gguf_path = path

    def close(self):
        self.closed = True

    def sample_batch(self, prompt_ids, max_tokens, temperature, stop_ids=()):
        return [[5, 6, stop_ids[0]] for _ in prompt_ids], [[-0.1, -0.2, -0.3] for _ in prompt_ids]


class FakeTokenizer:
    eos_token_id = 2

    def apply_chat_template(self, conversation, add_generation_prompt, tokenize, return_dict, chat_template=None, **kwargs):
        assert add_generation_prompt and tokenize and return_dict
        return {"input_ids": [[1, len(m[0]["content"])] for m in conversation]}


def fake_trainer(step):
    model = SimpleNamespace(training=True, train=lambda mode=True: None)
    return SimpleNamespace(state=SimpleNamespace(global_step=step), model=model)


def run_steps(rollout, steps):
    prompts = [[{"role": "user", "content": "What is 1 plus 2?"}]] * 4
    for step in range(steps):
        out = rollout(prompts, fake_trainer(step))
        assert set(out) == {"prompt_ids", "completion_ids", "logprobs"}
        assert len(out["completion_ids"]) == len(prompts) == len(out["logprobs"])
    return rollout.ledger


@pytest.fixture
def no_export(monkeypatch, tmp_path):
    exports = []

    def fake_export(model, path, **kwargs):
        exports.append(path)
        path.write_bytes(b"GGUF\x03\x00\x00\x00")
        return path

    monkeypatch.setattr("grpolab.gguf.export_gguf", fake_export)
    return exports


def test_without_refresh_the_lag_grows_every_step(no_export, tmp_path):
    rollout = LlamaCppRollout(FakeSampler(), FakeTokenizer(), max_completion_length=4, refresh_every=0)
    ledger = run_steps(rollout, 6)
    assert ledger.lags == [0, 1, 2, 3, 4, 5]
    assert ledger.summary()["stale"] and ledger.max_lag_steps == 5 and not no_export


@pytest.mark.parametrize("K", [1, 2, 3])
def test_refresh_every_k_keeps_the_lag_below_k(no_export, tmp_path, K):
    sampler = FakeSampler()
    rollout = LlamaCppRollout(sampler, FakeTokenizer(), max_completion_length=4, refresh_every=K, export_dir=tmp_path)
    ledger = run_steps(rollout, 7)
    assert max(ledger.lags) <= K - 1 < K
    assert ledger.lags == [step % K for step in range(7)]
    assert [r.trainer_step for r in ledger.refreshes] == [s for s in range(1, 7) if s % K == 0]
    assert sampler.loaded == no_export and len(no_export) == len(ledger.refreshes)
    # one refreshed file on disk at a time
    assert len(list(tmp_path.glob("policy-step*.gguf"))) == 1
    assert ledger.summary()["stale"] is (K > 1)


def test_close_removes_the_gguf_copies(no_export, tmp_path):
    sampler = FakeSampler()
    rollout = LlamaCppRollout(sampler, FakeTokenizer(), max_completion_length=4, refresh_every=1, export_dir=tmp_path / "gguf")
    (tmp_path / "gguf").mkdir()
    run_steps(rollout, 3)
    assert list((tmp_path / "gguf").glob("*.gguf"))
    rollout.close()
    assert sampler.closed and not (tmp_path / "gguf").exists()


def test_rollout_sets_the_ledger_on_the_trainer(no_export):
    rollout = LlamaCppRollout(FakeSampler(), FakeTokenizer(), max_completion_length=4)
    trainer = fake_trainer(0)
    rollout([[{"role": "user", "content": "x"}]] * 2, trainer)
    assert trainer.rollout_ledger is rollout.ledger


def test_rollout_rejects_bad_arguments():
    with pytest.raises(ValueError, match="export_dir"):
        LlamaCppRollout(FakeSampler(), FakeTokenizer(), refresh_every=2)
    with pytest.raises(ValueError, match="temperature"):
        LlamaCppRollout(FakeSampler(), FakeTokenizer(), temperature=0)


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


class FakeServer:
    """A tiny HTTP server answering canned JSON per path (a stand-in for llama-server or vLLM)."""

    def __init__(self, routes):
        routes_ = routes

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                path = self.path.split("?")[0]
                if path not in routes_:
                    self.send_response(404)
                    self.end_headers()
                    return
                status, body = routes_[path]
                if callable(body):
                    length = int(self.headers.get("Content-Length") or 0)
                    body = body(json.loads(self.rfile.read(length) or b"null"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    assert (payload["temperature"], payload["top_k"], payload["top_p"], payload["min_p"], payload["repeat_penalty"]) == (1.0, 0, 1.0, 0.0, 1.0)
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
            rollouts.wait_for_health(url, timeout_s=1.0, what="llama-server", interval_s=0.2)
        assert time.monotonic() - started < 10


def test_refresh_on_a_running_llama_server_needs_a_restart():
    with FakeServer({"/health": (200, {})}) as server:
        client = LlamaServerClient(server.url, wait_s=5)
        with pytest.raises(LayerFailure, match="restart"):
            client.load("policy.gguf")


# --- vLLM server checks --------------------------------------------------------------------------------


def vllm_routes(version="0.30.0", weight_transfer=True, dev_mode=True):
    routes = {"/health": (200, {}), "/version": (200, {"version": version})}
    if dev_mode:
        routes["/server_info"] = (200, {"vllm_config": {"weight_transfer_config": {"backend": "nccl"} if weight_transfer else None}})
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
        choose_rollout(lab("c", rollout="vllm-colocate"), get_track("c"), device_type="cpu", platform="linux", vllm_version="0.30.0")


def test_vllm_not_installed_is_refused():
    with pytest.raises(LayerFailure, match="not installed"):
        choose_rollout(lab("n", rollout="vllm-colocate"), get_track("n"), device_type="cuda", platform="linux", vllm_version=None, device_total_gb=24)


def test_vllm_outside_trls_range_is_refused():
    with pytest.raises(LayerFailure, match=r"outside the range installed TRL declares \(>=0\.22\.0,<=0\.31\.0\)"):
        choose_rollout(lab("n", rollout="vllm-colocate"), get_track("n"), device_type="cuda", platform="linux", vllm_version="0.33.0", device_total_gb=24)


def test_server_mode_on_one_gpu_suggests_colocate():
    with pytest.raises(LayerFailure, match="second GPU") as error:
        choose_rollout(lab("n", rollout="vllm-server"), get_track("n"), device_type="cuda", platform="linux", vllm_version="0.30.0", gpu_count=1)
    assert "vllm-colocate" in error.value.action


@pytest.mark.parametrize("url, local", [
    ("http://localhost:8000", True), ("http://127.0.0.1:8000", True), ("http://0.0.0.0:8000", True),
    ("http://vllm:8000", True),  # a Compose service: same machine, same GPUs
    ("http://gpu-box.lab.example:8000", False), ("http://10.0.0.7:8000", False),
])
def test_which_servers_share_this_machine(url, local):
    assert rollouts.server_is_on_this_machine(url) is local


def test_compose_service_on_one_gpu_is_refused():
    with pytest.raises(LayerFailure, match="second GPU"):
        choose_rollout(lab("n", rollout="vllm-server", vllm_server_url="http://vllm:8000"), get_track("n"), device_type="cuda", platform="linux", gpu_count=1)


def test_server_mode_with_two_gpus_or_a_remote_server():
    two = choose_rollout(lab("n", rollout="vllm-server"), get_track("n"), device_type="cuda", platform="linux", vllm_version="0.30.0", gpu_count=2)
    assert two.grpo_kwargs == {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": "http://localhost:8000", "vllm_server_timeout": 240.0}
    remote = choose_rollout(lab("n", rollout="vllm-server", vllm_server_url="http://gpu-box.lab.example:8000/"), get_track("n"), device_type="cuda", platform="linux", gpu_count=1)
    assert remote.grpo_kwargs["vllm_server_base_url"] == "http://gpu-box.lab.example:8000"


def test_colocate_on_a_discrete_card_keeps_trls_default_when_it_fits():
    choice = choose_rollout(lab("n", rollout="vllm-colocate"), get_track("n"), device_type="cuda", platform="linux", vllm_version="0.30.0", device_total_gb=24)
    assert choice.grpo_kwargs == {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3}
    assert "fits" in choice.reason and "0.30.0 inside" in choice.reason


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
    choice = choose_rollout(settings, get_track("s"), device_type="cuda", platform="linux", vllm_version="0.31.0", device_total_gb=16.0)
    assert choice.grpo_kwargs["vllm_gpu_memory_utilization"] == fraction and choice.log["memory_reason"] == why


def test_colocate_on_the_lessons_128_gb_machine_keeps_the_default():
    settings = lab("s", rollout="vllm-colocate", model="Qwen/Qwen3-4B", beta=0.04)
    fraction, why = colocate_memory_fraction(settings, "Qwen/Qwen3-4B", 128.0, unified_memory=True)
    assert fraction == 0.3 and "fits" in why


def test_colocate_that_cannot_fit_is_refused():
    settings = lab("s", rollout="vllm-colocate", model="Qwen/Qwen3-8B", beta=0.04)
    with pytest.raises(LayerFailure, match="does not fit"):
        colocate_memory_fraction(settings, "Qwen/Qwen3-8B", 16.0, unified_memory=True)


# --- GGUF files and the converter's source (no llama.cpp needed) -----------------------------------------


def test_check_gguf_refuses_missing_and_foreign_files(tmp_path):
    from grpolab.gguf import check_gguf

    with pytest.raises(LayerFailure, match="does not exist"):
        check_gguf(tmp_path / "absent.gguf")
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(LayerFailure, match="not a GGUF file"):
        check_gguf(tmp_path / "model.safetensors")
    (tmp_path / "ok.gguf").write_bytes(b"GGUF\x03\x00\x00\x00rest")
    assert check_gguf(tmp_path / "ok.gguf") == tmp_path / "ok.gguf"


def fake_sdist(path, with_converter=True):
    import io
    import tarfile

    members = {"llama_cpp_python-9.9.9/README.md": b"x", "llama_cpp_python-9.9.9/vendor/llama.cpp/src/llama.cpp": b"x"}
    if with_converter:
        members.update({
            "llama_cpp_python-9.9.9/vendor/llama.cpp/convert_hf_to_gguf.py": b"# converter",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/convert_lora_to_gguf.py": b"# lora",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/conversion/__init__.py": b"",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/conversion/qwen.py": b"",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/gguf-py/gguf/__init__.py": b"",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/gguf-py/tests/test.py": b"",
        })
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_converter_is_taken_from_the_sdist_only(tmp_path, monkeypatch):
    from grpolab import gguf

    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(gguf.CONVERTER_ENV, raising=False)
    sdist = gguf.sdist_path("9.9.9")
    sdist.parent.mkdir(parents=True)
    fake_sdist(sdist)
    lock = tmp_path / "lock.txt"  # a cached sdist is used only when the track's lock lists its sha256
    lock.write_text(f"llama-cpp-python==9.9.9 \\\n    --hash=sha256:{hashlib.sha256(sdist.read_bytes()).hexdigest()}\n")
    monkeypatch.setenv(gguf.LOCK_FILE_ENV, str(lock))
    found = gguf.converter_dir("9.9.9", download=False, progress=lambda *_: None)
    assert found == tmp_path / "cache" / "llama.cpp-converter" / "9.9.9"
    files = sorted(str(p.relative_to(found)) for p in found.rglob("*") if p.is_file())
    assert files == ["conversion/__init__.py", "conversion/qwen.py", "convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "gguf-py/gguf/__init__.py"]
    assert gguf.converter_dir("9.9.9", download=False) == found  # extracted once, then reused


def test_converter_missing_without_download_says_what_to_do(tmp_path, monkeypatch):
    from grpolab import gguf

    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(gguf.CONVERTER_ENV, raising=False)
    with pytest.raises(LayerFailure, match="converter is not here") as error:
        gguf.converter_dir("9.9.9", download=False)
    assert "python -m grpolab.gguf converter" in error.value.action
    monkeypatch.setenv(gguf.CONVERTER_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(LayerFailure, match="does not hold convert_hf_to_gguf.py"):
        gguf.converter_dir()


def test_sdist_without_converter_or_with_wrong_digest_is_refused(tmp_path, monkeypatch):
    from grpolab import gguf

    with pytest.raises(LayerFailure, match="does not carry"):
        gguf.extract_converter(fake_sdist(tmp_path / "no.tar.gz", with_converter=False), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    lock = tmp_path / "lock.txt"
    lock.write_text("llama-cpp-python==9.9.9 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    monkeypatch.setenv(gguf.LOCK_FILE_ENV, str(lock))
    monkeypatch.delenv(gguf.SDIST_DIR_ENV, raising=False)
    with pytest.raises(LayerFailure, match="sha256"):
        gguf.verify_sdist(fake_sdist(tmp_path / "bad.tar.gz"), "9.9.9")


def test_qwen2_pretokenizer_detection(tmp_path):
    from grpolab.gguf import QWEN2_SPLIT_REGEX, uses_qwen2_pretokenizer

    def write(pre):
        (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}, "pre_tokenizer": pre}))
        return uses_qwen2_pretokenizer(tmp_path)

    qwen2 = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    assert write(qwen2)
    other_regex = json.loads(json.dumps(qwen2))
    other_regex["pretokenizers"][0]["pattern"]["Regex"] = r"\p{N}{1,3}"
    assert not write(other_regex)
    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    assert not write(gpt2)
