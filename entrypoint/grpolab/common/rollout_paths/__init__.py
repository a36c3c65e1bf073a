"""The rollout paths a lab can sample through, one module each, and their registry: what each path owns (its
settings, its memory terms, its disk needs, its doctor items, its lag basis, what the verl export makes of it) is
declared in its module behind one interface (base.RolloutPath). Light (no torch), so every layer and the host tasks
read it; the engines that sample live in grpolab.rollouts, each in the module its path names.

Adding a path: a module here, a line in ROLLOUT_PATH_REGISTRY, and its engine's module in grpolab.rollouts.
"""

from __future__ import annotations

from . import inprocess, llamacpp, vllm_colocate, vllm_server
from .base import MemoryBasis, MemoryTerm, RolloutPath, SettingsWarning

# The registry, in the order --help and refusals list the paths. A track's row names one as its default; --rollout
# picks another.
ROLLOUT_PATH_REGISTRY: dict[str, RolloutPath] = {
    path.NAME: path for path in (inprocess, vllm_colocate, vllm_server, llamacpp)
}
DEFAULT_ROLLOUT_PATH = inprocess.NAME  # the lesson's, where neither a track's row nor the user names one


class UnknownRolloutPath(ValueError):
    """A name that is not a registered rollout path; str() says which there are."""


def rollout_path(name: str) -> RolloutPath:
    """The registered path called `name`, or UnknownRolloutPath."""
    try:
        return ROLLOUT_PATH_REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownRolloutPath(f"unknown rollout path {name!r}: choose {path_names_in_words()}") from None


def registered_path(name) -> RolloutPath | None:
    """The registered path called `name`, or None for any other value: where a value not yet checked is looked at
    (the settings' own check refuses it, in words)."""
    try:
        return ROLLOUT_PATH_REGISTRY.get(name)
    except TypeError:  # a list or table from a --config file: no path's name
        return None


def path_names_in_words() -> str:
    """"inprocess, vllm-colocate, vllm-server or llamacpp": every registered path, as a sentence names them."""
    names = list(ROLLOUT_PATH_REGISTRY)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def paths_by_setting() -> dict[str, tuple[str, ...]]:
    """Each setting that belongs to particular rollout paths, with those paths' names (in the registry's order): the
    settings of one path first, in the registry's order, then those several paths share (the order the settings'
    warnings are said in)."""
    owners: dict[str, tuple[str, ...]] = {}
    for path in ROLLOUT_PATH_REGISTRY.values():
        for setting in path.SETTINGS:
            owners[setting] = owners.get(setting, ()) + (path.NAME,)
    return dict(sorted(owners.items(), key=lambda owned: len(owned[1])))  # a stable sort: the registry's order within


def needs_doctor_item(rollout: str, item: str) -> bool:
    """Does rollout path `rollout` need the doctor's item `item` (named as the doctor names it) to pass? False for a
    name no path has: the doctor judges what it finds even for a track row that names no registered path."""
    path = registered_path(rollout)
    return path is not None and item in path.DOCTOR_ITEMS


def lock_extras_for(item: str) -> set[str]:
    """The pyproject.toml extras that bring the engine a doctor item judges (llamacpp brings llama.cpp)."""
    return {path.LOCK_EXTRA for path in ROLLOUT_PATH_REGISTRY.values() if item in path.DOCTOR_ITEMS and path.LOCK_EXTRA}


__all__ = [
    "DEFAULT_ROLLOUT_PATH", "ROLLOUT_PATH_REGISTRY", "MemoryBasis", "MemoryTerm", "RolloutPath", "SettingsWarning",
    "UnknownRolloutPath", "lock_extras_for", "needs_doctor_item", "path_names_in_words", "paths_by_setting",
    "registered_path", "rollout_path",
]
