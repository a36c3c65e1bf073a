"""The lab's settings: one dataclass whose defaults are the lesson's, each declared beside what it allows.

Precedence, lowest first: the lesson's defaults below, the track's [tracks.T.lab] row in
images/tracks.toml, a config file (--config, TOML or JSON), then command-line flags.

Every setting says, next to its default, its type and its valid range or choices (`Allowed`), and where one
exists the range a careful user stays inside (outside it: a warning that reaches the run log, never a
refusal). `check_settings` is the one loop over them all, then over the relations between settings, for
values from every source alike; it runs before any model, tokenizer or dataset loads and refuses with every
problem in one message (`SettingsRefused`), each naming the flag, the value given, where it came from and
what is allowed. `grpolab lab --help` prints the same declarations. Beside this module: the rules beyond a range
(rules), the relations between settings (relations), and how a value is shown and a refusal reads (refusals).

Why dataclass field metadata and not pydantic: LabSettings stays the plain dataclass the rest of the lab
uses (asdict, replace, fields); the messages are ours (flag, value, source, range) rather than a library's
error dump; and nothing is added to the images' locks or to the start-up of a run that must be refused in
well under a second.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path

from .allowed_values import Allowed, WrongType, number, setting
from .config_file import ConfigFileError, read_config_file
from ..common.errors import LayerFailure
from ..model.shape import context_from_config, local_model_config
from .nearest_working import (
    nearest_batch,
    nearest_group,
    nearest_heldout_size,
    nearest_length,
    nearest_logging_steps,
    nearest_train_size,
)
from .refusals import COMMAND_LINE, LESSON_DEFAULT, SMOKE_SOURCE, Checked, Problem, SettingsRefused, flag, shown
from .relations import check_relations
from .rules import (
    REPORT_TO_PACKAGES,
    dataset_rule,
    model_rule,
    nonempty,
    report_to_rule,
    target_modules_rule,
    url_rule,
    weights_rule,
)
from ..common.rollout_paths import DEFAULT_ROLLOUT_PATH, registered_path
from ..common.tracks import ROLLOUT_PATHS, Track

DTYPES = ("auto", "float32", "bfloat16", "float16")
SEED_LIMIT = 2**32  # numpy's seeds (transformers' set_seed seeds numpy too) are below 2**32


# --- the settings -------------------------------------------------------------------------------------------


@dataclass
class LabSettings:
    # Which machine, model and data.
    track: str = setting(
        "c", Allowed(str, rule=nonempty, rule_text="a track in images/tracks.toml, chosen with --track")
    )
    model: str = setting(
        "Qwen/Qwen3-1.7B",
        Allowed(
            str,
            rule=model_rule,
            rule_text="a Hugging Face id (owner/name), a local model folder, or tiny (the built-in model)",
        ),
    )
    dataset: str = setting(
        "arithmetic",
        Allowed(
            str,
            rule=dataset_rule,
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
            str, rule=target_modules_rule, rule_text="all-linear or module names separated by commas, not lm_head"
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
        Allowed(dict, rule=weights_rule, rule_text="built-in rewards or module:function, finite weights, not all 0"),
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
        "http://localhost:8000", Allowed(str, rule=url_rule, rule_text="http://HOST[:PORT]"), "server mode only"
    )
    llamacpp_refresh_every: int = setting(
        0, Allowed(int, low=0), "llamacpp only; 0: never refresh the sampler (stale); K: re-export every K steps"
    )

    # Live logging: TRL's report_to, into the run's folder (none, tensorboard, trackio, wandb where installed).
    report_to: str = setting(
        "none", Allowed(str, choices=tuple(REPORT_TO_PACKAGES), rule=report_to_rule, rule_text="its package installed")
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


# --- checking: one loop over every setting, then the relations (relations.py) ------------------------------


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
        typed, sources if known else None, kind, bad, context, context_from, ALLOWED, DEFAULTS
    )
    return Checked(typed, problems + relations, warnings + relation_warnings, notes)


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
