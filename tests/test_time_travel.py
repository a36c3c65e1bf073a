"""Time travel: a Debian pin the main archive has lost is taken from Debian's snapshot archive at the lock's time, and
the image's bytes do not change; a pin neither has is refused in one line naming it.

Our machines cannot reach snapshot.debian.org, so both archives are stand-ins served on loopback, made with Debian's
own tools (dpkg-scanpackages, apt-ftparchive) from the pinned .deb that apt fetches from Debian's real archive: a
main archive that has moved on (the pin repacked with a newer version, the pinned one gone) and a snapshot archive
laid out as snapshot.debian.org's (debian/YYYYMMDDTHHMMSSZ/) holding the pinned one. The stand-ins are unsigned, so
their sources say trusted=yes; Debian's are signed by the archive key the base has.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import REPO, HostError  # noqa: E402
from hostlab.host import engine  # noqa: E402
from hostlab.images.build import stage_context  # noqa: E402
from hostlab.images.builders.buildah_store import base_into_buildah, run_buildah  # noqa: E402
from hostlab.images.builders.buildah import without_history  # noqa: E402
from hostlab.images.standin import build_standin, host_arch, image_id, standin_name  # noqa: E402
from hostlab.images.vendor import download_debs, make_repository  # noqa: E402
from hostlab.locks import debian  # noqa: E402
from hostlab.locks.debian import (  # noqa: E402
    base_lock_path,
    debian_lock_path,
    read_debian_lock,
    snapshot_list,
    snapshot_times,
)

CV = get_track("cv")
STANDIN = standin_name(host_arch())
SCRIPT = REPO / "images" / "apt-install-pinned.sh"
LOCK = read_debian_lock(debian_lock_path(CV))
PIN = next(pin for pin in LOCK.groups["runtime"] if pin.startswith("libnuma1="))  # one small .deb, needing libc6 only
NAME, VERSION = PIN.split("=", 1)
# The deps stage's step, as images/Dockerfile has it: the script (which removes what apt leaves that says when it ran).
DOCKERFILE = """ARG BASE
FROM ${BASE}
ARG PINS
RUN --mount=type=bind,source=apt-install-pinned.sh,target=/tmp/apt-install-pinned.sh \\
    --mount=type=bind,source=debian-sources,target=/tmp/debian-sources \\
    set -eu; sh /tmp/apt-install-pinned.sh cv trixie ${PINS}
"""
# In CI (.ci/run installs apt-utils and dpkg-dev, and `invoke test` builds the stand-in base first) these never skip:
# a missing tool there fails the test rather than hiding it.
needs_tools = pytest.mark.skipif(
    not os.environ.get("CI")
    and not (engine.running() and engine.image_or_none(STANDIN) and shutil.which("buildah")
             and shutil.which("apt-ftparchive") and shutil.which("dpkg-scanpackages")),
    reason=f"needs a Docker engine with {STANDIN} (`invoke base`), buildah, apt-ftparchive (apt-utils) and "
           "dpkg-scanpackages (dpkg-dev)",
)


def repacked_newer(deb: Path, version: str, into: Path) -> Path:
    """The package of `deb` (at `version`) repacked by dpkg-deb as a newer version: the main archive moved on."""
    unpacked = into / f"{deb.stem}-unpacked"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(unpacked)], check=True, timeout=120)
    control = unpacked / "DEBIAN" / "control"
    control.write_text(control.read_text().replace(f"Version: {version}\n", f"Version: {version}+grpolab.newer\n"))
    newer = into / f"{deb.stem}+grpolab.newer.deb"
    subprocess.run(["dpkg-deb", "-b", str(unpacked), str(newer)], check=True, capture_output=True, timeout=120)
    shutil.rmtree(unpacked)
    return newer


def serve(folder: Path) -> tuple[subprocess.Popen, str]:
    """`folder` served over HTTP on loopback: the server and its URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory",
                               str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    return server, f"http://127.0.0.1:{port}"


def make_snapshot(top: Path, header: dict, debs: list[Path]) -> None:
    """A stand-in of the snapshot archive under `top`, laid out as snapshot.debian.org's, at the lock's times."""
    first, *later = snapshot_times(header["resolved"])
    make_repository(top / "debian" / first, debs)
    for at in later:  # the real service names the last snapshot at or before any time; this one has only these
        (top / "debian" / at).symlink_to(first)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """The stand-in main archive (moved on) and snapshot archive, served on loopback: their apt sources."""
    root = tmp_path_factory.mktemp("archives")
    pinned = download_debs(STANDIN, "linux/amd64", [PIN], root / "debs")
    make_repository(root / "serve" / "main" / "debian", [repacked_newer(pinned[0], VERSION, root)])
    make_snapshot(root / "serve" / "snapshot", LOCK.header, pinned)
    server, url = serve(root / "serve")
    try:
        yield {
            "mirror": f"deb [trusted=yes] {url}/main/debian trixie main\n",
            "snapshot": snapshot_list(LOCK.header, f"{url}/snapshot", "trusted=yes"),
            "snapshot_url": f"{url}/snapshot",
        }
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def build(tmp_path: Path, mirror: str, snapshot: str, pins: str) -> tuple[str, str]:
    """The deps stage's apt step, built from nothing by buildah on the stand-in base: (image id without its history,
    or "" when the build failed; the log)."""
    context = tmp_path / f"context-{len(list(tmp_path.iterdir()))}"
    (context / "debian-sources").mkdir(parents=True)
    (context / "Dockerfile").write_text(DOCKERFILE)
    shutil.copy2(SCRIPT, context / "apt-install-pinned.sh")
    (context / "debian-sources" / "mirror.list").write_text(mirror)
    (context / "debian-sources" / "snapshot.list").write_text(snapshot)
    iid = context / "iid"
    base = base_into_buildah(image_id(STANDIN))
    proc = subprocess.run(
        ["buildah", "build", "--no-cache", "--force-rm", "--network", "host", "--timestamp", "0", "--platform",
         "linux/amd64", "--build-arg", f"BASE={base}", "--build-arg", f"PINS={pins}", "--iidfile", str(iid),
         "--file", str(context / "Dockerfile"), str(context)],
        capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        return "", proc.stdout + proc.stderr
    built = iid.read_text().strip()
    stripped = without_history(built, 0)
    run_buildah("rmi", "--force", built.removeprefix("sha256:"), check=False)
    return stripped, proc.stdout + proc.stderr


def test_the_build_context_says_where_the_snapshot_archive_holds_the_pins(tmp_path):
    stage_context(CV, REPO, tmp_path)
    first, later = snapshot_times(LOCK.header["resolved"])
    assert (tmp_path / "debian-sources" / "snapshot.list").read_text() == (
        f"deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/{first}/ trixie main\n"
        f"deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/{later}/ trixie main\n"
    )
    assert (tmp_path / "debian-sources" / "mirror.list").read_text() == ""  # the base's own sources


def test_the_step_built_here_is_the_dockerfiles():
    """The apt step these tests build is images/Dockerfile's deps step: the same mounts, and the clean-up in the script
    both run (what apt leaves that says when it ran, update-alternatives' log among it)."""
    dockerfile = (REPO / "images" / "Dockerfile").read_text()
    deps = dockerfile.split("\nFROM ${BASE_IMAGE} AS deps\n", 1)[1]
    step = DOCKERFILE.split("RUN ", 1)[1]
    for mount in re.findall(r"--mount=\S+", step):
        assert mount in deps
    assert 'sh /tmp/apt-install-pinned.sh "${TRACK}" "${DEBIAN_SUITE}" ${RUNTIME_PACKAGES};' in deps
    script = SCRIPT.read_text()
    last = " ".join(script[script.rindex("\nrm -rf "):].replace("\\\n", " ").split())
    assert "/var/log/alternatives.log" in last and "/var/lib/apt/lists/*" in last and "/var/log/dpkg.log" in last


@pytest.mark.docker
@needs_tools
def test_a_pin_the_main_archive_lost_comes_from_the_snapshot_archive_with_the_same_bytes(tmp_path, archives):
    ids = []
    try:
        real, real_log = build(tmp_path, "", archives["snapshot"], PIN)  # Debian's archive, which has the pin
        ids.append(real)
        assert real, real_log[-2000:]
        moved_on, log = build(tmp_path, archives["mirror"], archives["snapshot"], PIN)
        ids.append(moved_on)
        assert moved_on, log[-2000:]
        assert f"Debian package {NAME} {VERSION} is no longer in trixie's archive: asking the snapshot archive" in log
        assert "asking the snapshot archive" not in real_log
        assert moved_on == real
    finally:
        for made in filter(None, ids):
            run_buildah("rmi", "--force", made.removeprefix("sha256:"), check=False)


@pytest.mark.docker
@needs_tools
def test_invoke_vendor_keeps_a_pin_the_main_archive_lost_from_the_snapshot_archive(tmp_path, archives):
    """`invoke vendor` asks apt as a build does: the moved-on main archive first, then the snapshot archive at the
    lock's time, so the vendored folder holds the pinned version, not the newer one."""
    got = download_debs(STANDIN, "linux/amd64", [PIN], tmp_path / "kept", archives["mirror"], archives["snapshot"])
    assert [deb.name.split("_")[:2] for deb in got] == [[NAME, VERSION.replace(":", "%3a")]]
    with pytest.raises(HostError, match=r"^\[vendor\] apt could not download .*snapshot archive at the lock's time"):
        download_debs(STANDIN, "linux/amd64", [PIN], tmp_path / "lost", archives["mirror"])


@pytest.mark.docker
@needs_tools
def test_a_pin_in_neither_archive_is_refused_in_one_line_naming_it(tmp_path, archives):
    sources = tmp_path / "debian-sources"
    sources.mkdir()
    (sources / "mirror.list").write_text(archives["mirror"])
    (sources / "snapshot.list").write_text(archives["snapshot"])
    made_up = f"{VERSION}+grpolab.made.up"
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "-v", f"{SCRIPT}:/tmp/apt-install-pinned.sh:ro", "-v",
         f"{sources}:/tmp/debian-sources:ro", STANDIN, "sh", "/tmp/apt-install-pinned.sh", "cv", "trixie",
         f"{NAME}={made_up}"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    urls = " ".join(f"{archives['snapshot_url']}/debian/{at}/" for at in snapshot_times(LOCK.header["resolved"]))
    assert proc.stderr.strip().splitlines()[-1] == (
        f"ERROR: Debian package {NAME} {made_up} is no longer in trixie's archive nor in the snapshot archive "
        f"({urls}): run `invoke lock --track cv` to move the pins on"
    )
    assert proc.stderr.count("ERROR") == 1


# ------------------------------------------------------------------------------------ the stand-in base
LEAF = "ca-certificates"  # a package of the base that no other pins at a version


@pytest.mark.docker
@needs_tools
@pytest.mark.skipif(not (shutil.which("mmdebstrap") and os.geteuid() == 0), reason="needs mmdebstrap and root")
def test_a_base_pin_the_main_archive_lost_comes_from_the_snapshot_archive_with_the_same_base(
    tmp_path, monkeypatch, capfd
):
    """The stand-in base from a main archive that moved on (its pins, one of them repacked newer and the pinned one
    gone) and the snapshot archive at the pins' time is the base `invoke base` makes from Debian's archive."""
    lock = read_debian_lock(base_lock_path(host_arch()))
    pins = lock.groups["base"]
    debs = download_debs(STANDIN, "linux/amd64", pins, tmp_path / "debs")
    leaf = next(deb for deb in debs if deb.name.startswith(f"{LEAF}_"))
    moved_on = [deb for deb in debs if deb != leaf] + [repacked_newer(leaf, lock.versions("base")[LEAF], tmp_path)]
    make_repository(tmp_path / "serve" / "main" / "debian", moved_on)
    make_snapshot(tmp_path / "serve" / "snapshot", lock.header, [leaf])
    server, url = serve(tmp_path / "serve")
    real, standin = "grpolab-test:base-from-debian", "grpolab-test:base-from-stand-ins"
    try:
        build_standin(host_arch(), force=True, name=real)
        monkeypatch.setattr(debian, "MIRROR", f"deb [trusted=yes] {url}/main/debian trixie main")
        monkeypatch.setattr(debian, "SNAPSHOT", f"{url}/snapshot")
        monkeypatch.setattr(debian, "SNAPSHOT_OPTIONS", "trusted=yes")
        capfd.readouterr()
        build_standin(host_arch(), force=True, name=standin)
        said = capfd.readouterr().out
        assert f"Debian package {LEAF} {lock.versions('base')[LEAF]} is no longer in trixie's archive: asking the " \
            "snapshot archive" in said
        assert image_id(standin) == image_id(real)
    finally:
        server.terminate()
        server.wait(timeout=30)
        subprocess.run(["docker", "rmi", "-f", real, standin], capture_output=True, timeout=120)
