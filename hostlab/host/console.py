"""Printing and subprocess helpers shared by the host tasks."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .tools import resolved

STOP_GRACE_S = 30  # how long a streamed command is given to stop after an interrupt before it is killed
_LOGS: list = []  # the files `stream_log` keeps every streamed line in, while its block runs


@contextmanager
def stream_log(path: Path) -> Iterator[Path]:
    """Every line `stream` shows inside the block, each command too, also written to `path` (made anew): the whole log
    of a long command, where an error keeps only its last lines."""
    with path.open("w", errors="replace") as log:
        _LOGS.append(log)
        try:
            yield path
        finally:
            _LOGS.remove(log)


def say(message: str = "") -> None:
    print(message, flush=True)


def warn(message: str) -> None:
    print(f"WARNING: {message}", file=sys.stderr, flush=True)


def run(
    cmd: list[str], *, env: dict | None = None, cwd: Path | None = None, check: bool = True, capture: bool = False
) -> subprocess.CompletedProcess:
    """Run a command, echoing it first; `capture` returns its output instead of showing it."""
    say("$ " + shlex.join(str(c) for c in cmd))
    return subprocess.run(resolved(cmd), env=env, cwd=cwd, check=check, text=True, capture_output=capture)


def stream(
    cmd: list[str], *, env: dict | None = None, cwd: Path | None = None, keep_lines: int = 400, shown: str | None = None
) -> tuple[int, list[str]]:
    """Run a command showing its output live; return its exit status and its last `keep_lines` lines. `shown`: the
    command as echoed, when its own words would be too many to read."""
    say("$ " + (shown or shlex.join(str(c) for c in cmd)))
    for log in _LOGS:
        log.write("$ " + (shown or shlex.join(str(c) for c in cmd)) + "\n")
    tail: deque[str] = deque(maxlen=keep_lines)
    proc = subprocess.Popen(
        resolved(cmd),
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            for log in _LOGS:
                log.write(line)
            tail.append(line.rstrip("\n"))
    except BaseException:
        # A Ctrl-C at a terminal reaches the command too; one sent to this process alone (kill -INT, a supervisor)
        # must not leave it running on, orphaned, holding the builder's store.
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    return proc.wait(), list(tail)
