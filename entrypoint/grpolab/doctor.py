"""`grpolab doctor`: what this machine and environment look like, section by section, read-only.

Each section is ok, warn or fail with a one-line action. Nothing trains, nothing downloads, and nothing
prints a token's value. Without a GPU the whole report takes well under five seconds (torch is imported
only when its build can reach an accelerator).
"""

from __future__ import annotations

import grp
import importlib.metadata
import os
import re
import shutil
import sys
from pathlib import Path

from .fingerprint import run_quiet, environment_fingerprint, fingerprint_drift

OK, WARN, FAIL = "ok", "warn", "fail"
TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
DISK_WARN_GB = 20.0  # a couple of course models and an image layer or two
DISK_FAIL_GB = 5.0  # not even Qwen3-1.7B's 4 GB checkpoint


# --- TRL's declared vLLM range (also used by the smoke test's rollout layer and the lock task) ---------------


def _trl_vllm_requirement():
    """TRL's requirement on vllm from its `vllm` extra, as (name, specifier text), or None."""
    try:
        requires = importlib.metadata.requires("trl") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requires:
        try:
            from packaging.requirements import Requirement

            req = Requirement(line)
        except ImportError:  # packaging comes with transformers; this is the fallback parser
            m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*([^;]*)(?:;(.*))?$", line)
            if m and m.group(1).lower() == "vllm" and "vllm" in (m.group(3) or ""):
                return m.group(2).strip()
            continue
        except Exception:
            continue
        if req.name.lower() == "vllm" and req.marker is not None and req.marker.evaluate({"extra": "vllm"}) and not req.marker.evaluate({"extra": ""}):
            return req.specifier
    return None


def trl_vllm_range() -> str | None:
    """The vllm versions installed TRL declares in its `vllm` extra, lower bound first (">=0.22.0,<=0.31.0");
    None when TRL is not installed or declares no range."""
    spec = _trl_vllm_requirement()
    if spec is None:
        return None
    if isinstance(spec, str):
        return spec or None
    order = {">": 0, "~": 1, "=": 2, "<": 3, "!": 4}
    parts = sorted((str(s) for s in spec), key=lambda s: (order.get(s[0], 5), s))
    return ",".join(parts) or None


def vllm_in_trl_range(version: str) -> bool | None:
    """Whether vllm `version` is inside installed TRL's declared range; None when that cannot be told."""
    spec = _trl_vllm_requirement()
    if spec is None or isinstance(spec, str):
        return None
    try:
        return spec.contains(version, prereleases=True)
    except Exception:
        return None


# --- the sections -----------------------------------------------------------------------------------------


def _section(name: str, status: str, summary: str, action: str = "", **details) -> dict:
    return {"name": name, "status": status, "summary": summary, "action": action, "details": details}


def _device_node(path: str) -> dict | None:
    """A device node's owning group and whether this user can open it; None when it does not exist."""
    p = Path(path)
    if not p.exists():
        return None
    st = p.stat()
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    in_group = st.st_gid in os.getgroups() or st.st_gid == os.getegid()
    return {"path": path, "group": group, "gid": st.st_gid, "user_in_group": in_group, "accessible": os.access(path, os.R_OK | os.W_OK)}


def _track():
    try:
        from .tracks import current_track_name, get_track

        return get_track(current_track_name())
    except Exception:
        return None


def accelerator_section(fp: dict, track) -> dict:
    expected = track.expected_device if track else None
    smi = run_quiet(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    rocm = run_quiet(["rocm-smi", "--showproductname"])
    nodes = [n for n in (_device_node("/dev/kfd"), *(_device_node(str(d)) for d in sorted(Path("/dev/dri").glob("renderD*")))) if n]
    if Path("/dev/dri").exists() and not any(n["path"].startswith("/dev/dri") for n in nodes):
        nodes.append(_device_node("/dev/dri"))
    details = {
        "nvidia_smi": smi.splitlines() if smi else None,
        "rocm_smi": [l for l in rocm.splitlines() if l.strip() and not l.startswith("=")] if rocm else None,
        "device_nodes": nodes,
        "torch_device": fp.get("device_type"),
        "device_name": fp.get("device_name"),
        "device_arch": fp.get("device_arch"),
        "driver": fp.get("driver"),
        "expected_device": expected,
    }
    if fp.get("torch_build") == "mps" or sys.platform == "darwin":
        details["mps_available"] = fp.get("device_type") == "mps"
    device = fp.get("device_type")
    where = f"track {track.name} expects {expected}" if track else "no track table"
    blocked = [n["path"] for n in nodes if not n["accessible"]]
    if blocked:
        groups = ", ".join(sorted({n["group"] for n in nodes if not n["accessible"]}))
        return _section("accelerator", FAIL, f"{', '.join(blocked)} present but not usable by this user",
                        f"add the user to the {groups} group(s) (in a container: group_add with their numeric gids)", **details)
    if device in ("cuda", "mps"):
        summary = f"{fp.get('device_name')} ({fp.get('device_arch')}), driver {fp.get('driver') or 'unknown'}"
        if expected and expected != device:
            return _section("accelerator", WARN, f"{summary}, but {where}", "set GRPOLAB_TRACK to this machine's track", **details)
        return _section("accelerator", OK, summary, **details)
    # torch sees no accelerator
    hardware = "an NVIDIA GPU (nvidia-smi answers)" if smi else "an AMD GPU (/dev/kfd)" if any(n["path"] == "/dev/kfd" for n in nodes) else None
    if expected in ("cuda", "mps"):
        if hardware:
            return _section("accelerator", FAIL, f"{hardware} is present but torch ({fp.get('torch_build')} build) cannot use it; {where}",
                            "install the track's lock (its torch build matches the driver), or check the container's device access", **details)
        return _section("accelerator", FAIL, f"no accelerator visible; {where}",
                        "run on the track's machine, pass the GPU into the container (--gpus all, or /dev/kfd and /dev/dri), or use track c", **details)
    if hardware:
        return _section("accelerator", WARN, f"{hardware} is present but torch runs on the CPU ({fp.get('torch_build')} build)",
                        "use the matching track's image to train on the GPU", **details)
    return _section("accelerator", OK, f"no GPU: CPU only ({fp.get('device_name')}), as {where}", **details)


def torch_section(fp: dict, track) -> dict:
    details = {k: fp.get(k) for k in ("torch_version", "torch_build", "torch_cuda", "torch_hip", "torch_arch_list")}
    if fp.get("torch_import_error"):
        return _section("torch", FAIL, f"torch {fp.get('torch_version')} fails to import: {fp['torch_import_error']}",
                        "reinstall from the lock (uv pip sync --require-hashes)", **details)
    if not fp.get("torch_version"):
        return _section("torch", FAIL, "torch is not installed", "install the track's lock (uv pip sync --require-hashes LOCK)", **details)
    build = fp.get("torch_build")
    toolkit = fp.get("torch_cuda") and f"CUDA {fp['torch_cuda']}" or fp.get("torch_hip") and f"HIP {fp['torch_hip']}" or ""
    summary = f"torch {fp['torch_version']} ({build} build{', ' + toolkit if toolkit else ''})"
    if track and track.expected_build not in ("", "any", build):
        return _section("torch", FAIL, f"{summary}, but track {track.name} needs a {track.expected_build} build",
                        "a later pip install may have replaced the locked torch: re-sync the lock", **details)
    arch = track.expected_arch if track else ""
    archs = fp.get("torch_arch_list") or []
    if arch and fp.get("device_type") == "cuda" and archs and arch not in archs:
        return _section("torch", WARN, f"{summary}; compiled for {', '.join(archs)}, not {arch}",
                        "usually runs through a compatible arch (PyPI torch warns falsely on sm_121); if kernels fail, use a build that lists it", **details)
    return _section("torch", OK, summary, **details)


def packages_section(fp: dict, track) -> dict:
    pkgs = fp.get("packages") or {}
    vrange = trl_vllm_range()
    vllm = pkgs.get("vllm")
    inside = vllm_in_trl_range(vllm) if vllm else None
    details = {"versions": pkgs, "trl_vllm_range": vrange, "vllm_in_trl_range": inside}
    missing = [n for n in ("trl", "transformers", "peft", "accelerate", "datasets") if not pkgs.get(n)]
    listed = ", ".join(f"{n} {v}" for n, v in pkgs.items() if v)
    if missing:
        return _section("packages", FAIL, f"missing {', '.join(missing)}", "install the track's lock", **details)
    wants_vllm = bool(track and track.rollout.startswith("vllm"))
    if vllm and inside is False:
        return _section("packages", WARN, f"vllm {vllm} is outside TRL {pkgs.get('trl')}'s declared range {vrange}",
                        f"install a vllm in {vrange} (TRL only warns; its server protocol may not match)", **details)
    if not vllm and wants_vllm:
        return _section("packages", WARN, f"{listed}; vllm absent but track {track.name} rolls out with {track.rollout}",
                        f"install vllm in TRL's range {vrange}, or use --rollout inprocess", **details)
    suffix = f"; vllm {vllm} inside TRL's range {vrange}" if vllm else (f"; TRL's vLLM range {vrange}" if vrange else "")
    return _section("packages", OK, listed + suffix, **details)


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


def disk_section() -> dict:
    from .paths import cache_dir

    places = {"huggingface cache": hf_cache_dir(), "grpolab cache": cache_dir()}
    details, lows, fails = {}, [], []
    for label, path in places.items():
        free, measured_at = _free_gb(path)
        details[label] = {"path": str(path), "free_gb": None if free is None else round(free, 1), "measured_at": measured_at}
        if free is not None and free < DISK_FAIL_GB:
            fails.append(f"{label} {free:.1f} GB")
        elif free is not None and free < DISK_WARN_GB:
            lows.append(f"{label} {free:.1f} GB")
    summary = "; ".join(f"{label} {d['path']}: {d['free_gb']} GB free" for label, d in details.items())
    if fails:
        return _section("disk", FAIL, f"almost no space: {', '.join(fails)}", "free disk space or point HF_HOME / GRPOLAB_CACHE_DIR at a larger disk", **details)
    if lows:
        return _section("disk", WARN, f"low space: {', '.join(lows)}", "a course model needs 1-17 GB: free space or move HF_HOME", **details)
    return _section("disk", OK, summary, **details)


def token_section() -> dict:
    present = [v for v in TOKEN_VARS if os.environ.get(v)]
    details = {v: ("set" if os.environ.get(v) else "not set") for v in TOKEN_VARS}
    if present:
        return _section("huggingface token", OK, f"{' and '.join(present)} set (value not shown)", **details)
    return _section("huggingface token", OK, "no HF_TOKEN: public models only, at anonymous rate limits",
                    "export HF_TOKEN=... for gated models (never bake it into an image)", **details)


def smoke_section(fp: dict) -> dict:
    from .runlog import last_passing_smoke

    try:
        run = last_passing_smoke()
    except Exception as exc:
        return _section("last smoke test", WARN, f"the run log could not be read: {exc}", "check runs/runlog.jsonl")
    if run is None:
        return _section("last smoke test", WARN, "no passing smoke test in the run log", "run `grpolab smoke` on this machine")
    old = run.get("fingerprint") or run.get("environment")
    when = run.get("finished_at") or run.get("started_at") or run.get("time") or run.get("run_id", "?")
    drift = fingerprint_drift(old, fp) if isinstance(old, dict) else []
    details = {"run_id": run.get("run_id"), "when": when, "drift": drift}
    if not isinstance(old, dict):
        return _section("last smoke test", WARN, f"passed at {when}, but it recorded no environment fingerprint", "re-run `grpolab smoke`", **details)
    if drift:
        return _section("last smoke test", WARN, f"passed at {when}; changed since: {'; '.join(drift)}", "re-run `grpolab smoke` before trusting a long run", **details)
    return _section("last smoke test", OK, f"passed at {when}; nothing that matters has changed since", **details)


def doctor_report() -> dict:
    """Every section, plus the fingerprint they were judged from. Read-only; no training, no downloads."""
    fp = environment_fingerprint()
    track = _track()
    sections = [
        accelerator_section(fp, track),
        torch_section(fp, track),
        packages_section(fp, track),
        disk_section(),
        token_section(),
        smoke_section(fp),
    ]
    worst = FAIL if any(s["status"] == FAIL for s in sections) else WARN if any(s["status"] == WARN for s in sections) else OK
    return {"status": worst, "track": track.name if track else None, "sections": sections, "fingerprint": fp}


def render_report(report: dict) -> str:
    marks = {OK: "ok  ", WARN: "warn", FAIL: "FAIL"}
    width = max(len(s["name"]) for s in report["sections"])
    lines = [f"grpolab doctor: track {report.get('track') or '?'}, overall {report['status']}"]
    for s in report["sections"]:
        lines.append(f"  [{marks[s['status']]}] {s['name']:<{width}}  {s['summary']}")
        if s["action"] and s["status"] != OK:
            lines.append(f"  {'':6} {'':<{width}}  -> {s['action']}")
    return "\n".join(lines)
