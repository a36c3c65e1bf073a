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
from hostlab.images.build import stage_context  # noqa: E402
from hostlab.images.standin import host_arch, standin_name  # noqa: E402
from hostlab.images.vendor import locked_inputs, offline_sources, served  # noqa: E402
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

# Run inside a network namespace with loopback only: the folder served as a build serves it, then the image's first
# install as the Dockerfile runs it (a venv's own pip, PIP_CONFIG_FILE the bound pip.conf, uv's hashed lock) and the
# same lock by uv with the build's uv.toml, without the shell's PIP_* and UV_* settings, as the build's steps have
# it. Prints what it saw, as JSON.
IN_THE_NAMESPACE = r"""
import json, os, subprocess, sys
from pathlib import Path
from hostlab.images.vendor import offline_sources, reachable, served
folder, lock, work = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
reached = reachable()
with served(folder) as url:
    sources = offline_sources(url)
    (work / "pip.conf").write_text(sources.pip_conf)
    (work / "uv.toml").write_text(sources.uv_toml)
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True, timeout=300)
    pip = subprocess.run([str(work / "venv" / "bin" / "pip"), "install", "--no-cache-dir", "--no-deps",
                          "--require-hashes", "--disable-pip-version-check", "-r", lock],
                         env={**{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))},
                              "PIP_CONFIG_FILE": str(work / "pip.conf")}, capture_output=True,
                         text=True, timeout=300)
    uv = subprocess.run(["uv", "pip", "install", "--config-file", str(work / "uv.toml"), "--no-cache", "--reinstall",
                         "--python", str(work / "venv" / "bin" / "python"), "--require-hashes", "-r", lock],
                        env={k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))},
                        capture_output=True, text=True, timeout=300)
print(json.dumps({"reached": reached, "pip": [pip.returncode, pip.stdout + pip.stderr],
                  "uv": [uv.returncode, uv.stdout + uv.stderr]}))
"""


@pytest.mark.skipif(not CAN_CUT_THE_NETWORK and not os.environ.get("CI"),
                    reason="cutting the network needs root, unshare and ip")
def test_pip_and_uv_install_a_lock_from_the_served_folder_with_the_network_cut(tmp_path):
    """The vendored build's installers, for real, where nothing but loopback answers: the image's first install (uv,
    by the base's pip with the bound pip.conf) and uv with the build's uv.toml, both from the folder served as `invoke
    build --vendored` serves it. The whole image built this way, compared with its record: `invoke vendor.check`
    (bench/vendor-c.json); it writes about 25 GB, which the test command's machine does not spare."""
    from hostlab.locks.lockfile import Lock, parse_body
    from hostlab.locks.wheels import fetch, locked_files

    folder = tmp_path / "folder"
    (folder / "wheels").mkdir(parents=True)
    lock = REPO / "lockfiles" / "uv.txt"
    packages, hashes = parse_body(lock.read_text())
    for file in locked_files(C, binary_only=False, lock=Lock({}, packages, hashes, lock.read_text())):
        shutil.copy2(fetch(file, tmp_path / "cache"), folder / "wheels" / file.filename)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" -c "$1" "$2" "$3" "$4"', sys.executable,
         IN_THE_NAMESPACE, str(folder), str(lock), str(work)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'entrypoint'}"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["reached"] == []  # the namespace reaches nothing but loopback
    assert seen["pip"][0] == 0 and "Successfully installed uv-" in seen["pip"][1], seen["pip"][1][-2000:]
    assert seen["uv"][0] == 0 and re.search(r" [~+] uv==", seen["uv"][1]), seen["uv"][1][-2000:]
