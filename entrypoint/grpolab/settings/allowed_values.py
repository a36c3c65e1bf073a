"""What one setting allows, declared beside its default (`setting(default, Allowed(...))`): its type, its range or
choices or rule, the range a careful user stays inside, and the nearest value that works when a relation with a
setting the user chose makes the default impossible. One loop in lab_settings.py reads these for --help, refusals,
warnings and adjustments alike."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Callable

TYPE_WORDS = {int: "an integer", float: "a number", str: "text", dict: "NAME=WEIGHT pairs"}


class WrongType(ValueError):
    """A value of the wrong type; str() is the type expected, in words."""


@dataclass(frozen=True)
class Allowed:
    """What one setting accepts: its type, then a range (low/high inclusive, above/below exclusive), choices,
    or a rule (a function returning why a value is refused, with `rule_text` saying the rule in words).
    `wise` (low, high) is the range a careful user stays inside; outside it the run warns with `wise_why`.
    `nearest(values, context_tokens)` is the value nearest to this setting's that satisfies every relation it is in
    with the other `values` (and the model's context, when known); `nearest_text` says it in words. When this
    setting's value is a default (the lesson's or the track row's) and a value the user chose makes it impossible,
    the run takes the nearest value and says so, instead of refusing what the user never chose."""

    kind: type
    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple = ()
    rule: Callable[[object], str | None] | None = None
    rule_text: str = ""
    wise: tuple[float, float] | None = None
    wise_why: str = ""
    nearest: Callable[[dict, int | None], object] | None = None
    nearest_text: str = ""

    def describe(self) -> str:
        """What is allowed, in words: "an integer, at least 1"; the same text for --help and for refusals."""
        if self.choices:
            return "one of " + ", ".join(self.choices) + (f", {self.rule_text}" if self.rule_text else "")
        bounds = []
        if self.above is not None and self.below is not None:
            bounds.append(f"between {number(self.above)} and {number(self.below)}, both excluded")
        elif self.low is not None and self.high is not None:
            bounds.append(f"from {number(self.low)} to {number(self.high)}")
        elif self.low is not None and self.below is not None:
            bounds.append(f"at least {number(self.low)} and below {number(self.below)}")
        else:
            bounds += [f"at least {number(self.low)}"] if self.low is not None else []
            bounds += [f"above {number(self.above)}"] if self.above is not None else []
            bounds += [f"at most {number(self.high)}"] if self.high is not None else []
        if self.kind is str and self.rule_text and not bounds:
            return self.rule_text
        words = ", ".join([TYPE_WORDS[self.kind]] + bounds + ([self.rule_text] if self.rule_text else []))
        if self.kind is float:
            words += " (finite)"
        return words

    def convert(self, value, from_text: bool):
        """The value as its declared type. Text from the command line is parsed; a config file's or the track
        row's value must already have the type (TOML and JSON have numbers); raises WrongType."""
        expected = TYPE_WORDS[self.kind] if self.kind is not dict else "a table of reward name = weight"
        if self.kind is dict:
            if isinstance(value, str):
                try:
                    return parse_weights(value)
                except ValueError as error:
                    raise WrongType(f"NAME=WEIGHT pairs separated by commas, or a JSON object ({error})") from None
            if isinstance(value, dict):
                bad = [
                    name
                    for name, weight in value.items()
                    if isinstance(weight, bool) or not isinstance(weight, (int, float))
                ]
                if bad:
                    raise WrongType(f"a number as the weight of {', '.join(map(str, bad))}")
                return {str(name): float(weight) for name, weight in value.items()}
            raise WrongType(expected)
        if isinstance(value, str) and self.kind is not str:
            if not from_text:
                raise WrongType(f"{expected} (this is text in quotes: write it without them)")
            try:
                return self.kind(value.strip())
            except ValueError:
                raise WrongType(expected) from None
        if isinstance(value, bool) or not isinstance(value, (self.kind, int) if self.kind is float else self.kind):
            raise WrongType(expected)
        return float(value) if self.kind is float else value

    def refusal(self, value) -> str | None:
        """Why a value of the right type is refused; None when it is allowed."""
        if self.kind is float and not math.isfinite(value):
            return "not a finite number"
        outside = (
            (self.choices and value not in self.choices)
            or (self.low is not None and value < self.low)
            or (self.high is not None and value > self.high)
            or (self.above is not None and value <= self.above)
            or (self.below is not None and value >= self.below)
        )
        if outside:
            return "outside the range" if not self.choices else "not one of the choices"
        return self.rule(value) if self.rule else None

    def warning(self, value) -> str | None:
        if self.wise and not self.wise[0] <= value <= self.wise[1]:
            return f"outside {number(self.wise[0])} to {number(self.wise[1])}: {self.wise_why}"
        return None


def number(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def setting(default, allowed: Allowed, help_text: str = ""):
    """A LabSettings field: its default and, beside it, what it allows (read by check_settings and --help)."""
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"allowed": allowed, "help": help_text})
    return field(default=default, metadata={"allowed": allowed, "help": help_text})


def parse_weights(text: str) -> dict[str, float]:
    """`numeric_reward=1,format_reward=0.25` or a JSON object."""
    text = text.strip()
    if text.startswith("{"):
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise ValueError("the JSON is not an object")
        try:
            return {str(k): float(v) for k, v in loaded.items()}
        except (TypeError, ValueError):  # null, a list, a word
            raise ValueError("a weight in the JSON is not a number") from None
    weights = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, weight = part.rpartition("=")
        if not name:
            raise ValueError(f"{part!r} is not NAME=WEIGHT")
        try:
            weights[name.strip()] = float(weight)
        except ValueError:
            raise ValueError(f"the weight in {part!r} is not a number") from None
    return weights
