"""Where the lab writes: the run log and plots (runs/), and its cache of built models."""

from __future__ import annotations

import os
from pathlib import Path


# The committed tiny model, beside the package: entrypoint/tiny-model/ in the repository, /opt/grpolab/entrypoint/
# tiny-model/ in the images. Here, below both sides, so the host's benchmarks name the same folder the lab loads.
TINY_MODEL_DIR = Path(__file__).resolve().parents[2] / "tiny-model"
TINY_MODEL_RELATIVE = "entrypoint/tiny-model"


def runs_dir() -> Path:
    """runs/ in the working directory unless GRPOLAB_RUNS_DIR says otherwise (the images mount it)."""
    return Path(os.environ.get("GRPOLAB_RUNS_DIR", "runs"))


def runlog_path() -> Path:
    return runs_dir() / "runlog.jsonl"


def cache_dir() -> Path:
    """Built models (the tiny model, GGUF exports). GRPOLAB_CACHE_DIR, else ~/.cache/grpolab."""
    return Path(os.environ.get("GRPOLAB_CACHE_DIR", Path.home() / ".cache" / "grpolab"))


HUB_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # huggingface_hub's order: HF_TOKEN first


def hub_token_file() -> Path:
    """Where huggingface_hub looks for a token when HF_TOKEN is not set: HF_TOKEN_PATH (a token handed over as a
    file at run time, so it is in no process configuration), else $HF_HOME/token (what `hf auth login` writes)."""
    if os.environ.get("HF_TOKEN_PATH"):
        return Path(os.environ["HF_TOKEN_PATH"]).expanduser()
    hf_home = (
        os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"
    )
    return Path(hf_home).expanduser() / "token"


def hub_token() -> tuple[str | None, str]:
    """The Hugging Face token and where it came from, read the way huggingface_hub reads it (the variables
    first, then the token file; blank counts as none). (None, "") when there is none."""
    for var in HUB_TOKEN_VARS:
        if os.environ.get(var, "").strip():
            return os.environ[var].strip(), var
    path = hub_token_file()
    try:
        token = path.read_text().strip()
    except OSError:  # absent, unreadable, or a directory (what an empty one may arrive as)
        return None, ""
    return (token, f"token file {path}") if token else (None, "")
