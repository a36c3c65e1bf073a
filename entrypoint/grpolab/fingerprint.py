"""What this environment is, as one flat dict, and what changed between two of them.

The smoke test stores `environment_fingerprint()` with each run; the doctor compares the last passing one
with now (`fingerprint_drift`), so "it worked last week" comes with a list of what is different.

Nothing here needs a GPU, CUDA or nvidia-smi. torch's build is read from torch/version.py without importing
torch; torch is imported (slow: seconds) only when its build can reach an accelerator.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

# The packages whose versions the images pin and the lab depends on, by distribution name.
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
    ("lock_sha256", "lock sha256"),
)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_quiet(cmd: list[str], timeout: float = 10) -> str | None:
    """stdout of a command, or None when it is missing, fails or hangs."""
    if not shutil.which(cmd[0]):
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def torch_version_info() -> dict | None:
    """torch/version.py's literals (__version__, cuda, hip), read without importing torch; None without torch."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        return {"__version__": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    info: dict = {"__version__": package_version("torch"), "cuda": None, "hip": None}
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return info
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        if target in info:
            try:
                info[target] = ast.literal_eval(value)
            except ValueError:
                pass
    return info


def driver_version() -> tuple[str | None, str | None]:
    """(version, where it came from): nvidia-smi, the amdgpu kernel module, or rocm-smi; (None, None) without."""
    out = run_quiet(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if out:
        return out.splitlines()[0].strip(), "nvidia-smi"
    amdgpu = Path("/sys/module/amdgpu/version")
    if amdgpu.is_file():
        text = amdgpu.read_text().strip()
        if text:
            return text, "/sys/module/amdgpu/version"
    out = run_quiet(["rocm-smi", "--showdriverversion"])
    if out:
        for line in out.splitlines():
            if "driver version" in line.lower():
                return line.split(":")[-1].strip(), "rocm-smi"
    return None, None


def torch_build_of(info: dict | None) -> str | None:
    if info is None:
        return None
    if info.get("hip"):
        return "hip"
    if info.get("cuda"):
        return "cuda"
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "mps"  # macOS arm64 wheels are built with MPS
    return "cpu"


def _device(build: str | None) -> dict:
    """Device type, name and arch, importing torch only when its build can reach an accelerator."""
    cpu = {"device_type": "cpu", "device_name": platform.processor() or platform.machine(), "device_arch": platform.machine(), "torch_arch_list": [], "device_count": 0}
    if build not in ("cuda", "hip", "mps"):
        return cpu
    try:
        import torch
    except Exception as exc:  # a broken install is a finding, not a crash
        return {**cpu, "torch_import_error": f"{type(exc).__name__}: {exc}"}
    arch_list = list(torch.cuda.get_arch_list()) if hasattr(torch.cuda, "get_arch_list") else []
    if build in ("cuda", "hip") and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        if build == "hip":
            arch = str(getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")).split(":")[0] or None
        else:
            major, minor = torch.cuda.get_device_capability(0)
            arch = f"sm_{major}{minor}"
        return {"device_type": "cuda", "device_name": name, "device_arch": arch, "torch_arch_list": arch_list, "device_count": torch.cuda.device_count()}
    if build == "mps" and torch.backends.mps.is_available():
        return {"device_type": "mps", "device_name": platform.processor() or "Apple silicon", "device_arch": "mps", "torch_arch_list": arch_list, "device_count": 1}
    return {**cpu, "torch_arch_list": arch_list}


def environment_fingerprint() -> dict:
    """One flat dict describing this environment; safe (and reasonably fast) on a machine without a GPU."""
    info = torch_version_info()
    build = torch_build_of(info)
    driver, driver_source = driver_version()
    fp = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "torch_version": info["__version__"] if info else None,
        "torch_build": build,
        "torch_cuda": info.get("cuda") if info else None,
        "torch_hip": info.get("hip") if info else None,
        "driver": driver,
        "driver_source": driver_source,
        **_device(build),
        "packages": {name: package_version(name) for name in PACKAGES},
        "lock_sha256": os.environ.get("GRPOLAB_LOCK_SHA256") or None,
        "track": os.environ.get("GRPOLAB_TRACK") or None,
    }
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
        return [f"no environment fingerprint {'recorded by the earlier run' if not old else 'of this environment'} to compare with"]
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
