"""An image buildah built, handed to the Docker engine, which `docker compose run` needs: only the layers it lacks.

`buildah push IMAGE docker-daemon:NAME` sends every layer, and the engine unpacks the whole archive before it looks at
which layers it already holds. So a code change that rebuilt only the lab's small layers sent the 4.9 GB dependency
layer again (about a minute of such a rebuild here), and track c's llama.cpp image, which is the track's image plus
a layer, sent the track's whole image a second time.

Here the layers the engine already holds at the bottom of one of its images (it keys a layer by the layers under it
as well, so only a shared bottom counts) are not sent. buildah writes the image into an OCI layout in which those
layers are already present, as empty files; it skips them and writes the others. The docker-archive made from the
layout lists every layer and carries only the others: Docker's classic image store looks each layer up by its
chain before it opens the layer's file, and takes the held ones from its own store. The config goes over as buildah
wrote it, so the engine's id is buildah's (checked). buildah 1.28 gzips what it writes to an OCI layout
(`--disable-compression` has no effect there), so this way pays off only where the engine holds most of the image's
bytes; elsewhere, where the engine keeps its images in containerd, or when this way fails, the image is sent whole.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ... import HostError
from ...host.console import say
from ...host.tools import resolved
from ...host.turns import lock_file, one_at_a_time
from .buildah_store import run_buildah
from .engine_images import engine_image_id

# Two `buildah push ... docker-daemon:` of one 6 GB image at once both exited 0 here and left the engine without
# the image (buildah 1.28.2, Docker 20.10.24; one push alone: 42 s, loaded whole). Hand-overs on this machine take
# turns through this lock, and the second then finds the image there and only tags it.
HANDOVER_LOCK = lock_file("handover")


def buildah_to_engine(image_id: str, name: str) -> str:
    """Hand the image to the Docker engine under `name`; the config, and so the id, stay as they are. The engine's id
    for it, which must be buildah's. An image the engine already holds is only tagged; of any other, the layers the
    engine lacks are sent (`send_missing_layers`), or the whole image. One hand-over at a time on this machine
    (HANDOVER_LOCK)."""
    hex_id = image_id.removeprefix("sha256:")
    with one_at_a_time(HANDOVER_LOCK, "the hand-over to the Docker engine", f"the hand-over of {hex_id[:12]} as {name}",
                       "two at once left the engine without the image"):
        replaced = engine_image_id(name)
        if engine_image_id(hex_id).removeprefix("sha256:") == hex_id:
            subprocess.run(resolved(["docker", "tag", hex_id, name]), check=True, capture_output=True)
            say(f"the Docker engine already holds {hex_id[:12]}: tagged {name}")
        elif not send_missing_layers(hex_id, name):
            say(f"handing {hex_id[:12]} to the Docker engine as {name}, every layer")
            run_buildah("push", "--quiet", hex_id, f"docker-daemon:{name}")
        engine_id = engine_image_id(name)
    if not engine_id:
        raise HostError(
            f"buildah handed {image_id} to the Docker engine as {name} and exited 0, but the engine does not hold it: "
            f"run the build again; if it happens again, `docker load` of `buildah push {hex_id[:12]} "
            "docker-archive:FILE` shows the engine's error"
        )
    if engine_id.removeprefix("sha256:") != hex_id:
        raise HostError(f"the Docker engine holds {name} as {engine_id}, not as buildah built it ({image_id}): "
                        "the hand-over changed the image's config")
    if replaced and replaced != engine_id:
        drop_untagged(replaced, name)
    return engine_id


def drop_untagged(image_id: str, was: str) -> None:
    """The engine's image that `was` named before a rebuild (or images/stock-host-check.sh's commit), removed once no
    name is left on it: each rebuild otherwise leaves a whole image behind, untagged (5-7 GB per track here; CI ran out
    of disk on them). One a container still uses stays (the engine refuses), and is named."""
    tags = subprocess.run(resolved(["docker", "image", "inspect", "--format", "{{len .RepoTags}}", image_id]),
                          capture_output=True, text=True)
    if tags.returncode != 0 or tags.stdout.strip() != "0":
        return
    gone = subprocess.run(resolved(["docker", "image", "rm", image_id]), capture_output=True, text=True)
    if gone.returncode == 0:
        say(
            f"removed the engine's previous {was} ({image_id.removeprefix('sha256:')[:12]}), which no name held any "
            "more"
        )
    else:
        say(
            f"kept the engine's previous {was} ({image_id.removeprefix('sha256:')[:12]}), untagged: "
            f"{gone.stderr.strip()[-200:]}"
        )


def held_bottom(layers: list[str], chains: list[list[str]]) -> int:
    """How many of `layers`, from the bottom, the engine holds: the longest run of them that one of its images
    starts with."""
    best = 0
    for chain in chains:
        same = 0
        for mine, theirs in zip(layers, chain):
            if mine != theirs:
                break
            same += 1
        best = max(best, same)
    return best


def engine_chains() -> list[list[str]]:
    """Every image's layers in the engine, bottom first (intermediate images too)."""
    listed = subprocess.run(resolved(["docker", "image", "ls", "--all", "--quiet", "--no-trunc"]),
                            capture_output=True, text=True, check=True).stdout.split()
    if not listed:
        return []
    out = subprocess.run(
        resolved(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", *sorted(set(listed))]),
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]


def engine_keeps_images_in_containerd() -> bool:
    """The engine's containerd image store (Docker 29's default) loads an archive into containerd, which wants
    every layer's file in it; this way is for the classic store."""
    out = subprocess.run(
        resolved(["docker", "info", "--format", "{{json .DriverStatus}}"]), capture_output=True, text=True
    )
    return out.returncode != 0 or "io.containerd.snapshotter" in out.stdout


def send_missing_layers(hex_id: str, name: str) -> bool:
    """The image to the engine as `name`, without the layers the engine holds at the bottom of one of its images.
    False, having sent nothing, where that would not pay (the engine lacks most of the image's bytes) or where this
    way does not apply or failed; the caller then sends the whole image."""
    if engine_keeps_images_in_containerd():
        return False
    manifest = json.loads(json.loads(run_buildah("inspect", "--type", "image", hex_id).stdout)["Manifest"])
    layers = [layer["digest"] for layer in manifest["layers"]]  # uncompressed in buildah's store: each one's diff id
    sizes = [int(layer.get("size", 0)) for layer in manifest["layers"]]
    held = held_bottom(layers, engine_chains())
    sent_bytes, held_bytes = sum(sizes[held:]), sum(sizes[:held])
    if held_bytes <= sent_bytes:
        return False
    say(f"handing {hex_id[:12]} to the Docker engine as {name}: {len(layers) - held} of its {len(layers)} layers "
        f"({in_units(sent_bytes)}); the engine holds the {held} under them ({in_units(held_bytes)})")
    folder = Path(tempfile.mkdtemp(prefix="grpolab-handover-"))
    try:
        _load_missing(hex_id, name, layers[:held], folder)
    except (HostError, OSError, subprocess.SubprocessError, ValueError, KeyError) as failed:
        say(f"sending only those layers failed ({str(failed)[-300:]}): sending the whole image instead")
        return False
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return True


def in_units(size_bytes: int) -> str:
    if size_bytes >= 1e9:
        return f"{size_bytes / 1e9:.2f} GB"
    return f"{size_bytes / 1e6:.1f} MB" if size_bytes >= 1e6 else f"{size_bytes / 1e3:.1f} kB"


def _load_missing(hex_id: str, name: str, held_layers: list[str], folder: Path) -> None:
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (folder / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (folder / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": []}))
    for digest in held_layers:  # present already, as far as buildah's copy looks: it skips them
        (blobs / digest.removeprefix("sha256:")).touch()
    run_buildah("push", "--quiet", hex_id, f"oci:{folder}:handover")

    def blob(digest: str) -> Path:
        return blobs / digest.removeprefix("sha256:")

    written = json.loads(blob(json.loads((folder / "index.json").read_text())["manifests"][-1]["digest"]).read_text())
    config = blob(written["config"]["digest"]).read_bytes()
    config_digest = hashlib.sha256(config).hexdigest()
    if config_digest != hex_id:
        raise HostError(f"buildah wrote {hex_id[:12]}'s config with other bytes (digest {config_digest[:12]})")
    diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    files = [f"{diff.removeprefix('sha256:')}/layer.tar" for diff in diff_ids]
    archive = [{"Config": f"{hex_id}.json", "RepoTags": [name], "Layers": files}]
    with tempfile.TemporaryFile() as output:
        load = subprocess.Popen(
            resolved(["docker", "load"]), stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            with tarfile.open(fileobj=load.stdin, mode="w|") as tar:
                for member, data in (("manifest.json", json.dumps(archive).encode()), (f"{hex_id}.json", config)):
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                for index in range(len(held_layers), len(diff_ids)):  # gzipped by buildah; the engine unpacks either
                    tar.add(blob(written["layers"][index]["digest"]), arcname=files[index])
        except BrokenPipeError:
            pass  # the engine stopped reading: its exit status and words below say why
        finally:
            load.stdin.close()
        status = load.wait(timeout=3600)
        output.seek(0)
        said = output.read().decode(errors="replace").strip()
    if status != 0:
        raise HostError(f"`docker load` exited {status}: {said[-300:]}")
