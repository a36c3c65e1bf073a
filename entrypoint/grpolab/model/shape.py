"""A model's shape, size, context and weight dtype, read from its config.json before anything loads: the one place
the memory estimate, the settings' checks, the vLLM rollouts, the server and the smoke test's projection learn them.

config.json is found the same way for every model: the committed tiny model's, a local folder's, a Hub model's in
the local Hugging Face cache, or (for the shape only) the Hub's own copy; the course's Qwen3 models have a built-in
table for machines that reach neither.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..common.dtypes import dtype_on
from ..common.paths import hub_token
from .tiny import TINY_MODEL, resolve_model_name, tiny_model_dir
from ..common.tracks import get_track

HUB_TIMEOUT_S = 5  # one try for config.json on the Hub; offline machines fall back at once or after this
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # owner/name, or a bare canonical name

# The course's Qwen3 models. Shapes are the values of each model's published config.json on the Hugging Face
# Hub (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
# vocab_size, tie_word_embeddings, torch_dtype bfloat16). num_parameters is the count on each model card
# ("Number of Parameters: 1.7B"), which is what the course model reference's BF16 figure doubles
# (1.7B -> 3.4 GB, 4.0B -> 8 GB); the count summed from the shapes is a little higher (1.72B, 4.02B).
QWEN3_MODELS: dict[str, dict] = {
    "Qwen/Qwen3-0.6B": {  # huggingface.co/Qwen/Qwen3-0.6B: config.json; card: 0.6B parameters
        "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936, "tie_word_embeddings": True,
        "num_parameters": 0.6e9,
    },
    "Qwen/Qwen3-1.7B": {  # huggingface.co/Qwen/Qwen3-1.7B: config.json; card: 1.7B parameters
        "hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936, "tie_word_embeddings": True,
        "num_parameters": 1.7e9,
    },
    "Qwen/Qwen3-4B": {  # huggingface.co/Qwen/Qwen3-4B: config.json; card: 4.0B parameters
        "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936, "tie_word_embeddings": True,
        "num_parameters": 4.0e9,
    },
    "Qwen/Qwen3-8B": {  # huggingface.co/Qwen/Qwen3-8B: config.json; card: 8.2B parameters
        "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False,
        "num_parameters": 8.2e9,
    },
}

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPE_LABEL = {"float32": "FP32", "bfloat16": "BF16", "float16": "FP16"}


class UnknownModel(ValueError):
    pass


@dataclass
class ModelShape:
    """What the arithmetic needs to know about a decoder-only transformer."""

    name: str
    source: str  # "built-in table", or the config.json it was read from
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    num_parameters: float

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer PEFT's all-linear targets in one decoder layer."""
        h, q, kv, i = (
            self.hidden_size,
            self.num_attention_heads * self.head_dim,
            self.num_key_value_heads * self.head_dim,
            self.intermediate_size,
        )
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes


def parameters_from_shape(config: dict) -> int:
    """Parameters of a dense Qwen3/Llama-style decoder, summed from its config (tied embeddings counted once)."""
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or h // heads
    inter = config["intermediate_size"]
    attention = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
    mlp = 3 * h * inter
    norms = 2 * h + 2 * head_dim  # input and post-attention norms, Qwen3's q_norm and k_norm
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return embeddings + layers * (attention + mlp + norms) + h


def _shape_from_config(name: str, source: str, config: dict) -> ModelShape:
    config = config.get("text_config", config)  # multimodal configs nest the language model
    missing = [
        k
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
        if k not in config
    ]
    if missing:
        raise UnknownModel(
            f"{source}: config has no {', '.join(missing)}; the estimate needs a dense decoder-only model's config.json"
        )
    heads = config["num_attention_heads"]
    return ModelShape(
        name=name,
        source=source,
        hidden_size=config["hidden_size"],
        num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        intermediate_size=config["intermediate_size"],
        vocab_size=config["vocab_size"],
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        num_parameters=float(config.get("num_parameters") or parameters_from_shape(config)),
    )


def _hf_cached_config(model_id: str) -> Path | None:
    """config.json of a model already in the Hugging Face cache (no download)."""
    hub = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )
    snapshots = hub / ("models--" + model_id.replace("/", "--")) / "snapshots"
    found = sorted(snapshots.glob("*/config.json")) if snapshots.is_dir() else []
    return found[-1] if found else None


def _hub_config(model_id: str) -> dict | None:
    """config.json from the Hugging Face Hub (one try, a short timeout; None offline or on any failure)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or "/" not in model_id:
        return None
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(f"{endpoint}/{model_id}/resolve/main/config.json")
    token, _ = hub_token()
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=HUB_TIMEOUT_S) as response:
            return json.loads(response.read())
    except Exception:  # noqa: BLE001 - unreachable, unknown or private: the caller falls back
        return None


def model_shape(model: str | dict) -> ModelShape:
    """The shape of `model`: a config dict, a local directory or config.json, the built-in tiny model, a model
    in the Hugging Face cache, its config.json from the Hub when reachable, else a course Qwen3 from the
    built-in table (saying that the config could not be read)."""
    if isinstance(model, dict):
        return _shape_from_config(str(model.get("_name_or_path", "config")), "config given", model)
    name = str(model)
    path = Path(name).expanduser()
    if name == TINY_MODEL:
        path = tiny_model_dir()  # committed: its config is always there (its hashes are checked when it loads)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return _shape_from_config(name, str(path), json.loads(path.read_text()))
    cached = _hf_cached_config(name)
    if cached:
        return _shape_from_config(name, str(cached), json.loads(cached.read_text()))
    hub = _hub_config(name)
    if hub:
        return _shape_from_config(name, f"config.json from the Hugging Face Hub ({name})", hub)
    if name in QWEN3_MODELS:
        return _shape_from_config(
            name,
            "built-in table (config.json neither in the Hugging Face cache nor reachable on the Hub)",
            QWEN3_MODELS[name],
        )
    known = ", ".join(QWEN3_MODELS)
    raise UnknownModel(
        f"no memory estimate for {name!r}: it is not a local path with a config.json, its config.json is neither in "
        "the "
        f"Hugging Face cache nor reachable on the Hub, and it is not one of the built-in models ({known}). Pass a "
        "local "
        "model directory, or download the model first."
    )


def weights_dtype(dtype: str, track_name: str) -> str:
    """dtype_on the device the track `track_name` expects, for estimates made before any device is opened."""
    if dtype != "auto":
        return dtype
    try:
        device = get_track(track_name).expected_device
    except Exception:  # noqa: BLE001 - an unknown track or no table: the lesson's BF16
        return "bfloat16"
    return dtype_on(dtype, device)


# --- the model's context ---------------------------------------------------------------------------------------

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_from_config(config: dict) -> int | None:
    for scope in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            if isinstance(scope.get(key), int) and not isinstance(scope.get(key), bool):
                return scope[key]
    return None


def local_model_config(model: str) -> tuple[dict | None, str]:
    """(the model's config.json, where it was read) without loading anything else and without the network:
    the built-in model's, a local folder's, or a Hub model's from the local Hugging Face cache; (None, "")
    when it is not here yet (the pipeline reads it again once downloaded, still before the weights)."""
    path = Path(resolve_model_name(model) if model == TINY_MODEL else model).expanduser()
    config_file = path / "config.json" if path.is_dir() else None
    if config_file is None and HUB_ID.match(model) and "/" in model:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model, "config.json")
            config_file = Path(cached) if isinstance(cached, str) else None
        except ImportError:
            config_file = None
    if config_file is None or not config_file.is_file():
        return None, ""
    try:
        return json.loads(config_file.read_text()), str(config_file)
    except (OSError, ValueError):
        return None, ""


def model_context_tokens(model: str | dict) -> int | None:
    """The model's context in tokens (max_position_embeddings or its equivalent) from its config.json alone, when
    it can be read here; `model` may also be a config dict."""
    if isinstance(model, dict):  # a config given as it is (the estimate's model shapes)
        return context_from_config(model)
    config, _ = local_model_config(str(model))
    return context_from_config(config) if config else None
