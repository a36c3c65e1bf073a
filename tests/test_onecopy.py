"""One copy of each image once `invoke build` is done (hostlab/images/builders/onecopy.py): which of buildah's images
are this build's steps, the key a dependency stage is kept under, and, for real, a two-stage build in a buildah store of
the test's own whose copies go, whose dependency stage the engine keeps for the next code change, and whose older
dependency stage goes with a lock change."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from grpolab.common.tracks import get_track

import hostlab.images.build
import tasks
from hostlab.host import engine
from hostlab.images.build import build
from hostlab.images.builders import choose_builder
from hostlab.images.builders.buildah_store import buildah_layers, fresh_store, run_buildah
from hostlab.images.builders.onecopy import CODE_ARGS, DEPS_REPOSITORY, deps_key, deps_tag, is_bottom_of
from hostlab.images.standin import host_arch, standin_name
from hostlab.run.up import up

REPO = Path(__file__).resolve().parents[1]
TRACK = get_track("c")
BASE = ["b1", "b2"]
CHAIN = BASE + ["d1", "d2", "l1", "empty"]


@pytest.mark.parametrize(
    ("layers", "step"),
    [
        (BASE, False),  # the base: every build starts from it
        (BASE[:1], False),
        (BASE + ["d1"], True),  # a step of the dependency stage
        (CHAIN, True),  # the image itself
        (BASE + ["d1", "d2", "empty"], False),  # the dependency image without history: removed by id instead
        (BASE + ["c1", "c2"], False),  # the compile of llama.cpp: minutes to make again
        (CHAIN + ["more"], False),  # an image built on top of this one (grpolab:c-llamacpp on grpolab:c)
        ([], False),
    ],
)
def test_a_step_of_this_build_is_an_image_whose_layers_are_the_bottom_of_it_above_the_base(layers, step):
    assert is_bottom_of(layers, CHAIN, BASE) is step


def test_the_key_follows_what_the_dependency_stage_is_made_of_and_not_the_code(tmp_path):
    from test_faults import committed_copy

    repo = committed_copy(tmp_path / "repo")
    args = {"TRACK": "c", "PYTHON_VERSION": "3.13", "GIT_REVISION": "abc", "TRACK_ENV": "A=1"}
    key = deps_key(TRACK, repo, args, 1_700_000_000, "sha256:base")
    assert len(key) == 16 and deps_tag(TRACK, key) == f"{DEPS_REPOSITORY}:c-{key}"
    assert set(CODE_ARGS) == {"GIT_REVISION", "TRACK_ENV"}
    assert deps_key(TRACK, repo, {**args, "GIT_REVISION": "def", "TRACK_ENV": "A=2"}, 1_700_000_000,
                    "sha256:base") == key  # a code change keeps it
    (repo / "entrypoint" / "grpolab" / "changed.py").write_text("# code\n")
    assert deps_key(TRACK, repo, args, 1_700_000_000, "sha256:base") == key
    for changed in (
        deps_key(TRACK, repo, {**args, "PYTHON_VERSION": "3.12"}, 1_700_000_000, "sha256:base"),
        deps_key(TRACK, repo, args, 1_700_000_001, "sha256:base"),
        deps_key(TRACK, repo, args, 1_700_000_000, "sha256:other"),
    ):
        assert changed != key
    with open(repo / "lockfiles" / "c.txt", "a") as lock:
        lock.write("# a lock change\n")
    assert deps_key(TRACK, repo, args, 1_700_000_000, "sha256:base") != key


def test_only_the_learners_commands_keep_one_copy_and_say_how_to_keep_more():
    """`invoke build` and `invoke up` keep one copy unless --keep-cache; the library's build (CI's builds, the
    benchmarks, the reproducibility check) keeps buildah's store, which its next steps use."""

    assert inspect.signature(build).parameters["one_copy"].default is False
    assert inspect.signature(up).parameters["one_copy"].default is False
    for task in (tasks.build_image, tasks.up):
        assert inspect.signature(task.body).parameters["keep_cache"].default is False
        assert "keep_cache" in task.help and "3x" in task.help["keep_cache"]


# ----------------------------------------------------------------------------------------------- the real thing
TINY_DOCKERFILE = """\
ARG BASE_IMAGE=scratch
ARG DEPS=deps
ARG LAB=lab
ARG SOURCE_BUILDS=source-builds
FROM ${BASE_IMAGE} AS source-builds
ARG SOURCE_DATE_EPOCH
RUN set -eu; mkdir -p /wheels; echo compiled > /wheels/compiled
FROM ${BASE_IMAGE} AS deps
ARG SOURCE_DATE_EPOCH
ARG TRACK=c
RUN --mount=type=bind,source=uv.txt,target=/tmp/uv.txt --mount=type=cache,target=/root/.cache/uv \\
    set -eu; mkdir -p /opt/venv; cp /tmp/uv.txt /opt/venv/lock-${TRACK}.txt; echo wheel > /root/.cache/uv/w
RUN set -eu; echo second > /opt/venv/second
FROM ${DEPS} AS lab
ARG SOURCE_DATE_EPOCH
ARG TRACK=c
COPY entrypoint/grpolab/__init__.py /opt/grpolab/__init__.py
RUN set -eu; ls /opt/grpolab > /opt/grpolab/listing
FROM ${SOURCE_BUILDS} AS compiled
FROM ${LAB} AS with-source-builds
ARG SOURCE_DATE_EPOCH
RUN --mount=type=bind,from=compiled,source=/wheels,target=/tmp/wheels set -eu; cp /tmp/wheels/compiled /opt/compiled
"""


def _run(cmd: list[str], **kw) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600, **kw).stdout.strip()


def _commit(repo: Path, message: str) -> None:
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    _run(git + ["add", "."])
    _run(git + ["commit", "-qm", message])


@pytest.fixture
def tiny_repo(tmp_path):

    if shutil.which("buildah") is None or not engine.running():
        pytest.skip("needs buildah and a running Docker engine (CI has both)")
    base = standin_name(host_arch())
    if engine.image_or_none(base) is None:
        pytest.skip(f"no {base} here (invoke base makes it; CI has it)")
    from test_faults import committed_copy

    repo = committed_copy(tmp_path / "repo")
    (repo / "images" / "Dockerfile").write_text(TINY_DOCKERFILE)
    _commit(repo, "a tiny two-stage Dockerfile with the project's stage names")
    return repo, base


def _images(prefix: str) -> list[str]:
    names = _run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]).split()
    return sorted(name for name in names if name.startswith(prefix))


@pytest.mark.docker
def test_one_copy_stays_and_a_code_change_takes_the_dependency_stage_from_the_engine(tiny_repo, tmp_path, capfd,
                                                                                     monkeypatch):
    """In a buildah store of the test's own (the machine's is not touched): after the build, buildah keeps only the
    base; the engine holds the image and its dependency stage, tagged by its key, for no more disk than the image; the
    images' uv cache is gone. A code change then builds on the engine's dependency stage (not built again), and a
    lock change drops the older one."""


    # The track's measured need (GBs) is for its real Dockerfile; this one writes kilobytes.
    monkeypatch.setattr(hostlab.images.build, "check_room", lambda *args, **kw: None)
    repo, base = tiny_repo
    image, llama = "grpolab-test:onecopy", "grpolab-test:onecopy-llamacpp"
    builder = choose_builder("buildah")
    before = set(_images(f"{DEPS_REPOSITORY}:c-"))
    made = []
    try:
        with fresh_store() as store:  # under /var/tmp, not the test's /tmp folder: disk.py
            first = build("c", base=base, repo=repo, tag=image, write_env=False, builder=builder,
                          compare_record=False, one_copy=True, skip_host_check=True)
            made = sorted(set(_images(f"{DEPS_REPOSITORY}:c-")) - before)
            out = capfd.readouterr().out
            assert len(made) == 1, made
            kept = run_buildah("images", "--all", "--quiet", "--no-trunc").stdout.split()
            base_id = _run(["docker", "image", "inspect", "--format", "{{.Id}}", base]).removeprefix("sha256:")
            assert [i.removeprefix("sha256:") for i in kept] == [base_id], "buildah kept more than the base"
            assert not (store / "tmp" / "buildah-cache" / "root" / ".cache" / "uv").exists()
            assert "one copy: removed buildah's" in out and "the images' uv cache" in out
            engine_deps = _run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", made[0]])
            engine_image = _run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", image])
            assert engine_image.startswith(engine_deps.rstrip("]")), "the dependency stage is not the image's bottom"

            (repo / "entrypoint" / "grpolab" / "__init__.py").write_text('"""changed"""\n')
            _commit(repo, "a code change")
            second = build("c", base=base, repo=repo, tag=image, write_env=False, builder=builder,
                           compare_record=False, one_copy=True, skip_host_check=True)
            out = capfd.readouterr().out
            assert "taking it into buildah's store, not building it again" in out
            assert second.deps_image_id == first.deps_image_id and second.deps_layers == first.deps_layers
            assert second.image_id != first.image_id
            assert "of its" in out and "layers" in out  # the hand-over sent only the code's layers

            with open(repo / "lockfiles" / "uv.txt", "a") as lock:
                lock.write("# a lock change\n")
            _commit(repo, "a lock change")
            third = build("c", base=base, repo=repo, tag=image, write_env=False, builder=builder,
                          compare_record=False, one_copy=True, skip_host_check=True)
            out = capfd.readouterr().out
            assert "taking it into buildah's store" not in out
            assert third.deps_image_id != first.deps_image_id
            now = sorted(set(_images(f"{DEPS_REPOSITORY}:c-")) - before)
            assert len(now) == 1 and now != made, now
            assert f"dropped the engine's older dependency stages of track c: {made[0]}" in out
            made = now

            # llama.cpp's image: the code's layers, the compile's, on the kept dependency stage. buildah keeps the
            # base and the compile only (minutes to make again), the lab stage without history included.
            fourth = build("c", base=base, repo=repo, tag=llama, write_env=False, builder=builder,
                           compare_record=False, one_copy=True, skip_host_check=True, rollout="llamacpp")
            out = capfd.readouterr().out
            assert "not building it again" in out and fourth.compiled_layers
            base_layers = buildah_layers(base_id)
            for left in run_buildah("images", "--all", "--quiet", "--no-trunc").stdout.split():
                layers = buildah_layers(left)
                assert layers == base_layers or fourth.compiled_layers[: len(layers)] == layers, left
    finally:
        subprocess.run(["docker", "image", "rm", "--force", image, llama, *made], capture_output=True, timeout=300)
        if os.environ.get("CI"):
            subprocess.run(["docker", "image", "prune", "--force"], capture_output=True, timeout=300)
