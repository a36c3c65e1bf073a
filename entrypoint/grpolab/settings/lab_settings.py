"""The lab's settings: one dataclass whose defaults are the lesson's, each declared beside what it allows.

Precedence, lowest first: the lesson's defaults below, the track's [tracks.T.lab] row in
images/tracks.toml, a config file (--config, TOML or JSON), then command-line flags.

Every setting says, next to its default, its type and its valid range or choices (`Allowed`), and where one
exists the range a careful user stays inside (outside it: a warning that reaches the run log, never a
refusal). `check_settings` is the one loop over them all, then over the relations between settings, for
values from every source alike; it runs before any model, tokenizer or dataset loads and refuses with every
problem in one message (`SettingsRefused`), each naming the flag, the value given, where it came from and
what is allowed. `grpolab lab --help` prints the same declarations.

Why dataclass field metadata and not pydantic: LabSettings stays the plain dataclass the rest of the lab
uses (asdict, replace, fields); the messages are ours (flag, value, source, range) rather than a library's
error dump; and nothing is added to the images' locks or to the start-up of a run that must be refused in
well under a second.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

from .allowed_values import Allowed, WrongType, number, setting
from .config_file import ConfigFileError, read_config_file
from ..task.problems import BUILTIN_DATASETS, HELDOUT_SIZE
from ..common.errors import LayerFailure
from ..model.shape import HUB_ID, context_from_config, local_model_config
from .nearest_working import (
    nearest_batch,
    nearest_group,
    nearest_heldout_size,
    nearest_length,
    nearest_logging_steps,
    nearest_train_size,
    training_problems,
)
from ..task.rewards import CONTROL_REWARDS, REWARD_FUNCS
from ..common.rollout_paths import DEFAULT_ROLLOUT_PATH, paths_by_setting, registered_path, rollout_path
from ..common.tracks import ROLLOUT_PATHS, Track

# Live logging backends TRL's report_to accepts that we offer, each with the package it needs.
REPORT_TO_PACKAGES = {"none": None, "tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}
DTYPES = ("auto", "float32", "bfloat16", "float16")
SEED_LIMIT = 2**32  # numpy's seeds (transformers' set_seed seeds numpy too) are below 2**32
MODULE_NAME = re.compile(r"^[\w.*\[\]|()?+^$-]+$")  # a module name, or a regex PEFT matches module names against


# --- rules that are more than a range -----------------------------------------------------------------------


def _model_rule(name: str) -> str | None:
    if not name.strip() or name != name.strip():
        return "empty, or with spaces around it"
    looks_like_path = name.startswith(("/", "./", "../", "~")) or name.count("/") > 1
    if looks_like_path and not Path(name).expanduser().exists():
        return f"no such folder ({Path(name).expanduser()})"
    if not looks_like_path and not HUB_ID.match(name) and not Path(name).exists():
        return "neither a Hugging Face id (owner/name) nor a folder here"
    return None


def _dataset_rule(name: str) -> str | None:
    return (
        None
        if name in BUILTIN_DATASETS or HUB_ID.match(name)
        else "neither a built-in dataset nor a Hugging Face id (owner/name)"
    )


def _target_modules_rule(text: str) -> str | None:
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


def _weights_rule(weights: dict) -> str | None:
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


def _url_rule(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"not a URL ({error})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not http://HOST[:PORT] or https://HOST[:PORT]"
    return None if port is None or 0 < port < 65536 else "its port is outside 1 to 65535"


def _report_to_rule(name: str) -> str | None:
    """A live-logging backend must be installed, found before any model loads."""
    import importlib.util

    package = REPORT_TO_PACKAGES.get(name)
    if package and importlib.util.find_spec(package) is None:
        return (
            f"needs the {package} package, which this environment does not have: install it (pip install {package}), "
            "use a track whose lock has it, or leave --report-to at none"
        )
    return None


def _nonempty(text: str) -> str | None:
    return None if text.strip() else "empty"


# --- the settings -------------------------------------------------------------------------------------------


@dataclass
class LabSettings:
    # Which machine, model and data.
    track: str = setting(
        "c", Allowed(str, rule=_nonempty, rule_text="a track in images/tracks.toml, chosen with --track")
    )
    model: str = setting(
        "Qwen/Qwen3-1.7B",
        Allowed(
            str,
            rule=_model_rule,
            rule_text="a Hugging Face id (owner/name), a local model folder, or tiny (the built-in model)",
        ),
    )
    dataset: str = setting(
        "arithmetic",
        Allowed(
            str,
            rule=_dataset_rule,
            rule_text="arithmetic, arithmetic-words, or a Hugging Face dataset id (openai/gsm8k)",
        ),
    )
    train_size: int = setting(
        1000,
        Allowed(
            int,
            low=1,
            rule_text="at least one batch's prompts; at most 8500 for the built-in datasets",
            nearest=nearest_train_size,
            nearest_text="one batch's prompts, or the generator's 8500",
        ),
        "training prompts drawn from the dataset",
    )
    heldout_size: int = setting(
        200,
        Allowed(
            int,
            low=0,
            rule_text="at most 1000 for the built-in datasets (the held-out problems without twins in training); the "
                      "lab needs 1 or more",
            nearest=nearest_heldout_size,
            nearest_text="the generator's 1000",
        ),
        "held-out problems for pass@1, never seen in training",
    )
    seed: int = setting(0, Allowed(int, low=0, high=SEED_LIMIT - 1))
    dtype: str = setting("auto", Allowed(str, choices=DTYPES), "auto: bf16 on CUDA/ROCm, float32 on MPS and CPU")

    # The adapter: rank-16 LoRA on every linear layer.
    lora_rank: int = setting(
        16,
        Allowed(
            int,
            low=1,
            wise=(1, 256),
            wise_why="LoRA ranks are 8 to 64 as a rule; a larger one costs memory and rarely helps",
        ),
    )
    lora_alpha: int = setting(32, Allowed(int, low=1))
    lora_dropout: float = setting(
        0.0,
        Allowed(
            float,
            low=0,
            below=1,
            wise=(0.0, 0.5),
            wise_why="more than half the adapter's inputs dropped slows learning to a crawl",
        ),
    )
    lora_target_modules: str = setting(
        "all-linear",
        Allowed(
            str, rule=_target_modules_rule, rule_text="all-linear or module names separated by commas, not lm_head"
        ),
    )

    # GRPO, with TRL's defaults where the lesson does not say otherwise.
    num_generations: int = setting(
        8,
        Allowed(
            int,
            low=2,
            rule_text="GRPO compares completions within a group",
            nearest=nearest_group,
            nearest_text="the nearest divisor of the batch",
        ),
        "rollouts per prompt (G)",
    )
    max_prompt_length: int = setting(
        256,
        Allowed(
            int,
            low=1,
            rule_text="with max_completion_length within the model's context",
            nearest=nearest_length("max_prompt_length", "max_completion_length"),
            nearest_text="what the context leaves",
        ),
        "the longest prompt, in tokens, the memory estimate and llama.cpp's context plan for",
    )
    max_completion_length: int = setting(
        512,
        Allowed(
            int,
            low=1,
            rule_text="with max_prompt_length within the model's context",
            nearest=nearest_length("max_completion_length", "max_prompt_length"),
            nearest_text="what the context leaves",
        ),
    )
    max_steps: int = setting(200, Allowed(int, low=1))
    per_device_train_batch_size: int = setting(
        8,
        Allowed(
            int,
            low=1,
            rule_text="a multiple of num_generations (whole groups per batch)",
            nearest=nearest_batch,
            nearest_text="the nearest multiple of num_generations",
        ),
        "completions per step",
    )
    learning_rate: float = setting(
        1e-5,
        Allowed(
            float,
            above=0,
            wise=(1e-6, 1e-2),
            wise_why="LoRA is trained at about 1e-5 to 1e-3; far above, training diverges, far below, nothing moves",
        ),
    )
    beta: float = setting(
        0.0,
        Allowed(
            float,
            wise=(0.0, 1.0),
            wise_why="a negative beta rewards drifting away from the reference model; above 1 the KL term drowns the "
                     "reward",
        ),
        "0: no reference model is loaded and no kl is logged",
    )
    temperature: float = setting(
        1.0,
        Allowed(
            float,
            above=0,
            wise=(0.3, 2.0),
            wise_why="below, a group's completions are near copies and their rewards lose the spread GRPO learns from; "
                     "above, samples are mostly noise",
        ),
    )
    logging_steps: int = setting(
        1,
        Allowed(
            int, low=1, rule_text="at most max_steps", nearest=nearest_logging_steps, nearest_text="at most max_steps"
        ),
    )
    reward_weights: dict[str, float] = setting(
        {"numeric_reward": 1.0, "format_reward": 0.25},
        Allowed(dict, rule=_weights_rule, rule_text="built-in rewards or module:function, finite weights, not all 0"),
    )

    # Where completions come from.
    rollout: str = setting(DEFAULT_ROLLOUT_PATH, Allowed(str, choices=ROLLOUT_PATHS))  # the registry's names, live
    vllm_gpu_memory_utilization: float = setting(0.3, Allowed(float, above=0, below=1), "colocate only; TRL's default")
    vllm_importance_sampling_correction: str = setting(
        "auto",
        Allowed(str, choices=("auto", "on", "off")),
        "vLLM only; TRL's correction of vLLM's sampling, one more forward a step: "
        "auto is off where vLLM's CPU build samples in float32 (a ratio of 1 there), else on (TRL's default)",
    )
    vllm_server_url: str = setting(
        "http://localhost:8000", Allowed(str, rule=_url_rule, rule_text="http://HOST[:PORT]"), "server mode only"
    )
    llamacpp_refresh_every: int = setting(
        0, Allowed(int, low=0), "llamacpp only; 0: never refresh the sampler (stale); K: re-export every K steps"
    )

    # Live logging: TRL's report_to, into the run's folder (none, tensorboard, trackio, wandb where installed).
    report_to: str = setting(
        "none", Allowed(str, choices=tuple(REPORT_TO_PACKAGES), rule=_report_to_rule, rule_text="its package installed")
    )

    # Evaluation.
    eval_max_new_tokens: int = setting(
        0,
        Allowed(
            int,
            low=0,
            nearest=nearest_length("eval_max_new_tokens", "max_prompt_length"),
            nearest_text="what the context leaves",
        ),
        "0: same as max_completion_length",
    )

    def validate(self, kind: str = "lab") -> None:
        """Raise SettingsRefused (a ValueError) naming every setting that cannot run, in words."""
        checked = check_settings(self.as_dict(), kind=kind)
        if checked.problems:
            raise SettingsRefused(checked.problems, self.as_dict(), checked.warnings)

    def warnings(self, kind: str = "lab") -> list[str]:
        """Legal but unwise values, one sentence each (printed at the start of a run and kept in its run-log line):
        as resolve_settings found them, with where each value came from; else judged from the values alone."""
        found = self.__dict__.get("_warnings")
        return list(found) if found is not None else check_settings(self.as_dict(), kind=kind).warnings

    def notes(self) -> list[str]:
        """Defaults that gave way to a value the user chose (resolve_settings), one sentence each."""
        return list(self.__dict__.get("_notes") or [])

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """Every setting, one per line, for the top of each run."""
        width = max(len(f.name) for f in fields(self))
        return "\n".join(f"  {f.name:<{width}}  {getattr(self, f.name)!r}" for f in fields(self))


SETTING_NAMES = {f.name for f in fields(LabSettings)}
ALLOWED = {f.name: f.metadata["allowed"] for f in fields(LabSettings)}
DEFAULTS = {f.name: (f.default if f.default is not MISSING else f.default_factory()) for f in fields(LabSettings)}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def setting_help(name: str) -> str:
    """--help's text for a setting: what it means, what it allows, the lesson's default (all from the declaration)."""
    meta = next(f.metadata for f in fields(LabSettings) if f.name == name)
    allowed = meta["allowed"]
    words = [meta["help"]] if meta["help"] else []
    words.append(f"allowed: {allowed.describe()}")
    if allowed.wise:
        words.append(f"usual: {number(allowed.wise[0])} to {number(allowed.wise[1])} (outside, a warning)")
    if allowed.nearest:
        words.append(f"left at its default, gives way to your own values: {allowed.nearest_text}")
    return "; ".join(words + [f"lesson default: {DEFAULTS[name]!r}"])


# --- checking: one loop over every setting, then the relations ---------------------------------------------

COMMAND_LINE = "the command line"
LESSON_DEFAULT = "the lesson's default"


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


def check_settings(values: dict, sources: dict | None = None, kind: str = "lab", context: int | None = None,
                   context_from: str = "") -> Checked:
    """Every setting against its declaration, then the relations between settings: all problems, never the first
    only. `values` may hold text from the command line (its source COMMAND_LINE); `kind` is "lab", "smoke" or
    "any" (only what every run needs); `context` is the model's context in tokens when known (read from its
    config, before any weights load)."""
    known = sources is not None  # else where the values came from is not said
    sources = dict(sources or {})  # a default that gives way is said to have done so here, not in the caller's
    values = {**DEFAULTS, **values}
    problems: list[Problem] = []
    warnings: list[str] = []
    typed = dict(values)
    for name, allowed in ALLOWED.items():
        source = sources.get(name, LESSON_DEFAULT) if known else None
        # Text in a file is shown in quotes: a number written as "16" is refused for being text.
        value_shown = (
            json.dumps(values[name])
            if source not in (COMMAND_LINE, None) and isinstance(values[name], str)
            else shown(values[name])
        )
        where = f"{flag(name)} {value_shown}" + (f" (from {source})" if source else "")
        try:
            typed[name] = allowed.convert(values[name], from_text=source == COMMAND_LINE)
        except WrongType as expected:
            problems.append(Problem((name,), f"{where}: the wrong type; expected {expected}"))
            continue
        why = allowed.refusal(typed[name])
        if why:
            problems.append(Problem((name,), f"{where}: {why}; allowed: {allowed.describe()}"))
            continue
        unwise = allowed.warning(typed[name])
        if unwise:
            warnings.append(f"{where} is {unwise}; allowed, so it never stops a run")
    bad = {name for problem in problems for name in problem.names}
    relations, relation_warnings, notes = check_relations(
        typed, sources if known else None, kind, bad, context, context_from
    )
    return Checked(typed, problems + relations, warnings + relation_warnings, notes)


def chosen_by_user(source: str | None) -> bool:
    """A value the user chose: a flag, or their --config file. Not: the lesson's default, the track's row, the
    smoke test's first-run sizes (all defaults the user never typed)."""
    return (
        source is not None
        and source not in (LESSON_DEFAULT, SMOKE_SOURCE)
        and not source.startswith(("[tracks.", "track "))
    )


def check_relations(
    s: dict, sources: dict | None, kind: str, bad: set, context: int | None, context_from: str
) -> tuple[list[Problem], list[str], list[str]]:
    """Where one value makes another impossible or meaningless (refused), or pointless (a warning). A relation
    is judged only when every setting in it passed its own check. When the user chose one side and the other is
    a default that declares its `nearest` value, the default gives way (changed in `s`, said in a note) instead.
    Returns (problems, warnings, notes)."""
    problems: list[Problem] = []
    warnings: list[str] = []
    notes: list[str] = []

    def judge(names: tuple[str, ...]) -> bool:
        return not bad & set(names)

    def given(*names: str) -> str:
        return " and ".join(
            f"{flag(n)} {shown(s[n])}" + (f" (from {sources.get(n, LESSON_DEFAULT)})" if sources is not None else "")
            for n in names
        )

    def refuse(names: tuple[str, ...], why: str, holds=None, party: tuple[str, ...] = ()) -> None:
        """Refuse the relation between `names`, unless a default among them gives way to a value the user chose
        (`holds(s)` says whether the relation holds; `party` are settings in it that never give way, the model)."""
        if (
            holds is not None
            and sources is not None
            and any(chosen_by_user(sources.get(n, LESSON_DEFAULT)) for n in names + party)
        ):
            for name in names:
                source = sources.get(name, LESSON_DEFAULT)
                nearest = ALLOWED[name].nearest
                if chosen_by_user(source) or nearest is None:
                    continue
                candidate = nearest(s, context)
                if candidate != s[name] and not ALLOWED[name].refusal(candidate) and holds({**s, name: candidate}):
                    others = [n for n in names + party if n != name]
                    notes.append(
                        f"{flag(name)} {shown(s[name])} (from {source}) became {shown(candidate)} "
                        f"({ALLOWED[name].nearest_text}) "
                        f"to fit {given(*others)}; give {flag(name)} yourself to choose another value"
                    )
                    s[name] = candidate
                    sources[name] = f"{source}, fitted to {', '.join(flag(n) for n in others)}"
                    return
        problems.append(Problem(names, f"{given(*names)}: {why}"))

    def whole_groups(v: dict) -> bool:
        return not v["per_device_train_batch_size"] % v["num_generations"]

    batch, group = s["per_device_train_batch_size"], s["num_generations"]
    if judge(("per_device_train_batch_size", "num_generations")) and not whole_groups(s):
        refuse(
            ("per_device_train_batch_size", "num_generations"),
            "TRL needs whole groups per batch, so the batch must be a multiple of num_generations; try "
            + " or ".join(str(group * n) for n in sorted({max(1, batch // group), batch // group + 1})),
            holds=lambda v: (
                whole_groups(v) and v["train_size"] >= v["per_device_train_batch_size"] // v["num_generations"]
            ),
        )
    batch, group = s["per_device_train_batch_size"], s["num_generations"]
    if (
        judge(("per_device_train_batch_size", "num_generations", "train_size"))
        and whole_groups(s)
        and s["train_size"] < batch // group
    ):
        refuse(
            ("train_size", "per_device_train_batch_size", "num_generations"),
            f"one batch takes {batch // group} prompts ({batch} completions / {group} per prompt) and TRL drops an "
            "incomplete batch, "
            f"so a training set of {s['train_size']} never makes one; use --train-size {batch // group} or more",
            holds=lambda v: (
                whole_groups(v) and v["train_size"] >= v["per_device_train_batch_size"] // v["num_generations"]
            ),
        )
    if judge(("logging_steps", "max_steps")) and s["logging_steps"] > s["max_steps"]:
        refuse(
            ("logging_steps", "max_steps"),
            "no step would ever be logged, so the run would have no reward curve; use --logging-steps "
            f"{s['max_steps']} or less",
            holds=lambda v: v["logging_steps"] <= v["max_steps"],
        )
    train_problems = training_problems(s["dataset"])
    if judge(("dataset", "train_size", "heldout_size")) and train_problems is not None:
        if s["train_size"] > train_problems:
            refuse(
                ("train_size", "dataset"),
                f"the {s['dataset']} generator has {train_problems} training problems; use --train-size "
                f"{train_problems} or less",
                holds=lambda v: (
                    v["train_size"] <= train_problems
                    and v["train_size"] >= v["per_device_train_batch_size"] // v["num_generations"]
                ),
            )
        if s["heldout_size"] > HELDOUT_SIZE:
            refuse(
                ("heldout_size", "dataset"),
                f"the {s['dataset']} generator makes {HELDOUT_SIZE} held-out problems with no twin (A+B or B+A) "
                f"in training; use --heldout-size {HELDOUT_SIZE} or less",
                holds=lambda v: v["heldout_size"] <= HELDOUT_SIZE,
            )
    if kind == "lab" and judge(("heldout_size",)):
        if s["heldout_size"] == 0:
            refuse(
                ("heldout_size",),
                "the lab measures pass@1 on held-out problems before and after training; use --heldout-size 50 or more",
            )
        elif s["heldout_size"] < 50:
            warnings.append(
                f"{given('heldout_size')}: pass@1 on fewer than 50 problems moves in steps of "
                f"{1 / s['heldout_size']:.0%} or more, "
                "so a before/after difference may be noise; allowed, so it never stops a run"
            )
    if context is not None:
        lengths = [("max_completion_length", "max_prompt_length")]
        if kind == "lab" and s["eval_max_new_tokens"]:
            lengths.append(("eval_max_new_tokens", "max_prompt_length"))
        for names in lengths:
            if judge(names + ("model",)) and s[names[0]] + s[names[1]] > context:
                refuse(
                    names,
                    f"together {s[names[0]] + s[names[1]]} tokens, more than model {s['model']}'s context of {context} "
                    "tokens "
                    f"({context_from}); lower them to {context} tokens together",
                    holds=lambda v, names=names: v[names[0]] + v[names[1]] <= context,
                    party=("model",),
                )
    # Settings of another rollout path than the chosen one change nothing: said, not refused (each path names its own).
    for name, paths in paths_by_setting().items():
        if judge((name, "rollout")) and s["rollout"] not in paths and s[name] != DEFAULTS[name]:
            warnings.append(
                f"{given(name)} has no effect: it is for --rollout {' or '.join(paths)}, and this run's rollout path "
                f"is {s['rollout']}"
            )
    for warning in rollout_path(s["rollout"]).SETTINGS_WARNINGS if judge(("rollout",)) else ():
        if judge(warning.names) and warning.applies(s):
            warnings.append(f"{given(*warning.names)}: {warning.text}")
    return problems, warnings, notes


def check_model_context(settings: LabSettings, model_path: str, kind: str = "lab") -> None:
    """The input layer's refusal of prompt plus completion beyond the model's context, from its config alone
    (config.json: downloaded here for a Hub model not yet cached; its weights are not). A config that cannot be
    read is left to the model's loader, which says why in words."""
    config, where = local_model_config(model_path)
    if config is None:
        try:
            from transformers import AutoConfig

            config, where = AutoConfig.from_pretrained(model_path).to_dict(), f"{model_path}'s config.json"
        except Exception:  # noqa: BLE001 - offline, unknown id: the loader's own failure names it
            return
    context = context_from_config(config)
    if context is None:
        return
    checked = check_settings(settings.as_dict(), kind=kind, context=context, context_from=where)
    problems = [p for p in checked.problems if "context" in p.line]
    if problems:
        refused = SettingsRefused(problems, settings.as_dict())
        raise LayerFailure("input", str(refused), refused.action)


# --- where the values come from -----------------------------------------------------------------------------

def unknown_problems(names, source: str) -> list[Problem]:
    problems = []
    for name in sorted(names):
        close = difflib.get_close_matches(str(name), sorted(SETTING_NAMES), n=1)
        hint = f"did you mean {close[0]}?" if close else "the settings are listed by `grpolab lab --help`"
        problems.append(Problem((str(name),), f"unknown setting {name!r} in {source}: {hint}"))
    return problems


def gather(
    track: Track, config_file: Path | None, overrides: dict | None, track_source: str
) -> tuple[dict, dict, list[Problem]]:
    """(values, their sources, problems found while reading them), lowest precedence first."""
    values: dict = {"track": track.name, "rollout": track.rollout}
    sources: dict = {"track": f"--track {track.name}", "rollout": track_source.replace(".lab]", "] rollout")}
    problems: list[Problem] = []
    row = {key: value for key, value in track.lab.items() if key != "smoke_model"}
    problems += unknown_problems(set(row) - SETTING_NAMES, track_source)
    for key in set(row) & SETTING_NAMES:
        values[key], sources[key] = row[key], track_source
    if config_file:
        try:
            data, where = read_config_file(config_file)
        except ConfigFileError as error:
            problems.append(Problem(("config",), str(error)))
        else:
            problems += unknown_problems(set(data) - SETTING_NAMES, f"--config {config_file}")
            if "track" in data and data["track"] != track.name:
                problems.append(
                    Problem(
                        ("track",),
                        f"track {shown(data['track'])} (from {where['track']}): the track is chosen with --track "
                        f"(or GRPOLAB_TRACK), and this run's is {track.name}; leave track out of the file",
                    )
                )
            for key in set(data) & SETTING_NAMES - {"track"}:
                values[key], sources[key] = data[key], where[key]
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key], sources[key] = value, COMMAND_LINE
    problems += unknown_problems(set(values) - SETTING_NAMES, COMMAND_LINE)
    return {k: v for k, v in values.items() if k in SETTING_NAMES}, sources, problems


def resolve_settings(track: Track, config_file: Path | None = None, overrides: dict | None = None, smoke: bool = False,
                     with_context: bool = True) -> LabSettings:
    """Lesson defaults < track row < config file < overrides (None values in overrides are ignored), every value
    checked (check_settings) before any model loads; SettingsRefused lists every problem at once.

    Overrides are typed values, or text as typed on the command line. smoke: the smoke test of the lab those
    settings describe (smoke_settings), the flags in `overrides` honoured over its sizes. with_context: also
    check prompt plus completion against the model's context where its config is already here (a local read).
    """
    from ..common.tracks import TRACKS_FILE

    track_source = f"[tracks.{track.name}.lab] in {TRACKS_FILE}"
    values, sources, problems = gather(track, config_file, overrides, track_source)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    kind = "smoke" if smoke else "lab"
    if smoke:
        refused = [name for name in LAB_ONLY_SETTINGS if name in flags]
        if refused:
            problems.append(lab_only_problem(refused))
        lab_checked = check_settings(values, sources)
        values, sources = smoke_values(
            lab_checked.values, sources, track, {k: v for k, v in flags.items() if k not in LAB_ONLY_SETTINGS}
        )
    checked = check_settings(values, sources, kind=kind)
    problems += checked.problems
    if with_context and not problems:
        try:
            config, where = local_model_config(checked.values["model"])
        except LayerFailure as failure:  # the built-in model's files damaged, a folder without weights
            raise SettingsRefused(
                [
                    Problem(
                        ("model",),
                        f"{flag('model')} {shown(checked.values['model'])} (from "
                        f"{sources.get('model', LESSON_DEFAULT)}): {failure.what}",
                    )
                ],
                values,
                checked.warnings,
            ) from failure
        context = context_from_config(config) if config else None
        if context is not None:
            checked = check_settings(values, sources, kind=kind, context=context, context_from=where)
            problems += checked.problems
    if problems:
        raise SettingsRefused(problems, {**values}, checked.warnings)
    return with_warnings(LabSettings(**checked.values), checked.warnings, checked.notes)


def with_warnings(settings: LabSettings, warnings: list[str], notes: list[str] | None = None) -> LabSettings:
    """Keep the warnings and notes found with the values' sources on the settings (not settings: no field, not in
    as_dict)."""
    settings.__dict__["_warnings"] = list(warnings)
    settings.__dict__["_notes"] = list(notes or [])
    return settings


# The lesson's first run on a new machine: ten prompts, four rollouts, ten steps, every step logged.
SMOKE_SIZES = {"train_size": 10, "num_generations": 4, "max_steps": 10, "logging_steps": 1}
# The smoke test trains but does not evaluate: flags for the held-out evaluation are refused, not ignored.
LAB_ONLY_SETTINGS = ("heldout_size", "eval_max_new_tokens")
SMOKE_SOURCE = "the smoke test's first-run size"


def lab_only_problem(refused: list[str]) -> Problem:
    return Problem(
        tuple(refused),
        f"the smoke test does not evaluate held-out problems, so {', '.join(flag(n) for n in refused)} "
        "would change nothing: leave it out, or give it to `grpolab lab`",
    )


def smoke_values(lab: dict, sources: dict, track: Track, flags: dict) -> tuple[dict, dict]:
    """The smoke test's values for the lab `lab` describes (see smoke_settings), with their sources."""
    values = {**lab, **SMOKE_SIZES, "heldout_size": 0}
    sources = {
        **sources,
        **{name: SMOKE_SOURCE for name in (*SMOKE_SIZES, "heldout_size", "per_device_train_batch_size")},
    }
    smoke_model = track.lab.get("smoke_model")
    uses_track_model = lab["model"] == track.lab.get("model", DEFAULTS["model"])
    path = registered_path(lab["rollout"])  # not checked yet: an unknown one is refused with the smoke test's values
    if smoke_model and uses_track_model and not (path and path.SMOKE_KEEPS_LAB_MODEL):
        values["model"], sources["model"] = smoke_model, f"track {track.name}'s smoke_model"
    # Two groups per step, whatever the group size: TRL needs whole groups per batch.
    group = flags.get("num_generations", SMOKE_SIZES["num_generations"])
    try:
        values["per_device_train_batch_size"] = 2 * ALLOWED["num_generations"].convert(group, from_text=True)
    except WrongType:
        values["per_device_train_batch_size"] = 2 * SMOKE_SIZES["num_generations"]  # num_generations itself is refused
    values.update(flags)
    sources.update({name: COMMAND_LINE for name in flags})
    return values, sources


def smoke_settings(lab: LabSettings, track: Track, flags: dict | None = None) -> LabSettings:
    """The smoke test of the lab `lab` describes: its rollout path, rewards, dtype, adapter and sampling, on
    the track's smoke_model where the lab uses the track's model (same family, smaller), at the lesson's
    first-run sizes. `flags` (what the user typed) win over those sizes; none is silently overwritten.

    Server mode keeps the lab's model: the vLLM server holds that model and the trainer streams its weights
    into it, so a smaller model could not be smoke-tested against it.
    """
    flags = flags or {}
    refused = [name for name in LAB_ONLY_SETTINGS if name in flags]
    if refused:
        raise SettingsRefused([lab_only_problem(refused)])
    values, sources = smoke_values(lab.as_dict(), {name: "the lab's settings" for name in SETTING_NAMES}, track, flags)
    checked = check_settings(values, sources, kind="smoke")
    if checked.problems:
        raise SettingsRefused(checked.problems, values, checked.warnings)
    return with_warnings(LabSettings(**checked.values), checked.warnings, checked.notes)


# What the smoke test sets for itself; every other setting it takes from the lab it stands before.
SMOKE_OWN_SETTINGS = (*SMOKE_SIZES, "per_device_train_batch_size", "train_size", *LAB_ONLY_SETTINGS, "model")


def lab_for_smoke(smoke: LabSettings, track: Track) -> LabSettings:
    """The lab a smoke test run on its own stands before: the track's lab as configured (images/tracks.toml), with
    the smoke test's settings wherever the smoke test takes them from the lab (rollout path, completion length,
    dtype, adapter...), and its model unless that is the track's smoke_model (then the lab's own model)."""
    lab = resolve_settings(track, with_context=False)
    taken = {name: getattr(smoke, name) for name in SETTING_NAMES - set(SMOKE_OWN_SETTINGS)}
    if smoke.model != track.lab.get("smoke_model"):
        taken["model"] = smoke.model
    return replace(lab, **taken)
