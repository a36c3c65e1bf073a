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
from .index import PYPI
from .resolve import (
    LOCK_DIR,
    UV_CONFIG,
    LockReport,
    compile_command,
    display_command,
    extra_requirements,
    index_variable,
    instructions_path,
    lock_inputs,
    lock_path,
    parse_body,
    parse_lock,
    platform_env,
    uses_vllm,
    uv_config_text,
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
LEARNER = "learner"  # a row's lock_made_on for a lock made on the learner's machine by the first build that needs it
REFERENCE_MBIT_S = 100  # the connection a predicted time is stated for; a learner's may be faster or slower
RESOLVE_AND_CHECK_MIN = 1.0  # predicted: uv's resolution, the side locks (apt in the stand-in base), the checks
# What `invoke kernels` reads of each family's code, and when it refuses the lock, in words.
GPU_CODE_READ = {
    "gfx": "the amdgcn targets each library's clang offload bundle names (its .hip_fatbin section); the lock is "
           "refused unless the libraries the {rollout} path launches kernels from name {gpus} exactly (AMD's code "
           "objects are not compiled at run time)",
    "sm_": "the SASS and PTX of each library's fatbins; the lock is refused unless the libraries the {rollout} path "
           "launches kernels from have code for {gpus}, natively or as PTX",
}


def made_on_learner_machine(track: Track) -> bool:
    return track.lock_made_on == LEARNER


def predicted_lock_minutes(track: Track, mbit_s: float = REFERENCE_MBIT_S) -> float:
    """How long a lock made on the learner's machine takes, predicted: its wheels (the row's lock_download, itself
    predicted) downloaded once at `mbit_s`, plus RESOLVE_AND_CHECK_MIN."""
    return float(track.lock_download.get("gb", 0)) * 8000 / mbit_s / 60 + RESOLVE_AND_CHECK_MIN


def time_and_size(track: Track) -> str:
    """The predicted time and size of a lock made on the learner's machine, with where each figure comes from."""
    download = track.lock_download
    return (
        f"about {predicted_lock_minutes(track):.0f} min at {REFERENCE_MBIT_S} Mbit/s, predicted, not measured (our "
        f"machines can't reach the index): {download.get('gb', '?')} GB of wheels to download and read (predicted: "
        f"{download.get('predicted_from', 'no source given')}), plus about {RESOLVE_AND_CHECK_MIN:.0f} min to resolve, "
        "make the side locks and check them. The image build then downloads the same wheels once more and installs "
        "them"
    )


CACHE_IN_WORDS = "~/.cache/grpolab/provenance"  # CACHE as the README says it, the same on every machine


def learner_lock_steps(
    track: Track, indexes: list[str], cache: str = CACHE_IN_WORDS, pyproject: Path = REPO / "pyproject.toml"
) -> list[str]:
    """What making the track's lock does, step by step (`invoke lock --track T`, and the first `invoke build`), with
    the `indexes` it resolves from (the README: the row's and PyPI; a build: the ones in use here)."""
    inputs = lock_inputs(track, pyproject)
    family = next((f for f in GPU_CODE_READ if any(g.startswith(f) for g in track.gpus_required)), None)
    read = GPU_CODE_READ[family].format(rollout=track.rollout, gpus=", ".join(track.gpus_required)) if family else ""
    return [
        f"resolve its {len(inputs)} inputs ({', '.join(inputs[:2])}, ...) with uv from "
        f"{', '.join(indexes)}, for {track.uv_platform} and Python "
        f"{track.python}, every file hashed"
        + (
            f", going on to the next index where one answers {', '.join(map(str, track.index_ignore_error_codes))} "
            "for a package it does not host"
            if track.index_ignore_error_codes
            else ""
        )
        + f": lockfiles/{track.name}.txt",
        f"download its binary wheels by those hashes into {cache} and read their GPU code (`invoke kernels --track "
        f"{track.name}`): {read}; every library's links must resolve and its glibc fit the base image's: "
        f"lockfiles/{track.name}.kernels.json",
        f"make the locks beside it for an image that compiles (lockfiles/{track.name}.build.txt, the hashed tools "
        f"that compile its source-only packages; lockfiles/{track.name}.debian.txt, Debian pins resolved by apt in "
        f"the stand-in base, so Docker and, where the stand-in is not there yet, mmdebstrap), then check them all "
        f"(`invoke lock.check --track {track.name}`)",
    ]


def instructions(track: Track, pyproject: Path = REPO / "pyproject.toml") -> str:
    """How the lock of a track whose indexes our machines can't reach is made, with its exact inputs and command."""
    inputs = lock_inputs(track, pyproject)
    config = uv_config_text(track.index_urls, track.index_ignore_error_codes)
    steps = learner_lock_steps(track, list(track.index_urls) + [PYPI], pyproject=pyproject)
    return (
        f"# How lockfiles/{track.name}.txt is made\n\n"
        f"Track {track.name} ({track.description}) takes packages from indexes our machines can't reach:\n"
        + "".join(f"- {u}\n" for u in track.index_urls)
        + "\n"
        + (learner_text(track) if made_on_learner_machine(track) else "")
        + "Making the lock, on any machine that reaches those indexes (any OS: uv resolves for the track's platform), "
        f"is `invoke lock --track {track.name}`, which does this:\n\n"
        + "".join(f"{n}. {step}\n" for n, step in enumerate(steps, 1))
        + f"\nthen `invoke lock.check --track {track.name}`; commit what it wrote. A mirror of the indexes: "
        f"{index_variable(track)}=URL (space-separated, in the row's order) replaces them for uv and for every "
        "reader here, and the lock's header records it; UV_DEFAULT_INDEX replaces PyPI the same way.\n\n"
        "`invoke lock` resolves these inputs (images/tracks.toml's lock_inputs, then "
        "pyproject.toml's lab extra and the extras the track's row names):\n\n"
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
            f"next index when one answers {', '.join(map(str, track.index_ignore_error_codes))} for a package it does "
            "not host:\n\n"
            + "".join(f"    {line}\n" if line else "\n" for line in config.splitlines())
            if config
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


def learner_text(track: Track) -> str:
    """The part of lockfiles/<track>.README that says how the first build makes the lock on the learner's machine."""
    name = track.name
    return (
        f"So the lock is made on your machine (its row says lock_made_on = \"{LEARNER}\"). From a clone of this "
        "repository:\n\n"
        "    bash images/setup-host.sh && . .venvs/host/bin/activate    # the README's first command\n"
        f"    invoke build --track {name}    # or `invoke up` on the track's machine itself\n\n"
        f"finds no lockfiles/{name}.txt, says what it will do and how long that takes, asks, makes the lock as "
        "below, checks it, and builds the image. Nothing is downloaded before you answer; "
        "without a terminal to ask on (a script, or CI: CI set) it refuses instead, unless you pass --make-lock. A "
        "lock that fails its checks leaves none of its files behind, so the next build asks again. The files it "
        f"writes (lockfiles/{name}.txt, {name}.kernels.json, {name}.build.txt, {name}.debian.txt) are yours: keep "
        f"and commit them. Every later `invoke build` and `invoke lock.check` holds the image to them; `invoke lock "
        f"--track {name}` makes them again.\n\nHow long: {time_and_size(track)}.\n\n"
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
