"""Running the lab on the host: `invoke smoke/lab/...` and `invoke venv` (native venvs for tracks m and c)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from grpolab.common.tracks import Track, current_track_name, get_track

from .. import REPO, HostError
from ..host.console import say
from ..host.tools import find_python, resolved
from ..locks.lockfile import lock_path, lock_sha256
from ..locks.resolve import check_lock, platform_env

VENVS = REPO / ".venvs"
VENV_RECORD = "grpolab-venv.json"


def venv_dir(track: Track) -> Path:
    return VENVS / track.name


def venv_python(track: Track) -> Path:
    return venv_dir(track) / "bin" / "python"


def make_venv(track_name: str) -> Path:
    """A native virtual environment from the track's lock, with uv (hash-checked)."""
    track = get_track(track_name)
    report = check_lock(track)
    if report.problems:  # a hand-edited lock too: refused here, before anything is downloaded
        raise HostError("\n".join(report.problems))
    started = time.monotonic()
    path = venv_dir(track)
    env = {
        **os.environ,
        **platform_env(track),
        "UV_PYTHON_DOWNLOADS": os.environ.get("UV_PYTHON_DOWNLOADS", "automatic"),
    }
    made = subprocess.run(
        resolved(["uv", "venv", "--python", find_python(track.python), "--allow-existing", str(path)]), env=env
    )
    if made.returncode != 0:
        raise HostError(
            f"track {track.name} needs Python {track.python} and none was found or downloadable: install it "
            f"(`uv python install {track.python}`, `brew install python@{track.python}`, pyenv), then retry"
        )
    proc = subprocess.run(
        resolved(["uv", "pip", "sync", "--python", str(venv_python(track)), "--require-hashes", str(lock_path(track))]),
        env=env,
    )
    if proc.returncode != 0:
        raise HostError(
            f"installing lockfiles/{track.name}.txt into {path} failed (see above). On a platform other "
            f"than {track.uv_platform} the lock's wheels don't fit: pick the track for this machine."
        )
    (path / VENV_RECORD).write_text(json.dumps({"track": track.name, "lock_sha256": lock_sha256(lock_path(track))}))
    say(
        f"venv for track {track.name} ready at {path.relative_to(REPO)} in {time.monotonic() - started:.0f} s; "
        f"`invoke smoke --track {track.name}` uses it"
    )
    return path


def lab_env(track: Track) -> dict[str, str]:
    """What an image would set, for a host run: the track, its lock's hash, its runtime env, the code path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "entrypoint"), os.environ.get("PYTHONPATH")])),
        "GRPOLAB_TRACK": track.name,
    }
    record = venv_dir(track) / VENV_RECORD
    if record.exists():
        env["GRPOLAB_LOCK_SHA256"] = json.loads(record.read_text())["lock_sha256"]
    for key, value in track.env.items():
        env.setdefault(key, str(value))
    return env


def lab_command(command: str, track_name: str | None, options: dict[str, object], extra: list[str],
                module: str = "grpolab") -> list[str]:
    """`python -m MODULE COMMAND ...` with the track's venv python when there is one: the lab's commands (`grpolab`),
    or the benchmarks' and CI's proofs (`grpolab.bench`)."""
    track = get_track(track_name or current_track_name())
    python = venv_python(track) if venv_python(track).exists() else Path(sys.executable)
    argv = [str(python), "-m", module, *command.split(), "--track", track.name]
    for key, value in options.items():
        if value is not None and value is not False:
            argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return argv + extra


def run_lab(
    command: str, track_name: str | None = None, options: dict | None = None, extra: list[str] | None = None
) -> int:
    track = get_track(track_name or current_track_name())
    argv = lab_command(command, track.name, options or {}, extra or [])
    say("$ " + " ".join(argv))
    return subprocess.run(argv, env=lab_env(track), cwd=REPO).returncode
