"""What a vendored folder holds (`invoke vendor --track T`: every input of a track's image in one folder a learner can
keep), and how a build takes everything from it with no network at all (`invoke build --track T --vendored FOLDER`).
The two tasks themselves are hostlab/images/offline.py.

The folder (vendor.json says what is in it, each file with its sha256 and size, and the commit and locks it was made
for):
- base.tar: the base image as the engine holds it (`docker save`), loaded again (`docker load`) by id;
- wheels/: every file the track's locks install, the one for the track's platform and Python, checked against the
  locks' hashes (lockfiles/<track>.txt, its sdists for the source-only packages, lockfiles/<track>.build.txt for their
  compile, lockfiles/uv.txt for uv itself);
- debian/: the Debian packages lockfiles/<track>.debian.txt pins, as a repository apt reads (dists/, pool/), made by
  Debian's own dpkg-scanpackages and apt-ftparchive from the .deb files apt itself fetched.

A build from the folder serves it on loopback for the build's own steps (they share the host's network) and tells
the tools that install to take everything from there: pip a pip.conf, uv its uv.toml (find-links, no index), apt its
sources (the mirror list). The three are bound into the RUN steps from the build context, never stored in a layer or
named in a build arg, so the image is byte for byte the one the network gives.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from grpolab.common.filehash import sha256_of_file
from grpolab.common.tracks import Track

from .. import REPO, HostError
from ..host import engine
from ..host.console import say
from ..host.tools import resolved
from ..locks.buildtools import build_lock_path, fetch_sdist
from ..locks.debian import SUITE, debian_lock_path, mirror_list, read_debian_lock, snapshot_list, track_arch
from ..locks.lockfile import Lock, lock_path, lock_sha256, parse_body, read_lock
from ..locks.sourcebuilds import source_builds
from ..locks.provenance import CACHE
from ..locks.wheels import LockedFile, fetch, locked_files

MANIFEST = "vendor.json"
APT_DOWNLOAD_TIMEOUT_S = 1200


@dataclass(frozen=True)
class PackageSources:
    """What the build's install steps read instead of their defaults: pip's config, uv's, apt's sources."""

    pip_conf: str
    uv_toml: str
    mirror_list: str


def offline_sources(url: str, suite: str = SUITE) -> PackageSources:
    """The settings that send pip, uv and apt to a vendored folder served at `url`, and nowhere else."""
    return PackageSources(
        pip_conf=f"[global]\nno-index = true\nfind-links = {url}/wheels/\n",
        uv_toml=f'no-index = true\nfind-links = ["{url}/wheels/"]\n',
        mirror_list=f"deb [trusted=yes] {url}/debian {suite} main\n",
    )


def locked_inputs(track: Track, repo: Path = REPO) -> list[LockedFile]:
    """Every Python file the track's image installs: the lock's wheels and sdists, the compile's tools, uv."""
    lock = read_lock(track, repo / "lockfiles")
    files = locked_files(track, binary_only=False, lock=lock)
    files += [fetch_sdist(track, lock, name) for name in source_builds(lock)]
    for extra in (build_lock_path(track, repo / "lockfiles"), repo / "lockfiles" / "uv.txt"):
        if extra.exists() and extra.read_text().strip():  # hashed requirements, without a track lock's header
            packages, hashes = parse_body(extra.read_text())
            files += locked_files(track, binary_only=False, lock=Lock({}, packages, hashes, extra.read_text()))
    unique = {f.sha256: f for f in files}
    return sorted(unique.values(), key=lambda f: f.filename)


def _place(source: Path, target: Path) -> None:
    """`source` at `target`: a hard link where both are on one filesystem (no second copy on disk), else a copy."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def vendor_wheels(track: Track, into: Path, repo: Path = REPO, cache: Path = CACHE) -> list[dict]:
    (into / "wheels").mkdir(parents=True, exist_ok=True)
    listed = []
    for file in locked_inputs(track, repo):
        _place(fetch(file, cache), into / "wheels" / file.filename)
        listed.append({"file": f"wheels/{file.filename}", "sha256": file.sha256,
                       "bytes": (into / "wheels" / file.filename).stat().st_size})
    return listed


def make_repository(top: Path, debs: list[Path], suite: str = SUITE, arch: str = "amd64") -> None:
    """A Debian repository of `debs` for `suite` main `arch` at `top` (dists/, pool/), as apt reads one: its Packages
    index by dpkg-scanpackages, its Release by apt-ftparchive (unsigned: apt is told to trust it)."""
    (top / "pool" / "main").mkdir(parents=True, exist_ok=True)
    for deb in debs:
        _place(deb, top / "pool" / "main" / deb.name)
    index = top / "dists" / suite / "main" / f"binary-{arch}"
    index.mkdir(parents=True, exist_ok=True)
    packages = subprocess.run(resolved(["dpkg-scanpackages", "--multiversion", "pool"]), cwd=top, capture_output=True,
                              text=True, check=True, timeout=300).stdout
    (index / "Packages").write_text(packages)
    options = [f"APT::FTPArchive::Release::{key}={value}" for key, value in
               (("Suite", suite), ("Codename", suite), ("Components", "main"), ("Architectures", arch))]
    release = subprocess.run(
        resolved(["apt-ftparchive", *[x for o in options for x in ("-o", o)], "release", f"dists/{suite}"]),
        cwd=top, capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    (top / "dists" / suite / "Release").write_text(release)


# Run in a container of the base, /out mounted, as a build asks apt: the main archive (the base's own sources, or
# mirror.list's); where it lost a pin, again with the snapshot archive at the lock's time added (snapshot.list): apt
# then takes each pinned version from whichever holds it. apt itself downloads.
_DOWNLOAD = """set -eu
if [ -s /out/mirror.list ]; then rm -f /etc/apt/sources.list.d/*; cp /out/mirror.list /etc/apt/sources.list; fi
apt-get update -qq
if ! apt-get download -qq "$@" 2>/tmp/first; then
    [ -s /out/snapshot.list ] || { cat /tmp/first >&2; exit 1; }
    echo "a pin the main archive lost: asking the snapshot archive at the lock's time too" >&2
    cp /out/snapshot.list /etc/apt/sources.list.d/grpolab-snapshot.list
    apt-get update -qq
    apt-get download -qq "$@"
fi
"""


def download_debs(base: str, platform: str, pins: list[str], into: Path, mirror: str = "",
                  snapshot: str = "") -> list[Path]:
    """The pinned .deb files, fetched by apt itself (`apt-get download`) in a container of the base, from the main
    archive (or `mirror`'s apt sources) and, where given, `snapshot`'s (the snapshot archive at the lock's time)."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "mirror.list").write_text(mirror)
    (into / "snapshot.list").write_text(snapshot)
    done = subprocess.run(
        resolved(["docker", "run", "--rm", "--user", "0", "--network", "host", "--platform", platform, "-v",
                  f"{into}:/out", "-w", "/out", "--entrypoint", "sh", base, "-c", _DOWNLOAD, "sh", *pins]),
        capture_output=True, text=True, timeout=APT_DOWNLOAD_TIMEOUT_S,
    )
    for listed in ("mirror.list", "snapshot.list"):
        (into / listed).unlink()
    if done.returncode != 0:
        raise HostError(f"[vendor] apt could not download the track's Debian pins in {base}: "
                        f"{done.stderr.strip()[-400:]} (neither the main archive nor the snapshot archive at the "
                        "lock's time holds them: `invoke lock` moves the pins on)")
    return sorted(into.glob("*.deb"))


def vendor_debian(track: Track, base: str, into: Path, repo: Path = REPO) -> list[dict]:
    path = debian_lock_path(track, repo / "lockfiles")
    pins = sorted({pin for group in read_debian_lock(path).groups.values() for pin in group}) if path.exists() else []
    if not pins:
        return []
    staging = into / ".debs"
    debs = download_debs(base, track.platform, pins, staging, mirror_list(),
                         snapshot_list(read_debian_lock(path).header))
    make_repository(into / "debian", debs, arch=track_arch(track))
    shutil.rmtree(staging)
    return [{"file": str(p.relative_to(into)), "sha256": sha256_of_file(p), "bytes": p.stat().st_size}
            for p in sorted((into / "debian" / "pool").rglob("*.deb"))]


def vendor(track: Track, base: str, base_digest: str, into: Path, commit: str, repo: Path = REPO,
           cache: Path = CACHE) -> dict:
    """Write the folder for `commit`; what it holds (also in vendor.json), with how long each part took."""
    into.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    started = time.monotonic()
    say(f"[vendor] the base image {base} -> base.tar (docker save)")
    saved = subprocess.run(resolved(["docker", "save", "-o", str(into / "base.tar"), base]), capture_output=True,
                           text=True, timeout=1200)
    if saved.returncode != 0:
        raise HostError(f"[vendor] docker save {base} failed: {saved.stderr.strip()}")
    seconds["base_s"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    say(f"[vendor] every locked wheel and sdist of track {track.name} (by the locks' hashes) -> wheels/")
    files = vendor_wheels(track, into, repo, cache)
    seconds["wheels_s"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    say(f"[vendor] the Debian packages lockfiles/{track.name}.debian.txt pins -> debian/ (apt-get download)")
    files += vendor_debian(track, base, into, repo)
    seconds["debian_s"] = round(time.monotonic() - started, 1)
    manifest = {
        "track": track.name,
        "commit": commit,
        "lock_sha256": lock_sha256(lock_path(track, repo / "lockfiles")),
        "base": {"name": base, "digest": base_digest, "id": engine.image_or_none(base).id,
                 "file": "base.tar", "bytes": (into / "base.tar").stat().st_size},
        "files": files,
        "bytes": sum(p.stat().st_size for p in into.rglob("*") if p.is_file() and p.name != MANIFEST),
        "seconds": seconds,
    }
    (into / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(folder: Path, track: Track) -> dict:
    path = folder / MANIFEST
    if not path.exists():
        raise HostError(f"[vendor] {folder} holds no {MANIFEST}: make the folder with `invoke vendor --track "
                        f"{track.name} --into {folder}`")
    manifest = json.loads(path.read_text())
    if manifest["track"] != track.name:
        raise HostError(f"[vendor] {folder} was vendored for track {manifest['track']}, not {track.name}")
    return manifest


def load_base(folder: Path, manifest: dict) -> str:
    """The vendored base in the engine (loaded from base.tar unless the engine has that very image): its name."""
    base = manifest["base"]
    here = engine.image_or_none(base["name"])
    if here is None or here.id != base["id"]:
        say(f"[vendor] loading the base image {base['name']} from {folder / base['file']}")
        loaded = subprocess.run(resolved(["docker", "load", "-i", str(folder / base["file"])]), capture_output=True,
                                text=True, timeout=1200)
        if loaded.returncode != 0:
            raise HostError(f"[vendor] docker load of {folder / base['file']} failed: {loaded.stderr.strip()}")
    return base["name"]


# What a build without network must not reach: the indexes, Debian's archive, and any address at all.
OUTSIDE = (("pypi.org", 443), ("files.pythonhosted.org", 443), ("deb.debian.org", 80), ("1.1.1.1", 443))


def reachable(hosts: tuple[tuple[str, int], ...] = OUTSIDE) -> list[str]:
    """The hosts a TCP connection reaches from here (in a network namespace with loopback only: none)."""
    reached = []
    for host, port in hosts:
        try:
            socket.create_connection((host, port), timeout=3).close()
            reached.append(host)
        except OSError:
            pass
    return reached


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's name; the build's own log says what it fetched
        pass


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """`folder` served over HTTP on loopback while the build runs: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
