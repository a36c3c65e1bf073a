"""Where the host tasks find the programs they start (uv, docker, debootstrap, mmdebstrap, git, tar): beside the running
Python first, then on PATH. A missing one is one line naming it and how to get it, never a traceback.

Beside the running Python first because `invoke` is often run from a venv that is not activated
(`.venvs/host/bin/invoke lock`): uv is installed in that same venv, but its bin/ is not on PATH.
Commands are built with the plain names (as the user reads them, and as the lock headers record them) and
resolved only when they run (`resolved`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .. import HostError

HOW_TO_GET = {
    "ruff": "it comes with the test tools (lockfiles/test-tools.txt, which `bash .ci/run` installs into .venvs/c)",
    "uv": "it comes with the host tasks' packages (`bash images/setup-host.sh`, or `pip install uv` in the venv "
    "that runs invoke)",
    "docker": "install Docker Engine and its CLI (`bash images/setup-host.sh` on Debian and Ubuntu; Docker's own "
    "packages elsewhere)",
    "debootstrap": "`apt-get install -y debootstrap` (Debian and Ubuntu hosts only; it makes the stand-in base "
    "image when no registry answers)",
    "mmdebstrap": "`apt-get install -y mmdebstrap` (Debian and Ubuntu hosts only; it makes the stand-in base image, "
    "byte for byte the same from the same pins, when no registry answers)",
    "git": "`apt-get install -y git` (the project is a git clone; git tells builds and locks what changed)",
    "tar": "`apt-get install -y tar`",
    "buildah": "`apt-get install -y buildah` (`bash images/setup-host.sh` installs it: it builds images whose id is "
               "the same "
    "from the same commit)",
    "umount": "`apt-get install -y mount`",
}


def tool(name: str) -> str:
    """The program `name` to start: its plain name when PATH finds it there, else its path beside the running
    Python. HostError when neither has it."""
    beside_python = Path(sys.executable).parent / name
    on_path = shutil.which(name)
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        same = on_path is not None and Path(on_path).resolve() == beside_python.resolve()
        return name if same else str(beside_python)
    if on_path:
        return name
    how = HOW_TO_GET.get(name, f"install {name}")
    raise HostError(f"`{name}` was not found beside this Python ({Path(sys.executable).parent}) nor on PATH: {how}")


def resolved(cmd: list[str]) -> list[str]:
    """`cmd` with its program found by `tool` (the rest unchanged)."""
    return [tool(str(cmd[0])), *[str(part) for part in cmd[1:]]]


def compose_command(*args: str) -> list[str]:
    """`docker compose ARGS`, as the user would type it; run it with `resolved(...)`."""
    return ["docker", "compose", *args]


def find_python(version: str) -> str:
    """An interpreter for `version`: what uv finds (or downloads), else pyenv's or Homebrew's installs."""
    proc = subprocess.run(
        resolved(["uv", "python", "find", version]),
        capture_output=True,
        text=True,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.strip()
    for pattern in (f".pyenv/versions/{version}*/bin/python{version}",):
        found = sorted(Path.home().glob(pattern), reverse=True)
        if found:
            return str(found[0])
    for path in (f"/opt/homebrew/bin/python{version}", f"/usr/local/bin/python{version}", f"/usr/bin/python{version}"):
        if Path(path).exists():
            return path
    return version  # let uv try to download it (needs GitHub); its error is then shown
