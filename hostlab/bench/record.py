"""Where a benchmark result came from, and where it is kept.

Every result under bench/ carries a `provenance` block: the commit it was measured at (and whether the tree had
changes on top), the body hash of each lock it ran on (the hash `invoke lock` records, computed here from the body),
the hash of each model's weights, and the machine (CPU model, cores, the instruction-set flags that change a CPU
run's speed, memory, OS and kernel). Results are kept one per kind and case, `bench/<kind>[-<case>].json`: a new
measurement replaces the last one, and git keeps the history.

Results measured before results carried provenance were stamped after the fact from git (`stamped_from_git`): the
commit that added the file, the locks and the tiny model as they were at that commit; the machine was not recorded
then, and the stamp says so rather than guess it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from grpolab.common.filehash import weights_sha256
from grpolab.common.paths import TINY_MODEL_RELATIVE

from .. import REPO
from ..host.tools import resolved
from ..locks.lockfile import body_sha256, parse_lock

BENCH_DIR = REPO / "bench"
TINY_WEIGHTS = Path(TINY_MODEL_RELATIVE) / "model.safetensors"
# CPU flags that change how fast a CPU run goes (torch's kernels pick their path by them); the rest are not recorded.
# x86 names them in /proc/cpuinfo's `flags`, arm64 (track s's GB10) in its `Features`.
SPEED_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)
PROVENANCE_KEYS = ("commit", "tree_dirty", "locks", "models", "machine")


def result_path(kind: str, case: str | None = None, bench_dir: Path = BENCH_DIR) -> Path:
    """bench/<kind>.json, or bench/<kind>-<case>.json with the case's name made a file name ("c, in-process (host)" ->
    "c-in-process-host")."""
    slug = re.sub(r"[^a-z0-9.]+", "-", case.lower()).strip("-") if case else ""
    return bench_dir / (f"{kind}-{slug}.json" if slug else f"{kind}.json")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        resolved(["git", *args]), cwd=repo, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def machine() -> dict:
    """This machine's facts that a timing depends on, read from /proc and the platform module."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = set((re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, re.M) or [None, ""])[1].split())
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    total_kib = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    os_release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', os_release, re.M)
    return {
        "cpu_model": model[1].strip() if model else platform.processor() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_flags": [flag for flag in SPEED_FLAGS if flag in flags],
        "memory_gib": round(int(total_kib[1]) / 2**20, 1) if total_kib else None,
        "os": pretty[1] if pretty else platform.platform(),
        "kernel": platform.release(),
        "arch": platform.machine(),
    }


def lock_body_hash(text: str) -> str:
    """The sha256 of a lock's body, computed (not the header's word for it)."""
    return body_sha256(parse_lock(text).body)


def provenance(tracks: tuple[str, ...], models: dict[str, str | None], repo: Path = REPO) -> dict:
    """The block every result carries, for a result measured now on this checkout. `models`: name -> the folder of
    its weights (None for a model with no file to hash, such as a random model of a shape)."""
    locks = {track: lock_body_hash((repo / "lockfiles" / f"{track}.txt").read_text()) for track in tracks}
    return {
        "commit": _git(repo, "rev-parse", "HEAD").strip(),
        # Results and their page are what benchmarks write: a change there is not a change to what is measured.
        "tree_dirty": bool(
            _git(
                repo, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench", ":!docs/benchmarks.md"
            ).strip()
        ),
        "locks": locks,
        "models": {name: _weights_hash(folder) for name, folder in models.items()},
        "machine": machine(),
        "recorded": "when measured",
    }


def _weights_hash(folder: str | None) -> str:
    if folder is None:
        return "random weights of that shape: no file to hash"
    return weights_sha256(Path(folder))


def stamped_from_git(path: Path, tracks: tuple[str, ...], models: tuple[str, ...], repo: Path = REPO) -> dict:
    """The block for a result written before results carried one: the commit that added `path`, the locks' body
    hashes and the tiny model's weights as that commit had them, the machine not recorded."""
    added = _git(repo, "log", "--diff-filter=A", "--format=%H", "--", str(path.relative_to(repo))).split()
    if not added:
        raise ValueError(f"{path} was never committed: nothing in git says when it was measured")
    commit = added[-1]  # the first commit that added it (git log lists the newest first)
    locks = {track: lock_body_hash(_git(repo, "show", f"{commit}:lockfiles/{track}.txt")) for track in tracks}
    weights = {}
    for name in models:
        if name == "tiny":
            blob = subprocess.run(
                resolved(["git", "show", f"{commit}:{TINY_WEIGHTS}"]),
                cwd=repo,
                capture_output=True,
                check=True,
                timeout=60,
            ).stdout
            weights[name] = hashlib.sha256(blob).hexdigest()
        else:
            weights[name] = _weights_hash(None)
    return {
        "commit": commit,
        "tree_dirty": None,  # not known: the result may have been measured on changes that commit then took in
        "locks": locks,
        "models": weights,
        "machine": "not recorded (measured before results recorded it; the result's own host fields, if any, are all "
                   "that is known)",
        "recorded": f"after the fact, from git, on {datetime.now(timezone.utc).strftime('%Y-%m-%d')}",
    }


def missing_provenance(record: dict) -> list[str]:
    """The provenance keys a result lacks (an empty list: it says where it came from)."""
    block = record.get("provenance")
    if not isinstance(block, dict):
        return list(PROVENANCE_KEYS)
    return [key for key in PROVENANCE_KEYS if key not in block or (key in ("commit", "machine") and not block[key])]


def write_result(
    kind: str,
    record: dict,
    tracks: tuple[str, ...],
    models: dict[str, str | None],
    case: str | None = None,
    bench_dir: Path = BENCH_DIR,
    repo: Path = REPO,
) -> Path:
    """Write one result as bench/<kind>[-<case>].json (replacing the last of its kind and case), provenance included."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    record = {"kind": kind, **({"case": case} if case else {}), "when": stamp, **record,
              "provenance": provenance(tracks, models, repo)}
    bench_dir.mkdir(parents=True, exist_ok=True)
    path = result_path(kind, case, bench_dir)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
