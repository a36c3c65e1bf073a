"""Work that processes on this machine take turns at: a file lock held by one process at a time, re-entrant within a
process (code that holds it and calls code that takes it again does not wait for itself). The holder writes who it is
into the file, so a process that has to wait says whom it waits for, then how long it waited."""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from .console import say

_HELD: dict[Path, int] = {}  # lock file -> how deep this process holds it


def lock_file(name: str) -> Path:
    """The lock file for `name` (per user: a lock file another user made cannot be opened)."""
    return Path(tempfile.gettempdir()) / f"grpolab-{name}-{os.getuid()}.lock"


@contextmanager
def one_at_a_time(path: Path, what: str, doing: str, why: str):
    """`path` held by this process alone while the block runs. One that waits is told that `what` is in use by
    `doing` (this process), and `why` they take turns."""
    if _HELD.get(path):
        _HELD[path] += 1
        try:
            yield
        finally:
            _HELD[path] -= 1
        return
    with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+") as lock:
        _take(lock, path, what, why)
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


def _take(lock, path: Path, what: str, why: str) -> None:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    holder = lock.read().strip() or "another grpolab command"
    say(f"{what} is in use by {holder}: waiting for it to finish ({why}; its lock: {path})")
    waiting = time.monotonic()
    fcntl.flock(lock, fcntl.LOCK_EX)
    say(f"{what} is free after {time.monotonic() - waiting:.0f} s of waiting: going on")
