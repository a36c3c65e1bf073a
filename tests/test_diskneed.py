"""A full disk named before and during a build (hostlab/images/diskneed.py), on small filesystems of the test's own: a
tmpfs holding buildah's store (CONTAINERS_STORAGE_CONF), so the refusal and the failed build are real, not faked
text. The needs the mechanism is tested with are the test's own (a lockfiles/c.disk.json in a folder of its own); the
real ones are measured by `invoke build.disk --track T`."""

import json
import os
import shutil
import subprocess

import pytest

from grpolab.common.tracks import get_track
from hostlab import REPO, HostError
from hostlab.host.disk import filesystem_of, store_paths
from hostlab.images.diskneed import check_room, full_disk_named, need_path, needs_by_filesystem, read_needs

TRACK = get_track("c")


def test_needs_of_stores_on_one_filesystem_add_up_and_a_store_that_holds_the_image_asks_nothing(tmp_path):
    paths = {key: tmp_path / key for key in ("buildah_store", "buildah_tmp", "engine", "uv_cache")}
    needs = {"buildah_store": 9.0, "buildah_tmp": 3.0, "engine": 10.0, "uv_cache": 0.0}
    assert needs_by_filesystem(needs, paths, set(), builds_in_engine=False) == {
        filesystem_of(tmp_path): {"buildah_store": 9.0, "buildah_tmp": 3.0, "engine": 10.0}
    }
    held = needs_by_filesystem(needs, paths, {"engine"}, builds_in_engine=False)
    assert sum(held[filesystem_of(tmp_path)].values()) == 12.0


def test_a_builder_that_builds_in_the_engine_writes_buildahs_share_to_the_engines_filesystem(tmp_path, small_fs):
    paths = {"buildah_store": small_fs, "buildah_tmp": small_fs, "engine": tmp_path, "uv_cache": tmp_path}
    needs = {"buildah_store": 9.0, "buildah_tmp": 3.0, "engine": 10.0}
    assert needs_by_filesystem(needs, paths, set(), builds_in_engine=True) == {
        filesystem_of(tmp_path): {"buildah_store": 9.0, "buildah_tmp": 3.0, "engine": 10.0}
    }
    assert set(needs_by_filesystem(needs, paths, set(), builds_in_engine=False)) == {
        filesystem_of(tmp_path), filesystem_of(small_fs)
    }


NEEDS_GB = {"buildah_store": 1.5, "buildah_tmp": 0.5, "engine": 2.0, "uv_cache": 0.0}


@pytest.fixture
def needs_repo(tmp_path):
    """A folder holding lockfiles/c.disk.json with NEEDS_GB, as `invoke build.disk` writes it."""
    (tmp_path / "needs" / "lockfiles").mkdir(parents=True)
    need_path(TRACK, tmp_path / "needs").write_text(json.dumps({"track": "c", "need_gb": NEEDS_GB}))
    return tmp_path / "needs"


def test_a_track_not_measured_yet_is_said_and_not_refused(tmp_path, capsys):
    (tmp_path / "lockfiles").mkdir()
    check_room(TRACK, builds_in_engine=False, repo=tmp_path)
    assert "track c's need is neither measured nor predicted yet" in capsys.readouterr().out


@pytest.fixture
def small_fs(tmpfs):
    """A 64 MiB tmpfs of the test's own, unmounted afterwards."""
    return tmpfs(64)


@pytest.fixture
def buildah_on_small_fs(small_fs, tmp_path, monkeypatch):
    """buildah's store on the small tmpfs (vfs: no overlay mounts to undo), its temporary folder beside it on the
    test's disk; the Docker engine as it is."""
    if shutil.which("buildah") is None:
        pytest.skip("no buildah here (images/setup-host.sh installs it)")
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{small_fs / "root"}"\nrunroot = "{tmp_path / "run"}"\n')
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(conf))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    yield small_fs
    subprocess.run(["buildah", "rmi", "--all", "--force"], capture_output=True, timeout=120)


@pytest.mark.docker
def test_a_build_whose_store_cannot_hold_the_track_is_refused_in_one_line_before_it_starts(buildah_on_small_fs,
                                                                                           needs_repo):
    paths = store_paths()
    assert paths["buildah_store"] == buildah_on_small_fs / "root"
    with pytest.raises(HostError) as refused:
        check_room(TRACK, builds_in_engine=False, repo=needs_repo)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"[build] buildah's store ({buildah_on_small_fs / 'root'}): 0.1 GB free on "
                              f"{buildah_on_small_fs}, and track c's build needs 1.5 GB there")
    assert "(measured, c.disk.json)" in message and "`invoke clean`" in message
    # A track nothing measured: its need predicted from the locks (`invoke build.disk-predict`), and said so.
    need_path(TRACK, needs_repo).write_text(json.dumps({"track": "c", "predicted": {"need_gb": NEEDS_GB}}))
    with pytest.raises(HostError, match=r"needs 1\.5 GB there \(predicted from the locks, c\.disk\.json\)"):
        check_room(TRACK, builds_in_engine=False, repo=needs_repo)


@pytest.mark.docker
def test_invoke_build_refuses_before_it_builds_anything(buildah_on_small_fs):
    """The command itself, as a learner runs it: one ERROR line, exit 2, nothing written to the small store. With
    the repository's own measured need, once `invoke build.disk --track c` has written it."""
    if read_needs(TRACK) is None:
        pytest.skip(f"{need_path(TRACK)} is not measured yet (`invoke build.disk --track c`)")
    if subprocess.run(["docker", "image", "inspect", "grpolab-base:trixie-amd64"], capture_output=True,
                      timeout=120).returncode:
        pytest.skip("no stand-in base here (invoke base makes it)")
    out = subprocess.run(
        [str(REPO / ".venvs" / "host" / "bin" / "invoke"), "build", "--track", "c", "--builder", "buildah",
         "--base", "grpolab-base:trixie-amd64", "--no-record"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert [line for line in out.stderr.splitlines() if line.startswith("ERROR")] == [
        next(line for line in out.stderr.splitlines() if line.startswith("ERROR: [build] buildah's store"))
    ]
    assert "$ buildah build" not in out.stdout
    assert sum(f.stat().st_size for f in buildah_on_small_fs.rglob("*") if f.is_file()) < 1_000_000


@pytest.mark.docker
def test_a_build_that_fills_its_store_ends_in_one_line_naming_it_with_the_whole_log_kept(buildah_on_small_fs,
                                                                                           tmp_path, needs_repo):
    """The project's build step (build_target, as every stage is built) on a Dockerfile that copies 96 MiB into a
    store that holds 64: buildah's own `no space left on device`, named in one [build] line."""
    from hostlab.images.build import build_target
    from hostlab.images.builders import choose_builder

    context = tmp_path / "context"
    context.mkdir()
    with open(context / "big", "wb") as big:
        big.write(os.urandom(96 * 1024 * 1024))
    (tmp_path / "Dockerfile").write_text("FROM scratch AS fill\nCOPY big /big\n")
    log = tmp_path / "build.log"
    with pytest.raises(HostError) as failed:
        with full_disk_named(TRACK, log, repo=needs_repo):
            build_target(choose_builder("buildah"), TRACK, tmp_path / "Dockerfile", context, "fill", 1700000000, {},
                         None)
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(f"[build] no space left on device in buildah's store ({buildah_on_small_fs / 'root'})")
    assert f"GB free on {buildah_on_small_fs} at the lowest" in message
    assert "track c's build needs 1.5 GB there" in message
    assert message.endswith(f"the build's whole log: {log}")
    kept = log.read_text()
    assert "$ buildah build" in kept and "COPY big /big" in kept and "no space left on device" in kept


def test_a_failure_that_is_not_a_full_disk_is_left_as_it_was(tmp_path):
    log = tmp_path / "build.log"
    with pytest.raises(HostError, match="^the image build for track c failed: something else$"):
        with full_disk_named(TRACK, log):
            raise HostError("the image build for track c failed: something else")
    assert "something else" in log.read_text()
