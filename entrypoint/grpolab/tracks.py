"""Reads the one table of tracks (images/tracks.toml).

Both sides use this reader: the lab (to know what device a track expects) and the host tasks (to build
images and locks). It imports nothing heavy.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

# The table sits at <repo>/images/tracks.toml; the images copy it to the same place relative to the package.
TRACKS_FILE = Path(os.environ.get("GRPOLAB_TRACKS_FILE", Path(__file__).resolve().parents[2] / "images" / "tracks.toml"))


class UnknownTrack(ValueError):
    pass


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
    overrides: list[str] = field(default_factory=list)  # packages whose pin overrides what others require of them
    gpus: list[str] = field(default_factory=list)  # the GPUs `invoke kernels` judges the lock's code for (sm_121, gfx1151)
    gpus_required: list[str] = field(default_factory=list)  # those the lock refuses to leave without code

    @property
    def is_container(self) -> bool:
        return self.kind == "container"


def load_tracks(path: Path = TRACKS_FILE) -> dict[str, Track]:
    with open(path, "rb") as f:
        table = tomllib.load(f)["tracks"]
    return {name: Track(name=name, **row) for name, row in table.items()}


def get_track(name: str, path: Path = TRACKS_FILE) -> Track:
    tracks = load_tracks(path)
    if name not in tracks:
        known = ", ".join(sorted(tracks))
        raise UnknownTrack(f"unknown track {name!r}: the tracks are {known} (defined in {path})")
    return tracks[name]


def current_track_name(default: str = "c") -> str:
    """The track this environment was built for: GRPOLAB_TRACK, set by the image or venv; else `default`."""
    return os.environ.get("GRPOLAB_TRACK", default)
