"""How the lab's settings are judged and refused, below the settings themselves: where a value came from (a flag, a
file, a default the user never typed), how a setting and its value are shown, and what a check finds (`Problem`,
`Checked`) or refuses with (`SettingsRefused`)."""

from __future__ import annotations

from dataclasses import dataclass, field

COMMAND_LINE = "the command line"
LESSON_DEFAULT = "the lesson's default"
SMOKE_SOURCE = "the smoke test's first-run size"


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def shown(value) -> str:
    """A value as the user typed or wrote it."""
    if isinstance(value, str):
        return value if value.strip() and value == value.strip() and " " not in value else repr(value)
    if isinstance(value, dict):
        return ",".join(
            f"{k}={v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{k}={v!r}"
            for k, v in value.items()
        )
    return repr(value)


@dataclass
class Problem:
    """One refused value or relation, as one line: the flag(s), the value(s) given and where from, what is allowed."""

    names: tuple[str, ...]
    line: str


@dataclass
class Checked:
    values: dict  # the settings, converted to their types (values that could not be are left as given)
    problems: list[Problem]
    warnings: list[str]
    notes: list[str] = field(
        default_factory=list
    )  # defaults that gave way to a value the user chose, one sentence each


class SettingsRefused(ValueError):
    """Settings that cannot run. str() is the whole message: every problem, one line each."""

    def __init__(self, problems: list[Problem], given: dict | None = None, warnings: list[str] | None = None):
        self.problems, self.given, self.warnings = problems, dict(given or {}), list(warnings or [])
        if len(problems) == 1:
            text = f"{problems[0].line} (nothing was loaded)"
        else:
            text = f"{len(problems)} settings cannot be used (nothing was loaded):\n" + "\n".join(
                "  " + p.line for p in problems
            )
        super().__init__(text)

    @property
    def names(self) -> list[str]:
        return [name for problem in self.problems for name in problem.names]

    action = (
        "correct the value(s) named above, where each came from (a flag, the --config file, or the track's row in "
        "images/tracks.toml); `grpolab lab --help` lists what every setting allows"
    )


def chosen_by_user(source: str | None) -> bool:
    """A value the user chose: a flag, or their --config file. Not: the lesson's default, the track's row, the
    smoke test's first-run sizes (all defaults the user never typed)."""
    return (
        source is not None
        and source not in (LESSON_DEFAULT, SMOKE_SOURCE)
        and not source.startswith(("[tracks.", "track "))
    )
