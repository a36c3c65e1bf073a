"""One answer to "which PyTorch, and can it run here": the real answer on this machine (CPU wheel, no GPU), and
the device layer's verdicts for the machines we lack, judged from the facts such a machine reports (a torch
build, the devices it sees, the host's driver and device nodes), which stand in for its hardware."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.common.errors import LayerFailure
from grpolab.environment.machine import HostFacts, host_facts
from grpolab.run.checks import check_device
from grpolab.environment.torch_build import (
    Devices,
    TorchBuild,
    arch_covered,
    build_kind,
    coverage_reason,
    diagnose_device,
    gpu_nodes_present,
    installed_version,
    torch_build,
    torch_devices,
)
from grpolab.common.tracks import get_track

ENTRYPOINT = str(Path(__file__).resolve().parents[1] / "entrypoint")

H200 = Devices("cuda", 1, ["NVIDIA H200"], "sm_90", [150.0], 149.0)
GB10 = Devices("cuda", 1, ["NVIDIA GB10"], "sm_121", [128.0], 110.0)
STRIX = Devices("cuda", 1, ["AMD Radeon 8060S"], "gfx1151", [103.1], 100.0)
CU130 = TorchBuild(
    "2.13.0+cu130",
    "cuda",
    cuda="13.0",
    arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
)
THEROCK = TorchBuild("2.10.0+rocm7.11.0", "hip", hip="7.11.0", arch_list=["gfx1151"])
PLAIN_AMD_INDEX = TorchBuild("2.10.0+rocm7.11.0", "hip", hip="7.11.0", arch_list=[])  # `torch` without [device-gfx1151]
PYTORCH_ROCM = TorchBuild("2.13.0+rocm7.2", "hip", hip="7.2.0", arch_list=["gfx90a", "gfx942", "gfx1100"])
CPU_WHEEL = TorchBuild("2.13.0+cpu", "cpu")
NO_GPU = Devices()
NVIDIA_HOST = HostFacts(nvidia_driver="580.95.05", driver_cuda="13.0")
AMD_HOST = HostFacts(amd_gpu="gfx1151", amd_agents=["gfx1151"], kfd_present=True, kfd_accessible=True)


@pytest.mark.parametrize(
    "arch, arch_list, covered",
    [
        ("sm_121", ["sm_80", "sm_90", "sm_100", "sm_120"], "sm_120"),  # GB10 runs sm_120 cubins
        ("sm_121", ["sm_80", "sm_90"], None),
        ("sm_121", ["sm_90", "compute_90"], "compute_90"),  # PTX is compiled at load time
        ("sm_89", ["sm_80", "sm_86", "sm_90"], "sm_86"),
        ("gfx1151", ["gfx1100", "gfx1151"], "gfx1151"),
        ("gfx1151", ["gfx1100", "gfx1150"], None),  # ROCm needs the exact target
    ],
)
def test_arch_coverage(arch, arch_list, covered):
    assert arch_covered(arch, arch_list) == covered


def test_coverage_reasoning_is_spelled_out():
    assert coverage_reason("sm_90", CU130.arch_list) == "sm_90 native: the wheel carries sm_90 kernels"
    assert "sm_120 kernels run on sm_121 (same major version, lower minor" in coverage_reason("sm_121", CU130.arch_list)
    assert coverage_reason("sm_121", ["sm_90", "compute_90"]).startswith(
        "PTX compute_90 is compiled at load time for sm_121"
    )
    assert "ROCm needs the exact gfx target" in coverage_reason("gfx1151", ["gfx1100"])
    assert coverage_reason("gfx1151", ["gfx1151"]).startswith("gfx1151 native")


def test_build_kind_one_rule_for_every_caller():
    assert build_kind(None, "7.2.0") == "hip" and build_kind("13.0", None) == "cuda"
    assert build_kind(None, None, system="darwin") == "mps"  # every macOS wheel is built with MPS
    assert build_kind(None, None, system="linux") == "cpu"


def test_this_machine_without_importing_torch():
    """The CPU wheel here: the build is read from torch/version.py, and torch is never imported for it."""
    code = (
        "import sys, json; from grpolab.environment.torch_build import torch_build, torch_devices; b = torch_build(); "
        "d = torch_devices(b); "
        "print(json.dumps([b.version, b.kind, b.cuda, d.type, d.count, 'torch' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ENTRYPOINT},
        timeout=600,
    )
    version, kind, cuda, device, count, imported = json.loads(out.stdout)
    assert (
        version.split("+")[0] == installed_version("torch").split("+")[0]
    )  # torch says 2.15.0+cu132, its metadata 2.15.0
    if kind == "cpu":
        assert cuda is None and device == "cpu" and count == 0 and not imported
    elif kind == "cuda" and not gpu_nodes_present("cuda"):  # PyPI's CUDA wheel on a machine without a GPU (CI)
        assert cuda and device == "cpu" and count == 0 and not imported


def test_real_verdicts_on_this_machine():
    build = torch_build()
    if build.kind not in ("cpu", "cuda") or gpu_nodes_present(build.kind):
        pytest.skip("this machine has a GPU, or a torch that is neither a CPU nor a CUDA wheel")
    devices, host = torch_devices(build), host_facts()
    ok = diagnose_device(build, devices, host, get_track("c"))
    assert ok.status == "ok" and ok.device_type == "cpu" and "as track c expects" in ok.summary
    wrong = diagnose_device(build, devices, host, get_track("n"))
    # A CPU wheel is the wrong wheel for n; PyPI's CUDA wheel (CI's) is the right one, but sees no GPU here.
    wanted = "needs a CUDA build" if build.kind == "cpu" else "sees no GPU"
    assert wrong.status == "fail" and wanted in wrong.summary and wrong.action
    with pytest.raises(LayerFailure) as failure:  # the smoke test's device layer gives the same verdict
        check_device(get_track("n"))
    assert (
        failure.value.layer == "device"
        and wrong.summary in str(failure.value)
        and "grpolab doctor" in str(failure.value)
    )
    assert check_device(get_track("c")) == ("cpu", ok.summary)


@pytest.mark.parametrize(
    "build, devices, host, track, status, words",
    [
        (CU130, H200, NVIDIA_HOST, "n", "ok", "cuda:0 NVIDIA H200 (sm_90, kernels from sm_90)"),
        (CU130, GB10, NVIDIA_HOST, "s", "ok", "(sm_121, kernels from sm_120)"),
        (CU130, H200, NVIDIA_HOST, "s", "ok", "track s was made for sm_121"),
        (
            TorchBuild("2.13.0+cu130", "cuda", cuda="13.0", arch_list=["sm_100", "sm_120"]),
            H200,
            NVIDIA_HOST,
            "n",
            "fail",
            "has no kernels for NVIDIA H200 (sm_90)",
        ),
        (THEROCK, STRIX, AMD_HOST, "x", "ok", "AMD Radeon 8060S (gfx1151, kernels from gfx1151)"),
        (PLAIN_AMD_INDEX, STRIX, AMD_HOST, "x", "fail", "carries no GPU kernels at all"),
        (PYTORCH_ROCM, STRIX, AMD_HOST, "x", "fail", "has no kernels for AMD Radeon 8060S (gfx1151)"),
        (PYTORCH_ROCM, NO_GPU, AMD_HOST, "x", "fail", "device_count() == 0) although /dev/kfd is present"),
        (
            THEROCK,
            NO_GPU,
            HostFacts(amd_gpu="gfx1151", kfd_present=True, kfd_accessible=False),
            "x",
            "fail",
            "/dev/kfd is present but this user cannot open it",
        ),
        (THEROCK, NO_GPU, HostFacts(), "x", "fail", "no /dev/kfd on this machine or in this container"),
        (
            CU130,
            NO_GPU,
            AMD_HOST,
            "x",
            "fail",
            "the wrong wheel: torch 2.13.0+cu130 (cuda 13.0 build) is an NVIDIA build on an AMD machine",
        ),
        (
            CPU_WHEEL,
            NO_GPU,
            AMD_HOST,
            "x",
            "fail",
            "the wrong wheel: torch 2.13.0+cpu (cpu build) has no GPU support on an AMD machine",
        ),
        (
            CU130,
            NO_GPU,
            HostFacts(nvidia_driver="550.54", driver_cuda="12.4"),
            "n",
            "fail",
            "supports CUDA up to 12.4, older than the wheel's CUDA 13.0",
        ),
        (CU130, NO_GPU, NVIDIA_HOST, "n", "fail", "sees no GPU although nvidia-smi answers"),
        (CU130, NO_GPU, HostFacts(), "n", "fail", "sees no GPU: the device is cpu on a track that expects cuda"),
        (CPU_WHEEL, NO_GPU, HostFacts(), "n", "fail", "needs a CUDA build of PyTorch"),
        (THEROCK, NO_GPU, HostFacts(), "n", "fail", "needs a CUDA build of PyTorch"),
        (TorchBuild("2.13.0", "mps"), NO_GPU, HostFacts(), "m", "fail", "sees no MPS device"),
        (
            TorchBuild("2.13.0", "mps"),
            Devices("mps", 1, ["Apple M3"], "mps"),
            HostFacts(),
            "m",
            "ok",
            "torch 2.13.0 (mps build) · mps",
        ),
        (TorchBuild(), NO_GPU, HostFacts(), "c", "fail", "PyTorch is not installed"),
        (
            TorchBuild("2.13.0", "cuda", cuda="13.0", import_error="OSError: libcudart.so.13"),
            NO_GPU,
            HostFacts(),
            "n",
            "fail",
            "does not import: OSError",
        ),
    ],
)
def test_device_verdicts_for_machines_we_lack(build, devices, host, track, status, words):
    finding = diagnose_device(build, devices, host, get_track(track))
    assert finding.status == status and words in finding.summary, finding
    if status == "fail":
        assert finding.action
    else:
        assert finding.device_type in ("cuda", "mps")


def test_gfx1151_failures_point_at_amds_wheel():
    for build, devices in ((PLAIN_AMD_INDEX, STRIX), (PYTORCH_ROCM, NO_GPU), (CU130, NO_GPU), (CPU_WHEEL, NO_GPU)):
        assert "torch[device-gfx1151]" in diagnose_device(build, devices, AMD_HOST, get_track("x")).action


def test_gpu_device_nodes_decide_whether_torch_is_imported(tmp_path):
    from grpolab.environment.torch_build import gpu_nodes_present

    assert (
        not gpu_nodes_present("cuda", tmp_path)
        and not gpu_nodes_present("hip", tmp_path)
        and not gpu_nodes_present("cpu", tmp_path)
    )
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kfd").write_text("")
    assert gpu_nodes_present("hip", tmp_path) and not gpu_nodes_present("cuda", tmp_path)
    (tmp_path / "dev" / "dxg").write_text("")  # WSL2's CUDA
    assert gpu_nodes_present("cuda", tmp_path)
