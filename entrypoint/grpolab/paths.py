"""Where the lab writes: the run log and plots (runs/), and its cache of built models."""

from __future__ import annotations

import os
from pathlib import Path


def runs_dir() -> Path:
    """runs/ in the working directory unless GRPOLAB_RUNS_DIR says otherwise (the images mount it)."""
    return Path(os.environ.get("GRPOLAB_RUNS_DIR", "runs"))


def runlog_path() -> Path:
    return runs_dir() / "runlog.jsonl"


def cache_dir() -> Path:
    """Built models (the tiny model, GGUF exports). GRPOLAB_CACHE_DIR, else ~/.cache/grpolab."""
    return Path(os.environ.get("GRPOLAB_CACHE_DIR", Path.home() / ".cache" / "grpolab"))
