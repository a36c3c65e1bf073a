"""The rollout paths behind one interface (issue 51): each path is a module of grpolab.common.rollout_paths (its
settings, memory terms, disk needs, doctor items) with an engine in grpolab.rollouts, both listed by one registry.
Checked here: every registered path keeps the whole interface; no module outside those two packages tests a path's
name; and a path registered at run time (a fake module) is taken by the settings, the choice and the estimate with no
other edit."""

import ast
import importlib
import sys
import tomllib
import types
from dataclasses import fields
from pathlib import Path

import pytest
from grpolab.common import gpucode
from grpolab.common.rollout_paths import (
    ROLLOUT_PATH_REGISTRY, MemoryBasis, RolloutPath, SettingsWarning, needs_doctor_item, paths_by_setting, rollout_path,
)
from grpolab.common.tracks import ROLLOUT_PATHS, get_track
from grpolab.rollouts.base import RolloutChoice, RolloutEngine

LAB = Path(__file__).resolve().parents[1] / "entrypoint" / "grpolab"
# The packages where a path's name may be tested: its description and its engine.
PATH_PACKAGES = (LAB / "common" / "rollout_paths", LAB / "rollouts")


def interface(protocol) -> set[str]:
    """The members a Protocol asks for: its annotated attributes and its public methods."""
    methods = {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}
    return set(protocol.__annotations__) | methods


def doctor_item_names() -> set[str]:
    """The names the doctor gives its items: the first argument of every item(...) call in doctor.py."""
    tree = ast.parse((LAB / "environment" / "doctor.py").read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    items = [call for call in calls if call.func.id == "item" and call.args]
    return {call.args[0].value for call in items if isinstance(call.args[0], ast.Constant)}


def pyproject_extras() -> set[str]:
    with open(LAB.parents[1] / "pyproject.toml", "rb") as file:
        return set(tomllib.load(file)["project"]["optional-dependencies"])


def a_basis(settings, device: str = "cuda") -> MemoryBasis:
    return MemoryBasis(settings, device, 16.0, "BF16", 3.4, 0.5, "8 sequences x 1280 tokens x 112 KiB per token", 8,
                       vllm_cpu_engine_terms=lambda: [("vLLM engine runtime", 0.075, "a constant")])


class FakeModel:
    """Two parameters of 1,000 and 24 values and no linear layer: what disk_writes may count of a model."""

    def parameters(self):
        return [types.SimpleNamespace(numel=lambda: 1000), types.SimpleNamespace(numel=lambda: 24)]

    def named_modules(self):
        return []


# --- (a) every registered path keeps the whole interface ----------------------------------------------------


@pytest.mark.parametrize("name", list(ROLLOUT_PATH_REGISTRY))
def test_every_registered_path_supplies_every_part_of_the_interface(name):
    from grpolab.settings.lab_settings import LabSettings

    path = ROLLOUT_PATH_REGISTRY[name]
    assert sorted(interface(RolloutPath) - set(dir(path))) == []
    assert path.NAME == name and rollout_path(name) is path
    setting_names = {f.name for f in fields(LabSettings)}
    assert set(path.SETTINGS) <= setting_names - {"rollout"}
    assert all(isinstance(w, SettingsWarning) and set(w.names) <= setting_names for w in path.SETTINGS_WARNINGS)
    assert set(path.DOCTOR_ITEMS) <= doctor_item_names()
    assert path.GPU_LIBRARIES and all(isinstance(pattern, str) for pattern in path.GPU_LIBRARIES)
    assert isinstance(path.LAG_BASIS, str) and path.LAG_BASIS
    assert isinstance(path.SMOKE_KEEPS_LAB_MODEL, bool)
    assert path.LOCK_EXTRA is None or path.LOCK_EXTRA in pyproject_extras()
    assert path.VERL_REFUSAL is None or isinstance(path.VERL_REFUSAL, str)
    settings = LabSettings(rollout=name)
    for device in ("cuda", "cpu"):
        terms = path.memory_terms(a_basis(settings, device))
        assert terms and all(isinstance(label, str) and gb >= 0 and isinstance(how, str) for label, gb, how in terms)
    writes = path.disk_writes(settings, FakeModel())
    assert isinstance(writes, dict) and all(isinstance(size, int) and size > 0 for size in writes.values())
    # Its engine: the module of grpolab.rollouts its description names, with the whole engine interface.
    engine = importlib.import_module(f"grpolab.rollouts.{path.ENGINE}")
    assert sorted(interface(RolloutEngine) - set(dir(engine))) == []
    assert all(callable(getattr(engine, member)) for member in interface(RolloutEngine))


def test_the_tracks_names_are_the_registrys():
    assert list(ROLLOUT_PATHS) == list(ROLLOUT_PATH_REGISTRY)
    assert list(ROLLOUT_PATH_REGISTRY) == ["inprocess", "vllm-colocate", "vllm-server", "llamacpp"]
    assert paths_by_setting()["vllm_importance_sampling_correction"] == ("vllm-colocate", "vllm-server")


# --- (b) nobody else tests a path's name ----------------------------------------------------------------


def _names_in(node: ast.AST, names: set[str]) -> bool:
    """A literal naming a path: "llamacpp", or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in names
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_in(element, names) for element in node.elts)


def _is_rollout(node: ast.AST) -> bool:
    """settings.rollout, s["rollout"], a variable called rollout."""
    if isinstance(node, ast.Attribute):
        return node.attr == "rollout"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "rollout"
    return isinstance(node, ast.Name) and node.id == "rollout"


def name_tests(source: str, names) -> list[str]:
    """Every place in `source` that tests a rollout path by its name: a comparison or `case` with a path's name, a
    table keyed by path names, or a rollout setting's startswith/endswith."""
    names = set(names)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_in(side, names) for side in (node.left, *node.comparators)):
            found.append(f"line {node.lineno}: compares with a path's name")
        elif isinstance(node, ast.MatchValue) and _names_in(node.value, names):
            found.append(f"line {node.lineno}: a case of a path's name")
        elif isinstance(node, ast.Dict) and any(key is not None and _names_in(key, names) for key in node.keys):
            found.append(f"line {node.lineno}: a table keyed by path names")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and _is_rollout(node.func.value)):
            found.append(f"line {node.lineno}: tests the rollout setting's {node.func.attr}")
    return found


def test_the_checker_finds_a_path_tested_by_name():
    """The checker itself, on the forms the tree had before issue 51."""
    names = ROLLOUT_PATH_REGISTRY.keys()
    assert name_tests("if settings.rollout == 'llamacpp':\n    x\n", names) == ["line 1: compares with a path's name"]
    assert name_tests("x = s['rollout'] not in ('vllm-colocate', 'vllm-server')\n", names)
    assert name_tests("BASIS = {'inprocess': 'by construction'}\n", names)
    assert name_tests("wants = ctx.rollout.startswith('vllm')\n", names)
    assert name_tests("match settings.rollout:\n    case 'vllm-server':\n        pass\n", names)
    # Naming a path as a value is no test of one.
    assert name_tests("s = replace(settings, rollout='inprocess')\nrow = {'rollout': 'vllm-colocate'}\n", names) == []


def test_no_module_outside_the_path_packages_tests_a_paths_name():
    found = {}
    for file in sorted(LAB.rglob("*.py")):
        if any(file.is_relative_to(package) for package in PATH_PACKAGES):
            continue
        tests = name_tests(file.read_text(), ROLLOUT_PATH_REGISTRY.keys())
        if tests:
            found[str(file.relative_to(LAB))] = tests
    assert found == {}, "ask the path (grpolab.common.rollout_paths) or its engine (grpolab.rollouts) instead"


# --- (c) a new path is a module and a registry line ---------------------------------------------------------


@pytest.fixture
def fake_path(monkeypatch):
    """A path registered at run time: its description and its engine, two modules, and a registry line."""
    description = types.ModuleType("fake_path")
    description.__dict__.update(
        NAME="fake-engine", ENGINE="fake_engine_for_tests", SETTINGS=("llamacpp_refresh_every",), SETTINGS_WARNINGS=(),
        DOCTOR_ITEMS=("vllm",), LOCK_EXTRA=None, GPU_LIBRARIES=("fake/lib/libfake.so",), LAG_BASIS="by the fake",
        SMOKE_KEEPS_LAB_MODEL=False, VERL_REFUSAL="the fake has no verl rollout",
        memory_terms=lambda basis: [("Fake engine", 1.25, "a constant")],
        disk_writes=lambda settings, model: {"fake files": 7},
    )

    def choose(settings, track, facts):
        return RolloutChoice(settings.rollout, {"fake": True}, f"the fake on {facts.device_type}")

    engine = types.ModuleType("grpolab.rollouts.fake_engine_for_tests")
    engine.__dict__.update(check_installed=lambda: None, choose=choose, configure=lambda *args, **kwargs: ({}, "fake"))
    monkeypatch.setitem(ROLLOUT_PATH_REGISTRY, description.NAME, description)
    monkeypatch.setitem(sys.modules, engine.__name__, engine)
    return description


def test_a_path_registered_at_run_time_is_taken_with_no_other_edit(fake_path):
    from grpolab.export.verl_mapping import refusals
    from grpolab.memory.estimate import estimate_memory
    from grpolab.rollouts.choice import choose_rollout
    from grpolab.run.diskspace import lab_writes
    from grpolab.settings.lab_settings import ALLOWED, resolve_settings

    assert "fake-engine" in ROLLOUT_PATHS and "fake-engine" in ALLOWED["rollout"].describe()
    settings = resolve_settings(get_track("c"), overrides={"rollout": "fake-engine", "llamacpp_refresh_every": 3})
    assert settings.rollout == "fake-engine" and not any("has no effect" in line for line in settings.warnings())
    other = resolve_settings(get_track("c"), overrides={"rollout": "inprocess", "llamacpp_refresh_every": 3})
    assert any("it is for --rollout llamacpp or fake-engine" in line for line in other.warnings())
    choice = choose_rollout(settings, get_track("c"), device_type="cpu")
    assert (choice.path, choice.grpo_kwargs, choice.reason) == ("fake-engine", {"fake": True}, "the fake on cpu")
    assert estimate_memory("Qwen/Qwen3-1.7B", settings, device_total_gb=16).term("Fake engine") == 1.25
    assert needs_doctor_item("fake-engine", "vllm") and gpucode.needed_by("fake/lib/libfake.so", "fake-engine")
    assert any("the fake has no verl rollout" in reason for reason in refusals(settings, "verl", 1, 1))
    assert lab_writes(settings, FakeModel())["fake files"] == 7
