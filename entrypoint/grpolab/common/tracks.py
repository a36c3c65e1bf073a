"""Reads the one table of tracks (images/tracks.toml).

Both sides use this reader: the lab (to know what device a track expects) and the host tasks (to build
images and locks). It imports nothing heavy.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .rollout_paths import ROLLOUT_PATH_REGISTRY

# The table sits at <repo>/images/tracks.toml; the images copy it to the same place relative to the package.
TRACKS_FILE = Path(
    os.environ.get("GRPOLAB_TRACKS_FILE", Path(__file__).resolve().parents[3] / "images" / "tracks.toml")
)


# The rollout paths a lab can sample through (a track's row names one as its default; `--rollout` picks another): the
# registry's names, a live view of it. Here, below the lab's settings, so that the host tasks can refuse a wrong one
# before they build anything.
ROLLOUT_PATHS = ROLLOUT_PATH_REGISTRY.keys()


class UnknownTrack(ValueError):
    pass


class TracksFileError(ValueError):
    """images/tracks.toml (or GRPOLAB_TRACKS_FILE) cannot be read: the file, and the line and column TOML fails at."""

    def __init__(self, path: Path, what: str):
        super().__init__(f"the tracks table {path} {what}")
        committed = Path(path).resolve() == (Path(__file__).resolve().parents[3] / "images" / "tracks.toml")
        self.action = (
            "fix the file at that place (`git diff images/tracks.toml` shows a hand edit; `git checkout -- "
            "images/tracks.toml` "
            "restores the committed one)"
            if committed
            else f"fix {path} at that place, or unset GRPOLAB_TRACKS_FILE to use images/tracks.toml"
        )


@dataclass(frozen=True)
class Track:
    name: str
    description: str
    kind: str
    platform: str
    uv_platform: str
    python: str
    base_image: str
    index_urls: list[str]
    lock_inputs: list[str]
    expected_device: str
    expected_build: str
    expected_arch: str
    rollout: str
    device_access: str
    unified_memory: bool
    extras: list[str] = field(default_factory=list)
    index_ignore_error_codes: list[int] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    lab: dict[str, object] = field(default_factory=dict)
    versions_from: dict[str, object] = field(default_factory=dict)  # {track, packages}: pins taken from that lock
    # {package: why}: packages whose pin overrides what others require of them; packages the lock leaves out although
    # a locked one requires them. The reasons are what the doctor says of the requirements they leave unmet.
    overrides: dict[str, str] = field(default_factory=dict)
    excludes: dict[str, str] = field(default_factory=dict)
    gpus: list[str] = field(
        default_factory=list
    )  # the GPUs `invoke kernels` judges the lock's code for (sm_121, gfx1151)
    gpus_required: list[str] = field(default_factory=list)  # those the lock refuses to leave without code
    # "ours": the lock is made on our machines and committed; "learner": on the learner's machine, by the first
    # `invoke build` or `invoke up` that needs it (hostlab/run/learner_lock.py), for a track whose indexes our
    # machines can't reach
    lock_made_on: str = "ours"
    lock_download: dict[str, object] = field(default_factory=dict)  # {gb, predicted_from}: what that lock downloads

    @property
    def is_container(self) -> bool:
        return self.kind == "container"


def load_tracks(path: Path = TRACKS_FILE) -> dict[str, Track]:
    """Every track of the table; TracksFileError in words (as a broken --config gets) when the file cannot be read."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as error:
        raise TracksFileError(path, f"could not be read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise TracksFileError(path, f"is not UTF-8 text (byte {error.start}), so not TOML") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(error))
        at = f"line {where[1]}, column {where[2]}" if where else "somewhere"
        raise TracksFileError(path, f"is not valid TOML at {at}: {str(error).split(' (at ')[0]}") from None
    rows = table.get("tracks")
    if not isinstance(rows, dict) or not all(isinstance(row, dict) for row in rows.values()):
        raise TracksFileError(path, "has no [tracks.NAME] tables (each track is one)")
    tracks = {}
    for name, row in rows.items():
        try:
            tracks[name] = Track(name=name, **row)
        except TypeError as error:  # a key misspelt or missing in a hand-edited row
            raise TracksFileError(
                path, f"has a [tracks.{name}] row that does not fit: {str(error).removeprefix('Track.__init__() ')}"
            ) from None
    return tracks


def get_track(name: str, path: Path = TRACKS_FILE) -> Track:
    tracks = load_tracks(path)
    if name not in tracks:
        known = ", ".join(sorted(tracks))
        raise UnknownTrack(f"unknown track {name!r}: the tracks are {known} (defined in {path})")
    return tracks[name]


def current_track_name(default: str = "c") -> str:
    """The track this environment was built for: GRPOLAB_TRACK, set by the image or venv; else `default`."""
    return os.environ.get("GRPOLAB_TRACK", default)


def packages_left_out() -> list[str]:
    """The lock's packages this image leaves out on purpose (GRPOLAB_NOT_INSTALLED, which the image sets): the ones
    PyPI ships only as source, whose compile `invoke build` runs only for the rollout path that loads them. Empty
    outside an image, and in the image built with them (`invoke up --rollout llamacpp`)."""
    return os.environ.get("GRPOLAB_NOT_INSTALLED", "").split()
