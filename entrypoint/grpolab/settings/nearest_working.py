"""The nearest value that works, per setting, for a default that a value the user chose makes impossible: each
setting's `Allowed(nearest=...)` in lab_settings.py names one of these (logging_steps within max_steps, whole groups per
batch, a training set of at least one batch, lengths within the model's context)."""

from __future__ import annotations

from ..task.problems import BUILTIN_DATASETS, HELDOUT_SIZE, OPERAND_RANGE, VALIDATION_SIZE


def training_problems(dataset: str) -> int | None:
    """How many training problems the built-in generator `dataset` makes (None for a Hub dataset)."""
    return len(OPERAND_RANGE) ** 2 - HELDOUT_SIZE - VALIDATION_SIZE if dataset in BUILTIN_DATASETS else None


def nearest_batch(s: dict, _context: int | None) -> int:
    """The multiple of num_generations nearest the batch, with no more prompts per batch than the training set."""
    group = s["num_generations"]
    most = s["train_size"] * group
    return min(max(group, round(s["per_device_train_batch_size"] / group) * group), max(group, most))


def nearest_group(s: dict, _context: int | None) -> int:
    """The group size nearest num_generations (the larger on a tie) that divides the batch, with no more prompts
    per batch than the training set; unchanged when there is none."""
    batch, group = s["per_device_train_batch_size"], s["num_generations"]
    fits = [g for g in range(2, batch + 1) if not batch % g and batch // g <= s["train_size"]]
    return min(fits, key=lambda g: (abs(g - group), -g)) if fits else group


def nearest_train_size(s: dict, _context: int | None) -> int:
    """At least one batch's prompts, at most what the built-in generator makes."""
    least = s["per_device_train_batch_size"] // s["num_generations"]
    most = training_problems(s["dataset"])
    return max(least, min(s["train_size"], most if most is not None else s["train_size"]))


def nearest_heldout_size(s: dict, _context: int | None) -> int:
    return min(s["heldout_size"], HELDOUT_SIZE) if s["dataset"] in BUILTIN_DATASETS else s["heldout_size"]


def nearest_logging_steps(s: dict, _context: int | None) -> int:
    return min(s["logging_steps"], s["max_steps"])


def nearest_length(name: str, beside: str):
    """A length that fits the model's context beside `beside` (prompt beside completion, and so on)."""
    def nearest(s: dict, context: int | None) -> int:
        return s[name] if context is None else min(s[name], context - s[beside])
    return nearest
