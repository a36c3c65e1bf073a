"""The lab's reward functions: the only statement of what a run optimises.

Both take TRL's reward signature: `completions` is a list of strings, or of chat messages
(`[{"role": "assistant", "content": ...}]`), dataset columns arrive as keyword arguments (a list per
column), and each returns one float per completion. They are deterministic and never raise: odd input
(None, empty, huge numbers) scores 0.0.

The answer format the prompts ask for is `<answer>NUMBER</answer>`.
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

# A number as people and models write it: sign (ASCII or unicode minus), thousands commas, decimals,
# a fraction, an exponent. ASCII digits only. The sign counts only when it does not follow a word or a
# closing bracket ("3-4" is 3 and 4, not 3 and -4).
_NUMBER_RE = (
    r"(?:(?<![\w)\]])(?P<sign>[-+\u2212]))?"
    r"(?P<mantissa>(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?:[eE](?P<exponent>[-+]?[0-9]+))?"
    r"(?:/(?P<denominator>[0-9]+(?:\.[0-9]+)?))?"
)
NUMBER = re.compile(r"(?<![0-9.])" + _NUMBER_RE)
ONE_NUMBER = re.compile(r"\s*" + _NUMBER_RE + r"\s*")
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*)\}")
LATEX_FRAC = re.compile(r"\\d?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")

MAX_EXPONENT = 400  # "1e999999999" would take forever to build exactly; no answer in the lab is that big
MAX_DIGITS = 4000  # below Python's int-from-string limit (4300)


def completion_text(completion) -> str:
    """The text of one completion: a string, or the last message's content of a chat completion."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)) and completion:
        message = completion[-1]
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""
    return ""


def _to_fraction(match: re.Match) -> Fraction | None:
    mantissa = match["mantissa"].replace(",", "")
    if len(mantissa) > MAX_DIGITS or len(match["denominator"] or "") > MAX_DIGITS:
        return None
    value = Fraction(mantissa)
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > MAX_EXPONENT:
            return None
        value *= Fraction(10) ** exponent
    if match["denominator"] is not None:
        denominator = Fraction(match["denominator"])
        if denominator == 0:
            return None
        value /= denominator
    return -value if match["sign"] in ("-", "\u2212") else value


def _last_number(text: str) -> Fraction | None:
    text = LATEX_FRAC.sub(r"\1/\2", text)
    last = None
    for last in NUMBER.finditer(text):
        pass
    return _to_fraction(last) if last else None


def extract_final_number(text) -> Fraction | None:
    """The number a completion answers with, as an exact Fraction, or None.

    Where it looks, first match wins: the last complete `<answer>...</answer>` (when there is one, only its
    content counts), else the last `\\boxed{...}`, else the last number anywhere in the text.
    """
    try:
        text = completion_text(text)
        tags = ANSWER_TAG.findall(text)
        if tags:
            return _last_number(tags[-1])
        boxed = BOXED.findall(text)
        if boxed:
            return _last_number(boxed[-1])
        return _last_number(text)
    except (ValueError, ZeroDivisionError, OverflowError, TypeError, AttributeError):
        return None


def numeric_reward(completions, answer=None, **kwargs) -> list[float]:
    """1.0 when the completion's final number equals the answer exactly (0.5 == 1/2), else 0.0."""
    completions = list(completions or [])
    answers = answer if isinstance(answer, (list, tuple)) else [answer] * len(completions)
    rewards = []
    for i, completion in enumerate(completions):
        expected = extract_final_number(str(answers[i])) if i < len(answers) and answers[i] is not None else None
        got = extract_final_number(completion)
        rewards.append(1.0 if expected is not None and got is not None and got == expected else 0.0)
    return rewards


def format_reward(completions, **kwargs) -> list[float]:
    """1.0 when the completion holds exactly one `<answer>...</answer>` and its content is a single number."""
    rewards = []
    for completion in completions or []:
        text = completion_text(completion)
        ok = (
            text.count("<answer>") == 1
            and text.count("</answer>") == 1
            and (tag := ANSWER_TAG.search(text)) is not None
            and ONE_NUMBER.fullmatch(tag[1]) is not None
        )
        rewards.append(1.0 if ok else 0.0)
    return rewards


_control_draws = random.Random(0)  # fixed, so a control run is repeatable in one process


def random_reward(completions, **kwargs) -> list[float]:
    """A control, not one of the lab's rewards: 1.0 or 0.0 by a coin toss, whatever the completion says.
    Trained on it (`--reward-weights random_reward=1`), a run shows how much of pass@1's
    change the real reward is responsible for (`invoke bench.learning` runs it)."""
    return [float(_control_draws.random() < 0.5) for _ in completions or []]


REWARD_FUNCS = {"numeric_reward": numeric_reward, "format_reward": format_reward}
# Controls a run may name like a built-in reward, but never one of the lab's own (the verl export does not carry them).
CONTROL_REWARDS = {"random_reward": random_reward}
REWARD_COLUMNS = {"numeric_reward": ["answer"], "format_reward": []}
