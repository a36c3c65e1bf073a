"""`invoke up`: the main job in one command. Detect (or take) the track, get an image for it (building the
stand-in base first where the pinned base can't be pulled), then `docker compose run lab`; a venv track gets
its venv and the lab runs natively."""

from __future__ import annotations

import subprocess
import sys

from .. import REPO
from ..host import engine
from ..host.console import say, warn
from ..host.tools import compose_command, resolved
from ..images.build import build, check_rollout, resolve_track
from ..images.builders import choose_builder
from ..images.diskneed import check_room
from ..images.standin import build_standin, host_arch
from .lab import make_venv, run_lab
from .learner_lock import ensure_lock


def up(track_name: str | None = None, rollout: str | None = None, make_lock: bool = False,
       one_copy: bool = False) -> int:
    """`rollout`: the lab's rollout path, when not the track's default; llamacpp gets the image with llama.cpp
    compiled in (built once, minutes), every other path the track's image, which leaves it out. `make_lock`: where the
    track's lock is made on this machine and none is here, make it without asking (learner_lock). `one_copy`: only the
    engine's copy of the image stays (builders/onecopy.py)."""
    check_rollout(rollout)  # before a venv or an image is made for it
    track = resolve_track(track_name)
    if not track.is_container:
        make_venv(track.name)
        return run_lab("lab", track.name, {"rollout": rollout} if rollout else None)
    engine.client()  # first: an engine that is stopped, or not ours to use, is said before anything else
    ensure_lock(track, make_lock)  # x's lock, made here (after asking) where none is yet
    check_room(track, choose_builder().loads_into_engine)  # before the stand-in base, the first thing written
    build(track.name, base=base_for(track), rollout=rollout, one_copy=one_copy)
    # The lab service's own command (the smoke test first, always), with the rollout path when one was asked for.
    command = ["lab", "--smoke", "always", "--rollout", rollout] if rollout else []
    cmd = compose_command("run", "--rm", *([] if sys.stdin.isatty() else ["-T"]), "lab", *command)
    say("$ " + " ".join(cmd))
    return subprocess.run(resolved(cmd), cwd=REPO).returncode


def base_for(track) -> str | None:
    """None when the track's pinned base is here or can be pulled; else the stand-in base from Debian's archive."""
    if engine.image_or_none(track.base_image) is not None:
        return None
    say(f"pulling {track.base_image} ...")
    ok, reason = engine.pull(track.base_image, track.platform)
    if ok:
        return None
    arch = track.platform.partition("/")[2]
    warn(f"cannot pull {track.base_image} ({reason}): building on a stand-in base from Debian's archive")
    if arch != host_arch():
        say(f"(an {arch} stand-in on this {host_arch()} host needs QEMU; see images/qemu-arm64-check.sh)")
    return build_standin(arch)
