"""One copy of each image on the learner's disk, for a builder that keeps a store of its own (buildah).

Why: buildah builds into its store and hands the image to the Docker engine, which `docker compose run` needs. Left as
it was, the machine kept the image twice (buildah's copy, with every step of its layer cache, and the engine's) and the
images' uv cache beside them: 15.5 GB for track c's 5.1 GB image.

What a build that keeps one copy does, once the engine holds the image:
- the dependency stage goes to the engine as well, tagged grpolab-deps:<track>-<key>. It is the bottom of the image
  the engine now holds, so only its config is sent (handover.py) and it costs no disk. `key` is a digest of what the
  stage is made of (`deps_key`): the next build with the same key, a code change, takes that image back into buildah
  (`deps_from_engine`) rather than building the stage again, and the engine then receives only the code's layers;
- the track's earlier grpolab-deps tags go (a lock change would otherwise pin the old 5 GB);
- buildah's copies go: every image in its store whose layers are the bottom of the image handed over (the steps of
  this build), and the dependency image without its history. What stays in buildah's store is the base (every build
  starts from it) and the compile of the lock's source-only packages (`grpolab:c-llamacpp`'s llama.cpp: minutes to
  make again);
- the images' uv cache (buildah's cache mount for /root/.cache/uv) goes: it only speeds up a lock change, by the
  wheels it still holds, and it is as large as the image's packages.

Two builds at once into one buildah store take turns (storelock.py): the build that removes its copies holds the store
alone, so what it removes is no other build's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from grpolab.common.tracks import Track

from ...host.console import say
from ...host.disk import buildah_cache_mounts, buildah_store, free_gb
from ...host.tools import resolved
from .buildah import without_history
from .buildah_store import buildah_has_image, buildah_layers, run_buildah
from .engine_images import engine_image_id
from .handover import buildah_to_engine
from .inputs import input_hashes

DEPS_REPOSITORY = "grpolab-deps"
CODE_ARGS = ("GIT_REVISION", "TRACK_ENV")  # build args only the lab stage reads: they change with the code
UV_CACHE_MOUNT = Path("root") / ".cache" / "uv"  # images/Dockerfile's `--mount=type=cache,target=/root/.cache/uv`


def deps_key(track: Track, repo: Path, args: dict[str, str], epoch: int, base_id: str) -> str:
    """A digest of what the dependency stage is made of: its input files, the base, its time and its build args."""
    inputs = input_hashes(track, repo)
    stage_args = {key: value for key, value in sorted(args.items()) if key not in CODE_ARGS}
    text = json.dumps({"inputs": inputs, "epoch": epoch, "base": base_id, "args": stage_args}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def deps_tag(track: Track, key: str) -> str:
    return f"{DEPS_REPOSITORY}:{track.name}-{key}"


def deps_from_engine(track: Track, key: str, epoch: int) -> tuple[str, str, list[str]] | None:
    """The dependency stage the engine keeps for `key`, taken into buildah's store: (its id without history, the image
    as built, a log line), as the stage's build gives them; None when the engine has none."""
    tag = deps_tag(track, key)
    held = engine_image_id(tag).removeprefix("sha256:")
    if not held:
        return None
    if buildah_has_image(held):  # kept by an earlier --keep-cache build: nothing to copy
        say(f"buildah's store holds this dependency stage ({tag}): not building it again")
        return without_history(held, epoch), held, [f"dependency stage {held[:12]} from buildah's store"]
    say(f"the Docker engine keeps this dependency stage ({tag}): taking it into buildah's store, not building it again")
    pulled = run_buildah("pull", "--quiet", f"docker-daemon:{tag}").stdout.strip().splitlines()[-1]
    return without_history(pulled, epoch), pulled, [f"dependency stage taken from the engine's {tag}"]


def keep_one_copy(track: Track, key: str, deps_ref: str, drop_ids: list[str], image_id: str, base_id: str) -> None:
    """After the hand-over of `image_id`: the dependency stage kept in the engine by `key`, the track's older ones
    dropped, buildah's copies of this build (and `drop_ids`) and the images' uv cache removed, each step saying what
    it freed."""
    tag = deps_tag(track, key)
    buildah_to_engine(deps_ref, tag)
    drop_older_deps(track, tag)
    drop_own_copies(image_id, base_id, drop_ids)


def drop_own_copies(image_id: str, base_id: str, drop_ids: list[str]) -> None:
    """buildah's copies of the build of `image_id` (and `drop_ids`) and the images' uv cache removed, each step
    saying what it freed."""
    store, mounts = buildah_store(), buildah_cache_mounts()
    before = free_gb(store)
    dropped = drop_buildah_copies(image_id, base_id, drop_ids)
    say(f"one copy: removed buildah's {dropped} images of this build (the engine holds it): "
        f"{free_gb(store) - before:.2f} GB freed")
    cache = mounts / UV_CACHE_MOUNT
    if cache.is_dir():
        before = free_gb(mounts)
        shutil.rmtree(cache, ignore_errors=True)
        say(f"one copy: removed the images' uv cache ({cache}; a lock change downloads its wheels again): "
            f"{free_gb(mounts) - before:.2f} GB freed. `--keep-cache` keeps it and buildah's copies")


def drop_older_deps(track: Track, keep: str) -> None:
    """The track's grpolab-deps tags other than `keep`: each holds the layers of a dependency stage no build uses."""
    listed = subprocess.run(resolved(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}",
                                      DEPS_REPOSITORY]), capture_output=True, text=True).stdout.split()
    older = [name for name in listed if name != keep and name.partition(":")[2].startswith(f"{track.name}-")]
    if older:
        subprocess.run(resolved(["docker", "image", "rm", *older]), capture_output=True)
        say(f"one copy: dropped the engine's older dependency stages of track {track.name}: {', '.join(older)}")


def is_bottom_of(layers: list[str], chain: list[str], base: list[str]) -> bool:
    """Is an image with `layers` a step of the build that gave `chain`: its layers the bottom of it, above the base's
    (the base, which every build starts from, stays)?"""
    return len(base) < len(layers) <= len(chain) and chain[: len(layers)] == layers


def _layers_or_none(image_id: str) -> list[str]:
    info = run_buildah("inspect", "--type", "image", image_id, check=False)  # gone meanwhile: not ours to remove
    return json.loads(info.stdout)["OCIv1"]["rootfs"]["diff_ids"] if info.returncode == 0 else []


def drop_buildah_copies(image_id: str, base_id: str, drop_ids: list[str]) -> int:
    """Remove from buildah's store every image whose layers are the bottom of `image_id`'s above the base (the build's
    steps, `image_id` itself), and `drop_ids`: how many went."""
    chain, base = buildah_layers(image_id), buildah_layers(base_id)
    listed = run_buildah("images", "--all", "--quiet", "--no-trunc").stdout.split()
    ids = {i.removeprefix("sha256:") for i in listed}
    steps = [i for i in ids if is_bottom_of(_layers_or_none(i), chain, base)]
    gone = sorted(set(steps) | ({i.removeprefix("sha256:") for i in drop_ids} & ids))
    if gone:
        run_buildah("rmi", "--force", *gone, check=False)
    return len(gone)
