"""`grpolab doctor`: what this machine and environment look like, item by item, read-only.

Each item is ok, warn or fail, with one line of what to do; `-v` adds the details, `--json` prints the
report in the versioned format of doctor.schema.json. Nothing trains, nothing downloads, nothing prints a
secret's value. On a machine without a GPU the whole report takes a few seconds (torch is imported only
when its build has device nodes to reach).

Here: the order of the items (ITEMS), reading the Context once (gather), the report and its text form, and the
items a rollout path asks for by name (vllm, llama.cpp, vllm server: tests/test_rollout_paths.py reads their names
from this file). The other items live by layer: doctor_machine.py (the machine, PyTorch and the device layer) and
doctor_setup.py (packages, lock, image, environment, disk, token, run log); doctor_context.py holds the Context and
item() they share.
"""

from __future__ import annotations

import importlib.util
import json
import urllib.request
from pathlib import Path

from .fingerprint import environment_fingerprint
from ..common.rollout_paths import DEFAULT_ROLLOUT_PATH, lock_extras_for, needs_doctor_item
from ..common.tracks import packages_left_out
from .doctor_context import FAIL, OK, WARN, Context, item
from .doctor_machine import (
    arch_item, card_item, compilers_item, device_item, driver_item, gpus_item, kernels_item, memory_item, rocm_item,
    system_item, torch_item, unified_memory_item,
)
from .doctor_setup import (
    dependencies_item, disk_item, environment_item, image_item, lock_drift_item, packages_item, smoke_item, token_item,
    unfinished_item,
)
from .machine import HostFacts, host_facts
from .trl_range import describe_range, range_unknown_because, trl_vllm_range, vllm_in_trl_range
from .torch_build import torch_build, torch_devices

SCHEMA_VERSION = 2  # doctor.schema.json; raise it when a field changes meaning or goes away
SCHEMA_FILE = Path(__file__).with_name("doctor.schema.json")
SERVER_TIMEOUT_S = 3.0


def _track(name: str | None):
    try:
        from ..common.tracks import current_track_name, get_track

        return get_track(name or current_track_name())
    except Exception:
        return None


# --- the items a rollout path asks for by name ------------------------------------------------------------


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
    card_item,
    compilers_item,
    unified_memory_item,
    rocm_item,
    packages_item,
    lock_drift_item,
    dependencies_item,
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
