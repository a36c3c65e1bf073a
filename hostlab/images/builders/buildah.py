"""buildah as the builder (Debian's and Ubuntu's archives: `apt-get install buildah`): `--timestamp` sets the created
times and every file's mtime in the layers it commits, so the same commit gives the same image id. Debian 12's Docker
engine (20.10, BuildKit 0.8) cannot: it knows no SOURCE_DATE_EPOCH and stamps each layer's history with the wall
clock. buildah builds into its own store; the image is then handed to the engine, which keeps its id (handover.py:
only the layers the engine lacks)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ...host.console import stream
from ... import HostError
from ...host.disk import MOUNT_TARGET_TOPS, buildah_store, under_mount_target_top
from .buildah_store import BUILDAH_HINT, base_into_buildah, buildah_layers, fresh_store, run_buildah
from .facts import BuilderFacts
from .handover import buildah_to_engine
from .inputs import build_arg_flags

NAME = "buildah"


@dataclass(frozen=True)
class Buildah(BuilderFacts):
    """The Builder (see __init__) for buildah: sets every time; hands its image to the engine."""

    name: str = NAME
    sets_times: bool = True
    loads_into_engine: bool = False
    keeps_own_copy: bool = True

    def base_ref(self, engine_base_id: str, base_image: str) -> str:
        return base_into_buildah(engine_base_id)  # its own store needs a copy; FROM takes it by id

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
        image_id, built, tail = buildah_build(dockerfile, context, target, epoch, args, platform, ca, tag=tag)
        return image_id, built.removeprefix("sha256:"), tail

    def hand_to_engine(self, image_id: str, image: str) -> None:
        buildah_to_engine(image_id, image)

    def layers(self, image_id: str, ref: str) -> list[str]:
        return buildah_layers(image_id)

    def from_nothing(self, folder: Path) -> AbstractContextManager:
        return fresh_store(folder)


def detect() -> tuple[Buildah | None, str]:
    """buildah where installed (its version), else why not."""
    path = shutil.which("buildah")
    if not path:
        return None, f"buildah is not installed: {BUILDAH_HINT}"
    out = subprocess.run([path, "--version"], capture_output=True, text=True)
    return Buildah(out.stdout.split()[2] if out.returncode == 0 else "?"), ""


def buildah_build(
    dockerfile: Path, context: Path, target: str, epoch: int, args: dict[str, str], platform: str,
    ca: Path | None, tag: str | None = None,
) -> tuple[str, str, list[str]]:
    """One `buildah build` of `target` with every time set to `epoch`: the image without its history (tagged `tag`),
    the image as built (with it: what a later build's FROM takes, so that its steps' cache hits), and the log's last
    lines; empty ids when the build failed. RUN steps
    use the host's network, as the engine's builder's do: buildah's own container network needs a CNI set-up that a
    plain `apt-get install buildah` does not make (name resolution failed in them here). The image format stays
    buildah's default, OCI: with `--format docker`, buildah 1.28's layer cache never hit (every build from nothing);
    the hand-over to the engine converts it, keeping the id. The built image keeps buildah's history, which its layer
    cache needs (with --omit-history, buildah 1.28 matched no cached step: every build was one from nothing), and the
    image returned is that image without it (`without_history`). --force-rm: buildah removes a step's working container
    after a failed or interrupted step too (by default only after
    success); left behind, each kept its half-written layer, and a day's failed and interrupted builds held 18 GB
    here."""
    iidfile = context.parent / f"{target}.iid"
    cmd = ["buildah", "build", "--layers", "--force-rm", "--jobs", "2", "--network", "host", "--timestamp", str(epoch),
           "--target", target, "--platform", platform, "--file", str(dockerfile), "--iidfile", str(iidfile)]
    store = buildah_store()
    if under_mount_target_top(store):
        raise HostError(f"[build] buildah's store is {store}, under a folder images/Dockerfile mounts into "
                        f"({', '.join(map(str, MOUNT_TARGET_TOPS))}): buildah 1.28 then leaves mount targets in the "
                        "layers and the image is not the recorded one. Set graphroot in /etc/containers/storage.conf "
                        "elsewhere (its default: /var/lib/containers/storage)")
    status, tail = stream(cmd + build_arg_flags(epoch, args, ca) + [str(context)])
    if status != 0:
        return "", "", tail
    built = iidfile.read_text().strip()
    return without_history(built, epoch, tag), built, tail


def without_history(image_id: str, epoch: int, tag: str | None = None) -> str:
    """`image_id` committed again without its history, at `epoch`: one more layer, empty (the same 1,024 bytes every
    time), and a config with no history. The history buildah 1.28 writes names each step's parent image in a comment
    ("FROM 9ba1e8057149"), and those ids (of its intermediate and temporary images) came out new each build: two
    builds from nothing had every layer the same and still two ids."""
    container = run_buildah("from", "--pull-never", image_id.removeprefix("sha256:")).stdout.strip().splitlines()[-1]
    try:
        iidfile = Path(tempfile.mkdtemp(prefix="grpolab-iid-")) / "iid"
        run_buildah(
            "commit", "--quiet", "--omit-history", "--timestamp", str(epoch), "--iidfile", str(iidfile), container
        )
        stripped = iidfile.read_text().strip()
        shutil.rmtree(iidfile.parent, ignore_errors=True)
    finally:
        run_buildah("rm", container, check=False)
    if tag:
        run_buildah("tag", stripped.removeprefix("sha256:"), tag)
    return stripped
