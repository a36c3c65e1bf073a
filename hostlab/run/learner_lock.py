"""A lock made on the learner's machine by the first build that needs it: for a track whose indexes our machines can't
reach (track x: AMD's), its row says lock_made_on = "learner" (images/tracks.toml).

`invoke build` and `invoke up` call lock_where_missing before anything is built. Where the row says so and no lock is
there, it says what it will do and how long that takes (predicted: nothing of it was measured on the track's machine),
asks on a terminal, as apt asks [Y/n] before a download, and with a yes does exactly what `invoke lock --track T`
does (make_checked_lock: uv's resolution with every hash, the kernels table read from the wheels, the locks beside it),
then `invoke lock.check --track T`, and says the files are the learner's to keep and commit. Without a terminal to ask
on (a script, or CI) nothing is made unless --make-lock says so: apt refuses without -y, and pnpm and Yarn never write
a lock in CI. A lock that fails leaves none of its files behind, so the next build asks again. A track whose lock is
made on our machines is left to the build's own check, which refuses a missing lock in one line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from grpolab.common.gpucode import load_table, table_path
from grpolab.common.tracks import Track

from .. import REPO, HostError
from ..host import engine
from ..host.console import say
from ..host.detect import host_problems
from ..host.environ import in_ci
from ..images.build import resolve_track
from ..kernels.table import render
from ..locks.buildtools import build_lock_path
from ..locks.debian import debian_lock_path
from ..locks.provenance import CACHE
from ..locks.resolve import LOCK_DIR, index_urls, index_variable, lock_path, track_index_urls
from ..locks.side import learner_lock_steps, made_on_learner_machine, time_and_size
from .lock import check_track, make_checked_lock

NOTHING, MAKE, ASK = "nothing", "make", "ask"  # what the first build does about the track's lock


def choice(track: Track, lock_exists: bool, make_lock: bool, interactive: bool, ci: bool) -> str:
    """NOTHING (a lock is there, or the track's lock is not made on the learner's machine: the build's own check says
    what to do), MAKE (--make-lock), ASK (a terminal to ask on, outside CI); otherwise a HostError saying why nothing is
    made and what to type. Every fact comes in as an argument."""
    if lock_exists or not made_on_learner_machine(track):
        return NOTHING
    if make_lock:
        return MAKE
    if interactive and not ci:
        return ASK
    why = "CI is set" if ci else "there is no terminal to ask on"
    raise HostError(
        f"track {track.name} has no lock yet (lockfiles/{track.name}.txt) and {why}, so none is made: making it "
        f"downloads GBs and writes files for you to commit. Pass --make-lock to make it here, or run `invoke lock "
        f"--track {track.name}` (lockfiles/{track.name}.README)"
    )


def plan(track: Track) -> list[str]:
    """What making the lock will do, and how long it takes, in words, before anything is done."""
    replaced = track_index_urls(track) != list(track.index_urls)
    name = track.name
    return (
        [
            f"track {name} has no lock yet (lockfiles/{name}.txt). Its index is one our machines can't reach, so its "
            "row (images/tracks.toml) has it made here, on the machine that builds the image. Before the build, this "
            f"does what `invoke lock --track {name}` does:"
        ]
        + [f"  {n}. {step}" for n, step in enumerate(learner_lock_steps(track, index_urls(track), str(CACHE)), 1)]
        + [
            f"  and writes lockfiles/{name}.txt, {name}.kernels.json and, where the image compiles, {name}.build.txt "
            f"and {name}.debian.txt: yours to keep and commit.",
            f"How long: {time_and_size(track)}.",
        ]
        + (
            [f"Indexes: {index_variable(track)} replaces the row's {', '.join(track.index_urls)} with "
             f"{', '.join(track_index_urls(track))}."]
            if replaced
            else []
        )
    )


def said_yes(ask: Callable[[str], str], question: str) -> bool:
    """apt's [Y/n]: Enter or y is yes; no answer at all (end of input) is no."""
    try:
        return ask(question).strip().lower() in ("", "y", "yes")
    except EOFError:
        return False


def lock_files(track: Track, lock_dir: Path = LOCK_DIR) -> list[Path]:
    """What making the track's lock writes: the lock, its kernels table and the locks beside it."""
    return [lock_path(track, lock_dir), table_path(track.name, lock_dir), build_lock_path(track, lock_dir),
            debian_lock_path(track, lock_dir)]


def make_and_check(track: Track, lock_dir: Path = LOCK_DIR) -> list[Path]:
    """`invoke lock --track T`, then `invoke lock.check --track T`: the files written. On any failure, the files this
    wrote are removed again."""
    before = {path for path in lock_files(track, lock_dir) if path.exists()}
    try:
        make_checked_lock(track, None, lock_dir)
        if not check_track(track, lock_dir):
            raise HostError(f"the lock just made for track {track.name} fails its check (above): nothing is built")
    except BaseException:
        for path in lock_files(track, lock_dir):
            if path not in before:
                path.unlink(missing_ok=True)
        raise
    return [path for path in lock_files(track, lock_dir) if path.exists()]


def yours(track: Track, written: list[Path], seconds: float, lock_dir: Path = LOCK_DIR) -> list[str]:
    """What the learner reads once the lock is made: its GPU verdicts, the files, and that they are theirs."""
    table = load_table(table_path(track.name, lock_dir))
    shown = [p.relative_to(REPO) if p.is_relative_to(REPO) else p for p in written]
    return (render(table) if table else []) + [
        f"track {track.name}'s lock is made and checked, in {seconds:.0f} s (measured): {', '.join(map(str, shown))}.",
        "These files are yours: keep them and commit them (`git add " + " ".join(map(str, shown)) + "`), so that "
        "every later build, here or from a clone, installs exactly these wheels. `invoke lock.check --track "
        f"{track.name}` holds the image to them; `invoke lock --track {track.name}` makes them again.",
    ]


def ensure_lock(
    track: Track, make_lock: bool = False, skip_host_check: bool = False, lock_dir: Path = LOCK_DIR,
    interactive: bool | None = None, ask: Callable[[str], str] = input,
) -> bool:
    """Make the track's lock here when its row says so and none is there, after saying what and asking (True); else
    nothing (False). A host that can't run the track is refused first, unless `skip_host_check`."""
    interactive = sys.stdin.isatty() if interactive is None else interactive
    todo = choice(track, lock_path(track, lock_dir).exists(), make_lock, interactive, in_ci())
    if todo == NOTHING:
        return False
    if not skip_host_check:  # before minutes of work for a machine that can't run the image
        problems = host_problems(track, engine_runtimes=engine.runtimes())
        if problems:
            raise HostError("\n".join(problems) + "\n(to make the lock and build anyway, e.g. for another machine: "
                            "--skip-host-check)")
    for line in plan(track):
        say(line)
    if todo == ASK and not said_yes(ask, f"Make lockfiles/{track.name}.txt now? [Y/n] "):
        raise HostError(
            f"no lock made for track {track.name}, nothing downloaded. `invoke lock --track {track.name}` makes it "
            f"when you want (lockfiles/{track.name}.README)"
        )
    started = time.monotonic()
    written = make_and_check(track, lock_dir)
    for line in yours(track, written, time.monotonic() - started, lock_dir):
        say(line)
    return True


def lock_where_missing(track_name: str | None, make_lock: bool = False, skip_host_check: bool = False) -> str:
    """`invoke build`'s first step: the track (named, or detected from this host), its lock made here where its row
    says so and none is there; the track's name, for the build."""
    track = resolve_track(track_name)
    ensure_lock(track, make_lock, skip_host_check)
    return track.name
