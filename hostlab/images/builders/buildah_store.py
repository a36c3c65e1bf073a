"""buildah's own store, as the builds and the hand-over use it: buildah run with a clear error, the base copied in from
the Docker engine, an image's layers, a store of a build's own for a build from nothing, images removed."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ... import HostError
from ...host.console import say
from ...host.disk import buildah_tmp, under_mount_target_top
from ...host.environ import environ_set
from ...host.tools import resolved

BUILDAH_HINT = "`apt-get install -y buildah` (Debian 12+, Ubuntu 22.04+)"


def run_buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(resolved(["buildah", *args]), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise HostError(f"`buildah {' '.join(args[:3])} ...` failed: {out.stderr.strip()[-800:]}")
    return out


def buildah_has_image(image_id: str) -> bool:
    return run_buildah("inspect", "--type", "image", image_id.removeprefix("sha256:"), check=False).returncode == 0


def base_into_buildah(engine_image_id: str) -> str:
    """The base image, which the engine holds, in buildah's store too (same id: the same config's digest); its id
    without the sha256: prefix, which is what the Dockerfile's FROM is handed."""
    hex_id = engine_image_id.removeprefix("sha256:")
    if not buildah_has_image(hex_id):
        say(f"copying the base image {hex_id[:12]} from the Docker engine into buildah's store")
        run_buildah("pull", "--quiet", f"docker-daemon:sha256:{hex_id}")
    return hex_id


def buildah_layers(image_id: str) -> list[str]:
    """The image's layers' diff ids, bottom first."""
    info = json.loads(run_buildah("inspect", "--type", "image", image_id.removeprefix("sha256:")).stdout)
    return list(info["OCIv1"]["rootfs"]["diff_ids"])


@contextmanager
def fresh_store(folder: Path | None = None):
    """buildah with a store, cache and cache mounts of its own under `folder` (by default a new one in buildah's
    temporary folder), empty at first: builds from nothing that leave the everyday store (and its cache) as it was.
    Removed afterwards. `folder` must not be under /tmp or /root: buildah would leave mount targets in the layers
    there (hostlab/host/disk.py, MOUNT_TARGET_TOPS)."""
    folder = folder or Path(tempfile.mkdtemp(prefix="grpolab-store-", dir=buildah_tmp()))
    if under_mount_target_top(folder):
        raise HostError(f"a buildah store of its own in {folder}: that is under a folder images/Dockerfile mounts "
                        "into, and buildah 1.28 then leaves mount targets in the layers: use a folder under /var/tmp "
                        "(hostlab.host.disk.buildah_tmp())")
    conf = folder / "storage.conf"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)  # buildah keeps RUN --mount=type=cache folders under TMPDIR
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{folder}/storage"\nrunroot = "{folder}/run"\n')
    store = ["buildah", "--storage-driver", "overlay", "--root", f"{folder}/storage", "--runroot", f"{folder}/run"]
    try:
        with environ_set(CONTAINERS_STORAGE_CONF=str(conf), TMPDIR=str(folder / "tmp")):
            yield folder
    finally:
        subprocess.run(resolved([*store, "rmi", "--all", "--force"]), capture_output=True)
        subprocess.run(resolved(["umount", "--recursive", "--lazy", f"{folder}/storage/overlay"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def buildah_forget(*image_ids: str) -> None:
    """Remove images from buildah's store (its cache of them too): for a build from nothing."""
    for image_id in image_ids:
        run_buildah("rmi", "--force", image_id.removeprefix("sha256:"), check=False)
    run_buildah("rmi", "--prune", check=False)
