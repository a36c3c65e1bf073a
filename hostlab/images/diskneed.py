"""What a track's build needs on disk, measured and kept beside its lock (lockfiles/<track>.disk.json); the check
`invoke build` and `invoke up` make with it before they start, and a disk that fills during the build named in one
`[build]` line, with the whole log kept in a file.

The need is what a cold build of the track's image (`invoke build.disk --track T`, diskmeasure.py) wrote at its peak to
each store (hostlab/host/disk.py's STORES). Stores on one filesystem add up there. A store that already holds the
track's image is not asked for its cold need: a rebuild reuses what it holds (buildah's layer cache and cache mounts,
the engine's layers), and what a changed lock adds beyond that is caught by the watch during the build.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grpolab.common.tracks import Track

from .. import REPO, HostError
from ..host import engine
from ..host.console import say, stream_log
from ..host.runs import image_runs_dir
from ..host.disk import (
    GB,
    GIB,
    DiskWatch,
    command_output,
    existing,
    filesystem_of,
    free_gb,
    label_of,
    mount_point,
    store_paths,
)

BUILDAH_STORES = ("buildah_store", "buildah_tmp")  # what a builder that builds inside the engine writes there instead
FREE_IT = "`invoke clean --dry-run` lists what this project holds there and `invoke clean` frees it"
NO_SPACE = re.compile(r"no space left on device|os error 28|ENOSPC", re.IGNORECASE)


def need_path(track: Track, repo: Path = REPO) -> Path:
    return repo / "lockfiles" / f"{track.name}.disk.json"


def read_needs(track: Track, repo: Path = REPO) -> dict[str, float] | None:
    """{store key: GB a cold build of the track's image wrote there at its peak}, or None where not measured yet."""
    path = need_path(track, repo)
    return json.loads(path.read_text())["need_gb"] if path.exists() else None


def held_stores(track: Track) -> set[str]:
    """The stores that already hold the track's image, where a rebuild reuses what they hold."""
    held = set()
    if engine.image_or_none(f"grpolab:{track.name}") is not None:
        held.add("engine")
    if command_output(["buildah", "images", "--quiet", f"localhost/grpolab:{track.name}"]):
        held.update(BUILDAH_STORES)
    return held


def needs_by_filesystem(needs: dict[str, float], paths: dict[str, Path], held: set[str],
                        builds_in_engine: bool) -> dict[int, dict[str, float]]:
    """{device: {store key: GB}} for the stores a build will write: what each needs, added up per filesystem. A builder
    that builds inside the engine (buildx, the engine's own) writes buildah's share to the engine's data root."""
    found: dict[int, dict[str, float]] = {}
    for key, need_gb in needs.items():
        if key in held or need_gb <= 0:
            continue
        where = paths["engine"] if builds_in_engine and key in BUILDAH_STORES else paths[key]
        found.setdefault(filesystem_of(where), {})[key] = need_gb
    return found


def _stores_there(keys, paths: dict[str, Path]) -> str:
    return " and ".join(f"{label_of(key)} ({paths[key]})" for key in keys)


def check_room(track: Track, builds_in_engine: bool, repo: Path = REPO) -> None:
    """Refuse in one `[build]` line, before anything is built, where a filesystem the build writes to has less free
    space than the track's measured need there."""
    needs = read_needs(track, repo)
    if needs is None:
        say(f"disk: track {track.name}'s need is not measured yet ({need_path(track, repo).relative_to(repo)}; "
            f"`invoke build.disk --track {track.name}` measures it): free space not checked")
        return
    paths = store_paths()
    for device, there in needs_by_filesystem(needs, paths, held_stores(track), builds_in_engine).items():
        where = next(path for path in paths.values() if filesystem_of(path) == device)
        free, need = free_gb(where), sum(there.values())
        if free < need:
            raise HostError(
                f"[build] {_stores_there(there, paths)}: {free:.1f} GB free on {mount_point(where)}, and track "
                f"{track.name}'s build needs {need:.1f} GB there (measured, {need_path(track, repo).name}): "
                f"{FREE_IT}, or free space on {mount_point(where)}"
            )


def build_log(track: Track, repo: Path = REPO) -> Path:
    """runs/build-<track>.log, in the runs folder the images' labs write to (the test command's own while it runs)."""
    return (image_runs_dir() if repo == REPO else repo / "runs") / f"build-{track.name}.log"


def full_store(watch: DiskWatch, said: str, paths: dict[str, Path]) -> list[str]:
    """The stores the build filled: those whose folder the error names, else those on the filesystem that came
    closest to full while the watch looked, else every store."""
    # The folder as a whole path: /var/tmp is not named by /var/tmpfs/...
    named = [key for key, path in paths.items() if re.search(re.escape(str(path)) + r"(?![\w.-])", said)]
    if named:
        return named
    if watch.lows_gib:
        device = min(watch.lows_gib, key=watch.lows_gib.get)
        return [key for key, path in paths.items() if filesystem_of(path) == device]
    return list(paths)


@contextmanager
def full_disk_named(track: Track, log: Path, repo: Path = REPO, every_s: float = 0.5) -> Iterator[DiskWatch]:
    """The build inside the block, its every line kept in `log`, the free space of each store's filesystem watched; a
    build that fails on a full disk ends in one `[build]` line naming the store, the free and needed space, the command
    that frees it and the log, instead of the failed step's lines again."""
    paths = store_paths()
    log.parent.mkdir(parents=True, exist_ok=True)
    with stream_log(log), DiskWatch(list(paths.values()), every_s=every_s) as watch:
        try:
            yield watch
        except HostError as failed:
            said = str(failed)
            with log.open("a") as kept:
                kept.write(f"\n{said}\n")
            if not NO_SPACE.search(said) and not NO_SPACE.search(log.read_text(errors="replace")[-20000:]):
                raise
            raise HostError(_full_line(track, full_store(watch, said, paths), watch, paths, log, repo)) from None


def _full_line(track: Track, keys: list[str], watch: DiskWatch, paths: dict[str, Path], log: Path, repo: Path) -> str:
    where = existing(paths[keys[0]])
    low_gb = watch.lows_gib.get(filesystem_of(where), free_gb(where) * GB / GIB) * GIB / GB
    needs = read_needs(track, repo)
    need = (f"track {track.name}'s build needs {sum(needs.get(key, 0.0) for key in keys):.1f} GB there (measured, "
            f"{need_path(track, repo).name})" if needs else f"track {track.name}'s need is not measured yet")
    return (f"[build] no space left on device in {_stores_there(keys, paths)}: {low_gb:.1f} GB free on "
            f"{mount_point(where)} at the lowest, now {free_gb(where):.1f} GB, and {need}: {FREE_IT}, or free space on "
            f"{mount_point(where)}; the build's whole log: {log}")
