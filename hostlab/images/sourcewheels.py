"""`invoke source-wheels`: the wheels the image compiles from the lock's source-only packages, and their sdists, copied
out of the builder, so that a venv on this machine installs the very compile the image has instead of making its own.

The compile is the Dockerfile's source-builds stage, built exactly as `invoke build --rollout llamacpp` builds it
(same context, build args and time), so either one finds the other's compile in buildah's layer cache: on a fresh
machine, whichever runs first compiles, and the other takes it in seconds. CI's test venv (.ci/run) installs these
wheels; the compile keeps glibc's pre-C23 entry points (images/pre-c23-strtol.h) so that they load on Debian 12 too.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from grpolab.common.tracks import get_track

from .. import REPO, HostError
from ..host import engine
from ..host.console import say
from ..host.tools import resolved
from ..locks.lockfile import read_lock
from ..locks.sourcebuilds import source_builds
from .build import (
    build_target,
    builder_stage_args,
    ca_bundle_path,
    check_base_python,
    choose_base,
    image_build_args,
    staged_context,
)
from .builders import choose_builder, commit_time, deps_inputs
from .builders.buildah_store import run_buildah
from .builders.storelock import store_held


def source_wheels(track_name: str, into: Path, base: str | None = None, repo: Path = REPO) -> list[Path]:
    """Compile (or find in buildah's cache) the track's source-only packages as its image does, and put their wheels
    in `into`/wheels and their hash-checked sdists in `into`/sdist, replacing what was there. The files written."""
    track = get_track(track_name)
    lock = read_lock(track, repo / "lockfiles")
    builds = source_builds(lock)
    if not builds:
        raise HostError(f"track {track.name}'s lock has no package that PyPI ships only as source: nothing to compile")
    builder = choose_builder("buildah")
    started = time.monotonic()
    base_image, base_digest = choose_base(track, base)
    check_base_python(base_image, track)
    args = image_build_args(track, lock, base_image, base_digest, repo)
    ca = ca_bundle_path()  # the environment's certificate setting, as `invoke build` takes it (a secret: in no layer)
    epoch = commit_time(repo, deps_inputs(track))
    say(f"compiling {', '.join(builds)} as track {track.name}'s image does (its source-builds stage; buildah's cache "
        "keeps it, so `invoke build --rollout llamacpp` and later runs take it from there)")
    with staged_context(track, repo) as context, store_held(f"invoke source-wheels --track {track.name}"):
        stage_args = builder_stage_args(builder, args, engine.image_or_none(base_image).id)
        _, compiled, _ = build_target(
            builder, track, repo / "images" / "Dockerfile", context, "source-builds", epoch, stage_args, ca
        )
        written = copy_out(compiled, ("wheels", "sdist"), into)
    say(f"{len(written)} file(s) in {into} after {time.monotonic() - started:.0f} s: "
        + ", ".join(str(path.relative_to(into)) for path in written))
    return written


def copy_out(image: str, folders: tuple[str, ...], into: Path) -> list[Path]:
    """The image's top-level `folders`, copied into `into` (each replacing the one there): the files written. By a
    `tar` run in a container of the image, so it works as any user buildah runs as (no mount of its store)."""
    container = run_buildah("from", "--pull-never", image).stdout.strip().splitlines()[-1]
    try:
        out = run_tar(container, folders)
    finally:
        run_buildah("rm", container, check=False)
    for folder in folders:
        shutil.rmtree(into / folder, ignore_errors=True)
    into.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(fileobj=io.BytesIO(out), mode="r:") as archive:
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if member.isfile() and parts[0] in folders and ".." not in parts:
                path = into.joinpath(*parts)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.extractfile(member).read())
                written.append(path)
    return sorted(written)


def run_tar(container: str, folders: tuple[str, ...]) -> bytes:
    """`folders` of the container, as a tar stream (bytes: run_buildah reads text)."""
    out = subprocess.run(
        resolved(["buildah", "run", "--network", "none", container, "--", "tar", "-C", "/", "-cf", "-", *folders]),
        capture_output=True,
    )
    if out.returncode != 0:
        raise HostError(
            f"copying {', '.join(folders)} out of the compile's image failed: "
            f"{out.stderr.decode(errors='replace').strip()[-800:]}"
        )
    return out.stdout
