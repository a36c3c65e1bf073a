"""A build with the network cut: `invoke vendor` keeps every input of track c's image in one folder (the base image,
every locked wheel and sdist, uv, the compile's tools, the Debian pins as a repository apt reads), and the image built
from that folder, from nothing, in a network namespace whose only interface is loopback, is the dependency image
lockfiles/c.image.json records (`invoke vendor.check`).

The folder's tools are sent there by files the build binds into its RUN steps (pip.conf, uv.toml, apt's sources),
never by a build arg or a layer: the first tests read what a vendored build context holds; the last builds it."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import REPO  # noqa: E402
from hostlab.host import engine  # noqa: E402
from hostlab.images.build import stage_context  # noqa: E402
from hostlab.images.standin import host_arch, standin_name  # noqa: E402
from hostlab.images.vendor import MANIFEST, locked_inputs, offline_sources, served  # noqa: E402
from hostlab.locks.lockfile import read_lock  # noqa: E402

C = get_track("c")
STANDIN = standin_name(host_arch())
URL = "http://127.0.0.1:8765"


def test_a_vendored_build_sends_pip_uv_and_apt_to_the_folder_and_nowhere_else():
    sources = offline_sources(URL)
    assert "no-index = true" in sources.pip_conf and f"find-links = {URL}/wheels/" in sources.pip_conf
    assert "no-index = true" in sources.uv_toml and f'find-links = ["{URL}/wheels/"]' in sources.uv_toml
    assert sources.mirror_list == f"deb [trusted=yes] {URL}/debian trixie main\n"


def test_the_vendored_context_binds_the_folders_settings_and_asks_no_snapshot_archive(tmp_path):
    (tmp_path / "online").mkdir()
    (tmp_path / "offline").mkdir()
    online = stage_context(C, REPO, tmp_path / "online")
    offline = stage_context(C, REPO, tmp_path / "offline", offline_sources(URL))
    assert (online / "pip.conf").read_text() == ""  # pip's defaults
    assert (offline / "pip.conf").read_text() == offline_sources(URL).pip_conf
    assert (offline / "uv.toml").read_text() == offline_sources(URL).uv_toml
    assert (offline / "debian-sources" / "mirror.list").read_text() == offline_sources(URL).mirror_list
    assert (offline / "debian-sources" / "snapshot.list").read_text() == ""
    # Everything else the build reads is the same file either way: the image cannot tell the two apart.
    same = ["lock.txt", "build.txt", "uv.txt", "verify-locked.py", "apt-install-pinned.sh", "kernels.json"]
    assert all((online / name).read_bytes() == (offline / name).read_bytes() for name in same)


def test_every_pip_in_the_dockerfile_reads_the_bound_pip_conf():
    """A pip the build runs without the bound pip.conf would go to PyPI from a vendored build, and fail offline."""
    text = (REPO / "images" / "Dockerfile").read_text()
    steps = [step for step in re.split(r"\n(?=RUN |FROM |ARG |ENV |COPY )", text) if step.startswith("RUN ")]
    with_pip = [step for step in steps if re.search(r"/pip install|/pip download|/pip wheel", step)]
    assert len(with_pip) == 2  # uv's install (deps stage), the compile's tools and sdists (source-builds stage)
    for step in with_pip:
        assert "source=pip.conf,target=/tmp/pip.conf" in step
        assert "PIP_CONFIG_FILE=/tmp/pip.conf" in step


def test_the_folders_wheels_are_one_per_locked_package_for_the_tracks_platform():
    """Read from the index (no download): every package of the lock, uv's and the compile's tools, once each."""
    files = locked_inputs(C)
    names = {f.project for f in files}
    lock = read_lock(C)
    assert set(lock.packages) <= names
    assert {"uv", "cmake", "scikit-build-core"} <= names
    assert any(f.filename.startswith("llama_cpp_python-") and f.filename.endswith(".tar.gz") for f in files)
    assert not [f for f in files if f.filename.endswith(".whl") and ("macosx" in f.filename or "win" in f.filename)]
    assert len({f.filename for f in files}) == len(files)


def test_the_folder_is_served_on_loopback_only(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a.whl").write_bytes(b"x")
    import urllib.request

    with served(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        page = urllib.request.urlopen(f"{url}/wheels/").read().decode()  # what uv and pip read as find-links
        assert 'href="a.whl"' in page


CAN_CUT_THE_NETWORK = os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip")


@pytest.mark.docker
@pytest.mark.skipif(
    not os.environ.get("CI") and not (engine.running() and engine.image_or_none(STANDIN) and shutil.which("buildah")
                                      and CAN_CUT_THE_NETWORK and shutil.which("apt-ftparchive")),
    reason=f"needs root (unshare), buildah, apt-ftparchive, a Docker engine with {STANDIN} (`invoke base`)",
)
def test_track_c_built_from_its_vendored_folder_with_the_network_cut_is_the_recorded_image(tmp_path):
    folder = tmp_path / "vendor-c"
    invoke = [sys.executable, "-m", "invoke"]
    made = subprocess.run([*invoke, "vendor", "--track", "c", "--into", str(folder), "--base", STANDIN], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["base"]["name"] == STANDIN and (folder / "base.tar").stat().st_size > 100e6
    assert any(f["file"].startswith("debian/pool/main/g++") for f in manifest["files"])  # the compile's compilers
    checked = subprocess.run([*invoke, "vendor.check", "--track", "c", "--into", str(folder)], cwd=REPO,
                             capture_output=True, text=True, timeout=1800)
    out = checked.stdout + checked.stderr
    subprocess.run(["docker", "rmi", "grpolab-vendored:c"], capture_output=True, timeout=300)
    assert checked.returncode == 0, out[-3000:]
    record = json.loads((REPO / "lockfiles" / "c.image.json").read_text())
    assert f"dependency image {record['deps_image_id'][:19]}: the same as lockfiles/c.image.json records" in out
