"""`invoke clean` (hostlab/images/clean.py) removes only what the project made, track by track, and says what each
step freed. buildah's step runs on a store of the test's own; the engine's on a tag the test puts on the stand-in
base, so nothing of the machine's goes."""

import os
import shutil
import subprocess

import pytest

from grpolab.common.tracks import get_track
from hostlab.images import clean as cleaning


@pytest.mark.parametrize(("name", "track", "ours"), [
    ("grpolab:c", "c", True), ("localhost/grpolab:c", "c", True), ("grpolab:c-llamacpp", "c", True),
    ("grpolab-check:c-1", "c", True), ("grpolab-measure:c-whole", "c", True), ("grpolab:cv", "c", False),
    ("grpolab:c", "cv", False), ("grpolab-base:trixie-amd64", "c", False), ("python:c", "c", False),
    ("docker.io/someone/grpolab:c", "c", False), ("grpolab:cv", None, True), ("grpolab-deps:c-0123abcd", "c", True),
    ("grpolab-deps:cv-0123abcd", "c", False),
])
def test_only_the_names_the_project_gives_its_images_are_its(name, track, ours):
    assert cleaning.project_image(name, get_track(track) if track else None) is ours


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=True, timeout=120).stdout.strip()


def image(tag: str | None, created_by: str, size_mb: int, folder) -> str:
    """A buildah image holding `size_mb` of random bytes, its history's last step saying `created_by`."""
    payload = folder / f"payload-{size_mb}-{abs(hash(created_by))}"
    payload.write_bytes(os.urandom(size_mb * 1024 * 1024))
    container = buildah("from", "scratch")
    buildah("copy", container, str(payload), "/payload")
    buildah("config", "--created-by", created_by, container)
    made = buildah("commit", "--quiet", container, *([tag] if tag else []))
    buildah("rm", container)
    return made


@pytest.fixture
def quiet_fs(tmpfs):
    """A 256 MiB tmpfs of the test's own: nothing else writes there, so what a step freed is exact."""
    return tmpfs(256)


@pytest.mark.docker
@pytest.mark.skipif(shutil.which("buildah") is None, reason="no buildah here (images/setup-host.sh installs it)")
def test_buildahs_step_takes_the_tracks_images_and_build_stages_and_nothing_else(tmp_path, quiet_fs, monkeypatch):
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{quiet_fs / "root"}"\nrunroot = "{tmp_path / "run"}"\n')
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(conf))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")  # the engine out of reach
    kept = [
        image("localhost/grpolab:cv", "RUN |2 TRACK=cv X=1 /bin/sh -c uv pip sync", 1, tmp_path),
        image("localhost/other:c", "RUN |1 TRACK=c /bin/sh -c true", 1, tmp_path),  # not a name the project gives
        image(None, "RUN |1 TRACK=cv /bin/sh -c uv pip sync", 1, tmp_path),  # cv's build stage
        image(None, "RUN /bin/sh -c make", 1, tmp_path),  # nobody's we can tell
    ]
    gone = [image("localhost/grpolab:c", "RUN |1 TRACK=c /bin/sh -c true", 40, tmp_path),
            image(None, "RUN |2 TRACK=c PYTHON_VERSION=3.13 /bin/sh -c uv pip sync", 40, tmp_path)]
    step = next(s for s in cleaning.STEPS if s.store == "buildah_store")
    assert cleaning.clean("c", dry_run=True, steps=(step,)) == 0.0
    assert set(buildah("images", "--all", "--quiet", "--no-trunc").split()) >= {f"sha256:{i}" for i in gone}

    freed = cleaning.clean("c", steps=(step,))
    left = {line.removeprefix("sha256:") for line in buildah("images", "--all", "--quiet", "--no-trunc").split()}
    assert left == set(kept)
    assert freed == pytest.approx(2 * 40 * 1024**2 / 1e9, abs=0.005)  # the two 40 MiB images, as its free space saw
    buildah("rmi", "--all", "--force")


@pytest.mark.docker
def test_the_engines_step_untags_the_tracks_image_and_leaves_the_base_it_shares_layers_with():
    base = "grpolab-base:trixie-amd64"
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True, timeout=120).returncode:
        pytest.skip("no stand-in base here (invoke base makes it)")
    mine, other = "grpolab:n", "grpolab-test-other:n"  # n: a GPU track, never built on this CPU machine
    if subprocess.run(["docker", "image", "inspect", mine], capture_output=True, timeout=120).returncode == 0:
        pytest.skip(f"{mine} is here already: not the test's to remove")
    subprocess.run(["docker", "tag", base, mine], check=True, timeout=120)
    subprocess.run(["docker", "tag", base, other], check=True, timeout=120)
    try:
        step = next(s for s in cleaning.STEPS if s.label == "the Docker engine's images")
        assert step.find(get_track("n")) == [mine]
        cleaning.clean("n", steps=(step,))
        assert subprocess.run(["docker", "image", "inspect", mine], capture_output=True, timeout=120).returncode != 0
        for kept in (base, other):
            kept_here = subprocess.run(["docker", "image", "inspect", kept], capture_output=True, timeout=120)
            assert kept_here.returncode == 0
    finally:
        subprocess.run(["docker", "image", "rm", mine, other], capture_output=True, timeout=120)
