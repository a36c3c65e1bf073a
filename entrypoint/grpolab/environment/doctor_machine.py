"""The doctor's items for the machine and the device layer: system, memory, GPU driver and GPUs, then PyTorch's
build, the device it reaches, the wheel's arch list, the image's kernels table, unified memory and ROCm. The torch
and device verdicts are the smoke test's own judgement (torch_build.py); the machine's facts come from machine.py.
doctor.py runs them, in its order (ITEMS)."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import asdict
from pathlib import Path

from ..common.card_verdict import card_verdict, gpu_dtype
from ..common.gpucode import device_kernels, driver_key, driver_too_old, image_table_path, load_table
from .doctor_context import FAIL, OK, WARN, Context, item
from .machine import kernel_at_least
from .torch_build import coverage_reason, diagnose_device, arch_covered

STRIX_HALO_KERNEL = (6, 18, 4)  # older kernels are reported unstable on Strix Halo (gfx1151)
UNIFIED_MEMORY_GAP = 0.25  # MemAvailable and torch's free memory further apart than this fraction: warn


# --- the machine ------------------------------------------------------------------------------------------


def system_item(ctx: Context) -> dict:
    h = ctx.host
    return item(
        "system",
        OK,
        f"{h.os_name}, kernel {h.kernel}, {h.glibc}; {h.cpu_model}, {h.cpu_cores} cores"
        + (f" ({', '.join(h.cpu_flags)})" if h.cpu_flags else ""),
        os=h.os_name,
        kernel=h.kernel,
        glibc=h.glibc,
        cpu_model=h.cpu_model,
        cpu_cores=h.cpu_cores,
        cpu_flags=h.cpu_flags,
        python=sys.version.split()[0],
    )


def memory_item(ctx: Context) -> dict:
    total, available = ctx.host.mem_total_gb, ctx.host.mem_available_gb
    details = {"mem_total_gb": total, "mem_available_gb": available}
    if total is None or available is None:
        return item("memory", WARN, "/proc/meminfo could not be read", "check that /proc is mounted", **details)
    summary = f"{total} GB total, {available} GB available"
    if available < 0.1 * total:
        return item(
            "memory",
            WARN,
            f"{summary}: under a tenth is free",
            "close what holds the memory before a run (the estimate says what the run needs)",
            **details,
        )
    return item("memory", OK, summary, **details)


def driver_item(ctx: Context) -> dict:
    h, b = ctx.host, ctx.build
    details = {
        "nvidia_driver": h.nvidia_driver,
        "driver_cuda": h.driver_cuda,
        "torch_cuda": b.cuda,
        "amdgpu_version": h.amdgpu_version,
        "torch_hip": b.hip,
    }
    if h.nvidia_driver:
        summary = f"NVIDIA driver {h.nvidia_driver}, supports CUDA up to {h.driver_cuda or '?'}"
        table = load_table(image_table_path(ctx.track.name)) if ctx.track else None
        minimum = (
            table.get("driver_minimum") if table else None
        )  # the image's kernels table: its CUDA major's oldest driver
        details["driver_minimum"] = minimum
        update = (
            f"update the driver to {minimum} or newer (the oldest that runs this image's CUDA {table['cuda_major']} "
            "libraries)"
            if minimum
            else ""
        )
        if b.cuda and h.driver_cuda:
            have, need = (tuple(int(p) for p in v.split(".")[:2]) for v in (h.driver_cuda, b.cuda))
            if have < need:
                return item(
                    "gpu driver",
                    FAIL,
                    f"{summary}, older than torch's CUDA {b.cuda}",
                    update
                    or f"update the driver to one that supports CUDA {b.cuda} (580 or newer for CUDA 13), or use a "
                       f"wheel built for CUDA {h.driver_cuda}",
                    **details,
                )
        too_old = driver_too_old(table, h.nvidia_driver) if table else None
        if too_old:
            return item("gpu driver", FAIL, f"{summary}: {too_old}", update, **details)
        if minimum:
            summary += f"; the image's libraries need {minimum} or newer"
        if b.cuda and h.driver_cuda:
            return item(
                "gpu driver",
                OK,
                f"{summary}; >= torch's CUDA {b.cuda}" if minimum else f"{summary} >= torch's CUDA {b.cuda}",
                **details,
            )
        return item("gpu driver", OK, summary, **details)
    if h.amd_gpu:
        return item(
            "gpu driver",
            OK,
            f"amdgpu {h.amdgpu_version or '(in-kernel)'} for {h.amd_gpu}" + (f"; torch's HIP {b.hip}" if b.hip else ""),
            **details,
        )
    expected = ctx.track.expected_device if ctx.track else "cpu"
    if expected == "cuda":
        return item(
            "gpu driver",
            FAIL,
            "no GPU driver answers: no nvidia-smi, no amdgpu device",
            "install the driver on the host and pass the GPU to the container (NVIDIA Container Toolkit, or /dev/kfd "
            "and /dev/dri)",
            **details,
        )
    return item(
        "gpu driver",
        OK,
        "no GPU driver: none needed here" if expected == "cpu" else "no GPU driver: MPS needs none",
        **details,
    )


def gpus_item(ctx: Context) -> dict:
    h, d = ctx.host, ctx.devices
    details = {
        "nvidia_smi": h.nvidia_gpus,
        "amd_agents": h.amd_agents,
        "torch_device_names": d.names,
        "torch_total_memory_gb": d.total_memory_gb,
    }
    if d.count:
        listed = ", ".join(f"{n} ({m} GB)" for n, m in zip(d.names, d.total_memory_gb))
        return item("gpus", OK, f"{d.count} seen by torch: {listed}", **details)
    if h.nvidia_gpus:
        listed = ", ".join(
            f"{g['name']} ({g['memory_total_gb']} GB, compute {g['compute_cap']})" for g in h.nvidia_gpus
        )
        return item("gpus", WARN, f"{len(h.nvidia_gpus)} on the machine (nvidia-smi): {listed}; torch sees none",
                    "see the device item: the torch build or the container's GPU access", **details)
    if h.amd_gpu:
        return item(
            "gpus",
            WARN,
            f"{h.amd_gpu} on the machine; torch sees none",
            "see the device item: the torch build or /dev/kfd access",
            **details,
        )
    return item("gpus", OK, "none: CPU only", **details)


# --- PyTorch and the device layer -------------------------------------------------------------------------


def torch_item(ctx: Context) -> dict:
    b, track = ctx.build, ctx.track
    details = {"version": b.version, "build": b.kind, "cuda": b.cuda, "hip": b.hip, "arch_list": b.arch_list}
    if b.kind is None:
        return item(
            "torch",
            FAIL,
            "torch is not installed",
            "install the track's lock (uv pip sync --require-hashes LOCK)",
            **details,
        )
    if b.import_error:
        return item(
            "torch",
            FAIL,
            f"{b.describe()} fails to import: {b.import_error}",
            "reinstall from the lock (uv pip sync --require-hashes)",
            **details,
        )
    if track and track.expected_build not in ("", "any", b.kind):
        return item("torch", FAIL, f"{b.describe()}, but track {track.name} needs a {track.expected_build} build",
                    "a later pip install may have replaced the locked torch: re-sync the lock", **details)
    return item(
        "torch", OK, b.describe() + (f", kernels for {', '.join(b.arch_list)}" if b.arch_list else ""), **details
    )


def device_item(ctx: Context) -> dict:
    if ctx.track is None:
        return item(
            "device",
            WARN,
            "no track table: cannot say what device to expect",
            "run inside the image or a venv made by invoke venv",
        )
    finding = diagnose_device(ctx.build, ctx.devices, ctx.host, ctx.track)
    return item(
        "device",
        finding.status,
        finding.summary,
        finding.action,
        device_type=finding.device_type,
        expected_device=ctx.track.expected_device,
    )


def arch_item(ctx: Context) -> dict | None:
    """The device's arch against the wheel's compiled arch list, with the compatibility reasoning spelled out."""
    arch, archs = ctx.devices.arch, ctx.build.arch_list
    if ctx.devices.type != "cuda" or not arch:
        return None
    details = {"device_arch": arch, "arch_list": archs, "kernels_from": arch_covered(arch, archs)}
    reason = coverage_reason(arch, archs)
    covered = details["kernels_from"]
    if covered is None:
        return item(
            "arch", FAIL, reason, "install a torch whose arch list covers this device (the track's lock)", **details
        )
    if covered.startswith("compute_"):
        return item(
            "arch",
            WARN,
            reason,
            "works, but every kernel is JIT-compiled at start: a wheel with native kernels starts faster",
            **details,
        )
    return item("arch", OK, reason, **details)


def kernels_item(ctx: Context) -> dict | None:
    """The image's kernels table (lockfiles/<track>.kernels.json) for the GPU torch sees: which library the rollout
    path needs will JIT-compile from PTX (slow first run) or has no code at all (the run fails there)."""
    if ctx.track is None or ctx.devices.type != "cuda" or not ctx.devices.arch:
        return None
    found = device_kernels(ctx.track.name, ctx.devices.arch, ctx.rollout)
    if found is None:
        return item(
            "kernels",
            WARN,
            f"no kernels table for track {ctx.track.name} ({image_table_path(ctx.track.name)})",
            "rebuild the image: it copies lockfiles/<track>.kernels.json (made by `invoke kernels`)",
        )
    status, summary, lines = found
    action = {
        FAIL: "use a GPU the track serves (docs/kernels.md: Which GPUs each image runs on), or another rollout path",
        WARN: "expect the first run to pause while the driver compiles; later runs reuse its cache "
        "(~/.nv/ComputeCache)",
    }.get(status, "")
    return item("kernels", status, summary, action, gpu=ctx.devices.arch, rollout=ctx.rollout, libraries=lines)


def card_item(ctx: Context) -> dict | None:
    """This card's verdict for the lab as the track sets it (grpolab.common.card_verdict: the dtype each path runs in
    here, vLLM's attention backend, a kernel that runs only by JIT and the driver it needs), against this driver."""
    if ctx.track is None or ctx.devices.type != "cuda" or not (ctx.devices.arch or "").startswith("sm_"):
        return None
    table = load_table(image_table_path(ctx.track.name))
    if table is None:
        return None  # the kernels item says so
    found = card_verdict(table, ctx.devices.arch, ctx.rollout, gpu_dtype(ctx.track))
    details = found.as_dict()
    driver = ctx.host.nvidia_driver
    if not found.runs:
        return item("card", FAIL, found.words(), "use a GPU the track serves (docs/kernels.md), or another rollout "
                    "path", **details)
    if found.jit_driver and driver and driver_key(driver) < driver_key(found.jit_driver):
        return item("card", FAIL, f"{found.words()}; this machine's driver is {driver}",
                    f"install NVIDIA driver {found.jit_driver} or newer (it compiles {', '.join(found.jit_libraries)} "
                    "from PTX at first use)", **details)
    if found.dtype.reason or found.jit_unplaced:
        return item("card", WARN, found.words(), "nothing to do: the lab runs in " + found.dtype.dtype + " on this "
                    "card" if found.dtype.reason else "rebuild with a lock whose PTX ISA is known", **details)
    return item("card", OK, found.words(), **details)


def compilers_needed(fingerprint: dict) -> list[tuple[str, str, list[str]]]:
    """(who, language, the compilers it tries in order) for what the installed libraries compile at their first use
    (docs/locks-and-images.md, "What the libraries compile at run time"): Triton its driver, in C; vLLM's CPU build
    its sampler through torch's inductor, in C++."""
    packages = fingerprint.get("packages") or {}
    needed = []
    if packages.get("triton"):
        needed.append(("Triton", "C", [os.environ.get("CC") or "", "gcc", "clang"]))
    if packages.get("vllm") and fingerprint.get("vllm_build") == "cpu":
        needed.append(("vLLM's CPU build (torch's inductor)", "C++", [os.environ.get("CXX") or "", "g++", "clang++"]))
    return needed


def compilers_item(ctx: Context) -> dict | None:
    """The compilers and Python's headers the installed libraries' first-use compiles need, where they are installed:
    without them the first Triton kernel or vLLM's first request with logprobs stops the run."""
    needed = compilers_needed(ctx.fingerprint)
    if not needed:
        return None
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    found, missing = {}, []
    for who, language, tried in needed:
        tool = next((path for name in tried if name and (path := shutil.which(name))), None)
        if tool:
            found[language] = tool
        else:
            missing.append(f"{who} compiles {language} at first use and finds no {language} compiler "
                           f"({', '.join(name for name in tried if name)})")
    if not headers.exists():
        missing.append(f"Python's headers, which those compiles include, are missing ({headers})")
    details = {"compilers": found, "python_h": str(headers)}
    if missing:
        return item("compilers", FAIL, "; ".join(missing), "rebuild the image (its Debian pins keep the compilers); in "
                    "a venv, install gcc, g++ and Python's headers with the system's package manager", **details)
    return item("compilers", OK, ", ".join(f"{lang}: {tool}" for lang, tool in found.items())
                + f"; Python.h at {headers}", **details)


def unified_memory_item(ctx: Context) -> dict | None:
    """On unified memory the host's MemAvailable and torch's free device memory are the same pool, read two ways."""
    if not (ctx.track and ctx.track.unified_memory):
        return None
    host_gb, torch_gb = ctx.host.mem_available_gb, ctx.devices.free_memory_gb
    details = {"mem_available_gb": host_gb, "torch_free_gb": torch_gb}
    if torch_gb is None or host_gb is None:
        return item(
            "unified memory", OK, f"MemAvailable {host_gb} GB; torch reports no device memory to compare", **details
        )
    summary = f"MemAvailable {host_gb} GB, torch.cuda.mem_get_info free {torch_gb} GB"
    if abs(host_gb - torch_gb) > UNIFIED_MEMORY_GAP * max(host_gb, torch_gb):
        return item(
            "unified memory",
            WARN,
            f"{summary}: they disagree",
            "vLLM's start-up check and memory profiling read the lower figure: keep the colocate cap the estimate "
            "chose, and drop caches (sync; echo 3 > /proc/sys/vm/drop_caches) before a run",
            **details,
        )
    return item("unified memory", OK, f"{summary}: they agree", **details)


def rocm_item(ctx: Context) -> dict | None:
    h, track = ctx.host, ctx.track
    if not (h.amd_gpu or ctx.build.kind == "hip" or (track and track.device_access == "rocm")):
        return None
    override = os.environ.get("HSA_OVERRIDE_GFX_VERSION")
    nodes = [asdict(n) for n in h.device_nodes]
    details = {
        "hip": ctx.build.hip,
        "gcn_arch": ctx.devices.arch,
        "agents": h.amd_agents,
        "kfd": h.kfd_present,
        "device_nodes": nodes,
        "user_groups": h.user_groups,
        "kernel": h.kernel,
        "gtt": h.gtt,
        "HSA_OVERRIDE_GFX_VERSION": override,
    }
    summary = (f"HIP {ctx.build.hip or '-'}, arch {ctx.devices.arch or '-'}, kernel {h.kernel}, groups "
               f"{','.join(g for g in h.user_groups if g in ('video', 'render')) or 'neither video nor render'}")
    if not h.kfd_present:
        return item(
            "rocm",
            FAIL,
            f"no /dev/kfd: {summary}",
            "load the amdgpu driver on the host and pass /dev/kfd and /dev/dri to the container (compose/rocm.yaml)",
            **details,
        )
    blocked = [n["path"] for n in nodes if not n["accessible"]]
    if blocked:
        groups = ", ".join(sorted({n["group"] for n in nodes if not n["accessible"]}))
        return item(
            "rocm",
            FAIL,
            f"{', '.join(blocked)} present but not usable by this user",
            f"add the user to the {groups} group(s) (in a container: group_add with their numeric gids)",
            **details,
        )
    if override:
        return item(
            "rocm",
            WARN,
            f"HSA_OVERRIDE_GFX_VERSION={override} is set; {summary}",
            "unset it: gfx1151 has native kernels, and the override makes ROCm load another target's",
            **details,
        )
    if kernel_at_least(h.kernel, STRIX_HALO_KERNEL) is False:
        return item(
            "rocm",
            WARN,
            f"kernel {h.kernel} is older than 6.18.4; {summary}",
            "kernels from 6.18.4 on are reported stable on Strix Halo: upgrade the host's kernel",
            **details,
        )
    return item("rocm", OK, summary, **details)
