"""Which reward functions a run uses: the built-in ones by name, or your own as `module:function`."""

from __future__ import annotations

import importlib
import inspect

# Arguments TRL passes to every reward function; any other named parameter is a dataset column.
TRL_REWARD_ARGUMENTS = {
    "completions",
    "prompts",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
    "environments",
}


def resolve_reward(name: str):
    """`numeric_reward` or `format_reward` (grpolab.task.rewards), the control `random_reward`, or
    `package.module:function` on sys.path."""
    from .rewards import CONTROL_REWARDS, REWARD_FUNCS

    if name in REWARD_FUNCS or name in CONTROL_REWARDS:
        return REWARD_FUNCS.get(name) or CONTROL_REWARDS[name]
    if ":" not in name:
        raise ValueError(
            f"unknown reward {name!r}: the built-in rewards are {', '.join(REWARD_FUNCS)}; your own is module:function"
        )
    module_name, _, attribute = name.partition(":")
    try:
        func = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"reward {name!r} could not be imported: {error}") from error
    if not callable(func):
        raise ValueError(f"reward {name!r} is not a function")
    return func


def reward_columns(func) -> list[str]:
    """The dataset columns a reward function needs: its named parameters other than TRL's own."""
    columns = []
    for parameter in inspect.signature(func).parameters.values():
        if (
            parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
            or parameter.name in TRL_REWARD_ARGUMENTS
        ):
            continue
        if parameter.default is parameter.empty:
            columns.append(parameter.name)
    return columns
