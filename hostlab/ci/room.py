"""Disk room for CI's builds: what is free where the images, uv's cache and the clone live, room made from what earlier
runs of this project left behind when there is too little, and the lowest free space seen while CI runs.

Why: CI runs on a machine that keeps what earlier runs built (buildah's store, the Docker engine's copies, uv's
cache). One run found 21 GiB free and stopped 601 s in, with `no space left on device` in track cv's image commit, a
failure that names neither the cause nor the cure. Now the room is made, or its lack named, before anything builds.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

from .. import REPO, HostError
from ..host.console import say
from ..host.disk import (  # noqa: F401  (DiskWatch, GIB, filesystems, free_gib: CI's names for them)
    GIB,
    DiskWatch,
    buildah_cache_mounts,
    filesystems,
    free_gib,
    command_output,
    least_free,
    store_paths,
)
from ..host.tools import resolved


def storage_paths() -> list[Path]:
    """Where CI writes its bulk: the clone, and the stores a build writes (hostlab/host/disk.py's STORES)."""
    return [REPO, *store_paths().values(), buildah_cache_mounts()]


def _docker_images_of_the_project() -> list[str]:
    lines = command_output(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]).splitlines()
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


def _remove_buildah_cache_mounts() -> None:
    shutil.rmtree(buildah_cache_mounts(), ignore_errors=True)


def _prune_uv_cache() -> None:
    _run_all(["uv", "cache", "prune"])


def _clean_uv_cache() -> None:
    # `uv cache prune` keeps every unpacked wheel (uv cannot know which venvs link to them): on a machine that made the
    # locks of several tracks it held 19 GiB and freed nothing. The venvs keep their files (hard links or copies).
    _run_all(["uv", "cache", "clean"])


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
    (
        "uv's whole cache on this machine (the venvs keep their files; the next install downloads again)",
        _clean_uv_cache,
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
