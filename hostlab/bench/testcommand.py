"""`invoke bench.test-command`: the README's second command, `bash .ci/run`, timed in a fresh clone of this commit as
CI runs it (CI=true), with its exit status and the time of each step as it printed them: bench/test-command.json.

The clone is fresh; the machine is as it is (the images, buildah's layer cache and uv's cache that earlier runs left):
the case the README names, the second command right after the first. The result says so in `state`."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from .. import REPO, HostError
from ..host.console import say, stream
from ..host.tools import resolved
from .docs import write_page
from .labs import TINY
from .record import write_result

COMMAND = "bash .ci/run"
# The tracks CI's test command builds or runs: their locks name what was measured.
TRACKS = ("c", "cv", "clustercpu")
# .ci/run's own progress lines: "[ci 131s] invoke test".
CI_STEP = re.compile(r"^\[ci (\d+)s\] (.+)$")


def ci_steps(lines: list[str]) -> list[dict]:
    """Each step .ci/run announced, with the second it started at (its own clock) and how long it took."""
    marks = [(int(m.group(1)), m.group(2)) for line in lines if (m := CI_STEP.match(line))]
    return [{"step": what, "started_at_s": at, "seconds": (marks[n + 1][0] - at) if n + 1 < len(marks) else None}
            for n, (at, what) in enumerate(marks)]


def test_command_bench(repo: Path = REPO) -> Path:
    """Clone this commit, run `CI=true bash .ci/run` there with its output shown, and file its time."""
    with tempfile.TemporaryDirectory(prefix="grpolab-test-command-", dir=Path.home()) as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(resolved(["git", "clone", "--quiet", str(repo), str(clone)]), check=True)
        started = time.monotonic()
        status, tail = stream(["bash", ".ci/run"], cwd=clone, env={**os.environ, "CI": "true"}, keep_lines=100_000)
        seconds = round(time.monotonic() - started, 1)
    record = {
        "command": COMMAND,
        "state": "a fresh clone; the machine's images and caches as earlier runs left them",
        "total_s": seconds,
        "exit_status": status,
        "steps": ci_steps(tail),
    }
    path = write_result("test-command", record, TRACKS, TINY, repo=repo)
    say(f"{COMMAND}: exit {status} after {seconds:,.0f} s; result: {path.relative_to(repo)}, and "
        f"{write_page().relative_to(repo)} and the README's figures again")
    if status:
        raise HostError(f"`{COMMAND}` failed (exit {status}): its time is filed, its output is above")
    return path
