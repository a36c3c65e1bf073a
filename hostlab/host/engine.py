"""Questions to the Docker engine (through the Docker SDK for Python) and finding a BuildKit-capable CLI.

Builds go through the docker CLI (the SDK can't build with BuildKit: docker/docker-py#2230); everything
else asked of the engine (is it running, which runtimes, labels, sizes) goes through the SDK.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from .. import HostError
from .tools import HOW_TO_GET, tool


def client():
    """A connected Docker SDK client, or a HostError saying whether the engine is stopped or this user may not
    use it, and how to fix that."""
    import docker
    from docker.errors import DockerException

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        c = docker.from_env(timeout=30)
        c.ping()
        return c
    except DockerException as err:
        raise HostError(unreachable_message(where, err)) from None


def unreachable_message(where: str, err: Exception) -> str:
    """Permission denied (the engine runs, this user may not talk to it) or not running: which, and the fix."""
    if "permission denied" in str(err).lower():
        user = _user_name()
        return (
            f"permission denied talking to the Docker engine at {where}: it is running, but user {user} may not use "
            f"it. Fix: `sudo usermod -aG docker {user}`, then log out and in again (or `newgrp docker`); or use "
            "rootless Docker / Docker Desktop. Check with `docker info`."
        )
    return (
        f"the Docker engine is not running, or not at {where} ({_short(err)}). Start it: `sudo systemctl start "
        "docker` (or `sudo dockerd &` where there is no systemd; Docker Desktop on macOS/Windows), or point "
        "DOCKER_HOST at it. Check with `docker info`."
    )


def _user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid without a passwd entry
        return str(os.getuid())


def running() -> bool:
    try:
        client()
        return True
    except HostError:
        return False


def _short(err: Exception) -> str:
    text = getattr(err, "explanation", None) or str(err)
    text = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return text[:300]


def runtimes() -> set[str]:
    return set(client().info().get("Runtimes", {}))


def by_digest(name: str) -> str:
    """`repo:tag@sha256:...` -> `repo@sha256:...`: the digest is what counts; engines differ on the mixed form."""
    if "@" not in name:
        return name
    repo, digest = name.split("@", 1)
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    return f"{repo}@{digest}"


def image_or_none(name: str):
    from docker.errors import ImageNotFound, NullResource

    try:
        return client().images.get(by_digest(name))
    except (ImageNotFound, NullResource):
        return None


def pull(name: str, platform: str | None = None) -> tuple[bool, str]:
    """Try to pull an image; (False, reason) when the registry can't be reached."""
    from docker.errors import APIError

    try:
        client().images.pull(by_digest(name), platform=platform)
        return True, ""
    except (APIError, ValueError) as err:
        return False, _short(err)


def run_in(image: str, command: list[str], platform: str | None = None) -> tuple[int, str]:
    """Run a throwaway container of `image` (entrypoint cleared); its exit status and output."""
    from docker.errors import APIError, ContainerError

    c = client()
    try:
        container = c.containers.create(image, command=command, entrypoint=[], platform=platform)
    except APIError as err:
        return 127, _short(err)
    try:
        try:
            container.start()
        except APIError as err:  # e.g. exec: "sh": executable file not found
            return 127, _short(err)
        status = container.wait(timeout=300)["StatusCode"]
        return status, container.logs().decode(errors="replace")
    except ContainerError as err:
        return err.exit_status, _short(err)
    finally:
        container.remove(force=True)


@dataclass(frozen=True)
class BuildCli:
    """How to run a BuildKit build with the docker CLI found on this machine."""

    argv: tuple[str, ...]  # e.g. ("docker", "buildx", "build") or ("/usr/bin/docker", "build")
    env: tuple[tuple[str, str], ...]


@lru_cache(maxsize=1)
def build_cli() -> BuildCli:
    """A docker CLI that builds with BuildKit: buildx when installed; else a CLI older than 23 (BuildKit built
    in, DOCKER_BUILDKIT=1). Newer CLIs without buildx fall back to the legacy builder, which can't mount."""
    candidates = []
    try:
        found = shutil.which(tool("docker"))  # beside the running Python, then on PATH, as every host task finds it
    except HostError:
        found = None
    for path in (found, "/usr/bin/docker", "/usr/local/bin/docker"):
        if path and os.path.exists(path) and path not in candidates:
            candidates.append(path)
    if not candidates:
        raise HostError(
            "`docker` was not found beside this Python, on PATH, nor in /usr/bin or /usr/local/bin: "
            f"{HOW_TO_GET['docker']}"
        )
    for path in candidates:
        if subprocess.run([path, "buildx", "version"], capture_output=True).returncode == 0:
            return BuildCli((path, "buildx", "build", "--load"), ())
    for path in candidates:
        out = subprocess.run([path, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True)
        m = re.match(r"(\d+)\.", out.stdout.strip())
        if m and int(m.group(1)) < 23:
            return BuildCli((path, "build"), (("DOCKER_BUILDKIT", "1"),))
    raise HostError(
        f"the docker CLI ({', '.join(candidates)}) has no buildx plugin, which BuildKit builds need: "
        "install docker-buildx (Docker's docker-buildx-plugin package, or Debian's docker-buildx)"
    )
