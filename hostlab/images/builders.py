"""Which program builds the image, and the times it stamps into it: same commit, same image id.

An image id is the digest of the image's config, which holds every layer's diff id and the image's created times; a
layer's diff id is the digest of its tar, which holds every file's mtime. So two builds of one commit give one id only
when every time in them comes from the commit, not from the clock, and every file is made the same way.

The times come from git (`commit_time`): for the dependency stages the last commit that changed what they are made of
(the Dockerfile, the lock and its side locks: `deps_inputs`), for the lab stage the same plus the code
(`lab_inputs`). So a code change rebuilds the small lab stage only, and a cached dependency layer carries the time a
cold build would give it. The Dockerfile declares SOURCE_DATE_EPOCH in every stage, so each time is in the cache key.

Who sets the times (docs/locks-and-images.md, "Reproducible images"):
- buildah (Debian's and Ubuntu's archives: `apt-get install buildah`): `--timestamp` sets the created times and every
  file's mtime in the layers it commits. Debian 12's Docker engine (20.10, BuildKit 0.8) cannot: it knows no
  SOURCE_DATE_EPOCH and stamps each layer's history with the wall clock. buildah builds into its own store; the
  image is then handed to the engine, which keeps its id (`hostlab/images/handover.py`: the layers the engine lacks).
- buildx: the engine's own BuildKit where it can do the same (Docker >= 26 with the containerd image store):
  SOURCE_DATE_EPOCH and rewrite-timestamp, the image written to a file and loaded. Preferred where it works: nothing
  to install, no second copy of the image. Checked on Debian 13's Docker 26.1.5 by images/buildkit-repro-check.sh.
- docker: the engine's own builder otherwise. The image works the same; its id differs build
  to build, and `invoke build` says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grpolab.common.tracks import Track

from .. import HostError
from ..host.console import say, stream
from ..host.tools import resolved
from ..locks.sourcebuilds import SOURCE_BUILD_FILE_NAMES

BUILDAH_HINT = "`apt-get install -y buildah` (Debian 12+, Ubuntu 22.04+)"


def deps_inputs(track: Track) -> list[str]:
    """What the dependency stages are made of (paths in the repository): their time is the last commit of these."""
    return [
        "images/Dockerfile",
        "images/verify-locked.py",
        "images/apt-install-pinned.sh",
        "hostlab/locks/sourcebuilds.py",  # the compile's options (BUILD_CONFIG_SETTINGS) and which Debian libraries join
        *(f"images/{name}" for name in SOURCE_BUILD_FILE_NAMES),  # files those options name
        "lockfiles/uv.txt",
        f"lockfiles/{track.name}.txt",
        f"lockfiles/{track.name}.build.txt",
        f"lockfiles/{track.name}.debian.txt",
    ]


def lab_inputs(track: Track) -> list[str]:
    """What the lab stage is made of: the dependency inputs, the code, the track table and the kernels table."""
    return deps_inputs(track) + ["entrypoint", "images/tracks.toml", f"lockfiles/{track.name}.kernels.json"]


def commit_time(repo: Path, paths: list[str]) -> int:
    """Seconds since 1970 of the last commit that changed any of `paths` (the committed state: an uncommitted edit
    gets the time of the commit it sits on, and the image's revision label says -dirty). HostError outside git."""
    out = subprocess.run(
        resolved(["git", "-C", str(repo), "log", "-1", "--format=%ct", "--", *paths]), capture_output=True, text=True
    )
    if out.returncode != 0:
        raise HostError(
            f"cannot read the build's times from git in {repo} ({out.stderr.strip() or 'git failed'}): the image's "
            "times come from the commits that changed it. Build from a git clone of the project."
        )
    if not out.stdout.strip():  # none of the paths is committed yet: the time of the commit the tree sits on
        out = subprocess.run(resolved(["git", "-C", str(repo), "log", "-1", "--format=%ct"]), capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


@dataclass(frozen=True)
class Builder:
    """The program that builds images here; `reproducible`: whether it sets every time from git."""

    name: str  # "buildah" or "docker"
    version: str
    reproducible: bool

    def describe(self) -> str:
        return f"{self.name} {self.version}" + ("" if self.reproducible else " (not byte-reproducible)")


def engine_sets_times() -> tuple[bool, str]:
    """Can the engine's own builder set every time from git? BuildKit >= 0.13 (Docker >= 26) with buildx, writing the
    image to a file with rewrite-timestamp, which only the containerd image store allows: the classic store's exporter
    keeps the clock in the history ("Docker exporter is not supported for the docker driver"). (whether, why not)"""
    out = subprocess.run(resolved(["docker", "version", "--format", "{{.Server.Version}}"]), capture_output=True, text=True)
    version = out.stdout.strip()
    major = int(version.split(".")[0]) if version[:1].isdigit() else 0
    if major < 26:
        return False, f"Docker engine {version or '?'}: BuildKit before 0.13 cannot rewrite file times (Docker >= 26 can)"
    if subprocess.run(resolved(["docker", "buildx", "version"]), capture_output=True).returncode != 0:
        return False, "no docker buildx plugin"
    info = subprocess.run(resolved(["docker", "info", "--format", "{{json .DriverStatus}}"]), capture_output=True, text=True)
    if "io.containerd.snapshotter" not in info.stdout:
        return False, ("the engine keeps images in its classic store, whose exporter writes the clock into every image: "
                       "turn on the containerd image store (docs/locks-and-images.md)")  # fmt: skip
    return True, f"Docker engine {version} with buildx and the containerd image store"


def choose_builder(wanted: str | None = None) -> Builder:
    """`wanted` (--builder, or GRPOLAB_BUILDER), else the first of: the engine's own builder where it sets every time
    from git (buildx), buildah where installed, the engine's own builder without that promise (docker)."""
    wanted = wanted or os.environ.get("GRPOLAB_BUILDER") or None
    if wanted not in (None, "buildx", "buildah", "docker"):
        raise HostError(f"--builder {wanted}: choose buildx or buildah (same commit, same image id), or docker")
    if wanted in (None, "buildx"):
        able, why = engine_sets_times()
        if able:
            out = subprocess.run(resolved(["docker", "buildx", "version"]), capture_output=True, text=True)
            return Builder("buildx", (out.stdout.split() or ["?", "?"])[1], True)
        if wanted == "buildx":
            raise HostError(f"--builder buildx: {why}")
    if wanted in (None, "buildah"):
        path = shutil.which("buildah")
        if path:
            out = subprocess.run([path, "--version"], capture_output=True, text=True)
            return Builder("buildah", out.stdout.split()[2] if out.returncode == 0 else "?", True)
        if wanted == "buildah":
            raise HostError(f"--builder buildah: buildah is not installed: {BUILDAH_HINT}")
    out = subprocess.run(resolved(["docker", "version", "--format", "{{.Server.Version}}"]), capture_output=True, text=True)
    return Builder("docker", out.stdout.strip() or "?", False)


def buildx_build(
    dockerfile: Path, context: Path, target: str, epoch: int, args: dict[str, str], platform: str,
    ca: Path | None, tag: str,
) -> tuple[str, list[str]]:
    """One `docker buildx build` of `target` with every time set to `epoch` (SOURCE_DATE_EPOCH: created times;
    rewrite-timestamp: file mtimes), written to a file and loaded as `tag`: the image id and the log's last lines.
    No provenance or SBOM attestations: they hold the build's own times."""
    archive = context.parent / f"{target}.tar"
    cmd = ["docker", "buildx", "build", "--provenance=false", "--sbom=false", "--target", target, "--platform", platform,
           "--file", str(dockerfile), "--build-arg", f"SOURCE_DATE_EPOCH={epoch}",
           "--output", f"type=docker,name={tag},dest={archive},rewrite-timestamp=true"]  # fmt: skip
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    if ca:
        cmd += ["--secret", f"id=ca_bundle,src={ca}"]
    status, tail = stream(cmd + [str(context)])
    if status != 0:
        return "", tail
    loaded = subprocess.run(resolved(["docker", "load", "--input", str(archive)]), capture_output=True, text=True)
    archive.unlink(missing_ok=True)
    if loaded.returncode != 0:
        return "", tail + [f"ERROR: docker load of the built image failed: {loaded.stderr.strip()}"]
    return engine_image_id(tag), tail


def engine_layers(name: str) -> list[str]:
    """The image's layers' diff ids as the engine holds them, bottom first."""
    out = subprocess.run(resolved(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", name]),
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)


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
    image returned is that image without it (`without_history`). --force-rm: buildah removes a step's working container after a failed or interrupted step too (by default only after
    success); left behind, each kept its half-written layer, and a day's failed and interrupted builds held 18 GB here."""
    iidfile = context.parent / f"{target}.iid"
    cmd = ["buildah", "build", "--layers", "--force-rm", "--jobs", "2", "--network", "host", "--timestamp", str(epoch), "--target", target,
           "--platform", platform, "--file", str(dockerfile), "--iidfile", str(iidfile),
           "--build-arg", f"SOURCE_DATE_EPOCH={epoch}"]  # fmt: skip
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    if ca:
        cmd += ["--secret", f"id=ca_bundle,src={ca}"]
    status, tail = stream(cmd + [str(context)])
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
        run_buildah("commit", "--quiet", "--omit-history", "--timestamp", str(epoch), "--iidfile", str(iidfile), container)
        stripped = iidfile.read_text().strip()
        shutil.rmtree(iidfile.parent, ignore_errors=True)
    finally:
        run_buildah("rm", container, check=False)
    if tag:
        run_buildah("tag", stripped.removeprefix("sha256:"), tag)
    return stripped


def engine_image_id(name: str) -> str:
    out = subprocess.run(resolved(["docker", "image", "inspect", "--format", "{{.Id}}", name]), capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def buildah_layers(image_id: str) -> list[str]:
    """The image's layers' diff ids, bottom first."""
    info = json.loads(run_buildah("inspect", "--type", "image", image_id.removeprefix("sha256:")).stdout)
    return list(info["OCIv1"]["rootfs"]["diff_ids"])


@contextmanager
def fresh_store(folder: Path):
    """buildah with a store, cache and cache mounts of its own under `folder`, empty at first: builds from nothing
    that leave the everyday store (and its cache) as it was. Removed afterwards."""
    conf = folder / "storage.conf"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)  # buildah keeps RUN --mount=type=cache folders under TMPDIR
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{folder}/storage"\nrunroot = "{folder}/run"\n')
    saved = {k: os.environ.get(k) for k in ("CONTAINERS_STORAGE_CONF", "TMPDIR")}
    os.environ.update(CONTAINERS_STORAGE_CONF=str(conf), TMPDIR=str(folder / "tmp"))
    try:
        yield folder
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        subprocess.run(resolved(["buildah", "--storage-driver", "overlay", "--root", f"{folder}/storage", "--runroot", f"{folder}/run",
                        "rmi", "--all", "--force"]), capture_output=True)  # fmt: skip
        subprocess.run(resolved(["umount", "--recursive", "--lazy", f"{folder}/storage/overlay"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def buildah_forget(*image_ids: str) -> None:
    """Remove images from buildah's store (its cache of them too): for a build from nothing."""
    for image_id in image_ids:
        run_buildah("rmi", "--force", image_id.removeprefix("sha256:"), check=False)
    run_buildah("rmi", "--prune", check=False)
