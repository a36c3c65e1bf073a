"""`invoke kernels --track T`: which GPUs a track's image runs on, read from its locked wheels without a GPU.

Every ELF shared object in the lock's wheels (for the track's platform, fetched by the lock's hashes) is read:
the libraries it links resolve to another locked wheel, the base image or the host's driver; its GLIBC needs fit
the base's glibc; the CUDA major it was built for agrees with torch's; and for each GPU the track serves, its
code runs natively, by JIT from PTX, or not at all (grpolab.common.gpucode's rules). The table goes to
lockfiles/<track>.kernels.json, so a lock change shows its kernel change in the same diff. The lock refuses
(problems()) a library the track's default rollout path needs without code for the track's own GPUs, CUDA
majors that disagree, and a library that cannot load (unresolved DT_NEEDED, GLIBC newer than the base's).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from grpolab.common.card_verdict import gpu_dtype, path_libraries
from grpolab.common.gpucode import (
    FORMAT,
    JIT,
    NONE,
    cards,
    driver_for_ptx,
    driver_key,
    driver_minimum,
    jit_isa,
    load_table,
    needed_by,
    parse_arch,
    table_path,
    verdict,
)
from grpolab.common.tracks import Track, get_track, load_tracks

from .. import REPO, HostError
from ..host.console import say
from ..locks.lockfile import LOCK_DIR, lock_path, parse_lock
from ..locks.provenance import CACHE
from ..locks.wheels import LockedFile, fetch, locked_files
from . import library_rules
from .elf import SharedObject, is_elf, read_elf, version_key

SCAN_VERSION = 3  # raise when read_elf learns something new: cached scans of older versions are read again
# A table is a function of the locked wheels (their hashes are in the lock, so the lock's body hash names them) and
# of the code that reads them: these files. The table records both; CI reads the wheels again only when either moved.
# gpucode.py asks each rollout path's description (common/rollout_paths/) which libraries it launches kernels from.
READER_FILES = (
    "hostlab/kernels/table.py",
    "hostlab/kernels/elf.py",
    "hostlab/kernels/library_rules.py",
    "hostlab/locks/wheels.py",
    "hostlab/locks/lockfile.py",
    "entrypoint/grpolab/common/gpucode.py",
    *sorted(
        f"entrypoint/grpolab/common/rollout_paths/{p.name}"
        for p in (REPO / "entrypoint" / "grpolab" / "common" / "rollout_paths").glob("*.py")
    ),
)
SCAN_CACHE = CACHE.parent / "kernels"
# The base images' libraries (Debian trixie), measured on the stand-in base CI builds from:
# `docker run --rm grpolab-base:trixie-amd64 ldconfig -p` (glibc 2.41). python:3.1x-slim-trixie is Debian trixie
# too; its Python links a subset of these (libssl, libsqlite3, libffi, libz, libbz2, liblzma, libexpat, ncurses).
BASE_GLIBC = "2.41"
BASE_LIBRARIES = frozenset(
    "ld-linux-x86-64.so.2 ld-linux-aarch64.so.1 libBrokenLocale.so.1 libacl.so.1 libanl.so.1 libattr.so.1 "
    "libaudit.so.1 "
    "libblkid.so.1 libbsd.so.0 libbz2.so.1.0 libc.so.6 libc_malloc_debug.so.0 libcap-ng.so.0 libcap.so.2 libcrypt.so.1 "
    "libcrypto.so.3 libdb-5.3.so libdl.so.2 libexpat.so.1 libexpatw.so.1 libffi.so.8 libformw.so.6 libgcc_s.so.1 "
    "libgmp.so.10 libhistory.so.8 libhogweed.so.6 liblz4.so.1 liblzma.so.5 libm.so.6 libmd.so.0 libmenuw.so.6 "
    "libmount.so.1 libmvec.so.1 libncursesw.so.6 libnettle.so.8 libnsl.so.1 libnss_compat.so.2 libnss_dns.so.2 "
    "libnss_files.so.2 libpam.so.0 libpanelw.so.6 libpcre2-8.so.0 libpthread.so.0 libreadline.so.8 libresolv.so.2 "
    "librt.so.1 libseccomp.so.2 libselinux.so.1 libsmartcols.so.1 libsqlite3.so.0 libssl.so.3 libstdc++.so.6 "
    "libsystemd.so.0 libthread_db.so.1 libtinfo.so.6 libudev.so.1 libutil.so.1 libuuid.so.1 libxxhash.so.0 libz.so.1 "
    "libzstd.so.1".split()
)
# What the host's driver provides at run time: never in a wheel or the image. (ROCm has no entry: its user-space
# runtime, libamdhip64 and libhsa-runtime64, comes in the wheels; the host gives only the amdgpu kernel driver,
# reached through /dev/kfd and /dev/dri.)
HOST_DRIVER = {
    "libcuda.so.1": "NVIDIA's driver API: installed with the host's driver, mounted into the container by the NVIDIA "
                    "Container Toolkit",
    "libnvidia-ml.so.1": "NVML, nvidia-smi's library: from the host's driver, mounted by the NVIDIA Container Toolkit",
}
# Libraries that link what the image does not have on purpose: plugins their package loads with dlopen only when
# that is there, each with the reason. They are listed in the table (optional_unresolved), not refused.
OPTIONAL_PLUGINS = {
    "torchcodec/libtorchcodec_*": "torchcodec ships one library per FFmpeg major and loads the one matching the "
                                  "system's FFmpeg; the image has no FFmpeg and the lab decodes no video",
    "nvidia/nvshmem/lib/nvshmem_bootstrap_*": "NVSHMEM's bootstrap plugins (MPI, PMIx, OpenSHMEM), loaded only when "
                                              "NVSHMEM is set up to bootstrap through them",
    "nvidia/nvshmem/lib/nvshmem_transport_*": "NVSHMEM's network transports (InfiniBand, libfabric, UCX), loaded only "
                                              "on a multi-node network",
    "nvidia/cu*/lib/libcufile_rdma.so*": "cuFile's RDMA library (GPUDirect Storage over InfiniBand), loaded only with "
                                         "an RDMA setup",
    "numba/np/ufunc/omppool*": "numba's OpenMP threading layer, tried only when libgomp is present; numba falls back "
                               "to its own workqueue layer",
    "numba/np/ufunc/tbbpool*": "numba's TBB threading layer, tried only when libtbb is present; numba falls back to "
                               "its own workqueue layer",
}


def optional_plugin(path: str) -> str | None:
    return next((why for pattern, why in OPTIONAL_PLUGINS.items() if fnmatch.fnmatch(path, pattern)), None)


# ------------------------------------------------------------------------------------------ reading wheels
def scan_wheel(wheel: Path) -> list[SharedObject]:
    """Every ELF shared object in one wheel."""
    found = []
    with zipfile.ZipFile(wheel) as whl, tempfile.TemporaryDirectory(prefix="grpolab-kernels-") as tmp:
        for info in whl.infolist():
            base = info.filename.rsplit("/", 1)[-1]
            if info.is_dir() or not (base.endswith(".so") or ".so." in base):
                continue
            with whl.open(info) as member:
                if not is_elf(member.read(4)):
                    continue
            target = Path(tmp) / "object.so"
            with whl.open(info) as member, open(target, "wb") as out:
                while chunk := member.read(1 << 22):
                    out.write(chunk)
            shared = read_elf(target, info.filename)
            if shared:
                found.append(shared)
            target.unlink()
    return found


def facts_path(file: LockedFile, cache: Path = SCAN_CACHE) -> Path:
    return cache / f"{file.sha256}.v{SCAN_VERSION}.json"


def wheel_facts(file: LockedFile, wheel: Path | None, cache: Path = SCAN_CACHE) -> dict:
    """What one wheel says ({"objects": its shared objects, "rules": its library rules or None, "torch_cuda"}), read
    once and kept in `cache` by the wheel's sha256, so that a table is made again without the wheel."""
    kept = facts_path(file, cache)
    if not kept.exists():
        reader = RULE_READERS.get(file.project)
        facts = {
            "objects": [asdict(o) for o in scan_wheel(wheel)],
            "rules": reader(wheel, file.version) if reader else None,
            "torch_cuda": torch_cuda(wheel) if file.project == "torch" else None,
        }
        cache.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(facts))
    return json.loads(kept.read_text())


def torch_cuda(wheel: Path) -> str | None:
    """torch's version.py `cuda` ("13.0"), or None for a build without CUDA."""
    with zipfile.ZipFile(wheel) as whl:
        text = whl.read("torch/version.py").decode()
    for line in text.splitlines():
        if line.startswith("cuda"):
            value = line.split("=", 1)[1].split("#")[0].strip()
            return None if value == "None" else value.strip("'\"")
    return None


# The libraries whose own code says what they do per card (hostlab/kernels/library_rules.py), by locked project.
RULE_READERS = {"vllm": library_rules.read_vllm, "torch": library_rules.read_torch, "triton": library_rules.read_triton}


# ------------------------------------------------------------------------------------------ the table
def build_table(
    track: Track, scans: dict[str, list[SharedObject]], torch_cuda_version: str | None, lock_body_sha256: str,
    library_rules: dict | None = None,
) -> dict:
    """The kernels table from every wheel's shared objects ({"name version": [...]})."""
    # The base images' Python (python:3.1x-slim) is built with --enable-shared: /usr/local/lib/libpython3.1x.so.1.0,
    # which an extension that links libpython (cuda-tile's _cext) finds. (The stand-in base's Debian python3 has it
    # only with the libpython3.1x package.)
    provided = set(BASE_LIBRARIES) | set(HOST_DRIVER) | {f"libpython{track.python}.so.1.0"}
    for objects in scans.values():
        for o in objects:
            provided.add(o.path.rsplit("/", 1)[-1])
            provided.update([o.soname] if o.soname else [])
    cuda_major = int(torch_cuda_version.split(".")[0]) if torch_cuda_version else None
    libraries, unresolved, optional, glibc_too_new, majors, host_used = [], [], {}, [], defaultdict(list), set()
    newest_glibc = None
    for wheel, objects in sorted(scans.items()):
        for o in sorted(objects, key=lambda o: o.path):
            for name in o.needed:
                if name in HOST_DRIVER:
                    host_used.add(name)
                elif name not in provided:
                    if optional_plugin(o.path):
                        optional.setdefault(o.path, {"wheel": wheel, "why": optional_plugin(o.path), "needed": []})[
                            "needed"
                        ].append(name)
                    else:
                        unresolved.append({"wheel": wheel, "library": o.path, "needed": name})
            if o.glibc:
                newest_glibc = max(newest_glibc or o.glibc, o.glibc, key=version_key)
                if version_key(o.glibc) > version_key("GLIBC_" + BASE_GLIBC):
                    glibc_too_new.append({"wheel": wheel, "library": o.path, "glibc": o.glibc})
            if o.cuda_major is not None:
                majors[str(o.cuda_major)].append(f"{wheel}: {o.path}")
            if o.device_code:
                lib = {"wheel": wheel, "path": o.path, "sass": o.sass, "ptx": o.ptx, "ptx_isa": o.ptx_isa}
                if o.gfx is not None:
                    lib["gfx"] = o.gfx
                lib["needed_by_default_rollout"] = needed_by(o.path, track.rollout)
                lib["verdicts"] = {g: verdict(g, o.sass, o.ptx, o.gfx) for g in track.gpus}
                libraries.append(lib)
    return {
        "format": FORMAT,
        "made_by": f"invoke kernels --track {track.name}",
        "track": track.name,
        "lock_body_sha256": lock_body_sha256,
        "platform": track.uv_platform,
        "python": track.python,
        "rollout": track.rollout,
        "gpus": track.gpus,
        "gpus_required": track.gpus_required,
        "torch_cuda": torch_cuda_version,
        "cuda_major": cuda_major,
        "driver_minimum": driver_minimum({"cuda_major": cuda_major}),
        "base_glibc": BASE_GLIBC,
        "newest_glibc_needed": newest_glibc,
        "wheels_read": len(scans),
        "shared_objects": sum(len(v) for v in scans.values()),
        "host_driver_libraries": {name: HOST_DRIVER[name] for name in sorted(host_used)},
        "cuda_majors": {m: sorted(v) for m, v in sorted(majors.items())},
        "unresolved": unresolved,
        "optional_unresolved": optional,
        "glibc_too_new": glibc_too_new,
        "libraries": libraries,
        "library_rules": library_rules or {},
    }


def problems(table: dict) -> tuple[list[str], list[str]]:
    """(refusals, warnings) by the lock's rules, from a table alone (offline)."""
    refusals, warnings = [], []
    required = table.get("gpus_required", [])
    used = used_on(table)
    for lib in table.get("libraries", []):
        if not lib.get("needed_by_default_rollout"):
            continue
        where = f"{lib['wheel']}, {lib['path']}"
        code = f"SASS {', '.join(lib['sass']) or 'none'}; PTX {', '.join(lib['ptx']) or 'none'}"
        for gpu in (g for g in required if lib["path"] in used[g]):
            v = verdict(gpu, lib["sass"], lib["ptx"], lib.get("gfx"))
            if v == NONE:
                refusals.append(
                    f"{where}: no code for {gpu} ({cards(gpu)}), which track {table['track']}'s {table['rollout']} "
                    f"path needs ({code})"
                )
            elif v == JIT:
                warnings.append(
                    f"{where}: only PTX for {gpu} ({cards(gpu)}): the driver JIT-compiles it at first use ({code})"
                )
    majors = table.get("cuda_majors", {})
    want = (
        str(table.get("cuda_major"))
        if table.get("cuda_major")
        else (max(majors, key=lambda m: len(majors[m])) if majors else None)
    )
    for major, libs in majors.items():
        if major != want:
            shown = "; ".join(libs[:5]) + (f"; and {len(libs) - 5} more" if len(libs) > 5 else "")
            refusals.append(f"built for CUDA {major}, but torch is built for CUDA {want}: {shown}")
    for u in table.get("unresolved", []):
        refusals.append(
            f"{u['wheel']}, {u['library']}: links {u['needed']}, which no locked wheel, the base image or the host's "
            "driver provides"
        )
    refusals += jit_driver_refusals(table) + triton_refusals(table)
    for g in table.get("glibc_too_new", []):
        refusals.append(
            f"{g['wheel']}, {g['library']}: needs {g['glibc']}, newer than the base image's glibc "
            f"{table.get('base_glibc')}"
        )
    return refusals, warnings


def used_on(table: dict) -> dict[str, set[str]]:
    """{GPU: the libraries the default path launches kernels from there}, as the card verdict counts them: where
    vLLM's attention backend on that card is not FlashAttention (FlashInfer on compute 10.x), its libraries are not."""
    asked = gpu_dtype(get_track(table["track"]))
    return {gpu: {lib["path"] for lib in path_libraries(table, gpu, table["rollout"], asked)}
            for gpu in table.get("gpus_required", [])}


def jit_driver_refusals(table: dict) -> list[str]:
    """A library the default path needs only by JIT on one of the track's GPUs, whose PTX needs a newer driver than
    the track declares (its CUDA major's minimum), or whose PTX ISA no table here places."""
    minimum = table.get("driver_minimum")
    refusals, used = [], used_on(table)
    for lib in table.get("libraries", []):
        for gpu in table.get("gpus_required", []):
            if not (lib.get("needed_by_default_rollout") and lib["path"] in used[gpu]):
                continue
            if verdict(gpu, lib["sass"], lib["ptx"], lib.get("gfx")) != JIT:
                continue
            isa = jit_isa(gpu, lib.get("ptx_isa") or {})
            driver = driver_for_ptx(isa) if isa else None
            where = f"{lib['wheel']}, {lib['path']}: only PTX for {gpu} ({cards(gpu)})"
            if driver is None:
                refusals.append(
                    f"{where}, of PTX ISA {isa or 'unread'}, which grpolab/common/gpucode.py's PTX_ISA_CUDA does not "
                    "place: add it from NVIDIA's PTX release history, then `invoke kernels`"
                )
            elif minimum and driver_key(driver)[0] > driver_key(minimum)[0]:
                refusals.append(
                    f"{where}, of PTX ISA {isa}: the driver compiles it from {driver} on, newer than the {minimum} "
                    f"the track declares for CUDA {table.get('cuda_major')}: raise the track's minimum driver "
                    "(DRIVER_MINIMUM) with the reason, or lock a build with machine code for it"
                )
    return refusals


def triton_refusals(table: dict) -> list[str]:
    """Triton compiles its kernels for sm_XYa (from 9.0 on) with its own bundled ptxas: one that does not know the
    track's GPU fails at the first Triton kernel ("Value 'sm_121a' is not defined for option 'gpu-name'")."""
    rule = (table.get("library_rules") or {}).get("triton")
    if not rule or not table.get("cuda_major"):
        return []
    choice, tools = rule.get("choice"), rule.get("ptxas") or {}
    if not choice:
        return [f"{rule['read_from']}: the reader could not place Triton's choice of ptxas: read it again by hand"]
    refusals = []
    for gpu in table.get("gpus_required", []):
        cap = parse_arch(gpu)
        number = cap[0] * 10 + cap[1]
        name = f"sm_{number}" + ("a" if number >= choice["arch_specific_from"] else "")
        tool = "ptxas-blackwell" if number >= choice["blackwell_from"] and "ptxas-blackwell" in tools else "ptxas"
        if name not in (tools.get(tool) or {}).get("archs", []):
            refusals.append(
                f"{rule['read_from'].split(':')[0]}: its {tool} (CUDA {(tools.get(tool) or {}).get('cuda')}) does not "
                f"know {name}, which Triton compiles for on {gpu} ({cards(gpu)})"
            )
    return refusals


def kernels_tracks() -> list[Track]:
    """Tracks whose row names GPUs and whose lock exists here (x's lock is made elsewhere)."""
    return [t for t in load_tracks().values() if t.gpus and lock_path(t).exists()]


def reader_sha256() -> str:
    """The sha256 of the code that makes a table (READER_FILES, with SCAN_VERSION)."""
    digest = hashlib.sha256(f"scan version {SCAN_VERSION}\n".encode())
    for name in READER_FILES:
        digest.update(name.encode() + b"\0" + (REPO / name).read_bytes())
    return digest.hexdigest()


def make_table(track: Track, lock_dir: Path = LOCK_DIR, lock_text: str | None = None) -> tuple[dict, dict]:
    """Read the locked wheels (downloading the missing ones) and return (table, costs)."""
    if not track.gpus:
        raise HostError(
            f"track {track.name} serves no GPU (no `gpus` in its row of images/tracks.toml): no kernels to read"
        )
    if lock_text is None and not lock_path(track, lock_dir).exists():
        raise HostError(
            f"lockfiles/{track.name}.txt does not exist: make it first (`invoke lock --track {track.name}`, or "
            f"lockfiles/{track.name}.README where it is made elsewhere), then read its kernels"
        )
    lock = parse_lock(lock_text if lock_text is not None else lock_path(track, lock_dir).read_text())
    started = time.monotonic()
    files = locked_files(track, lock=lock)
    listed = time.monotonic()
    unread = [f for f in files if not facts_path(f).exists()]
    missing = [f for f in unread if not (CACHE / f.sha256 / f.filename).exists()]
    say(
        f"track {track.name}: {len(files)} binary wheels in lockfiles/{track.name}.txt for {track.uv_platform}, "
        f"{sum(f.size for f in files) / 1e9:.2f} GB; {len(unread)} not read before, {len(missing)} of them to "
        f"download ({sum(f.size for f in missing) / 1e9:.2f} GB) into {CACHE}"
    )
    wheels = {f: fetch(f) for f in unread}
    fetched = time.monotonic()
    facts = {f: wheel_facts(f, wheels.get(f)) for f in files}
    scans = {f"{f.project} {f.version}": [SharedObject(**o) for o in fact["objects"]] for f, fact in facts.items()}
    torch_file = next((f for f in files if f.project == "torch"), None)
    table = build_table(
        track, scans, facts[torch_file]["torch_cuda"] if torch_file else None, lock.header["body-sha256"],
        {f.project: fact["rules"] for f, fact in facts.items() if fact["rules"] is not None},
    )
    table["reader_sha256"] = reader_sha256()
    costs = {
        "index_s": round(listed - started, 1),
        "download_s": round(fetched - listed, 1),
        "read_s": round(time.monotonic() - fetched, 1),
        "downloaded_gb": round(sum(f.size for f in missing) / 1e9, 2),
        "wheels_gb": round(sum(f.size for f in files) / 1e9, 2),
    }
    return table, costs


def table_for_new_lock(track: Track, lock_text: str, lock_dir: Path = LOCK_DIR) -> dict:
    """`invoke lock`'s check of a lock it just made: the kernels table of `lock_text`, written beside it, or a
    HostError naming each wheel, library and what is missing (the caller keeps the old lock then)."""
    table, costs = make_table(track, lock_dir, lock_text)
    refusals, warnings = problems(table)
    for w in warnings:
        say(f"WARNING: {w}")
    if refusals:
        raise HostError(
            f"refusing the lock for track {track.name}: its wheels cannot run on the track's GPUs "
            f"({', '.join(track.gpus_required)}):\n"
            + "\n".join(f"  - {r}" for r in refusals)
        )
    say(
        f"wrote {write_table(table, lock_dir).name}: {len(table['libraries'])} libraries with GPU code (read in "
        f"{costs['read_s']} s)"
    )
    return table


def write_table(table: dict, lock_dir: Path = LOCK_DIR) -> Path:
    path = table_path(table["track"], lock_dir)
    path.write_text(json.dumps(table, indent=1) + "\n")
    return path


def check_table(track: Track, lock_dir: Path = LOCK_DIR) -> tuple[list[str], list[str]]:
    """(problems, warnings) of lockfiles/<track>.kernels.json against its lock, offline: missing, stale, refused."""
    if not track.gpus:
        return [], []
    path, redo = table_path(track.name, lock_dir), f"run `invoke kernels --track {track.name}`"
    table = load_table(path)
    if table is None:
        return [f"{path.name} is missing (or not a kernels table): {redo}"], []
    lock = parse_lock(lock_path(track, lock_dir).read_text())
    stale = [
        f"{key} {table.get(key)!r} (now {want!r})"
        for key, want in (
            ("lock_body_sha256", lock.header["body-sha256"]),
            ("gpus", track.gpus),
            ("gpus_required", track.gpus_required),
            ("rollout", track.rollout),
            ("platform", track.uv_platform),
        )
        if table.get(key) != want
    ]
    if stale:
        return [f"{path.name} is stale: it was read for {'; '.join(stale)}: {redo}"], []
    refusals, warnings = problems(table)
    return [f"{path.name}: {r}" for r in refusals], warnings


# ------------------------------------------------------------------------------------------ output
def render(table: dict) -> list[str]:
    """The table in words: per GPU, which libraries run natively, only by JIT, or not at all."""
    lines = [
        f"track {table['track']} ({table['platform']}, Python {table['python']}): {table['wheels_read']} binary "
        "wheels, "
        f"{table['shared_objects']} shared objects, {len(table['libraries'])} with GPU code",
        f"  CUDA: torch built for {table['torch_cuda'] or 'none'}; needs an NVIDIA driver "
        f"{table['driver_minimum'] or '-'} or newer"
        if table.get("cuda_major")
        else "  no CUDA build of torch",
        "  CUDA majors linked: " + ", ".join(f"CUDA {m}: {len(v)} libraries" for m, v in table["cuda_majors"].items()),
        f"  glibc: newest needed {table['newest_glibc_needed']}, base image has {table['base_glibc']}",
        f"  from the host's driver: {', '.join(table['host_driver_libraries']) or 'nothing'}; unresolved: "
        f"{len(table['unresolved'])}; "
        f"optional plugins that link what the image lacks: {len(table['optional_unresolved'])}",
    ]
    for gpu in table["gpus"]:
        counts = defaultdict(list)
        for lib in table["libraries"]:
            counts[lib["verdicts"][gpu]].append(lib)
        needed = [lib for lib in table["libraries"] if lib["needed_by_default_rollout"]]
        lines.append(
            f"  {gpu} ({cards(gpu)}): native {len(counts['native'])}, JIT {len(counts['jit'])}, none "
            f"{len(counts['none'])}; "
            f"{table['rollout']} path: "
            + ", ".join(
                f"{lib['path'].rsplit('/', 1)[-1]} {lib['verdicts'][gpu]}"
                for lib in needed
                if needed_by(lib["path"], table["rollout"], gpu)
            )
        )
        for kind in (JIT, NONE):
            if counts[kind]:
                lines.append(f"    {kind}: " + ", ".join(lib["path"] for lib in counts[kind]))
    return lines


def verify_committed(track_name: str, lock_dir: Path = LOCK_DIR) -> dict:
    """CI's step. Where the committed table was made from this lock by this reader (its lock_body_sha256 and
    reader_sha256), it is checked offline (check_table: its track row and the refusals) and the wheels are not read
    again: nothing it is made of has changed. Otherwise the track's locked wheels are read again (downloaded where
    not cached) and the committed table must be exactly what they say. The costs, and whether the wheels were read."""
    track = get_track(track_name)
    path = table_path(track.name, lock_dir)
    committed = load_table(path)
    lock_body = parse_lock(lock_path(track, lock_dir).read_text()).header["body-sha256"]
    reader = reader_sha256()
    if committed and committed.get("lock_body_sha256") == lock_body and committed.get("reader_sha256") == reader:
        problems_found, _ = check_table(track, lock_dir)
        if problems_found:
            raise HostError("; ".join(problems_found))
        say(
            f"lockfiles/{path.name} was read from this lock (body {lock_body[:12]}) by this reader ({reader[:12]}, "
            f"{', '.join(READER_FILES)}): "
            f"neither has changed, so the {committed.get('wheels_read')} wheels are not read again (`invoke kernels "
            f"--track {track.name}` reads them)"
        )
        return {"wheels_read_again": False}
    why = (
        "no table"
        if not committed
        else ("the lock changed" if committed.get("lock_body_sha256") != lock_body else "the reader changed")
    )
    say(f"lockfiles/{path.name}: {why} since it was made: reading the locked wheels again")
    table, costs = make_table(track, lock_dir)
    for line in render(table):
        say(line)
    say(
        f"  index {costs['index_s']} s, download {costs['download_s']} s ({costs['downloaded_gb']} GB of "
        f"{costs['wheels_gb']} GB), reading {costs['read_s']} s"
    )
    if committed != table:
        differ = sorted(k for k in table.keys() | (committed or {}).keys() if table.get(k) != (committed or {}).get(k))
        raise HostError(
            f"lockfiles/{path.name} is not what the locked wheels say (differs in: {', '.join(differ)}): run `invoke "
            f"kernels --track {track.name}` and commit it"
        )
    refusals, _ = problems(table)
    if refusals:
        raise HostError(f"track {track.name}'s lock would be refused:\n" + "\n".join(f"  - {r}" for r in refusals))
    return {**costs, "wheels_read_again": True}


def run_kernels(track_name: str | None, as_json: bool = False, lock_dir: Path = LOCK_DIR) -> bool:
    """Read each track's locked wheels, write its table, print it; False when a track's lock would be refused."""
    tracks = [get_track(track_name)] if track_name else kernels_tracks()
    ok, out = True, {}
    for track in tracks:
        with contextlib.redirect_stdout(sys.stderr if as_json else sys.stdout):  # --json: stdout holds the JSON alone
            table, costs = make_table(track, lock_dir)
        path = write_table(table, lock_dir)
        refusals, warnings = problems(table)
        out[track.name] = {"table": str(path), "costs": costs, "refusals": refusals, "warnings": warnings}
        if not as_json:
            for line in render(table):
                say(line)
            say(
                f"  wrote {path.name}; index {costs['index_s']} s, download {costs['download_s']} s "
                f"({costs['downloaded_gb']} GB of "
                f"{costs['wheels_gb']} GB), reading {costs['read_s']} s"
            )
            for w in warnings:
                say(f"  WARNING: {w}")
            for r in refusals:
                say(f"  REFUSED: {r}")
        ok &= not refusals
    if as_json:
        print(json.dumps(out, indent=1))
    return ok
