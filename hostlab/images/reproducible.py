"""`invoke build.reproducible --track T`: build twice from nothing and compare, byte for byte.

With buildah, each build runs in a store of its own, empty at first (no image, no cached layer, no cache mount: uv
downloads
the lock again), removed afterwards, so the everyday store and its cache are left as they were; the stand-in base is
made again before each of the two when the build is on it. With buildx, the engine's build cache is emptied before
each (`docker buildx prune --all`). The two images' ids
(their configs' digests) and every layer's diff id are compared; when they differ, imagediff names the layer and the
files, and how they differ. With --record, two same builds are written to lockfiles/<track>.image.json, which every
later build is compared with. The verdict, with what it cost, is printed and written to runs/reproducible-<image>.json
(or where `out` says); only the benchmark, `invoke bench.reproducible`, files it under bench/.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from grpolab.common.paths import runs_dir
from grpolab.common.tracks import Track

from .. import REPO, HostError
from ..host import engine
from ..host.console import say, warn
from ..host.disk import buildah_tmp
from ..host.tools import resolved
from ..locks.lockfile import read_lock
from .build import BuildResult, build, image_for_rollout, resolve_track
from .builders import BUILDAH_HINT, Builder, choose_builder, engine_layers
from .diff import explain
from .record import compare_with_record, record_path, write_record
from .standin import build_standin, standin_name


def _two_builds_from_nothing(track: Track, builder: Builder, base: str | None, ca_bundle: str | None, repo: Path,
                             rollout: str | None, on_standin: bool,
                             vendored: Path | None = None) -> tuple[list[BuildResult], list[dict]]:
    """The track's image built twice, each from nothing (the stand-in base made again first when the build is on
    it), tagged grpolab-check:<track>-1 and -2: the two results and what each took."""
    arch = track.platform.partition("/")[2]
    builds: list[BuildResult] = []
    seconds: list[dict] = []
    for attempt in (1, 2):
        say(f"== build {attempt} of 2 of track {track.name}, from nothing ==")
        started = time.monotonic()
        base_seconds = None
        if on_standin:  # made again before each: the first build too runs on the stand-in this commit makes
            base_started = time.monotonic()
            build_standin(arch, force=True)
            base_seconds = round(time.monotonic() - base_started, 1)
        tag = f"grpolab-check:{track.name}-{attempt}"
        # A store of the build's own (buildah), or the engine's build cache emptied (buildx): as a fresh machine has it.
        with builder.from_nothing(buildah_tmp() / f"grpolab-check-{track.name}-{attempt}"):
            result = build(track.name, base=base, ca_bundle=ca_bundle, repo=repo, tag=tag, write_env=False,
                           builder=builder, compare_record=False, rollout=rollout, vendored=vendored)
        builds.append(result)
        seconds.append({"build_s": round(result.seconds, 1), "total_s": round(time.monotonic() - started, 1),
                        **({"standin_base_s": base_seconds} if base_seconds is not None else {})})
    return builds, seconds


def check_reproducible(
    track_name: str | None,
    base: str | None = None,
    ca_bundle: str | None = None,
    record: bool = False,
    repo: Path = REPO,
    rollout: str | None = None,
    out: Path | None = None,
    vendored: Path | None = None,
) -> dict:
    """Two cold builds of the track's image (for `rollout`: the one with llama.cpp compiled in for llamacpp), compared;
    the verdict, also written to `out` (default runs/reproducible-<image>.json), never to a tracked file."""
    track = resolve_track(track_name)
    image, _ = image_for_rollout(track, rollout, read_lock(track, repo / "lockfiles"))
    builder = choose_builder()
    if not builder.sets_times:
        raise HostError(f"`invoke build.reproducible` needs a builder that takes its times from git: {BUILDAH_HINT}")
    arch = track.platform.partition("/")[2]
    # The stand-in base is made again before each build, from Debian's archive; a vendored folder brings its own.
    on_standin = (base or "") == standin_name(arch) and not vendored
    builds, seconds = _two_builds_from_nothing(track, builder, base, ca_bundle, repo, rollout, on_standin, vendored)
    first, second = (f"grpolab-check:{track.name}-{n}" for n in (1, 2))
    layers = [engine_layers(first), engine_layers(second)]
    same = builds[0].image_id == builds[1].image_id and layers[0] == layers[1]
    lines = [] if same else explain(first, second, *layers)
    verdict = {
        "track": track.name,
        "same_image_id": builds[0].image_id == builds[1].image_id,
        "image_ids": [b.image_id for b in builds],
        "same_layers": layers[0] == layers[1],
        "layers": len(layers[0]),
        "deps_image_ids": [b.deps_image_id for b in builds],
        **({"compiled_image_ids": [b.compiled_image_id for b in builds]} if builds[1].compiled_image_id else {}),
        "base": {"name": builds[1].base, "ids": [b.base_id for b in builds], "rebuilt_between": on_standin},
        "epochs": builds[1].epochs,
        "builder": builder.describe(),
        "seconds": seconds,
        "differences": lines,
    }
    if same:
        say(
            f"SAME: both builds of track {track.name} are image {builds[0].image_id} ({len(layers[0])} layers, each "
            "the same)"
        )
    else:
        warn(f"DIFFERENT: track {track.name}'s two builds are {builds[0].image_id[:19]} and {builds[1].image_id[:19]}")
        for line in lines:
            say(line)
    stages_same = (builds[0].deps_image_id, builds[0].compiled_image_id) == (
        builds[1].deps_image_id, builds[1].compiled_image_id
    )
    if same and stages_same:
        if record:
            path = write_record(track, builds[1], {"builds": 2, "from_nothing": True, "same": True,
                                                   "image_id": builds[1].image_id, "seconds": seconds}, repo)
            say(
                f"recorded in {path.relative_to(repo)}: every build of these inputs on this base must give dependency "
                f"image {builds[1].deps_image_id[:19]}"
            )
        else:
            verdict["record"] = compare_with_record(track, builds[1], repo)[0]
    elif record:
        warn(f"not recorded: the builds differ ({record_path(track, repo, builds[1].record_name).name} is left as it "
             "was)")
    # The second build becomes the track's image, as a plain `invoke build` would have left it.
    subprocess.run(resolved(["docker", "tag", second, image]), check=True)
    if same:  # differing ones stay, under their grpolab-check tags, to be looked at
        for tag in (first, second):
            engine.client().images.remove(tag, noprune=True)
    verdict["image"] = image
    out = out or repo / runs_dir() / f"reproducible-{image.partition(':')[2]}.json"  # c, or c-llamacpp
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(verdict, indent=1) + "\n")
    say(f"verdict written to {out}")
    if not same:
        raise HostError(f"track {track.name}'s image is not reproducible: the differences are listed above")
    return verdict
