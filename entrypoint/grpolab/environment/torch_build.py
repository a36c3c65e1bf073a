"""Which PyTorch is installed and what it can run on: one answer, asked by the smoke test's device layer, the
doctor and the run log's fingerprint.

`torch_build()` says what the wheel was built for (cuda, hip, mps or cpu; its CUDA or HIP version; the GPU
archs it carries kernels for). `torch_devices()` says what it sees (device type, count, names, arch, memory).
`diagnose_device()` judges the two against the machine (`machine.py`) and the track, naming the classic
failures: the wrong wheel (CUDA or CPU) on an AMD machine, a torch without kernels for the device,
`device_count() == 0` although `/dev/kfd` is there, a driver older than the CUDA the wheel was built for.

The build is read from torch/version.py; torch itself is imported (seconds, tens of them on a busy machine)
only when its build can reach a device: MPS, or CUDA/HIP with the vendor's device nodes present.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import platform
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

OK, WARN, FAIL = "ok", "warn", "fail"
ACCELERATOR_BUILDS = ("cuda", "hip", "mps")
GB = 1e9


@dataclass
class TorchBuild:
    """What the installed torch wheel was built for. `kind` is None when torch is not installed."""

    version: str | None = None
    kind: str | None = None  # cuda, hip, mps, cpu
    cuda: str | None = None  # torch.version.cuda
    hip: str | None = None  # torch.version.hip
    arch_list: list[str] = field(default_factory=list)  # torch.cuda.get_arch_list(): sm_90, compute_90, gfx1151
    import_error: str | None = None

    @property
    def toolkit(self) -> str:
        return f"CUDA {self.cuda}" if self.cuda else f"HIP {self.hip}" if self.hip else ""

    def describe(self) -> str:
        """`torch 2.13.0+cu130 (cuda 13.0 build)`: the words every layer prints."""
        toolkit = self.cuda or self.hip
        return f"torch {self.version} ({self.kind}{' ' + toolkit if toolkit else ''} build)"


@dataclass
class Devices:
    """What torch sees: the device type it would train on, and each device's name, arch and memory."""

    type: str = "cpu"  # cuda (NVIDIA, and AMD under a HIP build), mps or cpu
    count: int = 0
    names: list[str] = field(default_factory=list)
    arch: str | None = None  # device 0: sm_90, gfx1151
    total_memory_gb: list[float] = field(default_factory=list)
    free_memory_gb: float | None = None  # device 0, torch.cuda.mem_get_info (on unified memory: see the doctor)


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_literals() -> dict | None:
    """torch/version.py's __version__, cuda and hip, read without importing torch; None without torch."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        return {
            "__version__": torch.__version__,
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
        }
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    info: dict = {"__version__": installed_version("torch"), "cuda": None, "hip": None}
    try:
        tree = ast.parse((Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text())
    except (OSError, SyntaxError):
        return info
    for node in tree.body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else getattr(node, "target", None)
        )
        if isinstance(target, ast.Name) and target.id in info and getattr(node, "value", None) is not None:
            try:
                info[target.id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return info


def build_kind(cuda: str | None, hip: str | None, system: str = sys.platform) -> str:
    """hip or cuda from the wheel's toolkit; on macOS every wheel is built with MPS; else cpu."""
    if hip:
        return "hip"
    if cuda:
        return "cuda"
    return "mps" if system == "darwin" else "cpu"


# Device nodes without which a CUDA or HIP build sees no GPU (/dev/dxg: CUDA under WSL2).
GPU_NODES = {"cuda": ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"), "hip": ("/dev/kfd",)}


def gpu_nodes_present(kind: str | None, dev: Path = Path("/")) -> bool:
    return any((dev / node.lstrip("/")).exists() for node in GPU_NODES.get(kind or "", ()))


def torch_build() -> TorchBuild:
    """The installed torch's build. torch is imported (to read its arch list) only for a CUDA or HIP build on
    a machine with that vendor's device nodes, or when it is imported already: a CUDA wheel on a machine
    without a GPU (track c's image) can see nothing, and importing it would take most of the doctor's time."""
    info = _version_literals()
    if info is None:
        return TorchBuild()
    build = TorchBuild(
        version=info["__version__"], kind=build_kind(info["cuda"], info["hip"]), cuda=info["cuda"], hip=info["hip"]
    )
    if build.kind in ("cuda", "hip") and (gpu_nodes_present(build.kind) or "torch" in sys.modules):
        try:
            import torch

            build.arch_list = list(torch.cuda.get_arch_list())
        except Exception as error:  # a broken install is a finding, not a crash
            build.import_error = f"{type(error).__name__}: {error}"
    return build


def device_arch(props, kind: str) -> str:
    """sm_XY from a CUDA device's capability; the gfx target from a ROCm device's gcnArchName ('gfx1151:xnack-')."""
    if kind == "hip":
        return str(getattr(props, "gcnArchName", "")).split(":")[0]
    return f"sm_{props.major}{props.minor}"


def torch_devices(build: TorchBuild) -> Devices:
    """What this torch sees; only an accelerator build imports torch."""
    if build.kind not in ACCELERATOR_BUILDS or build.import_error:
        return Devices()
    if build.kind != "mps" and not (gpu_nodes_present(build.kind) or "torch" in sys.modules):
        return Devices()  # no device nodes: nothing to see, and no need to pay for importing torch
    try:
        import torch
    except Exception:  # noqa: BLE001 - already reported as build.import_error on the cuda/hip path
        return Devices()
    if build.kind == "mps":
        if torch.backends.mps.is_available():
            return Devices(
                "mps",
                1,
                [platform.processor() or "Apple silicon"],
                "mps",
                [round(torch.mps.recommended_max_memory() / GB, 1)],
            )
        return Devices()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return Devices()
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    free, _ = torch.cuda.mem_get_info(0)
    return Devices("cuda", count, [p.name for p in props], device_arch(props[0], build.kind),
                   [round(p.total_memory / GB, 1) for p in props], round(free / GB, 1))


# --- arch coverage ---------------------------------------------------------------------------------------


def arch_covered(arch: str, arch_list: list[str]) -> str | None:
    """The entry of torch's compiled arch list that runs on `arch`, or None.

    CUDA: a cubin built for sm_XY runs on sm_XZ with Z >= Y (same major), and PTX (compute_XY) is
    compiled at load time for any newer device; so sm_120 kernels serve GB10's sm_121. ROCm: gfx targets
    must match exactly.
    """
    if arch in arch_list:
        return arch
    match = re.fullmatch(r"sm_(\d+)(\d)", arch)
    if not match:
        return None
    major, minor = int(match[1]), int(match[2])
    usable = []  # (prefer native cubins over PTX, newest first)
    for entry in arch_list:
        found = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", entry)
        if not found:
            continue
        kind, entry_major, entry_minor = found[1], int(found[2]), int(found[3])
        if kind == "sm" and entry_major == major and entry_minor <= minor:
            usable.append(((1, entry_major, entry_minor), entry))
        elif kind == "compute" and (entry_major, entry_minor) <= (major, minor):
            usable.append(((0, entry_major, entry_minor), entry))
    return max(usable)[1] if usable else None


def coverage_reason(arch: str, arch_list: list[str]) -> str:
    """Why the wheel's kernels run on `arch` (or why not), spelled out."""
    covered = arch_covered(arch, arch_list)
    listed = ", ".join(arch_list) or "no GPU arch"
    if covered == arch:
        return f"{arch} native: the wheel carries {arch} kernels"
    if covered and covered.startswith("sm_"):
        return (f"{covered} kernels run on {arch} (same major version, lower minor: binary compatible); no {arch} "
                f"entry in {listed}")
    if covered:
        return (f"PTX {covered} is compiled at load time for {arch} (slow first start, no native kernels); compiled "
                f"for {listed}")
    if arch.startswith("gfx"):
        return f"no {arch} kernels: ROCm needs the exact gfx target, the wheel was compiled for {listed}"
    return f"nothing in {listed} runs on {arch}"


# --- the device layer's judgement -----------------------------------------------------------------------


@dataclass
class Finding:
    status: str  # ok, warn, fail
    summary: str
    action: str = ""
    device_type: str = "cpu"  # what training would run on

    def as_dict(self) -> dict:
        return asdict(self)


def _cuda_at_least(have: str | None, need: str | None) -> bool | None:
    """Does a driver that supports CUDA `have` run a wheel built for CUDA `need`? None when unknown."""
    if not have or not need:
        return None
    as_tuple = lambda v: tuple(int(p) for p in re.findall(r"\d+", v)[:2])  # noqa: E731
    return as_tuple(have) >= as_tuple(need)


def _no_device(build: TorchBuild, host, expected: str, track_name: str) -> Finding:
    """torch sees no GPU on a track that expects one: say which layer below it is wrong."""
    built = build.describe()
    if host.amd_gpu and build.kind == "cuda":
        return Finding(
            FAIL,
            f"the wrong wheel: {built} is an NVIDIA build on an AMD machine ({host.amd_gpu})",
            "this is the PyTorch build, not the trainer: install torch[device-gfx1151] from AMD's index (track x's "
            "lock: invoke build --track x)",
        )
    if host.amd_gpu and build.kind == "cpu":
        return Finding(
            FAIL,
            f"the wrong wheel: {built} has no GPU support on an AMD machine ({host.amd_gpu})",
            "this is the PyTorch build, not the trainer: install torch[device-gfx1151] from AMD's index (track x's "
            "lock), not a plain torch from PyPI",
        )
    if build.kind == "hip" and host.kfd_present:
        if not host.kfd_accessible:
            return Finding(
                FAIL,
                f"{built} sees no GPU: /dev/kfd is present but this user cannot open it",
                "add the user to the video and render groups (in a container: group_add with their numeric gids, see "
                "compose/rocm.yaml)",
            )
        return Finding(
            FAIL,
            f"{built} sees no GPU (device_count() == 0) although /dev/kfd is present and usable",
            "this is the PyTorch build: it has no kernels for this GPU (PyTorch's own ROCm wheels have been reported "
            "blind to gfx1151); "
            "install torch[device-gfx1151] from AMD's index, and unset HSA_OVERRIDE_GFX_VERSION",
        )
    if build.kind == "hip":
        return Finding(
            FAIL,
            f"{built} sees no GPU: no /dev/kfd on this machine or in this container",
            "pass /dev/kfd and /dev/dri to the container (compose/rocm.yaml) and check the amdgpu driver is loaded on "
            "the host",
        )
    if build.kind == "cuda" and host.nvidia_driver:
        fits = _cuda_at_least(host.driver_cuda, build.cuda)
        if fits is False:
            return Finding(
                FAIL,
                f"{built} sees no GPU: driver {host.nvidia_driver} supports CUDA up to {host.driver_cuda}, older than "
                f"the wheel's CUDA {build.cuda}",
                f"update the NVIDIA driver to one that supports CUDA {build.cuda} (580 or newer for CUDA 13), or "
                f"install a wheel built for CUDA {host.driver_cuda}",
            )
        return Finding(
            FAIL,
            f"{built} sees no GPU although nvidia-smi answers (driver {host.nvidia_driver})",
            "check the NVIDIA Container Toolkit and that the container was given the GPU (--gpus all; "
            "compose/nvidia.yaml)",
        )
    if build.kind not in ("cuda", "hip"):
        wanted = "a CUDA" if expected == "cuda" else "an accelerator"
        return Finding(
            FAIL,
            f"the wrong wheel: {built} where track {track_name} needs {wanted} build",
            f"this is the PyTorch build, not the trainer: reinstall from lockfiles/{track_name}.txt (invoke build "
            f"--track {track_name})",
        )
    return Finding(
        FAIL,
        f"{built} sees no GPU: the device is cpu on a track that expects {expected}",
        "cpu on a machine with an accelerator is the PyTorch build or the driver, not the trainer: check nvidia-smi on "
        "the host, "
        "the NVIDIA Container Toolkit, and a driver new enough for this CUDA (>= 580 for CUDA 13)",
    )


def _on_device(build: TorchBuild, devices: Devices, expected_arch: str, track_name: str) -> Finding:
    """torch sees a GPU: can the wheel's kernels run on it?"""
    built, arch, name = build.describe(), devices.arch or "?", devices.names[0]
    covered = arch_covered(arch, build.arch_list)
    if covered is None:
        what = (
            f"{built} has no kernels for {name} ({arch}); it was compiled for {', '.join(build.arch_list) or 'nothing'}"
        )
        if arch.startswith("gfx") and not build.arch_list:
            what = (f"{built} carries no GPU kernels at all for {name} ({arch}): a plain `torch` from AMD's multi-arch "
                    "index")
        return Finding(
            FAIL,
            what,
            "this is the PyTorch build: install one whose arch list covers this device "
            + (
                "(torch[device-gfx1151] from AMD's index, track x's lock)"
                if arch.startswith("gfx")
                else "(the track's lock)"
            ),
        )
    note = ""
    if expected_arch and arch != expected_arch:
        note = f" (track {track_name} was made for {expected_arch}; it runs, but the track's defaults may not fit)"
    more = f" +{devices.count - 1} more" if devices.count > 1 else ""
    return Finding(OK, f"{built} · cuda:0 {name} ({arch}, kernels from {covered}){more}{note}", device_type="cuda")


def diagnose_device(build: TorchBuild, devices: Devices, host, track, expect_device: str | None = None) -> Finding:
    """The device layer's verdict: can this torch train on what the track expects, and if not, which layer
    below the trainer is wrong. `host` is a machine.HostFacts; `track` a tracks.Track."""
    expected = expect_device or track.expected_device
    if build.kind is None:
        return Finding(
            FAIL, "PyTorch is not installed", "install the environment from its lock (invoke build / invoke venv)"
        )
    if build.import_error:
        return Finding(
            FAIL,
            f"PyTorch does not import: {build.import_error}",
            "reinstall the environment from its lock (invoke build / invoke venv)",
        )
    built = build.describe()
    if expected == "cpu":
        return Finding(OK, f"{built} · cpu, as track {track.name} expects")
    if expected == "mps":
        if devices.type != "mps":
            return Finding(
                FAIL,
                f"{built} sees no MPS device: training would fall back to the CPU",
                "this is the PyTorch build or macOS, not the trainer: use macOS 14+ on Apple silicon and the arm64 "
                "torch from lockfiles/m.txt (invoke venv --track m)",
            )
        return Finding(OK, f"{built} · mps", device_type="mps")
    wanted = track.expected_build
    if wanted in ("cuda", "hip") and build.kind != wanted and not (host.amd_gpu and build.kind in ("cuda", "cpu")):
        return Finding(
            FAIL,
            f"{built}, but track {track.name} needs a {wanted.upper()} build of PyTorch",
            f"this is the PyTorch build, not the trainer: reinstall from lockfiles/{track.name}.txt (invoke build "
            f"--track {track.name})",
        )
    if devices.type != "cuda":
        return _no_device(build, host, expected, track.name)
    return _on_device(build, devices, track.expected_arch, track.name)
