"""Which track fits this host, and what a track needs from the host that isn't there.

Detection matches host facts against the rows of images/tracks.toml (device access, platform, kind);
no track is named here.
"""

from __future__ import annotations

import grp
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grpolab.common.tracks import Track, load_tracks

from .. import HostError


@dataclass(frozen=True)
class HostFacts:
    system: str  # "linux", "darwin"
    arch: str  # Docker arch: "amd64", "arm64"
    nvidia_gpu: str = ""  # first line of `nvidia-smi -L`, "" when none answers
    nvidia_gpus: int = 0  # lines of `nvidia-smi -L`
    kfd: bool = False  # /dev/kfd: the ROCm kernel driver
    dri: bool = False  # /dev/dri

    @classmethod
    def probe(cls) -> "HostFacts":
        arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
            platform.machine().lower(), platform.machine().lower()
        )
        gpus = []
        if shutil.which("nvidia-smi"):
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
            if out.returncode == 0:
                gpus = out.stdout.strip().splitlines()
        return cls(
            system=platform.system().lower(),
            arch=arch,
            nvidia_gpu=gpus[0] if gpus else "",
            nvidia_gpus=len(gpus),
            kfd=Path("/dev/kfd").exists(),
            dri=Path("/dev/dri").exists(),
        )

    @property
    def device_access(self) -> str:
        return "nvidia" if self.nvidia_gpu else "rocm" if self.kfd else "none"


def _platform(track: Track) -> tuple[str, str]:
    system, _, arch = track.platform.partition("/")
    return system, arch


def detect_track(facts: HostFacts | None = None, tracks: dict[str, Track] | None = None) -> tuple[str, str]:
    """(track name, the reason in words) for this host."""
    facts = facts or HostFacts.probe()
    tracks = tracks if tracks is not None else load_tracks()
    if facts.system == "darwin":
        wanted, why = ("venv", None, "darwin"), "macOS: a native venv (no containers for the GPU on macOS)"
    else:
        seen = {
            "nvidia": f"an NVIDIA GPU ({facts.nvidia_gpu})",
            "rocm": "/dev/kfd (the ROCm kernel driver)",
            "none": "no NVIDIA GPU (nvidia-smi) and no /dev/kfd",
        }[facts.device_access]
        wanted, why = ("container", facts.device_access, "linux"), f"{seen} on linux/{facts.arch}"
    for track in tracks.values():
        system, arch = _platform(track)
        if (
            (track.kind, system) == (wanted[0], wanted[2])
            and arch == facts.arch
            and (wanted[1] is None or track.device_access == wanted[1])
        ):
            return track.name, why
    raise HostError(f"no track in images/tracks.toml fits this host ({why}); pick one with --track")


def host_problems(track: Track, facts: HostFacts | None = None, engine_runtimes: set[str] | None = None) -> list[str]:
    """What the host lacks to run `track`'s containers on its accelerator, each as an actionable sentence."""
    facts = facts or HostFacts.probe()
    problems = []
    if track.device_access == "nvidia":
        if not facts.nvidia_gpu:
            problems.append(
                f"track {track.name} needs an NVIDIA GPU and driver (>= 580 for CUDA 13): `nvidia-smi -L` "
                "lists none on this host"
            )
        runtimes = engine_runtimes if engine_runtimes is not None else set()
        cdi = any(Path(d, "nvidia.yaml").exists() for d in ("/etc/cdi", "/var/run/cdi"))
        if "nvidia" not in runtimes and not cdi:
            problems.append(
                f"track {track.name} needs the NVIDIA Container Toolkit: the Docker engine has no `nvidia` "
                f"runtime (it has: {', '.join(sorted(runtimes)) or 'none'}) and there is no CDI spec. "
                "Install nvidia-container-toolkit, run `sudo nvidia-ctk runtime configure --runtime=docker` "
                "and restart Docker"
            )
    elif track.device_access == "rocm":
        if not facts.kfd:
            problems.append(
                f"track {track.name} needs the ROCm kernel driver: /dev/kfd is missing (amdgpu driver not "
                "loaded, or a kernel without it; ROCm >= 7.0.2 for gfx1151)"
            )
        if not facts.dri:
            problems.append(f"track {track.name} needs /dev/dri (the GPU's render nodes), which is missing")
        for group in ("video", "render"):
            if _gid(group) is None:
                problems.append(
                    f"track {track.name} needs the host's `{group}` group (owner of /dev/kfd or /dev/dri), "
                    "which doesn't exist here"
                )
    return problems


def _gid(group: str) -> int | None:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def device_gids() -> dict[str, str]:
    """Numeric gids of the host's video and render groups (the image has no such names)."""
    return {f"{g.upper()}_GID": str(_gid(g)) for g in ("video", "render") if _gid(g) is not None}


def host_user_ids() -> tuple[int, int]:
    return os.getuid(), os.getgid()
