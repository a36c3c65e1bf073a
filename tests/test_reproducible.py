"""Same commit, same image: times from git, buildah setting them, the committed record, the difference explained,
and the image's id carried into the run log, the doctor and the report.

The full double build of a track's image takes minutes a build; CI's build of track c is compared with
lockfiles/c.image.json (strict under CI=true), and `invoke build.reproducible` runs the double build. Here
the same machinery runs on small images built for real by buildah and Docker."""

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402
from grpolab.environment.doctor import image_item  # noqa: E402
from grpolab.environment.fingerprint import fingerprint_drift, image_identity  # noqa: E402
from grpolab.report.rows import environment  # noqa: E402

from hostlab import REPO, HostError

from hostlab.host import engine  # noqa: E402
from hostlab.host.disk import MOUNT_TARGET_TOPS  # noqa: E402
from hostlab.images.standin import host_arch, standin_name  # noqa: E402
from hostlab.images.builders import choose_builder, commit_time, deps_inputs, engine_layers, lab_inputs  # noqa: E402
from hostlab.images.builders.buildah import buildah_build  # noqa: E402
from hostlab.images.builders.buildah_store import base_into_buildah, buildah_forget, buildah_layers, fresh_store  # noqa: E402
from hostlab.images.builders.buildx import buildx_build  # noqa: E402
from hostlab.images.builders.handover import buildah_to_engine  # noqa: E402
from hostlab.images.compose import compose_env  # noqa: E402
from hostlab.images.diff import explain  # noqa: E402
from hostlab.images.record import compare_with_record, input_hashes, write_record  # noqa: E402

STANDIN = standin_name(host_arch())
HAVE_BUILDAH = shutil.which("buildah") is not None
needs_buildah = pytest.mark.skipif(
    not (HAVE_BUILDAH and engine.running() and engine.image_or_none(STANDIN) is not None),
    reason="needs buildah, a Docker engine and the stand-in base (CI has all three: setup-host.sh, invoke base)",
)


def git(repo: Path, *args: str, when: int | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    if when is not None:
        env |= {"GIT_AUTHOR_DATE": f"@{when} +0000", "GIT_COMMITTER_DATE": f"@{when} +0000"}
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True, timeout=60
    ).stdout


# ------------------------------------------------------------------------------------------ times from git
def test_each_part_gets_the_time_of_the_last_commit_that_changed_it(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "images").mkdir()
    (tmp_path / "entrypoint").mkdir()
    (tmp_path / "images" / "Dockerfile").write_text("FROM x\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "dockerfile", when=1_700_000_000)
    (tmp_path / "entrypoint" / "lab.py").write_text("print(1)\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "code", when=1_700_000_500)
    (tmp_path / "README.md").write_text("words\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "docs", when=1_700_009_999)
    track = get_track("c")
    assert commit_time(tmp_path, deps_inputs(track)) == 1_700_000_000  # a code or docs commit leaves it
    assert commit_time(tmp_path, lab_inputs(track)) == 1_700_000_500  # the docs commit does not count
    (tmp_path / "entrypoint" / "lab.py").write_text("print(2)\n")  # uncommitted: still the commit's time, not the clock
    assert commit_time(tmp_path, lab_inputs(track)) == 1_700_000_500


def test_the_dockerfile_gives_each_stage_its_time_and_every_run_fails_on_error():
    text = (REPO / "images" / "Dockerfile").read_text()
    stages = text.split("\nFROM ")[1:]
    assert [s.split("\n", 1)[0] for s in stages] == [
        "${BASE_IMAGE} AS source-builds",
        "${BASE_IMAGE} AS deps",
        "${DEPS} AS lab",
        "${SOURCE_BUILDS} AS compiled",
        "${LAB} AS with-source-builds",
    ]
    assert (
        stages[3].strip() == "${SOURCE_BUILDS} AS compiled"
    )  # a name for the compile's image, which the last stage mounts
    building = [s for s in stages if "\nRUN " in s or "\nCOPY " in s]
    assert len(building) == 4 and all("\nARG SOURCE_DATE_EPOCH\n" in s for s in building), (
        "each stage's time must be in its cache key"
    )
    runs = text.split("\nRUN ")[1:]
    bodies = [" ".join(line.strip() for line in r.split("\n") if not line.strip().startswith("--mount")) for r in runs]
    assert bodies and all(b.lstrip("\\ ").startswith("set -eu;") for b in bodies), "buildah's OCI images ignore SHELL"
    for global_arg in ("ARG DEPS=deps", "ARG LAB=lab", "ARG SOURCE_BUILDS=source-builds"):
        assert global_arg in text.split("\nFROM ", 1)[0], f"{global_arg} is global: a FROM reads it"


# ------------------------------------------------------------------------------------------ buildah, for real
SMALL = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS deps
ARG SOURCE_DATE_EPOCH
RUN set -eu; python3 -m venv /opt/venv; python3 -c "import time; open('/opt/made', 'w').write('x')"
COPY code/ /opt/code/
"""


def small_context(tmp_path: Path, code: str) -> Path:
    context = tmp_path / f"context-{abs(hash(code))}"
    (context / "code").mkdir(parents=True)
    (context / "code" / "lab.py").write_text(code)
    (context / "Dockerfile").write_text(SMALL)
    return context


@pytest.fixture
def own_store(tmp_path):
    """The tests' buildah work in a store of their own: the everyday store's images and cache are not touched."""
    with fresh_store() as folder:  # under /var/tmp, not the test's /tmp folder: hostlab/host/disk.py
        yield folder


def small_build(context: Path, epoch: int, cached: bool = False) -> str:
    """The built image's id (without history); `cached`: every step must come from buildah's layer cache."""
    base = base_into_buildah(engine.image_or_none(STANDIN).id)
    image_id, built, tail = buildah_build(
        context / "Dockerfile", context, "deps", epoch, {"BASE_IMAGE": base}, "linux/" + host_arch(), None
    )
    assert image_id and built and image_id != built, "\n".join(tail[-20:])
    steps_run = [line for line in tail if line.startswith("STEP ") and (" RUN " in line or " COPY " in line)]
    if cached:
        assert sum("Using cache" in line for line in tail) >= len(steps_run) > 0, "\n".join(tail)
    return image_id


@pytest.mark.docker
@needs_buildah
def test_two_builds_from_nothing_give_one_id_and_another_time_another(tmp_path, own_store):
    """A venv (files stamped by the clock as they are written) and a COPY: buildah's --timestamp sets them all."""
    context = small_context(tmp_path, "print('lab')\n")
    first = small_build(context, 1_700_000_000)
    assert (
        small_build(context, 1_700_000_000, cached=True) == first
    )  # a rebuild: every step from the cache, the same id
    buildah_forget(first)
    second = small_build(context, 1_700_000_000)
    assert first == second
    third = small_build(context, 1_700_000_001)  # the time is in the cache key: nothing of the first is reused
    assert third != second and buildah_layers(third)[1:] != buildah_layers(second)[1:]
    assert buildah_layers(third)[0] == buildah_layers(second)[0]  # the base, as it was
    name = f"grpolab-test:repro-{os.getpid()}"
    try:
        assert buildah_to_engine(second, name).removeprefix("sha256:") == second.removeprefix("sha256:")
        assert engine.image_or_none(name).attrs["RootFS"]["Layers"] == buildah_layers(second)
    finally:
        engine.client().images.remove(name, force=True)
        buildah_forget(first, third)


@pytest.mark.docker
@needs_buildah
def test_a_difference_is_named_down_to_the_file(tmp_path, own_store):
    names = [f"grpolab-test:diff-{os.getpid()}-{n}" for n in (1, 2)]
    ids = [small_build(small_context(tmp_path, code), 1_700_000_000) for code in ("print('one')\n", "print('two')\n")]
    try:
        for image_id, name in zip(ids, names):
            buildah_to_engine(image_id, name)
        layers = [engine.image_or_none(n).attrs["RootFS"]["Layers"] for n in names]
        lines = explain(*names, *layers)
        text = "\n".join(lines)
        # the COPY's layer, the last but the empty one the history-free commit adds; the venv's is the same
        assert lines[0].startswith(f"layer #{len(layers[0]) - 2}:"), text
        assert "/opt/code/lab.py: content (13 vs 13 bytes)" in text
        assert "diffoscope /opt/code/lab.py" in text or "first differing byte at offset 7" in text
    finally:
        for name in names:
            engine.client().images.remove(name, force=True)
        buildah_forget(*ids)


# ------------------------------------------------------------------------------------------ the committed record
def fake_repo(tmp_path: Path, track) -> Path:
    for path in deps_inputs(track):
        if (REPO / path).is_file():
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / path, tmp_path / path)
    return tmp_path


def built(**fields) -> SimpleNamespace:
    made = dict(
        base="grpolab-base:trixie-amd64",
        base_id="sha256:" + "b" * 64,
        deps_image_id="sha256:" + "d" * 64,
        deps_layers=["sha256:" + "1" * 64, "sha256:" + "2" * 64],
        epochs={"deps": 1_700_000_000, "lab": 1_700_000_500},
        builder="buildah 1.28.2",
        image_id="sha256:" + "e" * 64,
        compiled_image_id="",
        compiled_layers=[],
        record_name="c",
    )
    return SimpleNamespace(**(made | fields))


def test_a_build_is_held_to_the_record_of_its_inputs(tmp_path):
    track = get_track("c")
    repo = fake_repo(tmp_path, track)
    assert compare_with_record(track, built(), repo)[0] == "none"
    write_record(track, built(), {"builds": 2, "same": True}, repo)
    record = json.loads((repo / "lockfiles" / "c.image.json").read_text())
    assert record["inputs"] == input_hashes(track, repo) and "lockfiles/c.txt" in record["inputs"]
    assert compare_with_record(track, built(), repo)[0] == "same"
    verdict, lines = compare_with_record(
        track, built(deps_image_id="sha256:" + "f" * 64, deps_layers=["sha256:" + "1" * 64, "sha256:" + "3" * 64]), repo
    )
    assert verdict == "differs" and "first differing layer: #1" in "\n".join(lines)
    verdict, lines = compare_with_record(
        track, built(base="python:3.13-slim-trixie", base_id="sha256:" + "a" * 64), repo
    )
    assert verdict == "other base" and "invoke build --track c --base grpolab-base:trixie-amd64" in lines[0]
    verdict, lines = compare_with_record(track, built(base_id="sha256:" + "a" * 64), repo)  # the stand-in, made anew
    assert verdict == "stale" and "--base grpolab-base:trixie-amd64 --record" in lines[0]
    with (repo / "lockfiles" / "c.txt").open("a") as lock:
        lock.write("# edited\n")
    verdict, lines = compare_with_record(track, built(), repo)
    assert (
        verdict == "stale"
        and "lockfiles/c.txt changed" in lines[0]
        and "build.reproducible --track c --record" in lines[0]
    )


def test_the_llamacpp_image_has_a_record_of_its_own_holding_its_compile_too(tmp_path):
    track = get_track("c")
    repo = fake_repo(tmp_path, track)
    compiled = dict(record_name="c-llamacpp", compiled_image_id="sha256:" + "c" * 64,
                    compiled_layers=["sha256:" + "1" * 64, "sha256:" + "7" * 64])
    verdict, lines = compare_with_record(track, built(**compiled), repo)
    assert verdict == "none" and "--track c --rollout llamacpp --record" in lines[0]
    write_record(track, built(**compiled), {"builds": 2, "same": True}, repo)
    record = json.loads((repo / "lockfiles" / "c-llamacpp.image.json").read_text())
    assert record["compiled_image_id"] == "sha256:" + "c" * 64 and not (repo / "lockfiles" / "c.image.json").exists()
    assert compare_with_record(track, built(**compiled), repo)[0] == "same"
    verdict, lines = compare_with_record(
        track, built(**{**compiled, "compiled_image_id": "sha256:" + "9" * 64,
                        "compiled_layers": ["sha256:" + "1" * 64, "sha256:" + "8" * 64]}), repo
    )
    assert verdict == "differs" and lines[0].startswith("compile stage's image sha256:999999999999")
    assert "first differing layer: #1" in lines[1] and "--rollout llamacpp" in lines[-1]
    assert compare_with_record(track, built(), repo)[0] == "none"  # the plain image: its own record, none here


def test_the_committed_records_match_their_inputs():
    """A Dockerfile, lock or side lock changed without recording what it gives fails here, before any build."""
    for path in sorted((REPO / "lockfiles").glob("*.image.json")):
        record = json.loads(path.read_text())
        track = get_track(record["track"])
        assert record["inputs"] == input_hashes(track), (
            f"{path.name} is stale: `invoke build.reproducible --track {track.name} --record`"
        )
        assert record["checked"]["same"] is True and record["checked"]["builds"] == 2


# ------------------------------------------------------------------------------------------ the id, carried
def test_the_image_id_reaches_the_run_log_the_doctor_and_the_report(monkeypatch):
    image_id = "sha256:" + "4c2d95832e99" + "0" * 52
    monkeypatch.setenv("GRPOLAB_IMAGE", image_id)
    monkeypatch.setenv("GRPOLAB_IMAGE_NAME", "grpolab:c")
    monkeypatch.delenv("GRPOLAB_IMAGE_REPO_DIGEST", raising=False)
    fp = image_identity()
    assert fp == {"image_id": image_id, "image_name": "grpolab:c", "image_repo_digest": None}
    assert fingerprint_drift({"image_id": "sha256:" + "9" * 64}, {"image_id": image_id}) == [
        f"image sha256:{'9' * 64} -> {image_id}"
    ]
    monkeypatch.setenv("GRPOLAB_LOCK_SHA256", "a" * 64)  # inside an image
    ctx = SimpleNamespace(fingerprint=fp)
    found = image_item(ctx)
    assert found["status"] == "ok" and found["summary"].startswith(image_id) and "no repo digest" in found["summary"]
    monkeypatch.setenv("GRPOLAB_IMAGE", "grpolab:c")  # started by name: no id to record
    found = image_item(SimpleNamespace(fingerprint=image_identity()))
    assert found["status"] == "warn" and "docker compose run" in found["action"]
    monkeypatch.delenv("GRPOLAB_LOCK_SHA256")  # a venv: no image item at all
    assert image_item(SimpleNamespace(fingerprint=image_identity())) is None
    assert environment({"fingerprint": {"image_id": image_id}})["image"] == "4c2d95832e99"


def test_compose_runs_the_built_image_by_its_id():
    env = compose_env(get_track("c"), "grpolab:c", image_id="sha256:" + "4" * 64, uid_gid=(1000, 1000))
    assert env["LAB_IMAGE"] == "sha256:" + "4" * 64 and env["LAB_IMAGE_NAME"] == "grpolab:c"
    compose = (REPO / "compose" / "base.yaml").read_text()
    assert "GRPOLAB_IMAGE: ${LAB_IMAGE}" in compose and "image: ${LAB_IMAGE:?" in compose


def engine_builder():
    try:
        return choose_builder("buildx")
    except HostError as why:
        return why


@pytest.mark.docker
@pytest.mark.skipif(
    isinstance(engine_builder(), HostError),
    reason=f"the engine's own builder cannot set every time here ({engine_builder()}); buildah does (CI)",
)
def test_the_engines_own_builder_where_it_can(tmp_path):
    """Docker >= 26 with the containerd image store: SOURCE_DATE_EPOCH and rewrite-timestamp, the build cache emptied
    between two builds, one id. (Run here against Debian 13's Docker 26.1.5: DOCKER_HOST and DOCKER_CONFIG pointed at
    it, images/buildkit-repro-check.sh.)"""
    context = small_context(tmp_path, "print('lab')\n")
    ids = []
    try:
        for attempt in (1, 2):
            subprocess.run(["docker", "buildx", "prune", "--all", "--force"], capture_output=True, timeout=300)
            image_id, tail = buildx_build(
                context / "Dockerfile",
                context,
                "deps",
                1_700_000_000,
                {"BASE_IMAGE": STANDIN},
                "linux/" + host_arch(),
                None,
                f"grpolab-test:buildx-{attempt}",
            )
            assert image_id, "\n".join(tail[-20:])
            ids.append(image_id)
        assert ids[0] == ids[1] and engine_layers("grpolab-test:buildx-1") == engine_layers("grpolab-test:buildx-2")
    finally:
        for attempt in (1, 2):
            subprocess.run(["docker", "rmi", f"grpolab-test:buildx-{attempt}"], capture_output=True, timeout=120)


# ----------------------------------- buildah's store must not be under a folder the Dockerfile mounts into
def test_every_mount_target_of_the_dockerfile_is_under_a_top_folder_a_store_is_kept_out_of():
    targets = re.findall(r"--mount=type=\w+,[^ \\]*?target=([^ ,\\]+)", (REPO / "images" / "Dockerfile").read_text())
    assert len(targets) >= 10
    tops = {Path("/", Path(target).parts[1]) for target in targets}
    assert tops <= set(MOUNT_TARGET_TOPS), tops - set(MOUNT_TARGET_TOPS)


def test_a_store_of_its_own_under_tmp_is_refused_in_one_line():
    with pytest.raises(HostError) as refused:
        with fresh_store(Path("/tmp/grpolab-test-refused")):
            pass
    assert "\n" not in str(refused.value) and "under /var/tmp" in str(refused.value)
    assert not Path("/tmp/grpolab-test-refused").exists()


def test_a_store_of_its_own_is_made_in_buildahs_temporary_folder_unless_named(monkeypatch):
    if shutil.which("buildah") is None:
        pytest.skip("no buildah here (images/setup-host.sh installs it)")
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    with fresh_store() as folder:
        assert folder.parent == Path("/var/tmp") and folder.name.startswith("grpolab-store-")
    assert not folder.exists()


MOUNTING = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS deps
ARG SOURCE_DATE_EPOCH
RUN --mount=type=bind,source=input.txt,target=/tmp/input.txt set -eu; cat /tmp/input.txt > /opt/copied
"""


def _left_in_layer(image_id: str) -> bool:
    def run(*args: str) -> str:
        out = subprocess.run(["buildah", *args], capture_output=True, text=True, check=True, timeout=300)
        return out.stdout.strip()

    container = run("from", "--pull-never", image_id.removeprefix("sha256:")).splitlines()[-1]
    try:
        root = Path(run("mount", container))
        assert (root / "opt" / "copied").read_text() == "x\n"
        return (root / "tmp" / "input.txt").exists()
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, timeout=300)


@pytest.mark.docker
@needs_buildah
def test_a_store_under_tmp_leaves_the_mount_target_in_the_layer_and_the_build_refuses_it(tmp_path, own_store,
                                                                                          monkeypatch):
    """buildah 1.28 leaves /tmp/input.txt in the layer when its store is under /tmp (three builds of track c from
    nothing, alike but for where their store was, gave three dependency images); under /var/tmp it does not. The
    project's build refuses such a store in one line."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "input.txt").write_text("x\n")
    (context / "Dockerfile").write_text(MOUNTING)
    base = base_into_buildah(engine.image_or_none(STANDIN).id)
    image_id, _, tail = buildah_build(context / "Dockerfile", context, "deps", 1_700_000_000, {"BASE_IMAGE": base},
                                      "linux/" + host_arch(), None)
    assert image_id and not _left_in_layer(image_id), "\n".join(tail[-20:])

    under_tmp = tmp_path / "store"  # tmp_path is under /tmp: a store there, made by hand as fresh_store refuses it
    conf = under_tmp / "storage.conf"
    under_tmp.mkdir()
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{under_tmp}/root"\nrunroot = "{under_tmp}/run"\n')
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(conf))
    try:
        subprocess.run(["buildah", "pull", "--quiet", f"docker-daemon:{STANDIN}"], capture_output=True, check=True,
                       timeout=300)
        built = subprocess.run(
            ["buildah", "build", "--quiet", "--timestamp", "1700000000", "--build-arg", f"BASE_IMAGE={STANDIN}",
             "--file", str(context / "Dockerfile"), str(context)], capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr[-2000:]
        assert _left_in_layer(built.stdout.strip().splitlines()[-1]), "buildah no longer leaves it: the rule can go"
        with pytest.raises(HostError) as refused:
            buildah_build(context / "Dockerfile", context, "deps", 1_700_000_000, {"BASE_IMAGE": STANDIN},
                          "linux/" + host_arch(), None)
        assert "\n" not in str(refused.value) and str(under_tmp / "root") in str(refused.value)
    finally:
        subprocess.run(["buildah", "rmi", "--all", "--force"], capture_output=True, timeout=300)
        subprocess.run(["umount", "--recursive", "--lazy", str(under_tmp / "root" / "overlay")], capture_output=True,
                       timeout=300)
