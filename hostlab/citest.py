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


def check_runlog(before: int, track: str, status: int) -> dict:
    """The run-log lines `docker compose run lab` wrote (after the first `before`) must end with a pass for `track`."""
    log = REPO / "runs" / "runlog.jsonl"
    runs = read_runs(log)[before:]
    if status != 0:
        raise HostError(f"`docker compose run lab` exited {status}; run-log lines it wrote: {runs}")
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


REPORT_FILES = ("report.md", "report.csv", "index.html", "reward_per_step.png", "time_split.png", "peak_memory.png", "pass_at_1.png")


def check_report(track: str) -> None:
    """`invoke report` over the run log `invoke up` appended to: the table (with a row for `track`), CSV, plots, HTML."""
    from grpolab.report import run_report

    out = REPO / "runs" / "report"
    if run_report([REPO / "runs" / "runlog.jsonl"], out=out) != 0:
        raise HostError("`invoke report` found no run in runs/runlog.jsonl after `invoke up`")
    missing = [name for name in REPORT_FILES if not (out / name).is_file() or not (out / name).stat().st_size]
    if missing:
        raise HostError(f"`invoke report` did not write {', '.join(missing)} into {out}")
    if f"| {track} |" not in (out / "report.md").read_text():
        raise HostError(f"the report's table has no row for track {track}: see {out / 'report.md'}")


def run_ci(skip_image: bool = False) -> dict:
    """lock --check; then the README's main command for real, `invoke up --track c` (the stand-in base where no
    registry answers, the image, `docker compose run lab`), and the run-log line it wrote; then pytest, whose
    Docker tests use that image."""
    from .lockcli import check
    from .up import up

    timings: dict[str, float] = {}
    started = time.monotonic()
    with _step("invoke lock --check", timings):
        if not check():
            raise HostError("a lock is missing, stale or tampered (see above)")
    if not skip_image:
        with _step("invoke up --track c (base, build, docker compose run lab)", timings):
            before = len(read_runs(REPO / "runs" / "runlog.jsonl"))
            check_runlog(before, "c", up("c"))
        with _step("invoke report (the table, CSV, plots and HTML from that run log)", timings):
            check_report("c")
    with _step("pytest", timings):
        run_pytest()
    timings["total"] = round(time.monotonic() - started, 1)
    say("\ninvoke test passed: " + ", ".join(f"{k} {v} s" for k, v in timings.items()))
    return timings
