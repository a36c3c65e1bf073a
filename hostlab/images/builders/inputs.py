"""What an image is made of, and the times a build stamps into it: from git, never the clock.

The times come from git (`commit_time`): for the dependency stages the last commit that changed what they are made of
(the Dockerfile, the lock and its side locks: `deps_inputs`), for the lab stage the same plus the code
(`lab_inputs`). So a code change rebuilds the small lab stage only, and a cached dependency layer carries the time a
cold build would give it. The Dockerfile declares SOURCE_DATE_EPOCH in every stage, so each time is in the cache key.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from grpolab.common.filehash import sha256_of_file
from grpolab.common.tracks import Track

from ... import REPO, HostError
from ...host.tools import resolved
from ...locks.sourcebuilds import SOURCE_BUILD_FILE_NAMES


def deps_inputs(track: Track) -> list[str]:
    """What the dependency stages are made of (paths in the repository): their time is the last commit of these."""
    return [
        "images/Dockerfile",
        "images/verify-locked.py",
        "images/apt-install-pinned.sh",
        # the compile's options (BUILD_CONFIG_SETTINGS) and which Debian libraries join
        "hostlab/locks/sourcebuilds.py",
        *(f"images/{name}" for name in SOURCE_BUILD_FILE_NAMES),  # files those options name
        "lockfiles/uv.txt",
        f"lockfiles/{track.name}.txt",
        f"lockfiles/{track.name}.build.txt",
        f"lockfiles/{track.name}.debian.txt",
    ]


def input_hashes(track: Track, repo: Path = REPO) -> dict[str, str]:
    """sha256 of each file the dependency stages are made of (the ones this track has): what a record keeps, and what
    the key of a kept dependency stage is made from (onecopy.py)."""
    return {p: sha256_of_file(repo / p) for p in deps_inputs(track) if (repo / p).is_file()}


def lab_inputs(track: Track) -> list[str]:
    """What the lab stage is made of: the dependency inputs, the code, the lesson's examples, the track table and the
    kernels table."""
    return deps_inputs(track) + [
        "entrypoint", "examples", "images/tracks.toml", f"lockfiles/{track.name}.kernels.json"
    ]


def commit_time(repo: Path, paths: list[str]) -> int:
    """Seconds since 1970 of the last commit that changed any of `paths` (the committed state: an uncommitted edit
    gets the time of the commit it sits on, and the image's revision label says -dirty). HostError outside git."""
    out = subprocess.run(
        resolved(["git", "-C", str(repo), "log", "-1", "--format=%ct", "--", *paths]), capture_output=True, text=True
    )
    if out.returncode != 0:
        raise HostError(
            f"cannot read the build's times from git in {repo} ({out.stderr.strip() or 'git failed'}): the image's "
            "times come from the commits that changed it. Build from a git clone of the project."
        )
    if not out.stdout.strip():  # none of the paths is committed yet: the time of the commit the tree sits on
        out = subprocess.run(
            resolved(["git", "-C", str(repo), "log", "-1", "--format=%ct"]), capture_output=True, text=True
        )
    return int(out.stdout.strip() or 0)


def build_arg_flags(epoch: int, args: dict[str, str], ca: Path | None) -> list[str]:
    """A stage's inputs as the flags buildah and buildx both take: SOURCE_DATE_EPOCH, every build arg, and the CA
    bundle as a secret (in no layer)."""
    flags = ["--build-arg", f"SOURCE_DATE_EPOCH={epoch}"]
    for key, value in args.items():
        flags += ["--build-arg", f"{key}={value}"]
    if ca:
        flags += ["--secret", f"id=ca_bundle,src={ca}"]
    return flags
