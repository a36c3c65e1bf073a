"""The doctor's items for what is installed and around it: the packages against the track's lock, the image this
container runs, the environment variables (secrets masked), free disk, the Hugging Face token, and the run log (the
last passing smoke test, runs that never ended). doctor.py runs them, in its order (ITEMS)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
from pathlib import Path

from .fingerprint import fingerprint_drift
from ..common.tracks import packages_left_out
from .doctor_context import FAIL, OK, WARN, Context, item

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
LOCKED_RUNTIME = ("torch", "vllm", "triton")  # a later pip install that replaced one of these is the classic failure


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


def dependencies_item(ctx: Context) -> dict:
    """`pip check` / `uv pip check`'s answer, judged against the track's table: a requirement the track leaves unmet on
    purpose (images/tracks.toml's `excludes` and `overrides`) is named with its reason, and so is a package whose own
    WHEEL file names another platform but that is installed at its locked version (the lock's hash-checked file: the
    tag is its publisher's); anything else is a FAIL."""
    from .requirements_met import judged, other_platform, unmet_requirements

    try:
        unmet, platforms = unmet_requirements(), other_platform()
    except ImportError as error:
        return item("dependencies", FAIL, f"cannot read the packages' requirements: {error}",
                    "install the track's lock (packaging comes with transformers)")
    meant, broken = judged(unmet, ctx.track)
    said = {"meant": [{"unmet": m.describe(), "why": m.why} for m in meant], "broken": [b.describe() for b in broken]}
    path = lock_file(ctx.track)
    locked = locked_versions(path.read_text()) if path is not None and path.is_file() else {}
    for name, version, tags in platforms:
        unsupported = f"{name} {version} names another platform in its WHEEL file ({', '.join(tags)})"
        if locked.get(name) == version:
            said["meant"].append({"unmet": unsupported, "why": f"installed from {path.name}'s hash-checked file, which "
                                  "fits this platform: the tag is its publisher's metadata"})
        else:
            said["broken"].append(unsupported)
    details = {"checked_as": "pip check / uv pip check", **said}
    if said["broken"]:
        more = f" and {len(said['broken']) - 3} more" if len(said["broken"]) > 3 else ""
        return item("dependencies", FAIL, f"{len(said['broken'])} not met: {'; '.join(said['broken'][:3])}{more}",
                    "a package was installed or removed after the image was built: rebuild the image (invoke build), "
                    "or install what is missing at the version asked", **details)
    if said["meant"]:
        track = ctx.track.name if ctx.track else "?"
        named = "; ".join(f"{m['unmet']}: {m['why']}" for m in said["meant"])
        return item("dependencies", OK, f"all met but what track {track} means, as pip check says: {named}", **details)
    return item("dependencies", OK, "every requirement of every installed package met (as pip check says)", **details)


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
