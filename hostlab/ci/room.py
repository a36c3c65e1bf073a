"""Disk room for CI's builds: what is free where the images, uv's cache and the clone live, room made from what earlier
runs of this project left behind when there is too little, and the lowest free space seen while CI runs.

Why: CI runs on a machine that keeps what earlier runs built (buildah's store, the Docker engine's copies, uv's
cache). One run found 21 GiB free and stopped 601 s in, with `no space left on device` in track cv's image commit, a
failure that names neither the cause nor the cure. Now the room is made, or its lack named, before anything builds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import REPO, HostError
from ..host.console import say
from ..host.tools import resolved

GIB = 1024**3


def _output(cmd: list[str]) -> str:
    try:
        out = subprocess.run(resolved(cmd), capture_output=True, text=True, timeout=60)
    except (HostError, OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def storage_paths() -> list[Path]:
    """Where CI writes its bulk: the clone, uv's cache, buildah's store, the Docker engine's, buildah's cache mounts."""
    candidates = [REPO, Path(_output(["uv", "cache", "dir"]) or Path.home() / ".cache" / "uv")]
    candidates.append(
        Path(_output(["buildah", "info", "--format", "{{.store.GraphRoot}}"]) or "/var/lib/containers/storage")
    )
    candidates.append(Path(_output(["docker", "info", "--format", "{{.DockerRootDir}}"]) or "/var/lib/docker"))
    return [*candidates, buildah_cache_mounts()]


def filesystems(paths: list[Path]) -> dict[int, Path]:
    """One path per filesystem (the first named), keyed by its device: free space is per filesystem."""
    seen: dict[int, Path] = {}
    for path in paths:
        existing = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
        seen.setdefault(os.stat(existing).st_dev, existing)
    return seen


def free_gib(path: Path) -> float:
    return shutil.disk_usage(path).free / GIB


def least_free(paths: list[Path]) -> tuple[float, Path]:
    """The fullest of the filesystems holding `paths`: its free GiB and the path that names it."""
    return min((free_gib(path), path) for path in filesystems(paths).values())


def _docker_images_of_the_project() -> list[str]:
    lines = _output(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]).splitlines()
    return [name for name in lines if name.split(":")[0].rsplit("/", 1)[-1] == "grpolab"]


def _run_all(*cmds: list[str]) -> None:
    for cmd in cmds:
        if cmd:
            subprocess.run(resolved(cmd), capture_output=True, text=True)


def _remove_leftovers() -> None:
    # Not buildah's untagged images: with --layers they are its layer cache, the source-builds stage's compile among
    # them (`invoke source-wheels` made it for the test venv, and the llama.cpp image takes it from there). Pruned
    # here, on a machine 2.9 GiB short of the 40, they gave back 0.9 GiB with the engine's, and cost the next builds
    # 154 s for track c (cached after `invoke up`) and 232 s for its llama.cpp image, compiled again. They go with
    # buildah's store, later in the order.
    _run_all(
        ["docker", "container", "prune", "--force"], ["docker", "image", "prune", "--force"], ["buildah", "rm", "--all"]
    )


def _remove_engine_copies() -> None:
    names = _docker_images_of_the_project()
    if names:
        _run_all(["docker", "image", "rm", "--force", *names], ["docker", "image", "prune", "--force"])


def _remove_buildah_store() -> None:
    _run_all(["buildah", "rm", "--all"], ["buildah", "rmi", "--all", "--force"])


def buildah_cache_mounts() -> Path:
    """Where buildah keeps the folders of `RUN --mount=type=cache` (the images' uv cache): under TMPDIR."""
    return Path(os.environ.get("TMPDIR") or "/var/tmp") / "buildah-cache"


def _remove_buildah_cache_mounts() -> None:
    shutil.rmtree(buildah_cache_mounts(), ignore_errors=True)


def _prune_uv_cache() -> None:
    _run_all(["uv", "cache", "prune"])


# Cheapest to lose first. Every one is something a build or `uv pip sync` makes again (uv's unused entries are
# needed by nothing). Only CI runs these, on a machine of its own: the first and the last reach past this project
# (every exited container and the engine's every untagged image; every build's cache mounts).
CLEANUPS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("exited containers and the Docker engine's untagged images; buildah's working containers", _remove_leftovers),
    (
        "the Docker engine's copies of the grpolab images (buildah keeps them; a build hands them over again, about a "
        "minute each)",
        _remove_engine_copies,
    ),
    (
        "buildah's store: its layer cache and the stand-in base (the builds then start from nothing, minutes each)",
        _remove_buildah_store,
    ),
    ("uv's cache entries that nothing uses any more (uv cache prune)", _prune_uv_cache),
    (
        "buildah's cache mounts, the images' own uv cache (the builds then download their wheels again)",
        _remove_buildah_cache_mounts,
    ),
)


def make_room(need_gib: float, paths: list[Path] | None = None, cleanups=CLEANUPS) -> float:
    """At least `need_gib` free on every filesystem in `paths`, by the cleanups in order, each only while short. The
    free GiB at the end; HostError naming the need, what is free and what was tried, when still short."""
    paths = paths if paths is not None else storage_paths()
    free, where = least_free(paths)
    say(f"disk: {free:.1f} GiB free on the filesystem of {where}; this needs {need_gib:.0f} GiB")
    tried = []
    for label, cleanup in cleanups:
        if free >= need_gib:
            break
        say(f"disk: short by {need_gib - free:.1f} GiB: removing {label}")
        cleanup()
        tried.append(label)
        after, where = least_free(paths)
        say(f"disk: {after:.1f} GiB free now ({after - free:+.1f} GiB)")
        free = after
    if free < need_gib:
        raise HostError(
            f"disk: {free:.1f} GiB free on the filesystem of {where}, and this needs {need_gib:.0f} GiB"
            + (f" after removing {'; '.join(tried)}" if tried else "")
            + ": free some space there (`du -xsh /var/lib/containers /var/lib/docker ~/.cache/uv` shows the usual "
            "large holders) and run it again"
        )
    return free


@dataclass
class DiskWatch:
    """The lowest free space on the fullest filesystem while the block runs, looked at every `every_s` seconds from a
    thread (a statvfs call: nothing the run would notice). `low_gib` and `low_at_s` are read after the block."""

    paths: list[Path]
    every_s: float = 2.0
    low_gib: float = float("inf")
    low_at_s: float = 0.0
    start_gib: float = 0.0
    looks: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _look(self, started: float) -> None:
        free, _ = least_free(self.paths)
        self.looks += 1
        if free < self.low_gib:
            self.low_gib, self.low_at_s = free, time.monotonic() - started

    def __enter__(self) -> DiskWatch:
        started = time.monotonic()
        self.start_gib = least_free(self.paths)[0]
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
