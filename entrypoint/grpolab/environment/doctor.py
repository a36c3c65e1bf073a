"""`grpolab doctor`: what this machine and environment look like, item by item, read-only.

Each item is ok, warn or fail, with one line of what to do; `-v` adds the details, `--json` prints the
report in the versioned format of doctor.schema.json. Nothing trains, nothing downloads, nothing prints a
secret's value. On a machine without a GPU the whole report takes a few seconds (torch is imported only
when its build has device nodes to reach). The torch and device items are the smoke test's own
judgement (torch_build.py); the machine's facts come from machine.py.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from .fingerprint import environment_fingerprint, fingerprint_drift
from ..common.gpucode import device_kernels, driver_too_old, image_table_path, load_table
from ..common.rollout_paths import DEFAULT_ROLLOUT_PATH, lock_extras_for, needs_doctor_item
from ..common.tracks import packages_left_out
from .machine import HostFacts, host_facts, kernel_at_least
from .trl_range import describe_range, range_unknown_because, trl_vllm_range, vllm_in_trl_range
from .torch_build import Devices, TorchBuild, coverage_reason, diagnose_device, arch_covered, torch_build, torch_devices

OK, WARN, FAIL = "ok", "warn", "fail"
SCHEMA_VERSION = 2  # doctor.schema.json; raise it when a field changes meaning or goes away
SCHEMA_FILE = Path(__file__).with_name("doctor.schema.json")
DISK_WARN_GB = 20.0  # a couple of course models and an image layer or two
DISK_FAIL_GB = 5.0  # not even Qwen3-1.7B's 4 GB checkpoint
ENV_PREFIXES = (
    "CUDA_",
    "HIP_",
    "HSA_",
    "ROCR_",
    "NCCL_",
    "PYTORCH_",
    "VLLM_",
    "HF_",
    "HUGGING_FACE_",
    "TRL_",
    "MIOPEN_",
    "NVIDIA_",
    "GRPOLAB_",
)
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
STRIX_HALO_KERNEL = (6, 18, 4)  # older kernels are reported unstable on Strix Halo (gfx1151)
UNIFIED_MEMORY_GAP = 0.25  # MemAvailable and torch's free memory further apart than this fraction: warn
LOCKED_RUNTIME = ("torch", "vllm", "triton")  # a later pip install that replaced one of these is the classic failure
SERVER_TIMEOUT_S = 3.0


# --- what every item is judged from ---------------------------------------------------------------------


@dataclass
class Context:
    track: object  # tracks.Track, or None when the table can't be read
    build: TorchBuild
    devices: Devices
    host: HostFacts
    fingerprint: dict
    rollout: str  # the rollout path the lab would take
    server_url: str | None  # checked when server mode is configured


def item(name: str, status: str, summary: str, action: str = "", **details) -> dict:
    return {"name": name, "status": status, "summary": summary, "action": action, "details": details}


def _track(name: str | None):
    try:
        from ..common.tracks import current_track_name, get_track

        return get_track(name or current_track_name())
    except Exception:
        return None


# --- the machine ------------------------------------------------------------------------------------------


def system_item(ctx: Context) -> dict:
    h = ctx.host
    return item(
        "system",
        OK,
        f"{h.os_name}, kernel {h.kernel}, {h.glibc}; {h.cpu_model}, {h.cpu_cores} cores",
        os=h.os_name,
        kernel=h.kernel,
        glibc=h.glibc,
        cpu_model=h.cpu_model,
        cpu_cores=h.cpu_cores,
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


# --- packages ---------------------------------------------------------------------------------------------


def lock_file(track) -> Path | None:
    """The lock this environment was installed from: GRPOLAB_LOCK_FILE, else lockfiles/<track>.txt beside the
    package (the repository for a venv; /opt/grpolab in the image, which copies its lock there)."""
    if os.environ.get("GRPOLAB_LOCK_FILE"):
        return Path(os.environ["GRPOLAB_LOCK_FILE"])
    if track is None:
        return None
    return Path(__file__).resolve().parents[3] / "lockfiles" / f"{track.name}.txt"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line of a lock made by `invoke lock` (uv pip compile)."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if m:
            found[canonical(m[1])] = m[2]
    return found


def lock_drift_item(ctx: Context) -> dict:
    path = lock_file(ctx.track)
    if path is None or not path.is_file():
        return item(
            "lock drift",
            WARN,
            f"no lock to compare with ({path or 'no track'})",
            "run inside the track's image or venv, or set GRPOLAB_LOCK_FILE to the lock it was installed from",
            lock=str(path) if path else None,
        )
    locked = locked_versions(path.read_text())
    installed = {
        canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions() if d.metadata["Name"]
    }
    # Packages the image leaves out on purpose (compiled only for the rollout path that loads them) are not drift, but
    # one installed anyway is: the image says it has not got it.
    left_out = [n for n in map(canonical, packages_left_out()) if n in locked and n not in installed]
    drift = {
        n: {"lock": v, "installed": installed.get(n)}
        for n, v in sorted(locked.items())
        if installed.get(n) != v and n not in left_out
    }
    details = {"lock": str(path), "locked_packages": len(locked), "drift": drift, "left_out": left_out}
    if not drift:
        but = f"; left out of this image on purpose: {', '.join(left_out)} (built on demand)" if left_out else ""
        return item(
            "lock drift",
            OK,
            f"all {len(locked) - len(left_out)} packages of {path.name} installed at their locked versions{but}",
            **details,
        )
    named = "; ".join(f"{n} {d['installed'] or 'missing'} (lock {d['lock']})" for n, d in list(drift.items())[:5])
    more = f" and {len(drift) - 5} more" if len(drift) > 5 else ""
    status = FAIL if any(n in drift for n in LOCKED_RUNTIME) else WARN
    return item(
        "lock drift",
        status,
        f"{len(drift)} of {len(locked)} differ from {path.name}: {named}{more}",
        "a later pip install replaced locked packages: re-sync the lock (uv pip sync --require-hashes LOCK) or rebuild "
        "the image",
        **details,
    )


def image_item(ctx: Context) -> dict | None:
    """Which image this container runs: its id (the digest of its config), which two learners compare to know they
    run the same bytes. Absent outside an image (the image sets GRPOLAB_LOCK_SHA256; a venv does not)."""
    fp = ctx.fingerprint
    if not os.environ.get("GRPOLAB_LOCK_SHA256"):
        return None
    details = {k: fp.get(k) for k in ("image_id", "image_name", "image_repo_digest")}
    if not fp.get("image_id"):
        return item(
            "image",
            WARN,
            f"this container's image id was not handed in ({fp.get('image_name') or 'no name either'})",
            "start it with `docker compose run` after `invoke build` (which passes the id), or `docker run -e "
            "GRPOLAB_IMAGE=$(docker image inspect --format '{{.Id}}' IMAGE) IMAGE`",
            **details,
        )
    named = f" ({fp['image_name']})" if fp.get("image_name") else ""
    digest = (
        f", repo digest {fp['image_repo_digest']}"
        if fp.get("image_repo_digest")
        else ", no repo digest (built here, not pulled)"
    )
    return item("image", OK, f"{fp['image_id']}{named}{digest}", **details)


def packages_item(ctx: Context) -> dict:
    pkgs = ctx.fingerprint.get("packages") or {}
    missing = [n for n in ("trl", "transformers", "peft", "accelerate", "datasets") if not pkgs.get(n)]
    listed = ", ".join(f"{n} {v}" for n, v in pkgs.items() if v and n not in ("vllm", "llama_cpp_python"))
    if missing:
        return item("packages", FAIL, f"missing {', '.join(missing)}", "install the track's lock", versions=pkgs)
    return item("packages", OK, listed, versions=pkgs)


def vllm_item(ctx: Context) -> dict:
    vllm = (ctx.fingerprint.get("packages") or {}).get("vllm")
    vrange = trl_vllm_range()
    inside = vllm_in_trl_range(vllm) if vllm else None
    importable = vllm is not None and importlib.util.find_spec("vllm") is not None  # found, not imported: that is slow
    details = {
        "version": vllm,
        "trl_vllm_range": vrange,
        "trl_vllm_range_unknown_because": range_unknown_because() if vrange is None else None,
        "inside_trl_range": inside,
        "importable": importable,
        "rollout": ctx.rollout,
    }
    wants = needs_doctor_item(ctx.rollout, "vllm")
    if vllm and inside is False:
        return item("vllm", WARN if not wants else FAIL, f"vllm {vllm} is outside TRL's declared range {vrange}",
                    f"install a vllm in {vrange} (TRL only warns; its server protocol may not match)", **details)
    if vllm and not importable:
        return item(
            "vllm", FAIL, f"vllm {vllm} is installed but its module is missing", "reinstall the lock", **details
        )
    if not vllm:
        if wants:
            return item(
                "vllm",
                FAIL,
                f"not installed, but the rollout path is {ctx.rollout}",
                f"install vllm in TRL's range {describe_range()}, or use --rollout inprocess",
                **details,
            )
        return item("vllm", OK, f"not installed; the rollout path is {ctx.rollout}", **details)
    if inside is None:  # the range cannot be read: say why, never "inside None"
        return item(
            "vllm",
            WARN,
            f"vllm {vllm}: TRL's declared range is unknown: {range_unknown_because()}",
            "fix what that names, then run the doctor again",
            **details,
        )
    return item("vllm", OK, f"vllm {vllm} inside TRL's range {vrange}", **details)


def llamacpp_item(ctx: Context) -> dict:
    version = (ctx.fingerprint.get("packages") or {}).get("llama_cpp_python")
    in_lock = bool(ctx.track and lock_extras_for("llama.cpp") & set(ctx.track.extras))
    wants = needs_doctor_item(ctx.rollout, "llama.cpp")
    if version is None:
        if "llama-cpp-python" in packages_left_out():
            status = FAIL if wants else OK
            return item(
                "llama.cpp",
                status,
                "not in this image: left out of the first build, compiled only for --rollout llamacpp",
                "on the host, `invoke up --rollout llamacpp` builds the image that has it",
                in_lock=in_lock,
                left_out=True,
            )
        if wants or in_lock:
            return item(
                "llama.cpp",
                WARN,
                "llama-cpp-python is not installed, though this track's lock has it",
                "re-sync the lock (--rollout llamacpp needs it)",
                in_lock=in_lock,
            )
        return item("llama.cpp", OK, "not installed (not in this track's lock)", in_lock=in_lock)
    try:
        import llama_cpp

        system_info = llama_cpp.llama_print_system_info()
        system_info = system_info.decode() if isinstance(system_info, bytes) else str(system_info)
        offload = bool(llama_cpp.llama_supports_gpu_offload())
    except Exception as error:  # noqa: BLE001 - a library that won't load is the finding
        return item("llama.cpp", FAIL, f"llama-cpp-python {version} does not import: {type(error).__name__}: {error}",
                    "reinstall it from the lock (it compiles llama.cpp at install)", version=version)
    options = [o.strip() for o in system_info.split("|") if o.strip().endswith("= 1")]
    summary = (f"llama-cpp-python {version}, GPU offload {'yes' if offload else 'no'}; "
               f"{' '.join(o.split(' =')[0].split(':')[-1].strip() for o in options) or 'no CPU features reported'}")
    return item("llama.cpp", OK, summary, version=version, gpu_offload=offload, system_info=system_info)


def server_item(ctx: Context) -> dict | None:
    """vLLM's server answers /health, when the lab would stream to one."""
    if not needs_doctor_item(ctx.rollout, "vllm server") and not ctx.server_url:
        return None
    url = (ctx.server_url or "http://localhost:8000").rstrip("/")
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=SERVER_TIMEOUT_S) as response:
            code = response.status
    except OSError as error:
        reason = getattr(error, "reason", None) or error
        return item(
            "vllm server",
            FAIL,
            f"{url}/health does not answer: {reason}",
            "start the server (invoke serve, or docker compose up vllm) or pass the right --vllm-server-url",
            url=url,
        )
    return item("vllm server", OK, f"{url}/health answers {code}", url=url, status_code=code)


# --- environment, disk, token, last smoke test ------------------------------------------------------------


def is_secret(name: str) -> bool:
    """A token, key or password by its name; where one is kept (HF_TOKEN_PATH, ..._FILE) is shown: it helps."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS) and not upper.endswith(("_PATH", "_FILE"))


def environment_item(ctx: Context) -> dict:
    """The variables that steer CUDA, ROCm, NCCL, PyTorch, vLLM, Hugging Face and TRL; secrets masked."""
    shown = {
        k: ("<set, value hidden>" if is_secret(k) else v)
        for k, v in sorted(os.environ.items())
        if k.startswith(ENV_PREFIXES)
    }
    expected = ctx.track.expected_device if ctx.track else "cpu"
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        if name in os.environ and os.environ[name].strip() in ("", "-1") and expected == "cuda":
            return item(
                "environment",
                WARN,
                f"{name}={os.environ[name]!r} hides every GPU",
                f"unset {name} or name the GPU to use",
                variables=shown,
            )
    names = ", ".join(shown) or "none"
    return item("environment", OK, f"{len(shown)} relevant variables: {names}", variables=shown)


def hf_cache_dir() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def _free_gb(path: Path) -> tuple[float | None, str]:
    """Free space on the filesystem that holds `path` (or its nearest existing parent)."""
    p = Path(path).expanduser()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free / 1e9, str(p)
    except OSError:
        return None, str(p)


def disk_item(ctx: Context) -> dict:
    from ..common.paths import cache_dir

    places = {"huggingface cache": hf_cache_dir(), "grpolab cache": cache_dir()}
    details, lows, fails = {}, [], []
    for label, path in places.items():
        free, measured_at = _free_gb(path)
        details[label] = {
            "path": str(path),
            "free_gb": None if free is None else round(free, 1),
            "measured_at": measured_at,
        }
        if free is not None and free < DISK_FAIL_GB:
            fails.append(f"{label} {free:.1f} GB")
        elif free is not None and free < DISK_WARN_GB:
            lows.append(f"{label} {free:.1f} GB")
    summary = "; ".join(f"{label} {d['path']}: {d['free_gb']} GB free" for label, d in details.items())
    if fails:
        return item(
            "disk",
            FAIL,
            f"almost no space: {', '.join(fails)}",
            "free disk space or point HF_HOME / GRPOLAB_CACHE_DIR at a larger disk",
            **details,
        )
    if lows:
        return item(
            "disk",
            WARN,
            f"low space: {', '.join(lows)}",
            "a course model needs 1-17 GB: free space or move HF_HOME",
            **details,
        )
    return item("disk", OK, summary, **details)


def token_item(ctx: Context) -> dict:
    from ..common.paths import HUB_TOKEN_VARS, hub_token, hub_token_file

    token, source = hub_token()
    details = {v: ("set" if os.environ.get(v) else "not set") for v in HUB_TOKEN_VARS}
    details["token_file"] = str(hub_token_file())
    if token:
        return item("huggingface token", OK, f"from {source} (value not shown)", **details)
    return item("huggingface token", OK, "no HF_TOKEN: public models only, at anonymous rate limits",
                "export HF_TOKEN=... for gated models (never bake it into an image)", **details)


def smoke_item(ctx: Context) -> dict:
    from ..common.runlog import last_passing_smoke

    try:
        run = last_passing_smoke()
    except Exception as exc:
        return item("last smoke test", WARN, f"the run log could not be read: {exc}", "check runs/runlog.jsonl")
    if run is None:
        return item(
            "last smoke test", WARN, "no passing smoke test in the run log", "run `grpolab smoke` on this machine"
        )
    old = run.get("fingerprint") or run.get("environment")
    when = run.get("finished_at") or run.get("started_at") or run.get("time") or run.get("run_id", "?")
    drift = fingerprint_drift(old, ctx.fingerprint) if isinstance(old, dict) else []
    details = {"run_id": run.get("run_id"), "when": when, "drift": drift}
    if not isinstance(old, dict):
        return item(
            "last smoke test",
            WARN,
            f"passed at {when}, but it recorded no environment fingerprint",
            "re-run `grpolab smoke`",
            **details,
        )
    if drift:
        return item(
            "last smoke test",
            WARN,
            f"passed at {when}; changed since: {'; '.join(drift)}",
            "re-run `grpolab smoke` before trusting a long run",
            **details,
        )
    return item("last smoke test", OK, f"passed at {when}; nothing that matters has changed since", **details)


def unfinished_item(ctx: Context) -> dict:
    """Runs that left a start record and no end: killed where nothing could log (SIGKILL, the OOM killer)."""
    from ..common.runlog import describe_unfinished, unfinished_runs

    try:
        runs = unfinished_runs()
    except Exception as exc:
        return item("unfinished runs", WARN, f"the run log could not be read: {exc}", "check runs/runlog.jsonl")
    details = {"run_ids": [run.get("run_id") for run in runs]}
    if not runs:
        return item("unfinished runs", OK, "none: every run in the run log ended with a record", **details)
    return item(
        "unfinished runs",
        WARN,
        f"{len(runs)}; the last: {describe_unfinished(runs[-1])}",
        "if it was killed for memory, lower --num-generations or --max-completion-length (`grpolab estimate`)",
        **details,
    )


# --- the report -------------------------------------------------------------------------------------------

ITEMS = (
    system_item,
    memory_item,
    driver_item,
    gpus_item,
    torch_item,
    device_item,
    arch_item,
    kernels_item,
    unified_memory_item,
    rocm_item,
    packages_item,
    lock_drift_item,
    image_item,
    vllm_item,
    llamacpp_item,
    server_item,
    environment_item,
    disk_item,
    token_item,
    smoke_item,
    unfinished_item,
)


def gather(
    track_name: str | None = None,
    rollout: str | None = None,
    server_url: str | None = None,
    host: HostFacts | None = None,
) -> Context:
    """Read everything once; the items only judge. `host` stands in for a machine we don't have (tests)."""
    track = _track(track_name)
    host = host or host_facts()
    build = torch_build()
    devices = torch_devices(build)
    rollout = rollout or (track.rollout if track else DEFAULT_ROLLOUT_PATH)
    return Context(track, build, devices, host, environment_fingerprint(host), rollout, server_url)


def doctor_report(
    track_name: str | None = None, rollout: str | None = None, server_url: str | None = None, ctx: Context | None = None
) -> dict:
    """Every item that applies here, plus the fingerprint they were judged from. Read-only."""
    ctx = ctx or gather(track_name, rollout, server_url)
    items = [i for i in (judge(ctx) for judge in ITEMS) if i is not None]
    worst = FAIL if any(i["status"] == FAIL for i in items) else WARN if any(i["status"] == WARN for i in items) else OK
    return {"schema": "grpolab-doctor", "schema_version": SCHEMA_VERSION, "status": worst,
            "track": ctx.track.name if ctx.track else None, "items": items, "fingerprint": ctx.fingerprint}


def render_report(report: dict, verbose: bool = False) -> str:
    """One line per item, an arrow line with what to do for each warn or fail; with `verbose`, the details."""
    marks = {OK: "ok  ", WARN: "warn", FAIL: "FAIL"}
    width = max(len(i["name"]) for i in report["items"])
    lines = [f"grpolab doctor: track {report.get('track') or '?'}, overall {report['status']}"]
    for i in report["items"]:
        lines.append(f"  [{marks[i['status']]}] {i['name']:<{width}}  {i['summary']}")
        if i["action"] and i["status"] != OK:
            lines.append(f"  {'':6} {'':<{width}}  -> {i['action']}")
        if verbose:
            for key, value in i["details"].items():
                text = value if isinstance(value, str) else json.dumps(value, default=str)
                lines.append(f"  {'':6} {'':<{width}}     {key}: {text}")
    if not verbose:
        lines.append("details: grpolab doctor -v; the whole report as JSON: grpolab doctor --json")
    return "\n".join(lines)
