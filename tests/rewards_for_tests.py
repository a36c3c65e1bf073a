"""Reward functions that provoke failures for real: imported by the tests as `rewards_for_tests:NAME`."""


def constant_reward(completions, **kwargs):
    # Every completion scores the same: every group has zero spread (the lesson's group collapse).
    return [1.0] * len(completions)


def raising_reward(completions, answer, **kwargs):
    # Fails on one particular row, so the error must name the function and the row.
    return [1.0 / (0 if "<answer>" in str(c) else 1) for c in completions]


def needs_missing_column(completions, difficulty, **kwargs):
    return [0.0] * len(completions)


def infinite_reward(completions, **kwargs):
    # Not a number a mean or a std can use: TRL logs reward inf and reward_std NaN.
    return [float("inf")] * len(completions)


def text_reward(completions, **kwargs):
    # One value per completion, but text: TRL's training step fails turning it into a tensor (a crash).
    return ["good"] * len(completions)
