"""The tools that compile a track's source-only packages, pinned and hashed: lockfiles/<track>.build.txt.

A track's lock pins llama-cpp-python's sdist by hash, but compiling it takes a build backend and what the backend asks
for (scikit-build-core, CMake, Ninja). Left to pip's build isolation they come from PyPI at whatever version is current
that day, unhashed. So `invoke lock` resolves them from what the sdist itself declares:

1. the sdist, downloaded by the lock's own hash (kept in ~/.cache/grpolab/provenance under that hash);
2. its pyproject.toml's `build-system.requires` (PEP 518), resolved and installed, hash-checked, into a throwaway venv
   of the track's Python;
3. the backend's own `get_requires_for_build_wheel` (PEP 517), run for real in that venv, inside the unpacked sdist,
   with the track's build options, and with nothing of the host's on PATH: the build stage has no CMake, Ninja or Make
   of its own, and scikit-build-core asks for CMake and Ninja from PyPI only when the system lacks them;
4. both lists, with the backend at the version the hook ran with, compiled by uv with --generate-hashes for the track's
   platform and Python (from PyPI, whatever other indexes the track's own lock uses).

The image's source-builds stage and CI's compile install this lock with pip --require-hashes and build with
--no-build-isolation, so nothing else is fetched: pip's build isolation would not check hashes for build dependencies,
not even from a hashed --build-constraint file (pypa/pip#12942, pypa/pip#13984). `invoke lock.check` compares the
header with the track's lock (offline): another sdist, other build options or a hand edit make it stale.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tarfile
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from grpolab.common.tracks import Track
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import HostError
from ..host.console import say
from ..host.tools import find_python, resolved
from . import index as pkgindex
from .lockfile import LOCK_DIR, Lock, body_sha256, lock_path, parse_body, parse_lock, parse_side_lock, render_side_lock
from .resolve import index_urls, uv_version
from .sourcebuilds import config_settings, source_builds
from .wheels import LockedFile, fetch, index_files

FORMAT = "grpolab-build-lock v1"
# PEP 517's answer for an sdist that declares no build system: setuptools' legacy backend.
LEGACY_BUILD_SYSTEM = ("setuptools.build_meta:__legacy__", ["setuptools>=40.8.0"], [])
HOOK_TIMEOUT_S = 300
# Run inside the sdist by the throwaway venv's Python: the backend's dynamic build requirements, as JSON on stdout.
HOOK = """
import importlib, json, os, sys
backend, _, attribute = sys.argv[1].partition(":")
sys.path[:0] = [os.path.abspath(p) for p in json.loads(sys.argv[2])]
hooks = importlib.import_module(backend)
for part in filter(None, attribute.split(".")):
    hooks = getattr(hooks, part)
ask = getattr(hooks, "get_requires_for_build_wheel", None)
print(json.dumps(list(ask(json.loads(sys.argv[3]))) if ask else []))
"""


def build_lock_path(track: Track, lock_dir: Path = LOCK_DIR) -> Path:
    return lock_dir / f"{track.name}.build.txt"


@dataclass(frozen=True)
class BuildSystem:
    backend: str  # "module" or "module:object"
    requires: list[str]
    backend_path: list[str]  # in-tree backends (PEP 517 backend-path), relative to the sdist


def read_build_system(source: Path) -> BuildSystem:
    """The sdist's pyproject.toml `[build-system]`, with PEP 517's defaults where it says nothing."""
    pyproject = source / "pyproject.toml"
    table = tomllib.loads(pyproject.read_text()).get("build-system", {}) if pyproject.exists() else {}
    if "build-backend" not in table:
        return BuildSystem(LEGACY_BUILD_SYSTEM[0], list(table.get("requires", LEGACY_BUILD_SYSTEM[1])), [])
    return BuildSystem(table["build-backend"], list(table.get("requires", [])), list(table.get("backend-path", [])))


def fetch_sdist(track: Track, lock: Lock, name: str) -> LockedFile:
    """The sdist of the locked version whose sha256 the lock holds, downloaded (or found in the cache) and checked."""
    hashes = {h.removeprefix("sha256:") for h in lock.hashes[name]}
    for index in index_urls(track):
        try:
            files = [
                f
                for f in index_files(name, index)
                if f["sha256"] in hashes and f["filename"].endswith((".tar.gz", ".zip"))
            ]
        except OSError:
            continue
        if files:
            f = files[0]
            return LockedFile(name, lock.packages[name], f["filename"], f["url"], f["sha256"], f["size"])
    raise HostError(
        f"no sdist of {name}=={lock.packages[name]} with a hash lockfiles/{track.name}.txt holds on "
        f"{', '.join(index_urls(track))}: "
        f"the index no longer serves it; run `invoke lock --track {track.name}`"
    )


def unpack_sdist(sdist: Path, into: Path) -> Path:
    """The sdist unpacked into `into`; its top folder (where pyproject.toml is)."""
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as archive:
            archive.extractall(into)
    else:
        with tarfile.open(sdist) as archive:
            archive.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def compile_command(track: Track, inputs_file: str, output_file: str, constraints_file: str | None = None) -> list[str]:
    """uv pip compile, hashed, for the track's platform and Python, from PyPI alone."""
    cmd = ["uv", "pip", "compile", inputs_file]
    if constraints_file:
        cmd += ["--constraint", constraints_file]
    return cmd + ["--python-platform", track.uv_platform, "--python-version", track.python, "--generate-hashes",
                  "--no-header", "--output-file", output_file]


CONSTRAINTS_FILE = "backend-versions.txt"  # beside build-requirements.in: the versions the backend's hook ran with


def _compile(track: Track, inputs: list[str], workdir: Path, name: str, constraints: list[str] | None = None) -> str:
    (workdir / f"{name}.in").write_text("\n".join(inputs) + "\n")
    if constraints:
        (workdir / CONSTRAINTS_FILE).write_text("\n".join(constraints) + "\n")
    cmd = compile_command(track, f"{name}.in", f"{name}.txt", CONSTRAINTS_FILE if constraints else None)
    say("$ " + shlex.join(cmd) + f"   # inputs: {', '.join(inputs)}")
    proc = subprocess.run(resolved(cmd), cwd=workdir, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise HostError(
            f"uv could not resolve the build tools for track {track.name} ({', '.join(inputs)}):\n{proc.stderr.strip()}"
        )
    return (workdir / f"{name}.txt").read_text()


def backend_requires(
    track: Track, source: Path, system: BuildSystem, settings: dict[str, str], workdir: Path
) -> tuple[dict[str, str], list[str]]:
    """({package: version} the backend ran with, what its get_requires_for_build_wheel asked for), the hook run for real
    in a throwaway venv of the track's Python inside the unpacked sdist."""
    pins = _compile(track, system.requires, workdir, "backend")
    venv = workdir / "backend-venv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    for cmd in (
        ["uv", "venv", "--quiet", "--python", find_python(track.python), str(venv)],
        [
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            "--require-hashes",
            "--no-deps",
            "-r",
            str(workdir / "backend.txt"),
        ],
    ):
        proc = subprocess.run(resolved(cmd), env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise HostError(
                f"could not make the venv that asks {system.backend} for its build requirements "
                f"({shlex.join(cmd)}):\n{proc.stderr.strip()}"
            )
    # Only the venv on PATH, and none of the host's settings: what the backend finds is what the build stage has.
    hook_env = {"PATH": str(venv / "bin"), "HOME": str(workdir), "LANG": "C.UTF-8"}
    python = str(venv / "bin" / "python")
    proc = subprocess.run([python, "-c", HOOK, system.backend, json.dumps(system.backend_path), json.dumps(settings)],
                          cwd=source, env=hook_env, capture_output=True, text=True, timeout=HOOK_TIMEOUT_S)
    if proc.returncode != 0:
        raise HostError(
            f"{system.backend}'s get_requires_for_build_wheel failed in {source.name}:\n{proc.stderr.strip()[-2000:]}"
        )
    return parse_body(pins)[0], json.loads(proc.stdout.strip().splitlines()[-1])


def title(track: Track) -> str:
    return (
        f"# {FORMAT}: the tools that compile track {track.name}'s source-only packages, made by `invoke lock --track "
        f"{track.name}` from their sdists' own build requirements. Never edit it: re-run that command."
    )


def make_build_lock(track: Track, lock_dir: Path = LOCK_DIR) -> Path | None:
    """Resolve and write lockfiles/<track>.build.txt (or remove it when the lock has no source-only package)."""
    lock = parse_lock(lock_path(track, lock_dir).read_text())
    builds = source_builds(lock)
    path = build_lock_path(track, lock_dir)
    if not builds:
        if path.exists():
            path.unlink()
            say(f"removed {path.name}: lockfiles/{track.name}.txt has no source-only package any more")
        return None
    sdists, systems, inputs, backend_pins = {}, {}, [], {}
    with tempfile.TemporaryDirectory(prefix=f"grpolab-build-lock-{track.name}-") as tmp:
        for name, build in builds.items():
            locked = fetch_sdist(track, lock, name)
            sdist = fetch(locked)
            source = unpack_sdist(sdist, Path(tmp) / name / "sdist")
            system = read_build_system(source)
            settings = config_settings(build)
            pins, dynamic = backend_requires(track, source, system, settings, Path(tmp) / name)
            say(f"{name} {locked.version}: {system.backend} requires {', '.join(system.requires)}; its "
                f"get_requires_for_build_wheel asks for {', '.join(dynamic) or 'nothing more'}")
            sdists[name] = {"version": locked.version, "file": locked.filename, "sha256": locked.sha256}
            systems[name] = {"build-backend": system.backend, "requires": system.requires,
                             "get_requires_for_build_wheel": dynamic, "config-settings": settings}
            inputs += [r for r in system.requires + dynamic if r not in inputs]
            backend_pins.update(pins)
        # The backend and its own requirements at exactly the versions the hook ran with.
        constraints = [f"{n}=={v}" for n, v in sorted(backend_pins.items())]
        body = _compile(track, inputs, Path(tmp), "build-requirements", constraints)
    header = {
        "track": track.name,
        "python-version": track.python,
        "python-platform": track.uv_platform,
        "sdists": sdists,
        "build-system": systems,
        "inputs": inputs,
        "backend-versions": constraints,
        "uv": uv_version(),
        "command": shlex.join(
            compile_command(track, "build-requirements.in", f"lockfiles/{path.name}", CONSTRAINTS_FILE)
        ),
    }
    path.write_text(render_side_lock(title(track), header, body))
    packages = parse_body(body)[0]
    say(f"wrote {path.name}: " + ", ".join(f"{n} {v}" for n, v in sorted(packages.items())))
    return path


def unmet_requirements(requirements: list[str], packages: dict[str, str], track: Track) -> list[str]:
    """The requirements (for the track's platform and Python) that the locked versions do not satisfy."""
    env = pkgindex.marker_env(track.uv_platform, track.python)
    unmet = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        version = packages.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(Version(version), prereleases=True):
            unmet.append(f"{text} (locked: {version or 'none'})")
    return unmet


def check_build_lock(track: Track, lock: Lock, lock_dir: Path = LOCK_DIR) -> list[str]:
    """What is wrong with lockfiles/<track>.build.txt against the track's lock `lock` (offline): missing, stale, hand
    edited, unhashed, or short of what a backend asked for. Each problem a sentence naming what to do."""
    builds = source_builds(lock)
    path = build_lock_path(track, lock_dir)
    redo = f"run `invoke lock --track {track.name}`"
    if not builds:
        return (
            [
                f"lockfiles/{path.name} is for source-only packages lockfiles/{track.name}.txt no longer has: {redo} "
                "(it removes it)"
            ]
            if path.exists()
            else []
        )
    if not path.exists():
        return [f"lockfiles/{path.name} does not exist (the hashed tools that compile {', '.join(builds)}): {redo}"]
    try:
        header, body = parse_side_lock(path.read_text(), FORMAT)
    except ValueError as err:
        return [f"lockfiles/{path.name} is not a build lock made by `invoke lock`: {err}; {redo}"]
    problems = []
    for key, want in (("track", track.name), ("python-version", track.python), ("python-platform", track.uv_platform)):
        if header.get(key) != want:
            problems.append(
                f"lockfiles/{path.name} is stale: it was made for {key} {header.get(key)!r}, the track now says "
                f"{want!r}; {redo}"
            )
    sdists, systems = header.get("sdists", {}), header.get("build-system", {})
    if sorted(sdists) != sorted(builds):
        problems.append(
            f"lockfiles/{path.name} is stale: it was made for the sdists of {', '.join(sorted(sdists)) or 'nothing'}, "
            f"lockfiles/{track.name}.txt's source-only packages are {', '.join(sorted(builds))}; {redo}"
        )
    for name in sorted(set(sdists) & set(builds)):
        made = sdists[name]
        if made.get("version") != lock.packages[name] or f"sha256:{made.get('sha256')}" not in lock.hashes[name]:
            problems.append(
                f"lockfiles/{path.name} is stale: it was made for {name} {made.get('version')}'s sdist (sha256 "
                f"{str(made.get('sha256'))[:16]}...), lockfiles/{track.name}.txt pins {name} {lock.packages[name]}; "
                f"{redo}"
            )
        if systems.get(name, {}).get("config-settings") != config_settings(builds[name]):
            problems.append(
                f"lockfiles/{path.name} is stale: {name}'s build options changed since "
                "(hostlab/locks/sourcebuilds.py); "
                f"run `invoke lock.side --track {track.name}`"
            )
    if body_sha256(body) != header["body-sha256"]:
        problems.append(
            f"lockfiles/{path.name} was changed after `invoke lock` wrote it (its body no longer matches the sha256 in "
            "its "
            f"header): {redo}, or restore it (`git checkout lockfiles/{path.name}`)"
        )
    packages, hashes = parse_body(body)
    unhashed = sorted(n for n, hs in hashes.items() if not hs)
    if unhashed:
        problems.append(f"lockfiles/{path.name} has packages without hashes ({', '.join(unhashed)}); {redo}")
    asked = [
        r
        for name in sorted(systems)
        for r in systems[name].get("requires", []) + systems[name].get("get_requires_for_build_wheel", [])
    ]
    unmet = unmet_requirements(asked, packages, track)
    if unmet:
        problems.append(
            f"lockfiles/{path.name} does not meet what the build backends ask for: {'; '.join(unmet)}; {redo}"
        )
    return problems
