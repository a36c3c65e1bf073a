"""`invoke bench.cold-up`: the README's first command as a learner meets it, timed part by part.

In a fresh clone of this commit, with nothing of ours warm: no grpolab image and no stand-in base in the engine,
buildah's store, build cache and cache mounts empty (a store of the bench's own, as `invoke build.reproducible` uses),
the host's uv and pip caches set aside (and put back afterwards), the page cache dropped. Then, as `bash
images/setup-host.sh && . .venvs/host/bin/activate && invoke up` does on a machine without a registry: the host
set-up, the stand-in base, the image (and of it, the hand-over to the Docker engine), `docker compose run lab`
(the smoke test, then the lab); then, the page cache dropped again, `invoke up --rollout llamacpp`, the first run on
the path whose image has llama.cpp compiled in (the track's image leaves it out). Both build as `invoke up` does,
keeping one copy of each image; the disk they take is the free space of the one filesystem before and after.

With `--bare`, the machine is first made as bare as a fresh one for what setup-host.sh installs: the Docker engine
stopped and every package setup-host.sh would install on a bare machine of this release purged (with what they
pulled in, and the engine's, containerd's and buildah's data, so every image on the machine), Compose's fallback
binary removed, apt's downloaded packages and lists removed. setup-host.sh then installs them again from the
archive, inside the timed command. Without it, the engine's install is not timed (setup-host.sh finds it installed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from grpolab.common.tracks import get_track

from .. import REPO, HostError
from ..host import engine, packages
from ..host.console import say
from ..host.disk import buildah_tmp, engine_root, filesystem_of, free_gb
from ..host.tools import compose_command, resolved
from ..images.build import build, image_for_rollout, image_name
from ..images.builders.buildah_store import fresh_store
from ..images.standin import build_standin, host_arch, standin_name
from ..locks.lockfile import read_lock
from .labs import _write
from .projection import DROP_CACHES, drop_page_cache

TRACK = "c"  # what `invoke up` builds on a machine without an accelerator
HOST_CACHES = (Path.home() / ".cache" / "uv", Path.home() / ".cache" / "pip")  # the host venv's downloads
GOAL_S = 240  # issue 36: the first command under 4 minutes on a fresh 2-core machine
LLAMACPP_COMMAND = "invoke up --rollout llamacpp"


@contextmanager
def set_aside(paths: tuple[Path, ...]):
    """Each existing folder renamed out of the way for the block, and put back after it (what the block made there
    is removed first)."""
    moved = []
    try:
        for path in paths:
            if path.exists():
                aside = path.with_name(path.name + ".grpolab-cold-up")
                if aside.exists():
                    raise HostError(
                        f"{aside} is left from an earlier --cold-up that did not finish: move it back to {path} first"
                    )
                path.rename(aside)
                moved.append((path, aside))
        yield
    finally:
        for path, aside in moved:
            shutil.rmtree(path, ignore_errors=True)
            aside.rename(path)


def forget_images(names: list[str]) -> None:
    """Remove the named images from the engine, with every other tag of the same id (an engine that holds the id under
    any name is only tagged by the hand-over, which would then not be timed), and every image built on one of them
    (the engine refuses to remove an image others are built on: track cv's, which CI builds on the stand-in base,
    stopped this bench at 70d8774)."""
    client = engine.client()
    for name in names:
        image = engine.image_or_none(name)
        if image is None:
            continue
        bottom = image.attrs["RootFS"]["Layers"]
        built_on = [other for other in client.images.list(all=True)
                    if other.id != image.id and other.attrs["RootFS"]["Layers"][:len(bottom)] == bottom]
        for other in sorted(built_on, key=lambda other: -len(other.attrs["RootFS"]["Layers"])):  # the top ones first
            say(f"removing {', '.join(other.tags) or other.short_id}, built on {name}")
            client.images.remove(other.id, force=True)
        client.images.remove(image.id, force=True)


# What a bare machine lacks beyond the packages: the engine's, containerd's and buildah's data, and Compose's fallback
# binary (setup-host.sh puts it there as root); and apt's downloaded packages and lists, whose files go (their folders
# stay, as apt made them).
BARE_PATHS = (Path("/var/lib/docker"), Path("/var/lib/containerd"), Path("/var/lib/containers"),
              Path("/usr/local/lib/docker/cli-plugins/docker-compose"))
APT_DOWNLOADS = (Path("/var/cache/apt/archives"), Path("/var/lib/apt/lists"))


def bare_packages() -> list[str]:
    """What setup-host.sh's plan installs with apt on a machine of this release that has none of it (the Python that
    makes venvs excepted: the bench runs in one)."""
    release, _ = packages.release_for(packages.parse_os_release(Path("/etc/os-release").read_text()))
    nothing = packages.Found(engine=False, compose_v2=False, buildx=False, debootstrap=False, mmdebstrap=False,
                             buildah=False, python_with_venv=True)
    return packages.plan_for(release, nothing).apt


def make_bare() -> list[str]:
    """Stop the engine and take away what setup-host.sh installs (see the module's doc); returns the packages."""
    names = bare_packages()
    if Path("/run/systemd/system").is_dir():
        subprocess.run(resolved(["systemctl", "stop", "docker.socket", "docker", "containerd"]), check=False)
    else:
        for daemon in ("dockerd", "containerd"):  # setup-host.sh started them in the background
            subprocess.run(resolved(["pkill", "-x", daemon]), check=False)
        for _ in range(60):
            if subprocess.run(resolved(["pgrep", "-x", "dockerd"]), capture_output=True).returncode != 0:
                break
            time.sleep(1)
    say(f"making this machine bare: apt-get purge --autoremove {' '.join(names)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(resolved(["apt-get", "purge", "-y", "-qq", "--autoremove", *names]), env=env, check=True,
                   stdout=subprocess.DEVNULL)
    for path in BARE_PATHS:
        if path.is_dir():  # emptied, not removed: the folder may be a mount point (the engine's is on ours)
            for entry in path.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        elif path.exists():
            path.unlink()
    for folder in APT_DOWNLOADS:
        for entry in folder.iterdir():
            if entry.is_file():
                entry.unlink()
    return names


def _timed(cmd: list[str], cwd: Path) -> float:
    say("$ " + " ".join(cmd))
    started = time.monotonic()
    status = subprocess.run(resolved(cmd), cwd=cwd).returncode
    if status != 0:
        raise HostError(
            f"`{' '.join(cmd)}` exited {status} in the cold clone {cwd}: the first command fails there, see above"
        )
    return time.monotonic() - started


def cold_up_bench(bare: bool = False) -> Path:
    if not os.access(DROP_CACHES, os.W_OK):
        raise HostError(
            "bench.cold-up drops the page cache and removes track c's image and the stand-in base from the engine "
            "(with --bare, the engine itself): run it as root"
        )
    track = get_track(TRACK)
    with tempfile.TemporaryDirectory(prefix="grpolab-cold-up-", dir=Path.home()) as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(resolved(["git", "clone", "--quiet", str(REPO), str(clone)]), check=True)
        images = [
            image_name(track),
            image_for_rollout(track, "llamacpp", read_lock(track))[0],
            standin_name(host_arch()),
        ]
        installed = None
        if bare:
            installed = make_bare()
        else:
            say(f"removing {', '.join(images)} from the engine, for a cold start")
            forget_images(images)
        one_disk = len({filesystem_of(path) for path in (REPO, Path(tmp), engine_root(), buildah_tmp())}) == 1
        if not one_disk:
            raise HostError("the bench reads the disk the first command takes from one filesystem's free space: the "
                            "engine's data root, the home folder and the temporary folder must share one")
        with set_aside(HOST_CACHES):
            free_before_gb = free_gb(REPO)
            drop_page_cache()
            started = time.monotonic()
            setup_s = _timed(["bash", "images/setup-host.sh"], clone)
            base_started = time.monotonic()
            base = build_standin(host_arch())
            base_s = time.monotonic() - base_started
            with fresh_store():
                built = build(TRACK, base=base, repo=clone, one_copy=True)  # as `invoke up` builds
                lab_s = _timed(compose_command("run", "--rm", "-T", "lab"), clone)
                total_s = time.monotonic() - started
                added_gb = free_before_gb - free_gb(REPO)
                # Then the learner's first llama.cpp run, with the page cache dropped again: `invoke up --rollout
                # llamacpp` compiles llama.cpp into an image of its own and runs the smoke test and the lab on that
                # path.
                drop_page_cache()
                llama_started = time.monotonic()
                llama = build(TRACK, base=base, repo=clone, rollout="llamacpp", one_copy=True)
                llama_lab_s = _timed(
                    compose_command("run", "--rm", "-T", "lab", "lab", "--smoke", "always", "--rollout", "llamacpp"),
                    clone,
                )
                llama_total_s = time.monotonic() - llama_started
                llama_added_gb = free_before_gb - free_gb(REPO)
    record = cold_up_record(total_s, setup_s, base_s, lab_s, built, added_gb, llama_total_s, llama, llama_lab_s,
                            llama_added_gb, installed)
    return _write("cold-up", record, case="bare" if bare else None)


def cold_up_record(total_s: float, setup_s: float, base_s: float, lab_s: float, built, added_gb: float,
                   llama_total_s: float, llama, llama_lab_s: float, llama_added_gb: float,
                   installed: list[str] | None = None) -> dict:
    """The bench's result: the first command's parts and disk, then the first llama.cpp run's (`built` and `llama`
    are the two builds' BuildResults; `installed`, with --bare, the packages setup-host.sh installed)."""
    engine = ("a bare machine: the Docker engine, buildah, mmdebstrap and debootstrap not installed, apt's downloads "
              "and lists removed, so setup-host.sh installs them from the archive" if installed else
              "the Docker engine already installed")
    return {
        "what": "the README's first command in a fresh clone, cold: no grpolab image and no stand-in base in the "
                "engine, buildah's store and caches empty, the host's uv and pip caches aside, the page cache dropped; "
                + engine,
        "bare_machine": bool(installed),
        "command": "bash images/setup-host.sh && . .venvs/host/bin/activate && invoke up",
        "total_s": round(total_s, 1),
        "goal_s": GOAL_S,
        "parts": {
            "setup_host_s": round(setup_s, 1),
            "stand_in_base_s": round(base_s, 1),
            "image_build_s": round(built.seconds, 1),
            "of_it_handover_to_engine_s": round(built.handover_s, 1),
            "smoke_and_lab_s": round(lab_s, 1),
        },
        "image": {"id": built.image_id, "bytes": built.size_bytes, "builder": built.builder},
        "disk": {
            "what": "GB the first command took from the disk, all of it (the engine's copy of the image and of the "
                    "stand-in base, what buildah keeps, the host venv, the lab's cache volume): the free space of the "
                    "one filesystem before and after; `invoke up` keeps one copy of the image",
            "added_gb": round(added_gb, 2),
            "image_gb": round(built.size_bytes / 1e9, 2),
            "times_the_image": round(added_gb / (built.size_bytes / 1e9), 2),
            "goal_times_the_image": 1.5,
        },
        "setup_host_installed": installed or [],
        "not_included": ("the Python that makes venvs (this machine's own; on a stock Debian 12, python3-venv)"
                         if installed else
                         "installing the Docker engine, Compose and buildah (setup-host.sh found them installed)"),
        "then_llamacpp": {
            "what": "right after, the page cache dropped again: the first run on llama.cpp's rollout path, which "
                    "compiles "
            "llama.cpp into the image with it",
            "command": LLAMACPP_COMMAND,
            "total_s": round(llama_total_s, 1),
            "image_build_s": round(llama.seconds, 1),
            "of_it_handover_to_engine_s": round(llama.handover_s, 1),
            "smoke_and_lab_s": round(llama_lab_s, 1),
            "image": {"name": llama.image, "id": llama.image_id, "bytes": llama.size_bytes},
            "disk_added_gb_since_the_start": round(llama_added_gb, 2),
        },
    }
