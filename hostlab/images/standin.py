"""Stand-in base images: a Debian rootfs made by mmdebstrap, every package pinned, byte for byte the same each time.

Where no container registry is reachable (our CI), `invoke base` makes a local image that plays the part of the
pinned base (python:3.x-slim-trixie): Debian trixie with python3, python3-venv and python3's headers. Builds then take
`--base grpolab-base:trixie-amd64`. The arm64 one is made under QEMU user emulation.

Same commit, same image id:
- what it is made of: lockfiles/base-trixie-<arch>.debian.txt pins every package at its version. `invoke lock` makes it
  by making the base once from PACKAGES (mmdebstrap's minbase variant, as debootstrap's) and reading the made rootfs's
  dpkg status; `invoke base` installs exactly those (mmdebstrap's custom variant: the pins and nothing else), and
  refuses in one line, naming the package, when the archive no longer has one;
- its time: SOURCE_DATE_EPOCH, the time of the last git commit that changed that pin file or this module (never the
  clock), for mmdebstrap's tar (reproducible given the epoch and the same packages) and the image's created time;
- the two files mmdebstrap would copy from the host, /etc/resolv.conf and /etc/hostname, get fixed content (the
  container engine mounts its own over both at run time).
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import shlex
import subprocess
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from grpolab.common.filehash import sha256_of_file

from .. import REPO, HostError
from ..host.console import say, stream
from ..host.tools import resolved, tool
from ..locks import debian
from ..locks.debian import (
    DEBIAN_ARCHIVE,
    SUITE,
    base_lock_path,
    check_base_lock,
    read_debian_lock,
    refusal,
    release_text,
    snapshot_list,
    snapshot_urls,
    write_pins,
)
from ..locks.lockfile import LOCK_DIR, body_sha256
from .builders import commit_time

# python3's headers too (libpython3-dev: /usr/include/python3.13/Python.h, where sysconfig looks): the python:3.x-slim
# bases keep theirs (/usr/local/include/python3.x), and what the libraries compile at run time includes Python.h
# (Triton's driver.c, inductor's C++). It brings libc6-dev, zlib1g-dev and libexpat1-dev with it, which python:slim has
# not: an image that needs libc's headers names libc6-dev itself (hostlab/locks/sourcebuilds.py, RUNTIME_LIBRARIES).
PACKAGES = ["python3", "python3-venv", "libpython3-dev", "ca-certificates"]
# The stand-ins whose pins are committed and that plain `invoke lock` resolves again: CI's. Another arch's pins are made
# with `invoke lock.base --arch ARCH` (arm64's under QEMU, as its stand-in is) and kept up from then on.
PINNED_ARCHES = ("amd64",)
RESOLVING_VARIANT = (
    "minbase"  # what `invoke lock` makes to read the package set from (debootstrap's minbase, plus PACKAGES)
)
FIXED_FILE_HOOKS = ('printf "" > "$1/etc/resolv.conf"', 'echo localhost > "$1/etc/hostname"')
# The base's apt sources name Debian's archive, whichever mirror or snapshot archive mmdebstrap took the pins from.
SOURCES_HOOK = f'echo "deb {DEBIAN_ARCHIVE} {SUITE} main" > "$1/etc/apt/sources.list"'


class PinLost(HostError):
    """A pinned version the archives mmdebstrap was given lack."""

    def __init__(self, package: str, version: str, redo: str, urls: list[str] = ()):
        super().__init__(refusal(package, version, redo, snapshot_urls=urls))
        self.package, self.version = package, version
LOST_VERSION = re.compile(r"E: Version '([^']+)' for '([^']+)' was not found")  # apt's words, inside mmdebstrap
GONE_PACKAGE = re.compile(r"E: Unable to locate package (\S+)")


def standin_name(arch: str) -> str:
    """The stand-in base for a Docker arch (amd64, arm64)."""
    return f"grpolab-base:{SUITE}-{arch}"


def host_arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())


def image_exists(name: str) -> bool:
    return subprocess.run(resolved(["docker", "image", "inspect", name]), capture_output=True).returncode == 0


def image_id(name: str) -> str:
    out = subprocess.run(
        resolved(["docker", "image", "inspect", "--format", "{{.Id}}", name]), capture_output=True, text=True
    )
    return out.stdout.strip()


def _qemu_arch(arch: str) -> str:
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


def check_can_make(arch: str) -> None:
    """mmdebstrap is here, and QEMU user emulation when `arch` is not this host's."""
    tool("mmdebstrap")  # before anything else: said in one line when it is missing
    if arch != host_arch() and not Path(f"/proc/sys/fs/binfmt_misc/qemu-{_qemu_arch(arch)}").exists():
        raise HostError(
            f"making an {arch} base on this {host_arch()} host needs QEMU user emulation: "
            "`apt-get install -y qemu-user-static binfmt-support` (then the qemu-"
            f"{_qemu_arch(arch)} binfmt entry is enabled)"
        )


def mmdebstrap_env(epoch: int | None) -> dict[str, str]:
    """The environment mmdebstrap runs in: the caller's, less Python's own variables, plus its fixed TMPDIR and the
    base's time. The packages' maintainer scripts inherit it, and python3's byte-compiles debpython: with
    PYTHONDONTWRITEBYTECODE=1 in the caller's shell, five of its .pyc files came out hash-checked rather than
    timestamped, and the base had another id (191a3179 against 696f3cfd, same pins, same commit)."""
    kept = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    return {**kept, "TMPDIR": "/tmp", **({"SOURCE_DATE_EPOCH": str(epoch)} if epoch is not None else {})}


def mmdebstrap(
    arch: str,
    variant: str,
    include: list[str],
    target: Path,
    epoch: int | None,
    redo: str,
    hooks: tuple[str, ...] = (),
    snapshot: dict | None = None,
) -> None:
    """Make a rootfs tar with mmdebstrap from the main archive (and the snapshot archive at the time of the lock whose
    header is `snapshot`); a pinned version they lack is one line naming it (PinLost)."""
    mirrors = [debian.MIRROR]
    if snapshot:
        mirrors += snapshot_list(snapshot, debian.SNAPSHOT, debian.SNAPSHOT_OPTIONS).splitlines()
    cmd = ["mmdebstrap", f"--variant={variant}", f"--architectures={arch}", f"--include={','.join(include)}"]
    cmd += [f"--customize-hook={hook}" for hook in FIXED_FILE_HOOKS + hooks] + [SUITE, str(target), *mirrors]
    # TMPDIR=/tmp: mmdebstrap makes its working folders there, and apt, dropping to its _apt user to download, must
    # reach them. Under a TMPDIR inside a folder only root may enter (a buildah store of its own, as the benches make
    # one) apt downloaded as root instead, two of its folders came out owned by root, and the base had another id.
    env = mmdebstrap_env(epoch)
    # The pins are a hundred words: echoed as their count, so that the command stays readable.
    shown = [
        f"--include=<{len(include)} pins>" if part.startswith("--include=") and len(include) > 10 else part
        for part in cmd
    ]
    status, tail = stream(
        cmd, env=env, shown=(f"SOURCE_DATE_EPOCH={epoch} " if epoch is not None else "") + shlex.join(shown)
    )
    if status != 0:
        text = "\n".join(tail)
        lost, gone = LOST_VERSION.search(text), GONE_PACKAGE.search(text)
        urls = snapshot_urls(snapshot, debian.SNAPSHOT) if snapshot else []
        if lost:
            raise PinLost(lost[2], lost[1], redo, urls)
        if gone and any(pin.startswith(gone[1] + "=") for pin in include):
            raise PinLost(gone[1], next(p for p in include if p.startswith(gone[1] + "=")).split("=", 1)[1], redo, urls)
        raise HostError(f"mmdebstrap could not make the {arch} stand-in base:\n" + "\n".join(tail[-15:]))


def installed_packages(rootfs_tar: Path) -> dict[str, str]:
    """{package: version} of every package installed in a rootfs tar, read from its dpkg status (nothing run in it)."""
    with tarfile.open(rootfs_tar) as tar:
        status = tar.extractfile("./var/lib/dpkg/status").read().decode()
    found = {}
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Status", "").endswith(" installed"):
            found[fields["Package"]] = fields["Version"]
    return found


def base_epoch(arch: str, lock_dir: Path = LOCK_DIR) -> int:
    """The time of the last commit that changed the stand-in's pins or this module: its SOURCE_DATE_EPOCH."""
    paths = [
        str(p.relative_to(REPO))
        for p in (base_lock_path(arch, lock_dir), Path(__file__))
        if p.resolve().is_relative_to(REPO)
    ]
    return commit_time(REPO, paths)


def make_base_lock(arch: str | None = None, lock_dir: Path = LOCK_DIR) -> Path:
    """lockfiles/base-trixie-<arch>.debian.txt: make the base once from PACKAGES and read what it holds."""
    arch = arch or host_arch()
    check_can_make(arch)
    with tempfile.TemporaryDirectory(prefix=f"grpolab-base-lock-{arch}-") as tmp:
        rootfs, release = Path(tmp) / "rootfs.tar", Path(tmp) / "release"
        hook = ("sed -n 's/^\\(Origin\\|Version\\|Codename\\|Date\\): /\\1 /p' \"$1\"/var/lib/apt/lists/*_InRelease > "
                f"{release}")
        mmdebstrap(arch, RESOLVING_VARIANT, PACKAGES, rootfs, None, f"run `invoke lock.base --arch {arch}`", (hook,))
        pins = [f"{name}={version}" for name, version in sorted(installed_packages(rootfs).items())]
        facts = dict(line.split(" ", 1) for line in release.read_text().splitlines() if " " in line)
    version = subprocess.run(resolved(["mmdebstrap", "--version"]), capture_output=True, text=True).stdout.strip()
    header = {
        "suite": SUITE,
        "arch": arch,
        "asked": {"base": PACKAGES},
        "archive": release_text(facts),
        "how": f"{version} --variant={RESOLVING_VARIANT} --include={','.join(PACKAGES)} {SUITE}, then the made "
               "rootfs's dpkg status",
        "resolved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    title = (
        f"# grpolab-debian-lock v1: every package of the stand-in base {standin_name(arch)}, by version, made by "
        "`invoke lock "
        f"--base {arch}`. Never edit it: re-run that command."
    )
    path = base_lock_path(arch, lock_dir)
    write_pins(path, title, header, {"base": pins})
    return path


def build_standin(
    arch: str | None = None, force: bool = False, name: str | None = None, lock_dir: Path = LOCK_DIR
) -> str:
    """Make (once) and load the stand-in base for `arch` from its pins; return its image name."""
    arch = arch or host_arch()
    name = name or standin_name(arch)
    if image_exists(name) and not force:
        say(f"stand-in base {name} already exists (use --force to remake it)")
        return name
    check_can_make(arch)
    problems = check_base_lock(arch, PACKAGES, lock_dir)
    if problems:
        raise HostError("\n".join(problems))
    path = base_lock_path(arch, lock_dir)
    lock = read_debian_lock(path)
    pins = lock.groups["base"]
    epoch = base_epoch(arch, lock_dir)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"grpolab-base-{arch}-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        redo = f"run `invoke lock.base --arch {arch}`"
        try:
            mmdebstrap(arch, "custom", pins, rootfs, epoch, redo, (SOURCES_HOOK,))
        except PinLost as lost:
            # The same .deb files from Debian's snapshot archive at the time the pins were resolved: the same base.
            say(f"Debian package {lost.package} {lost.version} is no longer in {SUITE}'s archive: asking the snapshot "
                "archive at the pins' time too")
            try:
                mmdebstrap(arch, "custom", pins, rootfs, epoch, redo, (SOURCES_HOOK,), lock.header)
            except PinLost:
                raise
            except HostError as err:  # not reached (our machines): the main archive's refusal stands
                say("the snapshot archive did not answer mmdebstrap: " + "; ".join(str(err).splitlines()[-3:]))
                raise lost from None
        made, want = installed_packages(rootfs), lock.versions("base")
        if made != want:
            apart = sorted(
                f"{p} {made.get(p, 'absent')} (pinned: {want.get(p, 'not pinned')})"
                for p in set(made) | set(want)
                if made.get(p) != want.get(p)
            )
            raise HostError(
                f"the stand-in base holds other packages than lockfiles/{path.name} pins: {'; '.join(apart[:5])}: run "
                f"`invoke lock.base --arch {arch}`"
            )
        created_by = (f"mmdebstrap --variant=custom --include=<the {len(pins)} pins of lockfiles/{path.name}, body "
                      f"sha256 {body_sha256(lock.body)[:16]}> {SUITE} {DEBIAN_ARCHIVE}")
        say(
            f"loading {rootfs.name} into Docker as {name} (linux/{arch}), created "
            f"{datetime.fromtimestamp(epoch, timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
        )
        load_rootfs(rootfs, name, arch, Path(tmp), epoch, created_by)
    say(f"stand-in base {name} ready in {time.monotonic() - started:.0f} s: image id {image_id(name)}")
    return name


def ensure_standin(lock_dir: Path = LOCK_DIR) -> str:
    """This host's stand-in base, made (with its pins made first when missing) when it is not here yet: the
    container `invoke lock` asks apt in."""
    name = standin_name(host_arch())
    if not image_exists(name):
        if not base_lock_path(host_arch(), lock_dir).exists():
            make_base_lock(host_arch(), lock_dir)
        build_standin(host_arch(), lock_dir=lock_dir)
    return name


def load_rootfs(
    layer: Path, name: str, arch: str, workdir: Path, epoch: int = 0, created_by: str = "grpolab stand-in"
) -> None:
    """`docker load` a one-layer image of the rootfs tar `layer` whose config says linux/`arch` and was created at
    `epoch`: its id (the config's digest) is then the same whenever the tar is. (`docker import` would label an arm64
    rootfs amd64 on Debian's engine, and BuildKit then refuses it for --platform linux/arm64; it also stamps the
    clock.)"""
    created = datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "architecture": arch,
        "os": "linux",
        **({"variant": "v8"} if arch == "arm64" else {}),
        "created": created,
        "config": {
            "Cmd": ["/bin/bash"],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Labels": {"io.grpolab.stand-in": f"{SUITE}-{arch}"},
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{sha256_of_file(layer)}"]},
        "history": [{"created": created, "created_by": created_by}],
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
    proc = subprocess.run(resolved(["docker", "load", "--input", str(archive)]), capture_output=True, text=True)
    archive.unlink()
    if proc.returncode != 0:
        raise HostError(f"docker load of the stand-in base failed: {proc.stderr.strip()}")
