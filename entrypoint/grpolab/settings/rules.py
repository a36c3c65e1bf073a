"""Rules for a setting's value that are more than a type and a range (the `rule` of its `Allowed` in lab_settings):
each returns why the value cannot be used, in words, or None."""

from __future__ import annotations

import math
import re
from pathlib import Path
from urllib.parse import urlsplit

from ..model.shape import HUB_ID
from ..task.problems import BUILTIN_DATASETS
from ..task.rewards import CONTROL_REWARDS, REWARD_FUNCS

# Live logging backends TRL's report_to accepts that we offer, each with the package it needs.
REPORT_TO_PACKAGES = {"none": None, "tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}
MODULE_NAME = re.compile(r"^[\w.*\[\]|()?+^$-]+$")  # a module name, or a regex PEFT matches module names against


def model_rule(name: str) -> str | None:
    if not name.strip() or name != name.strip():
        return "empty, or with spaces around it"
    looks_like_path = name.startswith(("/", "./", "../", "~")) or name.count("/") > 1
    if looks_like_path and not Path(name).expanduser().exists():
        return f"no such folder ({Path(name).expanduser()})"
    if not looks_like_path and not HUB_ID.match(name) and not Path(name).exists():
        return "neither a Hugging Face id (owner/name) nor a folder here"
    return None


def dataset_rule(name: str) -> str | None:
    return (
        None
        if name in BUILTIN_DATASETS or HUB_ID.match(name)
        else "neither a built-in dataset nor a Hugging Face id (owner/name)"
    )


def target_modules_rule(text: str) -> str | None:
    if text == "all-linear":
        return None
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        return "no module name in it"
    bad = [name for name in names if not name or not MODULE_NAME.match(name)]
    if bad:
        return f"{', '.join(repr(n) for n in bad)} is not a module name"
    if (
        "lm_head" in names
    ):  # TRL's own refusal: the log-probabilities use lm_head.weight directly, so its adapter never trains
        return ("lm_head cannot carry the adapter in GRPO (TRL computes log-probabilities from lm_head.weight "
                "directly, so it would never train)")
    return None


def weights_rule(weights: dict) -> str | None:
    if not weights:
        return "empty: a run needs at least one reward function"
    unknown = [
        name
        for name in weights
        if name not in REWARD_FUNCS and name not in CONTROL_REWARDS and not re.match(r"^[\w.]+:\w+$", name)
    ]
    if unknown:
        return (f"{', '.join(unknown)}: neither a built-in reward ({', '.join(REWARD_FUNCS)}), a control "
                f"({', '.join(CONTROL_REWARDS)}), nor module:function")
    infinite = [name for name, weight in weights.items() if not math.isfinite(weight)]
    if infinite:
        return f"the weight of {', '.join(infinite)} is not a finite number"
    if not any(weights.values()):
        return "every weight is 0: every completion would score the same and nothing would be learned"
    return None


def url_rule(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"not a URL ({error})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not http://HOST[:PORT] or https://HOST[:PORT]"
    return None if port is None or 0 < port < 65536 else "its port is outside 1 to 65535"


def report_to_rule(name: str) -> str | None:
    """A live-logging backend must be installed, found before any model loads."""
    import importlib.util

    package = REPORT_TO_PACKAGES.get(name)
    if package and importlib.util.find_spec(package) is None:
        return (
            f"needs the {package} package, which this environment does not have: install it (pip install {package}), "
            "use a track whose lock has it, or leave --report-to at none"
        )
    return None


def nonempty(text: str) -> str | None:
    return None if text.strip() else "empty"

