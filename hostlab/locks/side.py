"""The locks beside the tracks' own: uv's (lockfiles/uv.txt, which the image builds install with), the test
tools' (lockfiles/test-tools.txt, CI's venv on top of track c's lock), the instructions for a lock that must be made
elsewhere (lockfiles/x.README), and the proof that any lock installs for its own platform (`invoke lock.prove`)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from grpolab.common.tracks import Track

from .. import REPO, HostError
from ..host.console import say
from ..host.tools import resolved
from .resolve import (
    LOCK_DIR,
    UV_CONFIG,
    LockReport,
    compile_command,
    display_command,
    extra_requirements,
    instructions_path,
    lock_inputs,
    lock_path,
    parse_body,
    parse_lock,
    platform_env,
    uses_vllm,
    uv_config,
    uv_version,
    write_command_files,
)

# ---------------------------------------------------------------------- uv itself, for the image builds
TOOLS_LOCK = "uv.txt"


def uv_lock_path(lock_dir: Path = LOCK_DIR) -> Path:
    return lock_dir / TOOLS_LOCK


def make_uv_lock(lock_dir: Path = LOCK_DIR) -> Path:
    """lockfiles/uv.txt: the uv the images install with, pinned to the uv that made the locks, every wheel hashed."""
    version = uv_version().split()[1]
    with tempfile.TemporaryDirectory(prefix="grpolab-lock-") as tmp:
        Path(tmp, "requirements.in").write_text(f"uv=={version}\n")
        cmd = [
            "uv",
            "pip",
            "compile",
            "requirements.in",
            "--universal",
            "--generate-hashes",
            "--no-header",
            "--output-file",
            "uv.txt",
        ]
        say("$ " + shlex.join(cmd))
        subprocess.run(resolved(cmd), cwd=tmp, check=True, capture_output=True, text=True)
        body = Path(tmp, "uv.txt").read_text()
    path = uv_lock_path(lock_dir)
    path.write_text(
        f"# uv for the image builds (images/Dockerfile installs it with pip --require-hashes).\n"
        f"# Made by `invoke lock`: {shlex.join(cmd)} from `uv=={version}`.\n" + body
    )
    return path


def check_uv_lock(lock_dir: Path = LOCK_DIR) -> LockReport:
    report = LockReport("uv")
    path = uv_lock_path(lock_dir)
    if not path.exists():
        report.problems.append("lockfiles/uv.txt does not exist: run `invoke lock`")
        return report
    packages, hashes = parse_body(path.read_text())
    if list(packages) != ["uv"] or not hashes["uv"]:
        report.problems.append("lockfiles/uv.txt must pin exactly uv, with hashes: run `invoke lock`")
    report.note = f"uv {packages.get('uv')}"
    return report


# ------------------------------------------------------------- the test tools, for CI's test environment
TEST_TOOLS_LOCK = "test-tools.txt"
TEST_TOOLS_EXTRAS = ("host", "test")  # pyproject.toml extras: the host tasks' needs, then the test-only tools
TEST_TOOLS_TRACK = "c"  # CI's tests run in a venv from this track's lock, with these tools added on top


def test_tools_lock_path(lock_dir: Path = LOCK_DIR) -> Path:
    return lock_dir / TEST_TOOLS_LOCK


def test_tools_inputs(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    return [spec for extra in TEST_TOOLS_EXTRAS for spec in extra_requirements(extra, pyproject)]


def make_test_tools_lock(track: Track, lock_dir: Path = LOCK_DIR, pyproject: Path = REPO / "pyproject.toml") -> Path:
    """lockfiles/test-tools.txt: pytest, hadolint and the host tasks' packages, hashed, for the track's Python and
    platform, constrained to the versions the track's lock (and lockfiles/uv.txt) pin, so one venv holds both locks."""
    inputs = test_tools_inputs(pyproject)
    with tempfile.TemporaryDirectory(prefix="grpolab-lock-") as tmp:
        Path(tmp, "requirements.in").write_text("\n".join(inputs) + "\n")
        pins = parse_lock(lock_path(track, lock_dir).read_text()).packages
        pins.update(parse_body(uv_lock_path(lock_dir).read_text())[0])  # the uv the locks were made with
        Path(tmp, "track-pins.txt").write_text(
            "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
        )
        write_command_files(track, Path(tmp), lock_dir)
        cmd = compile_command(track, "requirements.in", "test-tools.txt") + ["--constraint", "track-pins.txt"]
        say("$ " + shlex.join(cmd) + f"   # inputs: {', '.join(inputs)}")
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", **platform_env(track)}
        proc = subprocess.run(resolved(cmd), cwd=tmp, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise HostError(f"uv could not resolve the test-tools lock:\n{proc.stderr.strip()}")
        body = Path(tmp, "test-tools.txt").read_text()
    path = test_tools_lock_path(lock_dir)
    path.write_text(render_test_tools_header(track, inputs) + body)
    say(f"wrote {path.name}: {len(parse_body(body)[0])} packages")
    return path


def render_test_tools_header(track: Track, inputs: list[str]) -> str:
    return (
        f"# test tools for CI's venv (made by `invoke lock`; never edit): pyproject.toml's "
        f"{' and '.join(TEST_TOOLS_EXTRAS)} extras, resolved for track {track.name} ({track.uv_platform}, "
        f"Python {track.python}) within lockfiles/{track.name}.txt's pins.\n# inputs: {json.dumps(inputs)}\n"
    )


def check_test_tools_lock(
    track: Track, lock_dir: Path = LOCK_DIR, pyproject: Path = REPO / "pyproject.toml"
) -> LockReport:
    """Current (same inputs, same track), every package hashed, and no version apart from the track's lock."""
    report = LockReport("test-tools")
    path = test_tools_lock_path(lock_dir)
    if not path.exists():
        report.problems.append(f"lockfiles/{TEST_TOOLS_LOCK} does not exist: run `invoke lock`")
        return report
    text = path.read_text()
    inputs = test_tools_inputs(pyproject)
    if not text.startswith(render_test_tools_header(track, inputs)):
        report.problems.append(f"lockfiles/{TEST_TOOLS_LOCK} is stale (its inputs or track changed): run `invoke lock`")
    packages, hashes = parse_body(text)
    unhashed = sorted(n for n, hs in hashes.items() if not hs)
    if unhashed:
        report.problems.append(
            f"lockfiles/{TEST_TOOLS_LOCK} has packages without hashes ({', '.join(unhashed)}): run `invoke lock`"
        )
    if lock_path(track, lock_dir).exists():
        pins = parse_lock(lock_path(track, lock_dir).read_text()).packages
        apart = sorted(
            f"{n} {v} (lockfiles/{track.name}.txt: {pins[n]})"
            for n, v in packages.items()
            if n in pins and pins[n] != v
        )
        if apart:
            report.problems.append(
                f"lockfiles/{TEST_TOOLS_LOCK} disagrees with the track's lock on {', '.join(apart)}: run `invoke lock`"
            )
    report.note = f"{len(packages)} packages"
    return report


# ------------------------------------------------------------------------------ locks made elsewhere (x)
def instructions(track: Track, pyproject: Path = REPO / "pyproject.toml") -> str:
    """The exact inputs and command for a lock that must be made where the track's indexes are reachable."""
    inputs = lock_inputs(track, pyproject)
    return (
        f"# How to make lockfiles/{track.name}.txt\n\n"
        f"Track {track.name} ({track.description}) takes packages from indexes our machines can't reach:\n"
        + "".join(f"- {u}\n" for u in track.index_urls)
        + f"\nOn a machine that reaches them (any OS: uv resolves for {track.uv_platform}, Python "
        f"{track.python}), from a clone of this repository:\n\n"
        "    bash images/setup-host.sh && . .venvs/host/bin/activate    # the README's first command\n    invoke lock "
        f"--track {track.name}\n    invoke lock.check --track "
        f"{track.name}\n\nthen commit lockfiles/{track.name}.txt and the locks `invoke lock` writes beside it for an "
        "image that compiles (lockfiles/"
        f"{track.name}.build.txt, lockfiles/{track.name}.debian.txt: apt is asked inside the stand-in base, so Docker "
        "and, when "
        f"the stand-in is not there yet, mmdebstrap). Until it exists, `invoke build --track "
        f"{track.name}` refuses.\n\n`invoke lock` resolves these inputs (images/tracks.toml's lock_inputs, then "
        f"pyproject.toml's lab extra and the extras the track's row names):\n\n"
        + "".join(f"    {i}\n" for i in inputs)
        + "\nwith this command"
        + (
            " (plus `vllm==V` for the newest V inside TRL's declared range that resolves, read from TRL's metadata)"
            if uses_vllm(inputs)
            else ""
        )
        + f":\n\n    {display_command(track)}\n"
        + (
            f"\nrun beside this {UV_CONFIG} (`invoke lock` writes it from the track's row), which lets uv go on to the "
            "next "
            f"index when one answers {', '.join(map(str, track.index_ignore_error_codes))} for a package it does not "
            "host:\n\n"
            + "".join(f"    {line}\n" if line else "\n" for line in uv_config(track).splitlines())
            if uv_config(track)
            else ""
        )
        + (
            "\nUnverified (our machines can't reach these indexes):\n" + "".join(f"- {u}\n" for u in track.unverified)
            if track.unverified
            else ""
        )
        + f"\nThis file is generated by `invoke lock.instructions --track {track.name}`; `invoke lock.check` "
        f"notices when it is out of date.\n"
    )


def write_instructions(track: Track, lock_dir: Path = LOCK_DIR) -> Path:
    path = instructions_path(track, lock_dir)
    path.write_text(instructions(track))
    return path


# ----------------------------------------------------------------------------- installable, anywhere
def prove_installable(track: Track, target: Path, lock_dir: Path = LOCK_DIR) -> float:
    """Download and hash-check every wheel of the lock for the track's platform into `target`, from any
    host (uv installs for another platform with --target); seconds taken. A missing wheel or hash fails."""
    cmd = [
        "uv",
        "pip",
        "install",
        "--target",
        str(target),
        "--python-version",
        track.python,
        "--python-platform",
        track.uv_platform,
        "--require-hashes",
        "--no-deps",
        "-r",
        str(lock_path(track, lock_dir)),
    ]
    say("$ " + " ".join(f"{k}={v}" for k, v in platform_env(track).items()) + " " + shlex.join(cmd))
    started = time.monotonic()
    proc = subprocess.run(resolved(cmd), env={**os.environ, "UV_PYTHON_DOWNLOADS": "never", **platform_env(track)})
    if proc.returncode != 0:
        raise HostError(f"lockfiles/{track.name}.txt does not install for {track.uv_platform} (see above)")
    return time.monotonic() - started
