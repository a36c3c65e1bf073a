"""The disk an image build writes to: where each store is (STORES), how much is free on the filesystem that holds it,
and the lowest free space seen on each while a block runs (DiskWatch).

A build writes four stores: buildah's store (its images and layer cache), buildah's temporary folder (the images' uv
cache as `RUN --mount=type=cache`, the staged context, the hand-over's layers), the Docker engine's data root (its copy
of the image, and the archive it unpacks while loading one) and uv's cache on the host. Two or more of them usually
share one filesystem, so free space is asked per filesystem and what each store needs adds up there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import HostError
from .tools import resolved

GIB = 1024**3
GB = 1000**3


def command_output(cmd: list[str]) -> str:
    """The command's stdout, stripped; "" when it cannot run or fails (a tool not installed: its store's default)."""
    try:
        out = subprocess.run(resolved(cmd), capture_output=True, text=True, timeout=60)
    except (HostError, OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


# buildah 1.28 leaves a RUN step's mount target in the layer when its store is under the target's top folder: three
# builds of track c from nothing, alike but for where their store of their own was, gave three dependency images.
# Under /var/tmp, the recorded one; under /tmp/..., /tmp/pip.conf, /tmp/uv.txt, /tmp/lock.txt and two more left in its
# layers; under /root/..., /root/.cache/uv. images/Dockerfile mounts under these folders only (tests check it), and a
# build refuses a store under them (builders/buildah.py).
MOUNT_TARGET_TOPS = (Path("/tmp"), Path("/root"))


def under_mount_target_top(path: Path) -> bool:
    resolved_path = path.resolve()
    return any(resolved_path == top or top in resolved_path.parents for top in MOUNT_TARGET_TOPS)


def buildah_tmp() -> Path:
    """buildah's temporary folder: TMPDIR, else /var/tmp (where it keeps `RUN --mount=type=cache` folders too)."""
    return Path(os.environ.get("TMPDIR") or "/var/tmp")


def buildah_cache_mounts() -> Path:
    """Where buildah keeps the folders of `RUN --mount=type=cache` (the images' uv cache): under TMPDIR."""
    return buildah_tmp() / "buildah-cache"


def buildah_store() -> Path:
    graph_root = command_output(["buildah", "info", "--format", "{{.store.GraphRoot}}"])
    return Path(graph_root or "/var/lib/containers/storage")


def engine_root() -> Path:
    return Path(command_output(["docker", "info", "--format", "{{.DockerRootDir}}"]) or "/var/lib/docker")


def uv_cache() -> Path:
    return Path(command_output(["uv", "cache", "dir"]) or Path.home() / ".cache" / "uv")


@dataclass(frozen=True)
class Store:
    key: str  # as lockfiles/<track>.disk.json names it
    label: str  # as a sentence names it
    where: Callable[[], Path]


STORES: tuple[Store, ...] = (
    Store("buildah_store", "buildah's store", buildah_store),
    Store("buildah_tmp", "buildah's cache mounts and temporary files", buildah_tmp),
    Store("engine", "the Docker engine's data root", engine_root),
    Store("uv_cache", "uv's cache", uv_cache),
)


def store_paths() -> dict[str, Path]:
    """{store key: its folder on this machine}, asked of buildah, the engine and uv as they are set up now."""
    return {store.key: store.where() for store in STORES}


def label_of(key: str) -> str:
    return next(store.label for store in STORES if store.key == key)


def existing(path: Path) -> Path:
    """The path, or its nearest parent that exists: a store not made yet lands on its parent's filesystem."""
    return next((p for p in (path, *path.parents) if p.exists()), Path("/"))


def filesystem_of(path: Path) -> int:
    return os.stat(existing(path)).st_dev


def filesystems(paths: list[Path]) -> dict[int, Path]:
    """One path per filesystem (the first named), keyed by its device: free space is per filesystem."""
    seen: dict[int, Path] = {}
    for path in paths:
        seen.setdefault(filesystem_of(path), existing(path))
    return seen


def free_gib(path: Path) -> float:
    return shutil.disk_usage(existing(path)).free / GIB


def free_gb(path: Path) -> float:
    return shutil.disk_usage(existing(path)).free / GB


def least_free(paths: list[Path]) -> tuple[float, Path]:
    """The fullest of the filesystems holding `paths`: its free GiB and the path that names it."""
    return min((free_gib(path), path) for path in filesystems(paths).values())


def mount_point(path: Path) -> Path:
    """The mount point of the filesystem that holds `path` (what `df` names)."""
    path = existing(path).resolve()
    while path != path.parent and os.stat(path.parent).st_dev == os.stat(path).st_dev:
        path = path.parent
    return path


@dataclass
class DiskWatch:
    """The lowest free space on each filesystem holding `paths` while the block runs, looked at every `every_s` seconds
    from a thread (a statvfs call: nothing the run would notice). `low_gib` and `low_at_s` (the fullest filesystem)
    and `starts_gib` and `lows_gib` ({device: free GiB at the start, at the lowest}) are read after the block."""

    paths: list[Path]
    every_s: float = 2.0
    low_gib: float = float("inf")
    low_at_s: float = 0.0
    start_gib: float = 0.0
    looks: int = 0
    starts_gib: dict[int, float] = field(default_factory=dict)
    lows_gib: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _look(self, started: float) -> None:
        for device, path in filesystems(self.paths).items():
            free = free_gib(path)
            self.lows_gib[device] = min(free, self.lows_gib.get(device, float("inf")))
            if free < self.low_gib:
                self.low_gib, self.low_at_s = free, time.monotonic() - started
        self.looks += 1

    def __enter__(self) -> DiskWatch:
        started = time.monotonic()
        self.start_gib = least_free(self.paths)[0]
        self.starts_gib = {device: free_gib(path) for device, path in filesystems(self.paths).items()}
        self._look(started)

        def watch() -> None:
            while not self._stop.wait(self.every_s):
                self._look(started)

        self._thread = threading.Thread(target=watch, daemon=True, name="disk-watch")
        self._thread.start()
        self._started = started
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._look(self._started)

    def summary(self) -> str:
        return (f"disk: {self.start_gib:.1f} GiB free at the start, {self.low_gib:.1f} GiB at the lowest "
                f"({self.low_at_s:.0f} s in): this run used up to {self.start_gib - self.low_gib:.1f} GiB")
