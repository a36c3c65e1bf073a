"""A track's disk need predicted from its locks, for the tracks whose image our machines cannot build and measure
(`invoke build.disk-predict --track T`; kept under "predicted" in lockfiles/<track>.disk.json).

What an image holds is, nearly all of it, its locked wheels unpacked and its Debian pins installed. Both are read
without downloading them: each wheel's unpacked size from its zip's central directory (HTTP range requests, a few KB
per wheel, as pip's fast-deps reads), each Debian pin's Installed-Size from the archive's Packages index, less the pins
the base already has. The rest (the base image, the lab, the venvs' own files) and how much each store takes for a
GB of image come from track c's measurement (lockfiles/c.disk.json), whose own prediction is the calibration: the
prediction for any other track scales c's measured peak need by the predicted image over c's. It is checked against a
second measured track (cv: the same machine, a different lock) in tests/test_diskpredict.py's recorded figures and in
the README's table.
"""

from __future__ import annotations

import json
import lzma
import re
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grpolab.common.tracks import Track, get_track

from .. import REPO, HostError
from ..host.console import say
from ..locks.debian import MIRROR, SUITE, base_lock_path, debian_lock_path, read_debian_lock, track_arch
from ..locks.index import TIMEOUT_S, _RangeFile
from ..locks.lockfile import lock_path
from ..locks.wheels import LockedFile, locked_files
from .diskneed import need_file, need_path

CALIBRATION_TRACK = "c"  # measured here, and the lock every prediction is scaled from
RUNTIME_GROUP = "runtime"  # the Debian lock's group the image keeps (the build group is the compile stage's)
ATTEMPTS = 3  # a range request PyPI's CDN drops now and then
WORKERS = 16
PREDICTED = ("predicted from the locks, not measured: the image is track c's measured image less its locked wheels "
             "unpacked and Debian pins installed, plus this track's (each wheel's unpacked size read from its zip's "
             "central directory, each pin's Installed-Size from the archive's Packages index, less the base's pins); "
             "each store's need and the engine's kept share are track c's measured ones times this image over c's; "
             "written by `invoke build.disk-predict --track T`")


def unpacked_bytes(file: LockedFile) -> int:
    """What the wheel's files take once unpacked, from its zip's central directory."""
    failed: Exception | None = None
    for _ in range(ATTEMPTS):
        try:
            with zipfile.ZipFile(_RangeFile(file.url)) as wheel:
                return sum(info.file_size for info in wheel.infolist())
        except (OSError, zipfile.BadZipFile) as err:
            failed = err
    raise HostError(f"[lock] could not read {file.filename}'s contents from {file.url}: {failed}; check the network "
                    "and run it again")


def wheels_unpacked_bytes(track: Track) -> tuple[int, int, int]:
    """(wheels, bytes as downloaded, bytes unpacked) for the wheels of the track's lock (the sdists it compiles are
    not in the track's image)."""
    files = [file for file in locked_files(track, binary_only=False) if file.filename.endswith(".whl")]
    with ThreadPoolExecutor(WORKERS) as pool:
        unpacked = list(pool.map(unpacked_bytes, files))
    return len(files), sum(file.size for file in files), sum(unpacked)


def installed_sizes(packages_index: str) -> dict[tuple[str, str], int]:
    """{(package, version): Installed-Size in bytes} from a Debian Packages index's text."""
    sizes = {}
    for stanza in packages_index.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", stanza, re.MULTILINE))
        if "Package" in fields and "Installed-Size" in fields:
            sizes[(fields["Package"], fields["Version"])] = int(fields["Installed-Size"]) * 1024
    return sizes


def packages_index(arch: str, mirror: str = MIRROR, suite: str = SUITE) -> str:
    url = f"{mirror.rstrip('/')}/dists/{suite}/main/binary-{arch}/Packages.xz"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return lzma.decompress(response.read()).decode(errors="replace")


def debian_runtime_bytes(track: Track, sizes: dict[tuple[str, str], int], repo: Path = REPO) -> tuple[int, list[str]]:
    """Installed-Size of the runtime pins the base does not have, and the pins the index does not list."""
    path = debian_lock_path(track, repo / "lockfiles")
    pins = read_debian_lock(path).groups.get(RUNTIME_GROUP, []) if path.exists() else []
    base = base_lock_path(track_arch(track), repo / "lockfiles")
    in_base = set(read_debian_lock(base).groups.get("base", [])) if base.exists() else set()
    missing, total = [], 0
    for pin in pins:
        if pin in in_base:
            continue
        name, _, version = pin.partition("=")
        if (name, version) in sizes:
            total += sizes[(name, version)]
        else:
            missing.append(pin)
    return total, missing


def lock_contents(track: Track, repo: Path = REPO) -> dict:
    """What the track's locks put into its image, in bytes, read from the indexes."""
    say(f"track {track.name}: reading each locked wheel's size unpacked (range requests) and the Debian pins' sizes")
    wheels, packed, unpacked = wheels_unpacked_bytes(track)
    debian, missing = debian_runtime_bytes(track, installed_sizes(packages_index(track_arch(track))), repo)
    return {"wheels": wheels, "wheels_download_bytes": packed, "wheels_unpacked_bytes": unpacked,
            "debian_runtime_bytes": debian, "debian_pins_not_in_index": missing}


def scaled(contents: dict, calibration_contents: dict, calibration: dict) -> dict:
    """The prediction from the track's lock contents and track c's (`calibration_contents`, its measured
    `calibration` file): image = c's measured rest + wheels + Debian pins; each store's need = c's, times the image's
    ratio."""
    def locked(found: dict) -> int:
        return found["wheels_unpacked_bytes"] + found["debian_runtime_bytes"]

    rest_gb = calibration["image_gb"] - locked(calibration_contents) / 1e9
    image_gb = rest_gb + locked(contents) / 1e9
    ratio = image_gb / calibration["image_gb"]
    return {
        "image_gb": round(image_gb, 2),
        "need_gb": {key: round(gb * ratio, 2) for key, gb in calibration["need_gb"].items()},
        "kept_gb": {key: round(gb * ratio, 2) if key == "engine" else gb
                    for key, gb in calibration["kept_gb"].items()},
        "lock": contents,
        "calibration": {"track": CALIBRATION_TRACK, "rest_gb": round(rest_gb, 3), "lock": calibration_contents,
                        "measured_image_gb": calibration["image_gb"], "measured": calibration["measured"]},
    }


def predict_need(names: list[str], repo: Path = REPO) -> list[Path]:
    """Write the prediction into each track's lockfiles/<track>.disk.json (its measurement, if any, kept beside it).
    Every track and lock is checked before anything is read from the network."""
    if not any(names):
        raise HostError("[input] `invoke build.disk-predict` needs the tracks: --track n,s,cluster (by commas)")
    tracks = [get_track(name) for name in names]  # an unknown name: one line, before the minutes of reading
    for track in tracks:
        if not track.is_container:
            raise HostError(f"[input] track {track.name} is a native venv, not an image: there is no build to predict")
        if not lock_path(track, repo / "lockfiles").exists():
            raise HostError(f"[input] track {track.name} has no lock here (lockfiles/{track.name}.txt), so nothing to "
                            f"predict from: `invoke lock --track {track.name}` first")
    calibration_track = get_track(CALIBRATION_TRACK)
    calibration = need_file(calibration_track, repo)
    if "need_gb" not in calibration:
        raise HostError(f"[build] the prediction scales track {CALIBRATION_TRACK}'s measurement, and "
                        f"lockfiles/{CALIBRATION_TRACK}.disk.json holds none: `invoke build.disk --track "
                        f"{CALIBRATION_TRACK}` first")
    calibration_contents = lock_contents(calibration_track, repo)
    written = []
    for track in tracks:
        contents = calibration_contents if track.name == CALIBRATION_TRACK else lock_contents(track, repo)
        path = need_path(track, repo)
        kept = need_file(track, repo) or {"track": track.name}
        kept["predicted"] = {"what": PREDICTED, **scaled(contents, calibration_contents, calibration)}
        path.write_text(json.dumps(kept, indent=1) + "\n")
        say(f"track {track.name}: image {kept['predicted']['image_gb']} GB, a cold build's peak "
            f"{sum(kept['predicted']['need_gb'].values()):.1f} GB (predicted) -> {path.relative_to(repo)}")
        written.append(path)
    return written
