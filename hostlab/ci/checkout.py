"""The test command leaves the learner's checkout as it found it: `.env` byte for byte (the builds write it), the
runs folder untouched (every lab the test command starts, in an image or a venv, writes into a folder of its own under
.cache/tests/, which git ignores), and every file git tracks or would track as it was. Checked when it ends: a change
fails the test command, naming the files."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import REPO, HostError
from ..host.console import say
from ..host.environ import environ_set
from ..host.tools import resolved

TEST_RUNS = REPO / ".cache" / "tests" / "runs"


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Each file under `folder`: (size, mtime in ns)."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def _git_state(repo: Path) -> dict[str, str]:
    """Every path git reports as changed or untracked (not ignored), with its content's sha256."""
    out = subprocess.run(resolved(["git", "-C", str(repo), "status", "--porcelain", "-z", "--untracked-files=all"]),
                         capture_output=True, text=True, check=True, timeout=120).stdout
    state = {}
    for entry in filter(None, out.split("\0")):
        path = repo / entry[3:]
        state[entry[3:]] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else entry[:2]
    return state


@contextmanager
def checkout_kept(repo: Path = REPO) -> Iterator[Path]:
    """Runs the body with its labs' runs in TEST_RUNS (GRPOLAB_HOST_RUNS_DIR for the images' mount, GRPOLAB_RUNS_DIR
    for venvs); then puts `.env` back as it was and checks that runs/ and git's files are as they were."""
    env_file = repo / ".env"
    env_before = env_file.read_bytes() if env_file.exists() else None
    runs_before, git_before = _tree(repo / "runs"), _git_state(repo)
    shutil.rmtree(TEST_RUNS, ignore_errors=True)
    TEST_RUNS.mkdir(parents=True)
    passed = False
    try:
        with environ_set(GRPOLAB_HOST_RUNS_DIR=str(TEST_RUNS), GRPOLAB_RUNS_DIR=str(TEST_RUNS)):
            yield TEST_RUNS
        passed = True
    finally:
        if env_before is None:
            env_file.unlink(missing_ok=True)
        else:
            env_file.write_bytes(env_before)
        say(f"{env_file.name} put back as it was ({'absent' if env_before is None else f'{len(env_before)} bytes'})")
    if not passed:
        return
    moved = sorted(set(_tree(repo / "runs").items()) ^ set(runs_before.items()))
    changed = sorted({path for path, _ in set(_git_state(repo).items()) ^ set(git_before.items())})
    if moved or changed:
        raise HostError(
            "the test command changed the checkout it ran in: "
            + "; ".join(([f"runs/: {', '.join(sorted({p for p, _ in moved}))}"] if moved else [])
                        + ([f"files: {', '.join(changed)}"] if changed else []))
            + " (everything it writes belongs under .cache/tests/)"
        )
    say(f"the checkout is as it was: .env, runs/ ({len(runs_before)} files) and git's files")

