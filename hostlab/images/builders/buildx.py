"""buildx as the builder: the engine's own BuildKit where it sets every time from git (Docker >= 26 with the containerd
image store): SOURCE_DATE_EPOCH and rewrite-timestamp, the image written to a file and loaded. Preferred where it
works: nothing to install, no second copy of the image. Checked on Debian 13's Docker 26.1.5 by
images/buildkit-repro-check.sh."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...host.console import stream
from ...host.tools import resolved
from .engine_images import engine_image_id, engine_layers
from .facts import BuilderFacts
from .inputs import build_arg_flags

NAME = "buildx"


@dataclass(frozen=True)
class Buildx(BuilderFacts):
    """The Builder (see __init__) for buildx: sets every time; its image lands in the engine."""

    name: str = NAME
    sets_times: bool = True
    loads_into_engine: bool = True

    def base_ref(self, engine_base_id: str, base_image: str) -> str:
        return base_image  # the engine holds it under its name

    def build_target(
        self,
        dockerfile: Path,
        context: Path,
        target: str,
        epoch: int,
        args: dict[str, str],
        platform: str,
        ca: Path | None,
        tag: str | None,
    ) -> tuple[str, str, list[str]]:
        ref = tag or f"grpolab-{target}:{args.get('TRACK', 'image')}"
        image_id, tail = buildx_build(dockerfile, context, target, epoch, args, platform, ca, ref)
        return image_id, ref, tail

    def hand_to_engine(self, image_id: str, image: str) -> None:
        pass  # loaded by the build itself

    def layers(self, image_id: str, ref: str) -> list[str]:
        return engine_layers(ref)

    def from_nothing(self, folder: Path) -> AbstractContextManager:
        return _engine_cache_emptied()


@contextmanager
def _engine_cache_emptied() -> Iterator[None]:
    """The engine's build cache emptied (its cache mounts too), as a fresh machine has it."""
    subprocess.run(resolved(["docker", "buildx", "prune", "--all", "--force"]), capture_output=True)
    yield


def detect() -> tuple[Buildx | None, str]:
    able, why = engine_sets_times()
    if not able:
        return None, why
    out = subprocess.run(resolved(["docker", "buildx", "version"]), capture_output=True, text=True)
    return Buildx((out.stdout.split() or ["?", "?"])[1]), ""


def engine_sets_times() -> tuple[bool, str]:
    """Can the engine's own builder set every time from git? BuildKit >= 0.13 (Docker >= 26) with buildx, writing the
    image to a file with rewrite-timestamp, which only the containerd image store allows: the classic store's exporter
    keeps the clock in the history ("Docker exporter is not supported for the docker driver"). (whether, why not)"""
    out = subprocess.run(
        resolved(["docker", "version", "--format", "{{.Server.Version}}"]), capture_output=True, text=True
    )
    version = out.stdout.strip()
    major = int(version.split(".")[0]) if version[:1].isdigit() else 0
    if major < 26:
        return (
            False,
            f"Docker engine {version or '?'}: BuildKit before 0.13 cannot rewrite file times (Docker >= 26 can)",
        )
    if subprocess.run(resolved(["docker", "buildx", "version"]), capture_output=True).returncode != 0:
        return False, "no docker buildx plugin"
    info = subprocess.run(
        resolved(["docker", "info", "--format", "{{json .DriverStatus}}"]), capture_output=True, text=True
    )
    if "io.containerd.snapshotter" not in info.stdout:
        return False, (
            "the engine keeps images in its classic store, whose exporter writes the clock into every image: "
            "turn on the containerd image store (docs/locks-and-images.md)"
        )
    return True, f"Docker engine {version} with buildx and the containerd image store"


def buildx_build(
    dockerfile: Path, context: Path, target: str, epoch: int, args: dict[str, str], platform: str,
    ca: Path | None, tag: str,
) -> tuple[str, list[str]]:
    """One `docker buildx build` of `target` with every time set to `epoch` (SOURCE_DATE_EPOCH: created times;
    rewrite-timestamp: file mtimes), written to a file and loaded as `tag`: the image id and the log's last lines.
    No provenance or SBOM attestations: they hold the build's own times."""
    archive = context.parent / f"{target}.tar"
    cmd = [
        "docker",
        "buildx",
        "build",
        "--provenance=false",
        "--sbom=false",
        "--target",
        target,
        "--platform",
        platform,
        "--file",
        str(dockerfile),
        "--output",
        f"type=docker,name={tag},dest={archive},rewrite-timestamp=true",
    ]
    status, tail = stream(cmd + build_arg_flags(epoch, args, ca) + [str(context)])
    if status != 0:
        return "", tail
    loaded = subprocess.run(resolved(["docker", "load", "--input", str(archive)]), capture_output=True, text=True)
    archive.unlink(missing_ok=True)
    if loaded.returncode != 0:
        return "", tail + [f"ERROR: docker load of the built image failed: {loaded.stderr.strip()}"]
    return engine_image_id(tag), tail
