"""The builders behind one interface: every builder in the registry answers every part of Builder, the build asks a
builder what it can do and never its name, and a builder registered in one line is chosen without other edits."""

import ast
import inspect
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hostlab import HostError  # noqa: E402
from hostlab.images import builders  # noqa: E402
from hostlab.images.builders import BUILDERS, Builder, choose_builder  # noqa: E402
from hostlab.images.builders.buildah import Buildah  # noqa: E402
from hostlab.images.builders.buildx import Buildx  # noqa: E402
from hostlab.images.builders.engine import EngineBuilder  # noqa: E402

INTERFACE = [name for name in vars(Builder) if not name.startswith("_")] + list(Builder.__annotations__)


@pytest.mark.parametrize(
    "builder", [Buildah("1.28.2"), Buildx("0.13.0"), EngineBuilder("26.1.5")], ids=lambda b: b.name
)
def test_every_builder_answers_the_whole_interface(builder):
    missing = [name for name in INTERFACE if not hasattr(builder, name)]
    assert missing == []
    for name in INTERFACE:
        wanted = getattr(Builder, name, None)
        if callable(wanted):  # the same parameters as the interface says
            assert list(inspect.signature(getattr(builder, name)).parameters) == \
                list(inspect.signature(wanted).parameters)[1:], name
    assert builder.name in BUILDERS and builder.describe().startswith(builder.name)


def test_which_builders_set_the_times_and_which_need_a_hand_over():
    assert [(b.name, b.sets_times, b.loads_into_engine) for b in (Buildah("1"), Buildx("1"), EngineBuilder("1"))] == [
        ("buildah", True, False), ("buildx", True, True), ("docker", False, True)]


def _compares_a_builder_name(tree: ast.AST) -> list[str]:
    """`x.name == "buildah"` and the like: a branch on a builder's name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(isinstance(side, ast.Attribute) and side.attr == "name" for side in sides)
            literal = any(isinstance(side, ast.Constant) and side.value in BUILDERS for side in sides)
            if named and literal:
                found.append(ast.unparse(node))
    return found


def test_no_code_outside_the_builders_branches_on_a_builders_name():
    package = REPO / "hostlab" / "images" / "builders"
    files = [REPO / "tasks.py", *(p for p in (REPO / "hostlab").rglob("*.py") if not p.is_relative_to(package))]
    branches = {
        str(p.relative_to(REPO)): found for p in files if (found := _compares_a_builder_name(ast.parse(p.read_text())))
    }
    assert branches == {}


def test_the_scan_finds_a_branch_on_a_name():
    assert _compares_a_builder_name(ast.parse('if builder.name == "buildah":\n    pass\n')) == [
        "builder.name == 'buildah'"
    ]


def test_a_builder_registered_in_one_line_is_chosen(monkeypatch):
    class Kaniko(EngineBuilder):
        pass

    monkeypatch.setitem(BUILDERS, "kaniko", lambda: (Kaniko("1.0", name="kaniko", sets_times=True), ""))
    chosen = choose_builder("kaniko")
    assert chosen.name == "kaniko" and chosen.sets_times


def test_an_unknown_or_missing_builder_is_one_line(monkeypatch):
    with pytest.raises(HostError, match="--builder podman: choose one of buildx, buildah, docker"):
        choose_builder("podman")
    monkeypatch.setitem(BUILDERS, "buildah", lambda: (None, "buildah is not installed: `apt-get install -y buildah`"))
    with pytest.raises(HostError, match="--builder buildah: buildah is not installed"):
        choose_builder("buildah")


def test_none_asked_takes_the_first_that_can_build_here(monkeypatch):
    monkeypatch.setitem(BUILDERS, "buildx", lambda: (None, "Docker engine 20.10"))
    monkeypatch.setitem(BUILDERS, "buildah", lambda: (Buildah("1.28.2"), ""))
    monkeypatch.delenv("GRPOLAB_BUILDER", raising=False)
    assert choose_builder().name == "buildah"
    assert builders.choose_builder is choose_builder
