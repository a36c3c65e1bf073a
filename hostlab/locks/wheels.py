"""The wheels a track's lock pins, for the track's own platform, chosen and checked by the lock's sha256 hashes.

A lock lists every file's hash of each pinned version (all platforms); the index's PEP 691 JSON (or its PEP 503 page,
with the size asked of the server) gives each file's sha256 and size, so the file for the track's platform and Python
is the one whose hash the lock has and whose tags fit, picked without downloading anything. Downloads are kept in
~/.cache/grpolab/provenance under their sha256 (the cache `invoke lock.provenance` keeps), so a second run downloads
nothing."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from grpolab.common.filehash import sha256_of_file
from grpolab.common.tracks import Track
from packaging.utils import parse_wheel_filename

from .. import HostError
from ..host.console import say
from . import index as pkgindex
from .index import index_files
from .lockfile import Lock, lock_path, parse_lock
from .provenance import CACHE
from .resolve import index_urls

OLDEST_MANYLINUX_MINOR = 5  # manylinux1 is manylinux_2_5


@dataclass(frozen=True)
class LockedFile:
    project: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int  # bytes, as the index states it (0 when it does not)

    @property
    def binary(self) -> bool:
        """A wheel that may carry compiled code (not py3-none-any)."""
        return self.filename.endswith(".whl") and any(
            t.platform != "any" for t in parse_wheel_filename(self.filename)[3]
        )


def platform_tags(uv_platform: str) -> list[str]:
    """Wheel platform tags a Linux track's image accepts, best first: manylinux_2_<glibc> down to manylinux1."""
    machine, _, rest = uv_platform.partition("-")
    if not rest.startswith("manylinux_2_"):
        raise HostError(f"reading kernels needs a Linux track (uv_platform *-manylinux_2_N), not {uv_platform}")
    newest = int(rest.removeprefix("manylinux_2_"))
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(newest, OLDEST_MANYLINUX_MINOR - 1, -1):
        tags.append(f"manylinux_2_{minor}_{machine}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{machine}")
    return tags + [f"linux_{machine}", "any"]


def _rank(filename: str, python: str, platforms: list[str]) -> int | None:
    """Lower is better; None when the wheel does not install on this Python and platform."""
    cp = "cp" + python.replace(".", "")
    best = None
    for tag in parse_wheel_filename(filename)[3]:
        if tag.platform not in platforms:
            continue
        if tag.interpreter == cp and tag.abi in (cp, "abi3", "none"):
            py_rank = 0 if tag.abi == cp else 1
        elif tag.interpreter.startswith("cp3") and tag.abi == "abi3" and int(tag.interpreter[3:]) <= int(cp[3:]):
            py_rank = 1
        elif tag.interpreter in ("py3", "py2.py3", "py" + cp[2:]) and tag.abi == "none":
            py_rank = 2
        else:
            continue
        rank = py_rank * 1000 + platforms.index(tag.platform)
        best = rank if best is None else min(best, rank)
    return best


def locked_files(track: Track, binary_only: bool = True, lock: Lock | None = None) -> list[LockedFile]:
    """One file per package of the track's lock (or `lock`): the best wheel for its platform whose sha256 the lock
    holds."""
    if lock is None:
        path = lock_path(track)
        if not path.exists():
            raise HostError(f"lockfiles/{track.name}.txt does not exist: run `invoke lock --track {track.name}` first")
        lock = parse_lock(path.read_text())
    platforms = platform_tags(track.uv_platform)
    chosen = []
    for name, version in sorted(lock.packages.items()):
        hashes = {h.removeprefix("sha256:") for h in lock.hashes[name]}
        candidates = []
        for index in index_urls(track):
            try:
                candidates = [f for f in index_files(name, index) if f["sha256"] in hashes]
            except OSError:
                continue
            if candidates:
                break
        wheels = [
            (r, f)
            for f in candidates
            if f["filename"].endswith(".whl") and (r := _rank(f["filename"], track.python, platforms)) is not None
        ]
        if not wheels:
            if any(f["filename"].endswith((".tar.gz", ".zip")) for f in candidates):
                continue  # only an sdist is locked: built in the image, no prebuilt code to read here
            raise HostError(
                f"lockfiles/{track.name}.txt: no file of {name}=={version} with a locked hash fits "
                f"{track.uv_platform}, Python {track.python}"
            )
        f = min(wheels, key=lambda rf: rf[0])[1]
        found = LockedFile(name, version, f["filename"], f["url"], f["sha256"], f["size"] or _size(f["url"]))
        if found.binary or not binary_only:
            chosen.append(found)
    return chosen


def _size(url: str) -> int:
    """The size a PEP 503 page does not give (AMD's index), asked of the server; 0 when it won't say."""
    try:
        return pkgindex.remote_size(url)
    except OSError:
        return 0


def fetch(file: LockedFile, cache: Path = CACHE) -> Path:
    """The file, from the cache when its sha256 is there, else downloaded and checked against the lock's hash."""
    kept = cache / file.sha256 / file.filename
    if kept.exists():
        return kept
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{file.filename}.part"
    started = time.monotonic()
    with pkgindex._open(file.url) as response, open(partial, "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)
    digest = sha256_of_file(partial)
    if digest != file.sha256:
        partial.unlink()
        raise HostError(
            f"{file.filename} from {file.url} has sha256 {digest}, not the lock's {file.sha256}: the index serves "
            "another file"
        )
    (cache / digest).mkdir(exist_ok=True)
    say(f"  downloaded {file.filename} ({file.size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s")
    return Path(shutil.move(partial, kept))
