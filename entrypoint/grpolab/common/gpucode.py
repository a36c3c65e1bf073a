"""Which GPUs a library's code runs on: the kernels table `invoke kernels` writes beside a lock
(lockfiles/<track>.kernels.json, copied into the image), its verdict per GPU, and the driver a CUDA major needs.

Shared by the host (which writes the table from the locked wheels) and the image (the doctor and the smoke test's
device layer read it for the GPU they find). Standard library only.

How NVIDIA code runs on a GPU of compute capability X.Y (CUDA's compatibility rules):
- SASS (machine code) for sm_XZ runs natively on X.Y when Z <= Y: same major, same or older minor;
- arch-specific SASS (sm_90a, sm_120a) runs only on exactly that arch; family SASS (sm_100f, sm_120f) on every
  minor of that major from its own up (sm_120f on 12.0 and 12.1);
- PTX for compute_XY is compiled by the driver (JIT) for any newer arch, at first use: slow the first time;
- nothing else runs: "none" (the run fails when that library launches a kernel).
AMD's code objects run only on their exact gfx target (no JIT): native or none.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path

from .rollout_paths import registered_path

FORMAT = "grpolab-kernels v1"
NATIVE, JIT, NONE = "native", "jit", "none"

# The cards people own, by compute capability (and AMD target), in words.
CARDS = {
    "sm_61": "GTX 10xx, Pascal (compute 6.1)",
    "sm_70": "V100, Volta (compute 7.0)",
    "sm_75": "RTX 20xx, GTX 16xx, T4, Turing (compute 7.5)",
    "sm_80": "A100, A30, Ampere datacenter (compute 8.0)",
    "sm_86": "RTX 30xx, A10, A40, RTX A-series, Ampere (compute 8.6)",
    "sm_87": "Jetson Orin (compute 8.7)",
    "sm_89": "RTX 40xx, L4, L40, Ada (compute 8.9)",
    "sm_90": "H100, H200, GH200, Hopper (compute 9.0)",
    "sm_100": "B200, GB200, Blackwell datacenter (compute 10.0)",
    "sm_103": "B300, GB300 (compute 10.3)",
    "sm_110": "Jetson Thor (compute 11.0)",
    "sm_120": "RTX 50xx, RTX PRO Blackwell (compute 12.0)",
    "sm_121": "GB10, DGX Spark (compute 12.1)",
    "gfx1151": "Ryzen AI Max 300, Radeon 8060S, Strix Halo (gfx1151)",
}

# The oldest Linux driver each CUDA major's wheels run on (CUDA's minor-version compatibility, NVIDIA's CUDA
# Toolkit release notes, table 3): every CUDA 13.x build runs on driver 580 or newer, CUDA 12.x on 525.60.13.
DRIVER_MINIMUM = {13: "580", 12: "525.60.13", 11: "450.80.02"}

# PTX is compiled by the driver only when the driver knows the PTX's ISA version (its `.version` line): a newer ISA
# fails with cudaErrorUnsupportedPtxVersion, and CUDA's minor-version compatibility does not cover PTX (NVIDIA's CUDA
# Compatibility guide, "Minor Version Compatibility"). Which CUDA release brought each ISA: the PTX ISA document's
# "PTX Release History" (the table cuda-python's get_minimal_required_cuda_ver_from_ptx_ver encodes); 8.6 is listed
# as CUDA 12.7, a toolkit never released, so 12.8's driver is the first. The oldest Linux driver of each CUDA
# release: the CUDA Toolkit release notes, table 3 ("CUDA Toolkit and Corresponding Driver Versions", GA releases).
PTX_ISA_CUDA = {
    "7.8": "11.8", "8.0": "12.0", "8.1": "12.1", "8.2": "12.2", "8.3": "12.3", "8.4": "12.4", "8.5": "12.5",
    "8.6": "12.8", "8.7": "12.8", "8.8": "12.9", "9.0": "13.0", "9.1": "13.1",
}
CUDA_DRIVER = {
    "11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06",
    "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03",
    "13.0": "580.65.06", "13.1": "590.44.01",
}


def driver_key(version: str) -> tuple[int, ...]:
    """'580.65.06' -> (580, 65, 6): driver versions compare part by part."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def driver_for_ptx(isa: str) -> str | None:
    """The oldest Linux driver whose JIT compiles PTX of ISA `isa` ("9.0" -> "580.65.06"); None for an ISA the table
    above does not know (newer than it: treat as unplaceable, never as fine)."""
    cuda = PTX_ISA_CUDA.get(isa)
    return CUDA_DRIVER.get(cuda) if cuda else None


def jit_isa(gpu: str, ptx_isa: dict[str, str]) -> str | None:
    """The newest ISA among a library's PTX that the driver would compile for `gpu` (its PTX archs up to the GPU's)."""
    target = parse_arch(gpu)
    usable = [isa for arch, isa in ptx_isa.items()
              if target and (code := parse_arch(arch)) and _runs_on(code, target, jit=True)]
    return max(usable, key=driver_key) if usable else None


# The libraries a rollout path launches GPU kernels from are its description's GPU_LIBRARIES (rollout_paths/): the
# lock refuses one with no code for the track's GPUs, the doctor names one that JITs or has none.
# Libraries a path launches kernels from on some GPUs only, by compute capability. vLLM's FlashAttention backend
# (vllm/attention/utils/fa_utils.py, get_flash_attn_version): FlashAttention 3 on Hopper (9.x), FlashAttention 2 on
# the other GPUs from 8.0 up; below 8.0 vLLM chooses another attention backend and loads neither.
ONLY_ON = {
    "vllm/vllm_flash_attn/_vllm_fa2_C*.so": lambda major, minor: major >= 8 and major != 9,
    "vllm/vllm_flash_attn/_vllm_fa3_C*.so": lambda major, minor: major == 9,
}

_ARCH = re.compile(r"^(?:sm|compute)_(\d+?)(\d)([af]?)$")


def parse_arch(arch: str) -> tuple[int, int, str] | None:
    """'sm_121' -> (12, 1, ''); 'sm_90a' -> (9, 0, 'a'); 'sm_100f' -> (10, 0, 'f'); None for anything else."""
    m = _ARCH.match(arch)
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def arch_of_capability(capability: tuple[int, int] | str) -> str:
    """(12, 1) or '12.1' -> 'sm_121'."""
    major, minor = (int(p) for p in capability.split(".")) if isinstance(capability, str) else capability
    return f"sm_{major}{minor}"


def cards(arch: str) -> str:
    return CARDS.get(arch, arch)


def _runs_on(code: tuple[int, int, str], gpu: tuple[int, int, str], jit: bool) -> bool:
    (cmaj, cmin, kind), (gmaj, gmin, _) = code, gpu
    if kind == "a":
        return (cmaj, cmin) == (gmaj, gmin)
    if kind == "f" or not jit:
        return cmaj == gmaj and cmin <= gmin
    return (cmaj, cmin) <= (gmaj, gmin)  # portable PTX: the driver compiles it for any newer arch


def verdict(gpu: str, sass: list[str], ptx: list[str], gfx: list[str] | None = None) -> str:
    """native, jit or none for one GPU ('sm_121', 'gfx1151') and one library's code."""
    if gpu.startswith("gfx"):
        return NATIVE if gpu in (gfx or []) else NONE
    target = parse_arch(gpu)
    if target is None:
        return NONE
    if any((c := parse_arch(a)) and _runs_on(c, target, jit=False) for a in sass):
        return NATIVE
    if any((c := parse_arch(a)) and _runs_on(c, target, jit=True) for a in ptx):
        return JIT
    return NONE


def needed_by(path: str, rollout: str, gpu: str | None = None) -> bool:
    """Does the rollout path launch kernels from this library (its path inside its wheel): on `gpu`, or (None) on
    some GPU?"""
    described = registered_path(rollout)
    if not any(fnmatch.fnmatch(path, pattern) for pattern in (described.GPU_LIBRARIES if described else ())):
        return False
    only = next((test for pattern, test in ONLY_ON.items() if fnmatch.fnmatch(path, pattern)), None)
    arch = parse_arch(gpu) if gpu else None
    return only is None or gpu is None or (arch is not None and only(arch[0], arch[1]))


def table_path(track: str, lock_dir: Path) -> Path:
    return lock_dir / f"{track}.kernels.json"


def load_table(path: Path) -> dict | None:
    """The kernels table at `path`, or None when there is none (a track without a GPU) or it is not one."""
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return table if isinstance(table, dict) and table.get("format") == FORMAT else None


def findings(table: dict, gpu: str, rollout: str) -> list[dict]:
    """For one GPU: every library of the table that will JIT or has no code on it, most serious first, each
    {wheel, library, verdict, needed (by this rollout path)}."""
    found = []
    for lib in table.get("libraries", []):
        v = verdict(gpu, lib.get("sass", []), lib.get("ptx", []), lib.get("gfx"))
        if v != NATIVE:
            found.append(
                {
                    "wheel": lib["wheel"],
                    "library": lib["path"],
                    "verdict": v,
                    "needed": needed_by(lib["path"], rollout, gpu),
                }
            )
    return sorted(found, key=lambda f: (not f["needed"], f["verdict"] != NONE, f["library"]))


def describe(finding: dict, gpu: str) -> str:
    """One finding in words, for the doctor and the smoke test."""
    where = f"{finding['library']} ({finding['wheel']})"
    if finding["verdict"] == JIT:
        return (
            f"{where} has no machine code for {gpu}: the driver compiles its PTX at first use (expect a slow first run)"
        )
    return f"{where} has no code for {gpu}: the run fails when it launches one of its kernels"


def driver_minimum(table: dict) -> str | None:
    """The oldest driver the table's CUDA major runs on, or None (no CUDA, or a major we do not know)."""
    major = table.get("cuda_major")
    return DRIVER_MINIMUM.get(major) if isinstance(major, int) else None


def gpu_summary(table: dict, gpu: str, rollout: str) -> tuple[str, str, list[str]]:
    """(status ok/warn/fail, one-line summary, one sentence per finding) for the GPU found at run time."""
    found = findings(table, gpu, rollout)
    needed_none = [f for f in found if f["needed"] and f["verdict"] == NONE]
    needed_jit = [f for f in found if f["needed"] and f["verdict"] == JIT]
    others = [f for f in found if not f["needed"]]
    lines = [describe(f, gpu) for f in needed_none + needed_jit]
    rest = f"; {len(others)} other libraries (not on the {rollout} path) lack machine code for it" if others else ""
    if needed_none:
        return (
            "fail",
            f"{len(needed_none)} library(ies) the {rollout} path needs have no code for {cards(gpu)}{rest}",
            lines,
        )
    if needed_jit:
        return (
            "warn",
            f"{len(needed_jit)} library(ies) the {rollout} path needs only JIT-compile on {cards(gpu)} (slow first "
            f"run){rest}",
            lines,
        )
    return "ok", f"every library the {rollout} path needs has machine code for {cards(gpu)}{rest}", lines


def image_table_path(track: str) -> Path:
    """Where the running environment keeps its track's table: GRPOLAB_KERNELS_FILE, else beside the lock it was
    installed from (GRPOLAB_LOCK_FILE's folder; /opt/grpolab/lockfiles in the image, the repository's for a venv)."""
    if os.environ.get("GRPOLAB_KERNELS_FILE"):
        return Path(os.environ["GRPOLAB_KERNELS_FILE"])
    if os.environ.get("GRPOLAB_LOCK_FILE"):
        return table_path(track, Path(os.environ["GRPOLAB_LOCK_FILE"]).parent)
    return table_path(track, Path(__file__).resolve().parents[3] / "lockfiles")


def driver_too_old(table: dict, driver: str | None) -> str | None:
    """The sentence saying the NVIDIA driver is older than the table's CUDA major needs, or None."""
    need = driver_minimum(table)
    if not (need and driver):
        return None
    if driver_key(driver) >= driver_key(need):
        return None
    return (f"NVIDIA driver {driver} is older than {need}, the oldest that runs this image's CUDA "
            f"{table['cuda_major']} libraries")


def device_kernels(
    track: str, gpu: str | None, rollout: str, table: dict | None = None
) -> tuple[str, str, list[str]] | None:
    """gpu_summary for the GPU found (its arch, e.g. sm_121 or gfx1151:xnack-) from the environment's table; None
    when there is no GPU or no table (a track without one)."""
    table = table if table is not None else load_table(image_table_path(track))
    if not gpu or table is None:
        return None
    return gpu_summary(table, gpu.split(":")[0], rollout)
