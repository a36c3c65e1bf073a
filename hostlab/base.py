"""Stand-in base images: a Debian rootfs made with debootstrap and imported into Docker.

Where no container registry is reachable (our CI), `invoke base` makes a local image that plays the part of
the pinned base (python:3.x-slim-trixie): Debian trixie with python3 and python3-venv. Builds then take
`--base grpolab-base:trixie-amd64`. The arm64 one is made under QEMU user emulation.
"""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from grpolab.common.filehash import sha256_of_file

from . import HostError
from .console import run, say
from .tools import resolved, tool

SUITE = "trixie"
MIRROR = os.environ.get("GRPOLAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ["python3", "python3-venv", "ca-certificates"]


def standin_name(arch: str) -> str:
    """The stand-in base for a Docker arch (amd64, arm64)."""
    return f"grpolab-base:{SUITE}-{arch}"


def host_arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())


def image_exists(name: str) -> bool:
    return subprocess.run(resolved(["docker", "image", "inspect", name]), capture_output=True).returncode == 0


def build_standin(arch: str | None = None, force: bool = False) -> str:
    """Make (once) and import the stand-in base for `arch`; return its image name."""
    arch = arch or host_arch()
    name = standin_name(arch)
    if image_exists(name) and not force:
        say(f"stand-in base {name} already exists (use --force to remake it)")
        return name
    tool("debootstrap")  # before anything else: said in one line when it is missing
    foreign = arch != host_arch()
    if foreign and not Path(f"/proc/sys/fs/binfmt_misc/qemu-{_qemu_arch(arch)}").exists():
        raise HostError(
            f"making an {arch} base on this {host_arch()} host needs QEMU user emulation: "
            "`apt-get install -y qemu-user-static binfmt-support` (then the qemu-"
            f"{_qemu_arch(arch)} binfmt entry is enabled)"
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"grpolab-base-{arch}-") as tmp:
        root = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", f"--arch={arch}"]
        if foreign:
            cmd.append("--foreign")
        run(cmd + [SUITE, str(root), MIRROR])
        if foreign:
            run(["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"])
        # Package caches only make the image bigger.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        say(f"loading {root} into Docker as {name} (linux/{arch})")
        load_rootfs(root, name, arch, Path(tmp))
    say(f"stand-in base {name} ready in {time.monotonic() - started:.0f} s")
    return name


def load_rootfs(root: Path, name: str, arch: str, workdir: Path) -> None:
    """`docker load` a one-layer image of `root` whose config says linux/`arch`. (`docker import` would label
    an arm64 rootfs amd64 on Debian's engine, and BuildKit then refuses it for --platform linux/arm64.)"""
    layer = workdir / "layer.tar"
    subprocess.run(resolved(["tar", "-C", str(root), "--numeric-owner", "-cf", str(layer), "."]), check=True)
    layer_sha256 = sha256_of_file(layer)
    config = {
        "architecture": arch,
        "os": "linux",
        **({"variant": "v8"} if arch == "arm64" else {}),
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": {
            "Cmd": ["/bin/bash"],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Labels": {"io.grpolab.stand-in": f"{SUITE}-{arch}"},
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_sha256}"]},
        "history": [
            {"created_by": f"debootstrap --variant=minbase --include={','.join(PACKAGES)} {SUITE} (grpolab stand-in)"}
        ],
    }
    archive = workdir / "image.tar"
    with tarfile.open(archive, "w") as tar:
        for member, data in (
            ("config.json", json.dumps(config).encode()),
            (
                "manifest.json",
                json.dumps([{"Config": "config.json", "RepoTags": [name], "Layers": ["layer.tar"]}]).encode(),
            ),
        ):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.add(layer, arcname="layer.tar")
    layer.unlink()
    proc = subprocess.run(resolved(["docker", "load", "--input", str(archive)]), capture_output=True, text=True)
    if proc.returncode != 0:
        raise HostError(f"docker load of the stand-in base failed: {proc.stderr.strip()}")


def _qemu_arch(arch: str) -> str:
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
