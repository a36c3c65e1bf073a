"""CI's disk room (hostlab/ci/room.py): made by the cleanups in order only while short, a lack named before anything
builds, and the lowest free space seen while a block runs. The cleanups here remove files of the test's own; the
real ones (images, buildah's store) are never run by a test."""

import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from hostlab import HostError
from hostlab.ci.room import CLEANUPS, GIB, DiskWatch, filesystems, free_gib, least_free, make_room
from hostlab.images.builders.handover import drop_untagged


def reserve(path, gib: float):
    """A file that holds `gib` of the disk at once (allocated, not written)."""
    with open(path, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, int(gib * GIB))
    return path


@pytest.fixture
def quiet_folder(tmp_path):
    """A folder on a filesystem nothing else in the test run writes to: /dev/shm where it has room (a tmpfs of its
    own), else tmp_path. On the disk, the image builds CI runs beside these tests freed 0.23 GiB while this test held
    1 GiB, and the watch saw 0.77 GiB taken."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK) and free_gib(shm) >= 2):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="grpolab-test-disk-", dir=shm))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_paths_on_one_filesystem_count_once_and_a_missing_path_counts_as_its_nearest_parent(tmp_path):
    found = filesystems([tmp_path, tmp_path / "not" / "made" / "yet"])
    assert list(found.values()) == [tmp_path]


def test_no_cleanup_runs_when_there_is_room(quiet_folder):
    ran = []
    free = make_room(0.0, [quiet_folder], cleanups=(("anything", lambda: ran.append(1)),))
    assert ran == []
    assert free == pytest.approx(free_gib(quiet_folder), abs=0.5)


def test_cleanups_run_in_order_and_stop_once_the_room_is_there(quiet_folder):
    held = reserve(quiet_folder / "held", 1.0)
    need = least_free([quiet_folder])[0] + 0.5  # met once the file is gone, and not before
    ran = []
    cleanups = (("the held file", lambda: (ran.append("held"), held.unlink())), ("more", lambda: ran.append("more")))
    free = make_room(need, [quiet_folder], cleanups=cleanups)
    assert ran == ["held"]
    assert free >= need


def test_still_short_after_every_cleanup_is_one_error_naming_the_need_and_what_was_tried(tmp_path):
    ran = []
    cleanups = (("first thing", lambda: ran.append(1)), ("second thing", lambda: ran.append(2)))
    with pytest.raises(HostError) as refused:
        make_room(10**7, [tmp_path], cleanups=cleanups)
    assert ran == [1, 2]
    message = str(refused.value)
    assert "this needs 10000000 GiB" in message
    assert "after removing first thing; second thing" in message
    assert "free some space there" in message


def test_the_watch_sees_space_taken_and_given_back_inside_the_block(quiet_folder):
    with DiskWatch([quiet_folder], every_s=0.05) as watch:
        held = reserve(quiet_folder / "held", 1.0)
        seen = watch.looks
        while watch.looks < seen + 2:  # a whole look after the file was made
            time.sleep(0.01)
        held.unlink()
    assert watch.start_gib - watch.low_gib >= 0.9
    assert "this run used up to" in watch.summary()


def engine_images() -> list[str]:
    if shutil.which("docker") is None:
        return []
    out = subprocess.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, timeout=60
    )
    return out.stdout.split() if out.returncode == 0 else []


BASES = [name for name in engine_images() if name.startswith("grpolab-base:")]


def image_from(base: str, label: str, tag: str) -> str:
    """A new image of the engine's (the base with one label more; nothing runs), tagged `tag`: its id."""
    container = subprocess.run(
        ["docker", "create", base, "true"], capture_output=True, text=True, check=True, timeout=300
    ).stdout.strip()
    try:
        subprocess.run(
            ["docker", "commit", "--change", f"LABEL grpolab.test={label}", container, tag],
            capture_output=True,
            check=True,
            timeout=300,
        )
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True, timeout=300)
    return subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout.strip()


@pytest.mark.docker
@pytest.mark.skipif(not BASES, reason="no stand-in base in the Docker engine here (invoke base makes it)")
def test_a_rebuild_removes_the_engines_previous_image_of_its_tag_unless_another_name_holds_it():
    name, other = "grpolab-test-drop:t", "grpolab-test-drop:kept"
    made = []
    try:
        made.append(image_from(BASES[0], f"first-{os.getpid()}", name))
        made.append(
            image_from(BASES[0], f"second-{os.getpid()}", name)
        )  # the rebuild: `name` moves, the first is left untagged
        drop_untagged(made[0], name)
        assert subprocess.run(["docker", "image", "inspect", made[0]], capture_output=True, timeout=300).returncode != 0

        made.append(image_from(BASES[0], f"third-{os.getpid()}", name))
        subprocess.run(["docker", "tag", made[2], other], check=True, timeout=300)
        made.append(image_from(BASES[0], f"fourth-{os.getpid()}", name))
        drop_untagged(made[2], name)  # still named `other`: kept
        assert subprocess.run(["docker", "image", "inspect", made[2]], capture_output=True, timeout=300).returncode == 0
    finally:  # every image it made, the untagged second one too
        subprocess.run(["docker", "image", "rm", "--force", name, other, *made], capture_output=True, timeout=300)


@pytest.mark.docker
@pytest.mark.skipif(shutil.which("buildah") is None, reason="no buildah here (images/setup-host.sh installs it)")
def test_the_first_cleanup_keeps_buildahs_layer_cache_which_goes_only_with_its_store(tmp_path, monkeypatch):
    """An untagged buildah image is a step of its layer cache (the compile `invoke source-wheels` made for the test venv
    is one): the cleanup of leftovers keeps it, the cleanup of buildah's store removes it. On a buildah store of the
    test's own, with the engine out of reach, so nothing of the machine's is touched."""
    (leftovers, remove_leftovers), (store, remove_store) = CLEANUPS[0], CLEANUPS[2]
    assert "buildah's store" in store and "untagged" in leftovers
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{tmp_path / "root"}"\nrunroot = "{tmp_path / "run"}"\n')
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(conf))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")

    def buildah(*args: str) -> str:
        return subprocess.run(
            ["buildah", *args], capture_output=True, text=True, check=True, timeout=120
        ).stdout.strip()

    cached = buildah(
        "commit", "--quiet", buildah("from", "scratch")
    )  # no name: as each cached step of a --layers build
    assert cached in buildah("images", "--all", "--quiet", "--no-trunc")
    remove_leftovers()
    assert cached in buildah("images", "--all", "--quiet", "--no-trunc"), (
        "the leftovers' cleanup took buildah's layer cache"
    )
    remove_store()
    assert buildah("images", "--all", "--quiet", "--no-trunc") == ""


def _tiny_wheel(folder: Path) -> Path:
    """A wheel of one module, written by hand (zip, METADATA, WHEEL, RECORD): no index needed to install it."""
    wheel = folder / "tinypkg-1.0-py3-none-any.whl"
    files = {
        "tinypkg.py": "VALUE = 1\n",
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(
            "tinypkg-1.0.dist-info/RECORD",
            "".join(f"{name},,\n" for name in files) + "tinypkg-1.0.dist-info/RECORD,,\n",
        )
    return wheel


@pytest.mark.skipif(shutil.which("uv") is None, reason="no uv here")
def test_the_last_cleanup_empties_uvs_cache_which_its_prune_keeps(tmp_path, monkeypatch):
    """uv's prune keeps every unpacked wheel an index entry names (19 GiB on a machine that made several tracks'
    locks, none freed): the last cleanup is uv's own `cache clean`. On a cache of the test's own, holding a wheel a
    venv installed; the venv keeps working after."""
    (_, prune), (label, clean) = CLEANUPS[-2], CLEANUPS[-1]
    assert "uv's whole cache" in label
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    for name in [n for n in os.environ if n.startswith(("UV_", "PIP_")) and n != "UV_CACHE_DIR"]:
        monkeypatch.delenv(name)
    _tiny_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "--quiet", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    install = ["uv", "pip", "install", "--quiet", "--python", python, "--no-index", "--find-links", str(tmp_path)]
    subprocess.run([*install, "tinypkg"], check=True, timeout=300)

    def unpacked() -> list[Path]:
        return list((tmp_path / "uv-cache").glob("archive-v*/*/tinypkg.py"))

    assert unpacked()
    prune()
    assert unpacked(), "uv's prune took an unpacked wheel: then the last cleanup is not needed"
    clean()
    assert not unpacked()
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tinypkg; print(tinypkg.VALUE)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.stdout.strip() == "1"
