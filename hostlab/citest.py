"""`invoke test`: what CI runs, in order, each step timed; stops at the first failure with its reason."""

from __future__ import annotations

import subprocess
import sys
import time

from grpolab.runlog import read_runs

from . import REPO, HostError
from .console import say

PYTEST_NO_TESTS = 5


def _step(name: str, timings: dict):
    class _Timer:
        def __enter__(self):
            say(f"\n=== {name}")
            self.t = time.monotonic()

        def __exit__(self, *exc):
            timings[name] = round(time.monotonic() - self.t, 1)
            if exc[0] is None:
                say(f"=== {name}: ok in {timings[name]} s")

    return _Timer()


def run_pytest(args: list[str] | None = None) -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests", *(args or [])], cwd=REPO)
    if proc.returncode == PYTEST_NO_TESTS:
        say("pytest collected no tests")
    elif proc.returncode != 0:
        raise HostError(f"pytest failed (exit {proc.returncode}); see its report above")


def compose_run_lab(track: str = "c") -> dict:
    """`docker compose run lab` for real, then the run-log line it wrote must say passed, for `track`."""
    log = REPO / "runs" / "runlog.jsonl"
    before = len(read_runs(log))
    proc = subprocess.run(["docker", "compose", "run", "--rm", "-T", "lab"], cwd=REPO)
    runs = read_runs(log)[before:]
    if proc.returncode != 0:
        raise HostError(f"`docker compose run lab` exited {proc.returncode}; run-log lines it wrote: {runs}")
    if not runs:
        raise HostError(f"`docker compose run lab` exited 0 but wrote no line to {log}")
    last = runs[-1]
    if last.get("status") != "passed" or last.get("track") != track:
        raise HostError(
            f"the run-log line of that run says status {last.get('status')!r}, track {last.get('track')!r} "
            f"(expected passed, {track}): {last}"
        )
    say(f"run log: {len(runs)} new line(s), last: kind {last.get('kind')}, status passed, track {track}")
    return last


def run_ci(skip_image: bool = False) -> dict:
    from .base import build_standin, host_arch
    from .build import build
    from .lockcli import check

    timings: dict[str, float] = {}
    started = time.monotonic()
    standin = None
    if not skip_image:
        with _step("stand-in base", timings):
            standin = build_standin(host_arch())
    with _step("invoke lock --check", timings):
        if not check():
            raise HostError("a lock is missing, stale or tampered (see above)")
    if not skip_image:
        with _step("invoke build --track c", timings):
            build("c", base=standin)
    with _step("pytest", timings):
        run_pytest()
    if not skip_image:
        with _step("docker compose run lab", timings):
            compose_run_lab("c")
    timings["total"] = round(time.monotonic() - started, 1)
    say("\ninvoke test passed: " + ", ".join(f"{k} {v} s" for k, v in timings.items()))
    return timings
