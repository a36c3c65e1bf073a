"""buildah's store, written by one grpolab command at a time: a build, `invoke source-wheels` and `invoke clean` each
hold it alone (`store_held`), and a second one waits, saying which command it waits for.

Why: two builds of track c into one store at once (tests/test_faults.py) failed in two of eight CI runs here
(buildah 1.28.2, Debian 12), and in none of 86 tries on this machine outside CI (the two alone, with the cores kept
busy, started up to 5 s apart, and beside a third build of track c). In one, a `buildah commit --iidfile` of the
image both builds were making exited 0 and wrote no file; the other's cause was cut from the log. 340 such commits
here, in 110 rounds of two or four of one new image at once, all gave their file, so the cause is not pinned down.
buildah's store takes its own locks step by step, not for a whole build, while a build's steps, its uv cache mount,
its commits and the one-copy clean-up (builders/onecopy.py, which removes this build's steps from the store) each
assume that nothing of ours changes the store meanwhile. Taking turns costs a learner little on one machine's cores
and disk, and the second build of a track then finds the first's layers.

The lock is per user and per store (a store of a build's own, `fresh_store`, has its own), and re-entrant within a
process: code that holds it and calls code that takes it again does not wait for itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from ...host.console import say
from ...host.disk import buildah_store

_HELD: dict[Path, int] = {}  # lock file -> how deep this process holds it


def store_lock_path(store: Path | None = None) -> Path:
    """The lock file of buildah's store now in use (its graph root), or of `store`."""
    key = hashlib.sha256(str(store or buildah_store()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"grpolab-store-{os.getuid()}-{key}.lock"


@contextmanager
def store_held(doing: str, store: Path | None = None):
    """buildah's store held by this process alone while the block runs; `doing` names the command to one that waits.
    Blocks while another process holds it, after saying whom it waits for."""
    path = store_lock_path(store)
    if _HELD.get(path):
        _HELD[path] += 1
        try:
            yield
        finally:
            _HELD[path] -= 1
        return
    with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+") as lock:
        _take(lock, path, store)
        lock.seek(0)
        lock.truncate()
        lock.write(f"{doing} (pid {os.getpid()}, since {time.strftime('%H:%M:%S')})\n")
        lock.flush()
        _HELD[path] = 1
        try:
            yield
        finally:
            del _HELD[path]
            lock.seek(0)
            lock.truncate()
            fcntl.flock(lock, fcntl.LOCK_UN)


def _take(lock, path: Path, store: Path | None) -> None:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    holder = lock.read().strip() or "another grpolab command"
    say(f"buildah's store ({store or buildah_store()}) is in use by {holder}: waiting for it to finish (grpolab's "
        f"commands take turns in one store; its lock: {path})")
    waiting = time.monotonic()
    fcntl.flock(lock, fcntl.LOCK_EX)
    say(f"buildah's store is free after {time.monotonic() - waiting:.0f} s of waiting: going on")
