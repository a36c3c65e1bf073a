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

The lock (host/turns.py) is per user and per store (a store of a build's own, `fresh_store`, has its own), and
re-entrant within a process.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from pathlib import Path

from ...host.disk import buildah_store
from ...host.turns import lock_file, one_at_a_time


def store_lock_path(store: Path) -> Path:
    """The lock file of the buildah store whose graph root is `store`."""
    return lock_file(f"store-{hashlib.sha256(str(store).encode()).hexdigest()[:12]}")


@contextmanager
def store_held(doing: str, store: Path | None = None):
    """buildah's store now in use (or `store`) held by this process alone while the block runs; `doing` names the
    command to one that waits. Blocks while another process holds it, after saying whom it waits for."""
    store = store or buildah_store()
    with one_at_a_time(store_lock_path(store), f"buildah's store ({store})", doing,
                       "grpolab's commands take turns in one store"):
        yield
