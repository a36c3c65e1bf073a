"""The memory estimate reproduces the lesson's two tables ("The memory arithmetic") term by term."""

import json
from pathlib import Path

import pytest
import torch

from grpolab.export.verl_result import eval_dtype
from grpolab.memory.estimate import (
    ALLOCATOR_RETAINED_FRACTION,
    estimate_memory,
    lora_trainable_parameters,
    os_reserved_default_gb,
    run_estimate,
)
from grpolab.model.shape import QWEN3_MODELS, UnknownModel, dtype_on, model_shape, parameters_from_shape, weights_dtype
from grpolab.run.training import torch_dtype
from grpolab.settings.lab_settings import LabSettings


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No Hub here: the estimate must not wait on it (the one test of the Hub path sets its own endpoint)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


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
    e = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16, activations="lesson")
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
    e = estimate_memory(
        "Qwen/Qwen3-4B", lesson_settings(rollout="vllm-colocate", track="s"), device_total_gb=128, activations="lesson"
    )
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
    e = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16, activations="lesson")
    assert "1.24 GB of logits" in e.terms[-1][2]


def test_beta_zero_drops_the_reference_model():
    with_ref = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16)
    without = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(beta=0.0), device_total_gb=16)
    assert not any(name.startswith("Reference") for name, _, _ in without.terms)
    assert len(without.terms) == len(with_ref.terms) - 1
    assert without.free_gb == pytest.approx(with_ref.free_gb + 3.4)


def test_colocate_term_scales_with_the_fraction():
    def vllm_gb(fraction, total):
        e = estimate_memory(
            "Qwen/Qwen3-4B",
            lesson_settings(rollout="vllm-colocate", vllm_gpu_memory_utilization=fraction),
            device_total_gb=total,
        )
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
    for model_id, card in (
        ("Qwen/Qwen3-0.6B", 0.6e9),
        ("Qwen/Qwen3-1.7B", 1.7e9),
        ("Qwen/Qwen3-4B", 4.0e9),
        ("Qwen/Qwen3-8B", 8.2e9),
    ):
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


def test_auto_dtype_is_one_rule_for_the_estimate_the_trainer_and_verls_evaluation():
    """"auto" loads bf16 on CUDA and ROCm (torch's "cuda") and float32 on MPS and the CPU, wherever it is decided:
    the estimate by the track's device, the trainer by the device it opened, verl-result by what torch finds."""
    assert [dtype_on("auto", device) for device in ("cuda", "mps", "cpu")] == ["bfloat16", "float32", "float32"]
    assert dtype_on("float16", "cpu") == "float16"  # a dtype named is kept on every device
    assert [weights_dtype("auto", track) for track in ("s", "n", "x", "m", "c")] == ["bfloat16"] * 3 + ["float32"] * 2
    assert torch_dtype(lesson_settings(dtype="auto", track="c"), "cpu") is torch.float32
    assert torch_dtype(lesson_settings(dtype="auto", track="s"), "cuda") is torch.bfloat16
    assert (
        eval_dtype({"dtype": "auto"})
        is eval_dtype({})
        is (torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    )
    assert eval_dtype({"dtype": "bfloat16"}) is torch.bfloat16


def test_render_and_json():
    e = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16, activations="lesson")
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


def test_measured_device_total():
    e = estimate_memory("Qwen/Qwen3-0.6B", lesson_settings())
    assert e.total_gb > 0.5 and e.device_total_source


def test_tiny_model_and_settings_model():
    """"tiny" is the committed model: its config is read from entrypoint/tiny-model/, with no build first."""
    e = estimate_memory(None, lesson_settings(model="tiny", dtype="float32"), device_total_gb=16)
    assert e.model == "tiny" and e.term("Policy weights") < 0.01


def test_shape_based_update_row_says_where_it_differs_from_the_lesson():
    """Same four other rows as the lesson's table; the update's row follows the shape, in one line of difference."""
    lesson = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16, activations="lesson")
    shape = estimate_memory("Qwen/Qwen3-1.7B", lesson_settings(), device_total_gb=16)
    assert rounded(shape)[:4] == rounded(lesson)[:4]
    assert shape.inputs["gradient_checkpointing"] is True  # track n trains on a GPU
    assert shape.lesson_difference and "2.0 GB" in shape.lesson_difference
    assert [line for line in shape.render().splitlines() if "lesson's table" in line] == [
        "  " + shape.lesson_difference
    ]
    assert lesson.lesson_difference is None


def test_update_row_follows_tokens_layers_vocab_and_checkpointing():
    def update_gb(model="Qwen/Qwen3-0.6B", device="cpu", **changes):
        settings = lesson_settings(dtype="float32", **changes)
        return estimate_memory(model, settings, device_total_gb=64, device_type=device, prompt_tokens=32).term(
            "Logits and activations"
        )

    base = update_gb()
    # Twice the completions: twice the tokens of one update, about twice the row.
    assert update_gb(per_device_train_batch_size=16) == pytest.approx(2 * base, rel=0.1)
    # Gradient checkpointing (on a GPU) keeps one input per layer: far less.
    assert update_gb(device="cuda") < base / 3
    # Twice the layers: about twice the activations.
    deeper = dict(QWEN3_MODELS["Qwen/Qwen3-0.6B"], num_hidden_layers=56)
    assert update_gb(model=deeper) == pytest.approx(2 * base, rel=0.15)
    # A small vocabulary shrinks the log-probability tiles.
    small_vocab = dict(QWEN3_MODELS["Qwen/Qwen3-0.6B"], vocab_size=300)
    assert update_gb(model=small_vocab) < base


def test_prompt_tokens_replace_the_upper_bound():
    settings = lesson_settings(dtype="float32")
    bound = estimate_memory("Qwen/Qwen3-0.6B", settings, device_total_gb=64)
    measured = estimate_memory("Qwen/Qwen3-0.6B", settings, device_total_gb=64, prompt_tokens=20)
    assert measured.inputs["prompt_tokens"] == 20 and bound.inputs["prompt_tokens"] == 256
    assert measured.term("Rollout") < bound.term("Rollout")


def test_runtime_baseline_is_its_own_line():
    e = estimate_memory("Qwen/Qwen3-0.6B", lesson_settings(), device_total_gb=16, runtime_baseline_gb=0.9)
    assert e.peak_gb == pytest.approx(e.modelled_gb + 0.9)
    assert "Runtime baseline (measured at the start)" in e.render()
    without = estimate_memory("Qwen/Qwen3-0.6B", lesson_settings(), device_total_gb=16)
    assert without.free_gb == pytest.approx(e.free_gb + 0.9)
    assert "Not counted: the runtime baseline" in without.render()
    assert e.as_dict()["runtime_baseline_gb"] == 0.9


def test_no_config_anywhere_falls_back_to_the_table_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the Hub is unreachable
    shape = model_shape("Qwen/Qwen3-1.7B")
    assert shape.source.startswith("built-in table") and "Hub" in shape.source


def test_hub_config_is_read_when_reachable(tmp_path, monkeypatch):
    import http.server
    import threading

    config = dict(QWEN3_MODELS["Qwen/Qwen3-0.6B"], hidden_size=512)

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            found = self.path == "/someone/Other/resolve/main/config.json"
            self.send_response(200 if found else 404)
            self.end_headers()
            if found:
                self.wfile.write(json.dumps(config).encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_HOME", str(tmp_path))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        shape = model_shape("someone/Other")
        assert shape.hidden_size == 512 and "Hub" in shape.source
        with pytest.raises(UnknownModel, match="nor reachable on the Hub"):
            model_shape("someone/Missing")
    finally:
        server.shutdown()


def test_a_run_goes_on_without_an_estimate(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))

    class Meter:
        baseline_gb, device_type = 0.5, "cpu"

    said = []
    assert run_estimate("nobody/NoSuchModel-7B", lesson_settings(), Meter(), say=said.append) is None
    assert said and said[0].startswith("no memory estimate for this run") and "going on without one" in said[0]
    estimate = run_estimate("Qwen/Qwen3-0.6B", lesson_settings(), Meter(), say=said.append)
    assert estimate.runtime_baseline_gb == 0.5 and "memory estimate (before the run)" in said[-1]


def test_a_cpu_run_counts_the_heap_glibc_keeps_and_a_gpu_run_does_not():
    """On a CPU the measured peak is the resident set under glibc's own settings (the meter changes none), so the
    estimate adds the freed heap glibc keeps resident: its own term, a fitted share of the update's activations."""
    settings = LabSettings(
        model="Qwen/Qwen3-0.6B",
        dtype="float32",
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=16,
    )
    cpu = estimate_memory(None, settings, device_total_gb=24, device_type="cpu", prompt_tokens=18)
    gpu = estimate_memory(None, settings, device_total_gb=24, device_type="cuda", prompt_tokens=18)
    update = cpu.term("Logits and activations")
    assert (
        cpu.term("Allocator's retained heap") == pytest.approx(ALLOCATOR_RETAINED_FRACTION * update)
        and 0 < ALLOCATOR_RETAINED_FRACTION < 1
    )
    assert gpu.term("Allocator's retained heap") is None
    assert "fitted" in dict((name, note) for name, _, note in cpu.terms)["Allocator's retained heap (glibc, CPU)"]
    assert cpu.modelled_gb == pytest.approx(sum(gb for _, gb, _ in cpu.terms))


# --- The CUDA terms (grpolab.memory.cuda_terms), by hand at the GPU script's cases -----------------------------------

GPU_CASE = dict(completions=8, prompt_tokens=18, completion_tokens=128, rank=16)  # the GPU cases: 146-token sequences


def gpu_case_settings(**changes) -> LabSettings:
    """The settings of images/gpu/memory_check.sh's cases: bf16, beta 0, in-process, 8 completions of 128 tokens."""
    return lesson_settings(beta=0.0, max_completion_length=GPU_CASE["completion_tokens"], **changes)


def gpu_case_by_hand(model_id: str) -> dict:
    """Each term in bytes, worked out here from the Qwen3 shape's numbers (bf16: 2 bytes), not by the estimate."""
    s = QWEN3_MODELS[model_id]
    h, layers, vocab, inter, rank = (s["hidden_size"], s["num_hidden_layers"], s["vocab_size"], s["intermediate_size"],
                                     GPU_CASE["rank"])
    q, kv = s["num_attention_heads"] * s["head_dim"], s["num_key_value_heads"] * s["head_dim"]
    # Tied embeddings once; per layer q, k, v, o, gate, up, down, two norms and Qwen3's q_norm and k_norm; final norm.
    parameters = vocab * h + layers * (h * q + 2 * h * kv + q * h + 3 * h * inter + 2 * h + 2 * s["head_dim"]) + h
    lora = layers * rank * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + inter) + (inter + h))
    tokens = GPU_CASE["completions"] * (GPU_CASE["prompt_tokens"] + GPU_CASE["completion_tokens"])
    # Checkpointing: every layer's input, plus one layer recomputed (what it keeps per token) and its gradients.
    layer_keeps = (4 * h + 5 * q + kv + 4 * inter + 7 * rank) * 2
    kept = tokens * (layers * h * 2 + 2 * layer_keeps)
    # TRL on CUDA: the completion tokens only, one bf16 tile buffer of them x 32768 vocabulary entries folded in
    # Triton; the hidden states scored (bf16) and their float32 gradient.
    scored = GPU_CASE["completions"] * GPU_CASE["completion_tokens"]  # 1024, under TRL's 4096-token tile
    cuda_head = scored * 32768 * 2 + scored * h * (2 + 4)
    # torch's fold (CPU, MPS): every position of every sequence, three tiles.
    every = GPU_CASE["completions"] * (GPU_CASE["prompt_tokens"] + GPU_CASE["completion_tokens"] - 1)
    torch_head = 3 * every * 32768 * 2 + every * h * (2 + 4)
    return {"weights": parameters * 2, "adapter": lora * 16, "kv_cache": tokens * 2 * layers * kv * 2,
            "update_cuda": kept + cuda_head, "update_torch_fold": kept + torch_head, "tile": scored * 32768 * 2}


def gpu_case_estimate(model_id: str, device: str, **changes):
    shape = {k: v for k, v in QWEN3_MODELS[model_id].items() if k != "num_parameters"}  # summed, as the GPU script's
    return estimate_memory(shape, gpu_case_settings(**changes), device_total_gb=80, device_type=device,
                           prompt_tokens=GPU_CASE["prompt_tokens"])


@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"])
def test_cuda_folds_one_log_probability_tile_over_the_completion_tokens(model_id):
    """TRL 1.16 on CUDA: one tile buffer folded in place by Triton, completion tokens only; torch's fold elsewhere."""
    hand = gpu_case_by_hand(model_id)
    assert hand["tile"] == 1024 * 32768 * 2  # 67 MB at both shapes: the tile does not grow with the hidden size
    cuda = gpu_case_estimate(model_id, "cuda")
    assert cuda.term("Logits and activations") == pytest.approx(hand["update_cuda"] / 1e9, rel=1e-9)
    assert cuda.term("Policy weights") == pytest.approx(hand["weights"] / 1e9, rel=1e-9)
    assert cuda.term("Adapter") == pytest.approx(hand["adapter"] / 1e9, rel=1e-9)
    assert cuda.term("Rollout key-value cache") == pytest.approx(hand["kv_cache"] / 1e9, rel=1e-9)
    # MPS has no Triton: torch's fold, as the CPU's terms count it, with checkpointing as on every accelerator.
    mps = gpu_case_estimate(model_id, "mps")
    assert mps.term("Logits and activations") == pytest.approx(hand["update_torch_fold"] / 1e9, rel=1e-9)
    assert mps.cuda_terms is None


@pytest.mark.parametrize("model_id, update_gb", [("Qwen/Qwen3-0.6B", 0.270), ("Qwen/Qwen3-1.7B", 0.420)])
def test_on_cuda_the_in_process_cache_is_freed_before_the_update_so_the_larger_phase_is_the_peak(model_id, update_gb):
    hand = gpu_case_by_hand(model_id)
    assert hand["update_cuda"] / 1e9 == pytest.approx(update_gb, abs=0.001)  # the hand arithmetic, in round figures
    held = (hand["weights"] + hand["adapter"]) / 1e9
    generation, update = held + hand["kv_cache"] / 1e9, held + hand["update_cuda"] / 1e9
    cuda = gpu_case_estimate(model_id, "cuda")
    assert cuda.phases_gb == pytest.approx({"generation": generation, "update": update}, rel=1e-9)
    assert cuda.modelled_gb == pytest.approx(max(generation, update), rel=1e-9)
    assert cuda.freed_before_update_gb == pytest.approx(min(hand["kv_cache"], hand["update_cuda"]) / 1e9, rel=1e-9)
    assert cuda.free_gb == pytest.approx(80 - max(generation, update) - cuda.os_reserved_gb, rel=1e-9)
    # vLLM colocate keeps its share through the update (TRL sleeps it only with vllm_enable_sleep_mode, unset): adds.
    colocate = gpu_case_estimate(model_id, "cuda", rollout="vllm-colocate")
    assert colocate.freed_before_update_gb == 0
    assert colocate.modelled_gb == pytest.approx(held + 0.3 * 80 + hand["update_cuda"] / 1e9, rel=1e-9)
    # On a CPU every term still adds (the resident set keeps freed heap); the lesson's arithmetic adds as its tables.
    cpu = gpu_case_estimate(model_id, "cpu", track="c")
    assert cpu.freed_before_update_gb == 0 and cpu.modelled_gb == pytest.approx(sum(gb for _, gb, _ in cpu.terms))
    lesson = estimate_memory(model_id, gpu_case_settings(), device_total_gb=80, device_type="cuda",
                             activations="lesson")
    assert lesson.freed_before_update_gb == 0 and lesson.cuda_terms is None


def test_the_cuda_figure_says_it_is_not_yet_checked_on_a_gpu():
    cuda = gpu_case_estimate("Qwen/Qwen3-0.6B", "cuda")
    text = cuda.render()
    assert "CUDA terms (predicted, not yet checked on a GPU)" in text
    row = next(line for line in text.splitlines() if line.startswith("  Freed before the update "))
    assert row.endswith("-0.1 GB")  # the kv cache's 0.134 GB, in the table's tenths
    d = json.loads(json.dumps(cuda.as_dict()))
    assert d["cuda_terms"]["status"] == "predicted, not yet checked on a GPU"
    assert d["cuda_terms"]["checked_on_gpu"] is None
    assert len(d["cuda_terms"]["terms"]) == 2 and d["freed_before_update_gb"] == 0.134
    assert d["modelled_gb"] == round(d["phases_gb"]["update"], 3)
    cpu = gpu_case_estimate("Qwen/Qwen3-0.6B", "cpu", track="c")
    assert cpu.cuda_terms is None and "not yet checked on a GPU" not in cpu.render()


def test_the_estimate_command_on_track_n_carries_the_cuda_status(tmp_path):
    import subprocess
    import sys

    command = [sys.executable, "-m", "grpolab", "estimate", "--track", "n", "--model", "Qwen/Qwen3-0.6B",
               "--device-memory-gb", "80", "--rollout", "inprocess"]
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PYTHONPATH": "entrypoint"}
    repo = Path(__file__).resolve().parents[1]
    text = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "CUDA terms (predicted, not yet checked on a GPU)" in text
    out = subprocess.run(command + ["--json"], cwd=repo, env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert json.loads(out)["cuda_terms"]["status"] == "predicted, not yet checked on a GPU"
