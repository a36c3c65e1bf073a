"""`invoke clean`: free what this project put on the machine, track by track, each step saying what it freed (the free
space of the store's filesystem before and after it: measured, so another program writing there at the time shows
too).

Only what the project made, found by the names it gives: the images `invoke build` tags (grpolab:<track>,
grpolab:<track>-<rollout>), the dependency stages they keep (grpolab-deps:<track>-<key>, builders/onecopy.py) and the
checks' (grpolab-check:<track>-<n>, grpolab-measure:<track>...), in the Docker engine and in buildah's store;
buildah's build stages of a track (its untagged images whose history holds the build arg TRACK=<track>); a track's
native venv (.venvs/<track>). Without --track, the stand-in bases (grpolab-base:*) too, which every track builds on.
With --caches, what every track shares and a rebuild then downloads again: the images' uv cache (buildah's cache mount
for /root/.cache/uv) and the lab's Compose volume (grpolab_cache: Hugging Face downloads). What buildah cannot tell
apart is left: a step before the Dockerfile's first use of TRACK, another program's images.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from grpolab.common.tracks import Track, get_track, load_tracks

from .. import REPO
from ..host.console import say
from ..host.disk import buildah_cache_mounts, free_gb, store_paths
from ..host.tools import resolved
from .builders.storelock import store_held

CACHE_MOUNT = Path("root") / ".cache" / "uv"  # images/Dockerfile's `--mount=type=cache,target=/root/.cache/uv`
CACHE_VOLUME = "grpolab_cache"  # compose/base.yaml's volume `cache`, in Compose project grpolab


def _lines(cmd: list[str]) -> list[str]:
    out = subprocess.run(resolved(cmd), capture_output=True, text=True)
    return out.stdout.split("\n") if out.returncode == 0 else []


def project_image(name: str, track: Track | None) -> bool:
    """Is `name` (repository:tag, with or without buildah's localhost/) one of the project's images of `track` (of any
    track when None)?"""
    repository, _, tag = name.removeprefix("localhost/").partition(":")
    if repository == "grpolab-base":
        return False  # the stand-in base: a step of its own
    if repository not in ("grpolab", "grpolab-check", "grpolab-measure", "grpolab-deps"):
        return False
    return track is None or re.fullmatch(rf"{re.escape(track.name)}(-.+)?", tag) is not None


def engine_images(track: Track | None) -> list[str]:
    names = _lines(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"])
    return [name for name in names if name and project_image(name, track)]


def buildah_images(track: Track | None) -> list[str]:
    """The project's images of `track` in buildah's store, tagged ones by name, then its build stages by id."""
    listed = _lines(["buildah", "images", "--all", "--json"])
    images = json.loads("\n".join(listed) or "[]")
    tagged = [name for image in images for name in image.get("names") or [] if project_image(name, track)]
    marker = re.compile(rf"\bTRACK={re.escape(track.name)}\b" if track else r"\bTRACK=\S+")
    stages = [image["id"] for image in images if not image.get("names") and _history_has(image["id"], marker)]
    return tagged + stages


def _history_has(image_id: str, marker: re.Pattern) -> bool:
    out = subprocess.run(resolved(["buildah", "inspect", "--type", "image", image_id]), capture_output=True, text=True)
    if out.returncode != 0:
        return False
    history = json.loads(out.stdout).get("History") or []
    return any(marker.search(entry.get("created_by", "")) for entry in history)


def standin_bases(track: Track | None) -> list[str]:
    if track is not None:
        return []
    names = _lines(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "grpolab-base"])
    return [name for name in names if name]


def venvs(track: Track | None) -> list[str]:
    tracks = [track] if track else list(load_tracks().values())
    return [str(REPO / ".venvs" / t.name) for t in tracks if (REPO / ".venvs" / t.name).is_dir()]


def uv_cache_mount(track: Track | None) -> list[str]:
    path = buildah_cache_mounts() / CACHE_MOUNT
    return [str(path)] if path.is_dir() else []


def cache_volume(track: Track | None) -> list[str]:
    return [CACHE_VOLUME] if _lines(["docker", "volume", "ls", "--quiet", "--filter", f"name=^{CACHE_VOLUME}$"])[
        :1] == [CACHE_VOLUME] else []


def _remove_engine_images(names: list[str]) -> None:
    # By name: an image loses this name; its layers go once no other name or image holds them.
    subprocess.run(resolved(["docker", "image", "rm", *names]), capture_output=True)


def _remove_buildah_images(refs: list[str]) -> None:
    subprocess.run(resolved(["buildah", "rmi", "--force", *refs]), capture_output=True)


def _remove_standin_bases(names: list[str]) -> None:
    ids = [line for name in names for line in _lines(["docker", "image", "inspect", "--format", "{{.Id}}", name])]
    _remove_engine_images(names)
    # buildah's copy of a base is named by its id (base_into_buildah)
    _remove_buildah_images([i.removeprefix("sha256:") for i in ids if i])


def _remove_folders(paths: list[str]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def _remove_volume(names: list[str]) -> None:
    subprocess.run(resolved(["docker", "volume", "rm", *names]), capture_output=True)


@dataclass(frozen=True)
class Step:
    label: str
    store: str  # the store (hostlab/host/disk.py) whose filesystem's free space says what the step freed
    find: Callable[[Track | None], list[str]]
    remove: Callable[[list[str]], None]
    cache: bool = False  # shared by every track: only with --caches


# In order: the engine's copies first (a build hands them over again, about a minute each), caches last.
STEPS: tuple[Step, ...] = (
    Step("the Docker engine's images", "engine", engine_images, _remove_engine_images),
    Step("buildah's images and build stages (its layer cache: the next build starts from nothing)", "buildah_store",
         buildah_images, _remove_buildah_images),
    Step("the stand-in bases, in the engine and buildah's store (`invoke base` makes them again, 20 s)", "engine",
         standin_bases, _remove_standin_bases),
    Step("the native venvs (`invoke venv` makes them again)", "uv_cache", venvs, _remove_folders),
    Step("the images' uv cache, buildah's cache mount for /root/.cache/uv, which every track's build shares (the next "
         "build downloads its wheels again)", "buildah_tmp", uv_cache_mount, _remove_folders, cache=True),
    Step("the lab's Compose volume (Hugging Face downloads and built models)", "engine", cache_volume, _remove_volume,
         cache=True),
)


def clean(track_name: str | None = None, caches: bool = False, dry_run: bool = False,
          steps: tuple[Step, ...] = STEPS) -> float:
    """Each step's things removed (or, with `dry_run`, listed), saying what it freed; the GB freed in all."""
    track = get_track(track_name) if track_name else None
    whose = f"track {track.name}'s" if track else "every track's"
    paths = store_paths()
    freed_gb = 0.0
    with nullcontext() if dry_run else store_held("invoke clean"):  # not the images a build is making
        for step in steps:
            if step.cache and not caches:
                continue
            found = step.find(track)
            if not found:
                say(f"clean: {step.label}: none of {whose}")
                continue
            if dry_run:
                say(f"clean: {step.label}, {whose}: would remove {', '.join(found)}")
                continue
            before = free_gb(paths[step.store])
            step.remove(found)
            freed = free_gb(paths[step.store]) - before
            freed_gb += freed
            say(f"clean: {step.label}, {whose}: removed {len(found)} ({', '.join(found)[:300]}): {freed:.2f} GB freed")
    if not caches:
        say("clean: the caches every track shares were kept (--caches removes them too)")
    say(f"clean: {freed_gb:.2f} GB freed in all" if not dry_run else "clean: dry run, nothing removed")
    return freed_gb
