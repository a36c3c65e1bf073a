"""`invoke lock` over one track or all of them: each track's lock, with the locks beside it (the hashed tools that
compile
its source-only packages, its Debian pins), and the stand-in base's Debian pins."""

from __future__ import annotations

import time
from pathlib import Path

from grpolab.common.tracks import get_track, load_tracks

from .. import HostError
from ..host import engine
from ..host.console import say
from ..images.standin import PACKAGES as BASE_PACKAGES
from ..images.standin import PINNED_ARCHES, check_can_make, ensure_standin, make_base_lock
from ..kernels.table import check_table, table_for_new_lock
from ..locks.buildtools import check_build_lock, make_build_lock
from ..locks.debian import SUITE, base_lock_path, check_base_lock, check_debian_lock, make_debian_lock
from ..locks.lockfile import parse_lock
from ..locks.resolve import LOCK_DIR, check_lock, instructions_path, lock_path, make_lock
from ..locks.side import (
    made_on_learner_machine,
    TEST_TOOLS_TRACK,
    check_test_tools_lock,
    check_uv_lock,
    make_test_tools_lock,
    make_uv_lock,
    prove_installable,
    write_instructions,
)
from ..locks.side import instructions as instructions_text
from ..locks.sourcebuilds import debian_needs


def _made_elsewhere(track, lock_dir=LOCK_DIR) -> bool:
    return instructions_path(track, lock_dir).exists() and not lock_path(track, lock_dir).exists()


def where_made(track) -> str:
    if made_on_learner_machine(track):
        return f"its lock is made on the learner's machine by the first `invoke build --track {track.name}`"
    return "its lock is made elsewhere"


def make_checked_lock(track, vllm: str | None = None, lock_dir: Path = LOCK_DIR) -> None:
    """make_lock, then for a track that serves GPUs its kernels table (hostlab/kernels/table.py): a lock whose wheels
    cannot run on the track's GPUs is refused, and the lock that was there before is put back."""
    path = lock_path(track, lock_dir)
    before = path.read_text() if path.exists() else None
    make_lock(track, vllm, lock_dir)
    if track.gpus:
        try:
            table_for_new_lock(track, path.read_text(), lock_dir)
        except HostError:
            if before is None:
                path.unlink()
            else:
                path.write_text(before)
            raise
    if track.is_container:
        make_side_locks(track, lock_dir)


def make_side_locks(track, lock_dir: Path = LOCK_DIR) -> None:
    """The locks an image builds with beside the track's own: the hashed tools that compile its source-only packages
    (lockfiles/<track>.build.txt) and its Debian pins (lockfiles/<track>.debian.txt, resolved by apt inside the stand-in
    base, which is made first when it is not here)."""
    lock = parse_lock(lock_path(track, lock_dir).read_text())
    make_build_lock(track, lock_dir)
    asks_debian = any(debian_needs(lock).values())
    if asks_debian:
        engine.client()  # first: an engine that is stopped is said before a stand-in is made for nothing
    make_debian_lock(track, lock, ensure_standin() if asks_debian else "", lock_dir)


def make_side(track_name: str | None) -> None:
    """`invoke lock.side --track T`: only the locks beside T's lock, from that lock unchanged."""
    if not track_name:
        raise HostError("`invoke lock.side` needs --track: it remakes one track's build-tools and Debian locks")
    track = get_track(track_name)
    if not track.is_container or not lock_path(track).exists():
        raise HostError(
            f"track {track_name} has no image lock here to make side locks from (lockfiles/{track_name}.txt)"
        )
    started = time.monotonic()
    make_side_locks(track)
    say(f"done in {time.monotonic() - started:.0f} s")


def make_test_tools() -> None:
    """`invoke lock.test-tools`: only lockfiles/test-tools.txt, from pyproject.toml's extras within the pins of the
    track CI's venv holds beside them (its lock unchanged)."""
    make_test_tools_lock(get_track(TEST_TOOLS_TRACK))


def base_arches(lock_dir=LOCK_DIR) -> list[str]:
    """The arches whose stand-in pins `invoke lock` keeps: PINNED_ARCHES and any other whose pins are here."""
    present = {
        p.name.removeprefix(f"base-{SUITE}-").removesuffix(".debian.txt")
        for p in lock_dir.glob(f"base-{SUITE}-*.debian.txt")
    }
    return sorted(set(PINNED_ARCHES) | present)


def make_base(arch: str) -> None:
    """`invoke lock.base --arch ARCH`: the stand-in base's Debian pins for ARCH, resolved again."""
    started = time.monotonic()
    make_base_lock(arch)
    say(
        f"done in {time.monotonic() - started:.0f} s; `invoke base{'' if arch == 'amd64' else ' --arch ' + arch} "
        "--force` makes the stand-in from them"
    )


def make(track_name: str | None, vllm: str | None = None) -> None:
    started = time.monotonic()
    if track_name:
        make_checked_lock(get_track(track_name), vllm)
        if track_name == TEST_TOOLS_TRACK:
            make_test_tools_lock(get_track(track_name))
    else:
        if vllm:
            raise HostError("--vllm needs --track: it pins one track's vLLM")
        failed = []
        for arch in base_arches():  # first: the tracks' Debian pins are resolved inside the stand-in base
            try:
                check_can_make(arch)
            except HostError as err:
                say(f"skipping the {arch} stand-in's pins (lockfiles/{base_lock_path(arch).name} kept as it is): {err}")
                continue
            make_base_lock(arch)
        for track in load_tracks().values():
            if _made_elsewhere(track):
                say(f"skipping track {track.name}: {where_made(track)} (lockfiles/{track.name}.README)")
                continue
            try:
                make_checked_lock(track)
            except HostError as err:
                say(f"track {track.name}: FAILED\n{err}")
                failed.append(track.name)
        make_uv_lock()
        if TEST_TOOLS_TRACK not in failed:
            make_test_tools_lock(get_track(TEST_TOOLS_TRACK))
        if failed:
            raise HostError(f"no lock made for track(s) {', '.join(failed)} (reasons above)")
    say(f"done in {time.monotonic() - started:.0f} s")


def check_track(track, lock_dir=LOCK_DIR) -> bool:
    """`invoke lock.check --track T`: the lock, its kernels table and the locks beside it, one line and each problem
    printed; True when all are current and obey the rules."""
    report = check_lock(track, lock_dir)
    warnings = []
    if not report.problems:  # the kernels table and the side locks are judged against a lock that is itself current
        kernel_problems, warnings = check_table(track, lock_dir)
        report.problems += kernel_problems
        if track.is_container:
            lock = report.lock
            report.problems += check_build_lock(track, lock, lock_dir) + check_debian_lock(track, lock, lock_dir)
    say(f"{track.name}: {'ok' if report.ok else 'FAILED'}" + (f" ({report.note})" if report.note else ""))
    for problem in report.problems:
        say(f"  - {problem}")
    for warning in warnings:
        say(f"  warning: {warning}")
    return report.ok


def check(track_name: str | None = None, lock_dir=LOCK_DIR) -> bool:
    """Print one line per lock; True when every one is current and obeys the rules."""
    tracks = [get_track(track_name)] if track_name else list(load_tracks().values())
    ok = True
    for track in tracks:
        if not track_name and _made_elsewhere(track, lock_dir):
            fresh = instructions_path(track, lock_dir).read_text() == instructions_text(track)
            say(
                f"{track.name}: no lock yet, {where_made(track)} (lockfiles/{track.name}.README"
                + (")" if fresh else " is OUT OF DATE: `invoke lock.instructions --track " + track.name + "`)")
            )
            ok &= fresh
            continue
        ok &= check_track(track, lock_dir)
    if not track_name:
        for report in (check_uv_lock(lock_dir), check_test_tools_lock(get_track(TEST_TOOLS_TRACK), lock_dir)):
            say(f"{report.track}: {'ok' if report.ok else 'FAILED'} ({report.note})")
            for problem in report.problems:
                say(f"  - {problem}")
            ok &= report.ok
        for arch in base_arches(lock_dir):
            problems = check_base_lock(arch, BASE_PACKAGES, lock_dir)
            say(
                f"stand-in base {arch}: {'ok' if not problems else 'FAILED'} "
                f"(lockfiles/{base_lock_path(arch, lock_dir).name})"
            )
            for problem in problems:
                say(f"  - {problem}")
            ok &= not problems
    return ok


def prove(track_name: str | None) -> None:
    """Install each lock for its own platform into a throwaway folder (downloads everything once)."""
    import shutil
    import tempfile

    tracks = [get_track(track_name)] if track_name else [t for t in load_tracks().values() if lock_path(t).exists()]
    for track in tracks:
        with tempfile.TemporaryDirectory(prefix=f"grpolab-prove-{track.name}-") as tmp:
            seconds = prove_installable(track, Path(tmp) / "site-packages")
            size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
            say(
                f"{track.name}: lockfiles/{track.name}.txt installs for {track.uv_platform} (Python {track.python}) "
                f"in {seconds:.0f} s, {size / 1e9:.1f} GB"
            )
            shutil.rmtree(tmp, ignore_errors=True)


def instructions(track_name: str | None) -> None:
    if not track_name:
        raise HostError("`invoke lock.instructions` needs --track (the track whose lock is made elsewhere)")
    path = write_instructions(get_track(track_name))
    say(f"wrote {path}")
