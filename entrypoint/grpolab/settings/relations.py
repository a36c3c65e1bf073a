"""The relations between the lab's settings: where one value makes another impossible or meaningless (refused), or
pointless (a warning), judged by `check_relations` once every setting passed its own check (check_settings in
lab_settings). One function per family of relations, run in this order, which is the order of their messages:
batches and steps, the dataset's sizes, the model's context, the rollout path."""

from __future__ import annotations

from ..common.rollout_paths import paths_by_setting, rollout_path
from ..task.problems import HELDOUT_SIZE
from .nearest_working import training_problems
from .refusals import LESSON_DEFAULT, Problem, chosen_by_user, flag, shown


class Relations:
    """What every family of relations shares: the values `s` (a default that gives way is changed there), where each
    came from (`sources`, None when that is not said), the settings that failed their own check (`bad`), the model's
    context in tokens when known, what each setting allows and its default (`allowed`, `defaults`), and the problems,
    warnings and notes found so far."""

    def __init__(self, s: dict, sources: dict | None, bad: set, context: int | None, allowed: dict, defaults: dict):
        self.s, self.sources, self.bad, self.context = s, sources, bad, context
        self.allowed, self.defaults = allowed, defaults
        self.problems: list[Problem] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []

    def judge(self, names: tuple[str, ...]) -> bool:
        """Whether every setting in a relation passed its own check (else the relation is not judged)."""
        return not self.bad & set(names)

    def given(self, *names: str) -> str:
        """The settings `names` as given: flag, value and, where said, where each came from."""
        s, sources = self.s, self.sources
        return " and ".join(
            f"{flag(n)} {shown(s[n])}" + (f" (from {sources.get(n, LESSON_DEFAULT)})" if sources is not None else "")
            for n in names
        )

    def refuse(self, names: tuple[str, ...], why: str, holds=None, party: tuple[str, ...] = ()) -> None:
        """Refuse the relation between `names`, unless a default among them gives way to a value the user chose
        (`holds(s)` says whether the relation holds; `party` are settings in it that never give way, the model)."""
        s, sources, context, allowed = self.s, self.sources, self.context, self.allowed
        if (
            holds is not None
            and sources is not None
            and any(chosen_by_user(sources.get(n, LESSON_DEFAULT)) for n in names + party)
        ):
            for name in names:
                source = sources.get(name, LESSON_DEFAULT)
                nearest = allowed[name].nearest
                if chosen_by_user(source) or nearest is None:
                    continue
                candidate = nearest(s, context)
                if candidate != s[name] and not allowed[name].refusal(candidate) and holds({**s, name: candidate}):
                    others = [n for n in names + party if n != name]
                    self.notes.append(
                        f"{flag(name)} {shown(s[name])} (from {source}) became {shown(candidate)} "
                        f"({allowed[name].nearest_text}) "
                        f"to fit {self.given(*others)}; give {flag(name)} yourself to choose another value"
                    )
                    s[name] = candidate
                    sources[name] = f"{source}, fitted to {', '.join(flag(n) for n in others)}"
                    return
        self.problems.append(Problem(names, f"{self.given(*names)}: {why}"))


def check_relations(
    s: dict, sources: dict | None, kind: str, bad: set, context: int | None, context_from: str, allowed: dict,
    defaults: dict,
) -> tuple[list[Problem], list[str], list[str]]:
    """Where one value makes another impossible or meaningless (refused), or pointless (a warning). A relation
    is judged only when every setting in it passed its own check. When the user chose one side and the other is
    a default that declares its `nearest` value, the default gives way (changed in `s`, said in a note) instead.
    `allowed` and `defaults` are lab_settings' ALLOWED and DEFAULTS. Returns (problems, warnings, notes)."""
    relations = Relations(s, sources, bad, context, allowed, defaults)
    batch_relations(relations)
    dataset_relations(relations, kind)
    context_relations(relations, kind, context_from)
    rollout_relations(relations)
    return relations.problems, relations.warnings, relations.notes


def whole_groups(v: dict) -> bool:
    """Whether the batch holds whole groups: per_device_train_batch_size a multiple of num_generations."""
    return not v["per_device_train_batch_size"] % v["num_generations"]


def batch_relations(r: Relations) -> None:
    """Batches and steps: whole groups per batch (per_device_train_batch_size a multiple of num_generations), a
    training set of at least one batch's prompts (TRL drops an incomplete batch), logging_steps within max_steps."""
    s = r.s
    batch, group = s["per_device_train_batch_size"], s["num_generations"]
    if r.judge(("per_device_train_batch_size", "num_generations")) and not whole_groups(s):
        r.refuse(
            ("per_device_train_batch_size", "num_generations"),
            "TRL needs whole groups per batch, so the batch must be a multiple of num_generations; try "
            + " or ".join(str(group * n) for n in sorted({max(1, batch // group), batch // group + 1})),
            holds=lambda v: (
                whole_groups(v) and v["train_size"] >= v["per_device_train_batch_size"] // v["num_generations"]
            ),
        )
    batch, group = s["per_device_train_batch_size"], s["num_generations"]
    if (
        r.judge(("per_device_train_batch_size", "num_generations", "train_size"))
        and whole_groups(s)
        and s["train_size"] < batch // group
    ):
        r.refuse(
            ("train_size", "per_device_train_batch_size", "num_generations"),
            f"one batch takes {batch // group} prompts ({batch} completions / {group} per prompt) and TRL drops an "
            "incomplete batch, "
            f"so a training set of {s['train_size']} never makes one; use --train-size {batch // group} or more",
            holds=lambda v: (
                whole_groups(v) and v["train_size"] >= v["per_device_train_batch_size"] // v["num_generations"]
            ),
        )
    if r.judge(("logging_steps", "max_steps")) and s["logging_steps"] > s["max_steps"]:
        r.refuse(
            ("logging_steps", "max_steps"),
            "no step would ever be logged, so the run would have no reward curve; use --logging-steps "
            f"{s['max_steps']} or less",
            holds=lambda v: v["logging_steps"] <= v["max_steps"],
        )


def dataset_relations(r: Relations, kind: str) -> None:
    """The dataset's sizes: train_size and heldout_size within what a built-in dataset's generator makes, and, for
    the lab (`kind` "lab"), held-out problems to measure pass@1 on: none is refused, fewer than 50 is a warning."""
    s = r.s
    train_problems = training_problems(s["dataset"])
    if r.judge(("dataset", "train_size", "heldout_size")) and train_problems is not None:
        if s["train_size"] > train_problems:
            r.refuse(
                ("train_size", "dataset"),
                f"the {s['dataset']} generator has {train_problems} training problems; use --train-size "
                f"{train_problems} or less",
                holds=lambda v: (
                    v["train_size"] <= train_problems
                    and v["train_size"] >= v["per_device_train_batch_size"] // v["num_generations"]
                ),
            )
        if s["heldout_size"] > HELDOUT_SIZE:
            r.refuse(
                ("heldout_size", "dataset"),
                f"the {s['dataset']} generator makes {HELDOUT_SIZE} held-out problems with no twin (A+B or B+A) "
                f"in training; use --heldout-size {HELDOUT_SIZE} or less",
                holds=lambda v: v["heldout_size"] <= HELDOUT_SIZE,
            )
    if kind == "lab" and r.judge(("heldout_size",)):
        if s["heldout_size"] == 0:
            r.refuse(
                ("heldout_size",),
                "the lab measures pass@1 on held-out problems before and after training; use --heldout-size 50 or more",
            )
        elif s["heldout_size"] < 50:
            r.warnings.append(
                f"{r.given('heldout_size')}: pass@1 on fewer than 50 problems moves in steps of "
                f"{1 / s['heldout_size']:.0%} or more, "
                "so a before/after difference may be noise; allowed, so it never stops a run"
            )


def context_relations(r: Relations, kind: str, context_from: str) -> None:
    """The model's context, when known (`context_from` says where it was read): max_prompt_length plus
    max_completion_length within it, and for the lab plus eval_max_new_tokens (when set) too."""
    s, context = r.s, r.context
    if context is not None:
        lengths = [("max_completion_length", "max_prompt_length")]
        if kind == "lab" and s["eval_max_new_tokens"]:
            lengths.append(("eval_max_new_tokens", "max_prompt_length"))
        for names in lengths:
            if r.judge(names + ("model",)) and s[names[0]] + s[names[1]] > context:
                r.refuse(
                    names,
                    f"together {s[names[0]] + s[names[1]]} tokens, more than model {s['model']}'s context of {context} "
                    "tokens "
                    f"({context_from}); lower them to {context} tokens together",
                    holds=lambda v, names=names: v[names[0]] + v[names[1]] <= context,
                    party=("model",),
                )


def rollout_relations(r: Relations) -> None:
    """The rollout path: a setting of another path than the chosen one, changed from its default, is a warning
    (it changes nothing), and so is each of the chosen path's own SETTINGS_WARNINGS that applies."""
    s = r.s
    # Settings of another rollout path than the chosen one change nothing: said, not refused (each path names its own).
    for name, paths in paths_by_setting().items():
        if r.judge((name, "rollout")) and s["rollout"] not in paths and s[name] != r.defaults[name]:
            r.warnings.append(
                f"{r.given(name)} has no effect: it is for --rollout {' or '.join(paths)}, and this run's rollout path "
                f"is {s['rollout']}"
            )
    for warning in rollout_path(s["rollout"]).SETTINGS_WARNINGS if r.judge(("rollout",)) else ():
        if r.judge(warning.names) and warning.applies(s):
            r.warnings.append(f"{r.given(*warning.names)}: {warning.text}")
