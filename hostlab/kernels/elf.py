"""What one ELF shared object says about itself: the libraries it links (DT_NEEDED), the GLIBC symbol versions
it needs, the CUDA major it was built for, and its GPU code, or AMD's gfx targets from its clang offload bundle.
Reads files of any CPU architecture (aarch64 on x86 too).

CUDA code is read twice. NVIDIA's cuobjdump lists the fatbin in the .nv_fatbin section (SASS and PTX per arch);
fatbin_code() walks every fatbin header in the whole file (magic 0xBA55ED50), which also finds the fatbins some
libraries keep in their data instead (cuFFT keeps about 24,000 there, and its .nv_fatbin has sm_75 only). Inside
.nv_fatbin the two must agree, or the read fails; the library's code is the union.
"""

from __future__ import annotations

import importlib.util
import mmap
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from .. import HostError

ELF_MAGIC = b"\x7fELF"
CUDA_SECTIONS = (".nv_fatbin", "__nv_relfatbin")  # where nvcc puts device code
HIP_SECTIONS = (".hip_fatbin",)  # clang's offload bundles
# Libraries whose soname major is the CUDA major they belong to (libcufft.so.12 and others belong to CUDA 13).
CUDA_MAJOR_SONAMES = re.compile(r"^lib(cudart|nvrtc|cublas|cublasLt)\.so\.(\d+)$")
CUOBJDUMP_ENTRY = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.((?:sm|compute)_\d+[af]?)\.(?:cubin|ptx)$")
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
FATBIN_SASS, FATBIN_PTX = 2, 1  # entry kinds (others, e.g. 8, are not code a GPU runs or a driver JITs)
FATBIN_ARCH_SPECIFIC = 0x100000  # entry flag cuobjdump shows as the `a` of sm_90a
GFX_TARGET = re.compile(rb"amdgcn-amd-amdhsa-[a-z0-9_-]*?-?(gfx[0-9a-f]+(?:-generic)?)")


@dataclass
class SharedObject:
    path: str  # inside its wheel
    soname: str | None = None
    needed: list[str] = field(default_factory=list)
    glibc: str | None = None  # the newest GLIBC_x.y it needs
    cuda_major: int | None = None  # from the CUDA libraries it links (libcudart.so.N ...)
    sass: list[str] = field(default_factory=list)
    ptx: list[str] = field(default_factory=list)
    gfx: list[str] | None = None  # AMD targets, for a library with a HIP offload bundle
    device_code: bool = False
    embedded_fatbins: int = 0  # fatbins outside .nv_fatbin (in the library's data), read from their headers
    # The PTX ISA version of each PTX arch (the newest, where several entries carry one arch): "9.0" is CUDA 13.0's.
    # The driver JIT-compiles PTX only of an ISA it knows (grpolab.common.gpucode.PTX_ISA_CUDA).
    ptx_isa: dict[str, str] = field(default_factory=dict)


def is_elf(head: bytes) -> bool:
    return head[:4] == ELF_MAGIC


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def read_elf(file: Path, path_in_wheel: str) -> SharedObject | None:
    """The facts of one ELF file (None when it is not a readable ELF shared object)."""
    found = SharedObject(path_in_wheel)
    with open(file, "rb") as f:
        try:
            elf = ELFFile(f)
        except ELFError:
            return None
        glibc = []
        hip = None
        fatbin_range = None
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        found.needed.append(tag.needed)
                    elif tag.entry.d_tag == "DT_SONAME":
                        found.soname = tag.soname
            elif isinstance(section, GNUVerNeedSection):
                for _, auxiliaries in section.iter_versions():
                    glibc += [a.name for a in auxiliaries if a.name.startswith("GLIBC_") and a.name[6:7].isdigit()]
            elif section.name in CUDA_SECTIONS and section.header.sh_size:
                found.device_code = True
                if (
                    fatbin_range is None or section.name == ".nv_fatbin"
                ):  # cuobjdump's choice: executable, else relocatable
                    fatbin_range = (section.header.sh_offset, section.header.sh_offset + section.header.sh_size)
            elif section.name in HIP_SECTIONS and section.header.sh_size:
                hip = section.data()
    found.glibc = max(glibc, key=version_key) if glibc else None
    majors = {int(m.group(2)) for n in found.needed + [found.soname or ""] if (m := CUDA_MAJOR_SONAMES.match(n))}
    found.cuda_major = max(majors) if len(majors) == 1 else (min(majors) if majors else None)
    with open(file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        inside, outside, embedded = fatbin_code(data, fatbin_range)
        isa = ptx_isa_versions(data)
    if fatbin_range:
        listed = cuda_code(file)
        if listed != inside:
            raise HostError(
                f"{path_in_wheel}: cuobjdump lists SASS {listed[0]}, PTX {listed[1]} in .nv_fatbin, the fatbin headers "
                "say "
                f"SASS {inside[0]}, PTX {inside[1]}: the fatbin reader (hostlab/kernels/elf.py) needs fixing"
            )
    if embedded:
        found.device_code, found.embedded_fatbins = True, embedded
    if found.device_code:
        found.sass = sort_archs(set(inside[0]) | set(outside[0]))
        found.ptx = sort_archs(set(inside[1]) | set(outside[1]))
        found.ptx_isa = {arch: isa[arch] for arch in found.ptx if arch in isa}
    if hip is not None:
        found.device_code = True
        found.gfx = sorted({m.decode() for m in GFX_TARGET.findall(offload_bundles(hip))})
    return found


# clang's compressed offload bundles (`clang-offload-bundler --compress`, which PyTorch's ROCm build asks for): magic
# CCOB, u16 version, u16 method (0 zlib, 1 zstd), then by version (LLVM's OffloadBundler.cpp, CompressedOffloadBundle):
# v1 u32 uncompressed size; v2 u32 total size, u32 uncompressed size; v3 u64 total size, u64 uncompressed size; each
# then a u64 hash, then the compressed bundle.
CCOB_MAGIC = b"CCOB"
# Per version: (the sizes' format, the total size's index in them, the uncompressed size's).
CCOB_HEADERS = {1: ("<I", None, 0), 2: ("<II", 0, 1), 3: ("<QQ", 0, 1)}


def offload_bundles(section: bytes) -> bytes:
    """A .hip_fatbin section with every compressed bundle in it decompressed (the uncompressed ones as they are),
    so that their code objects' target names can be read. HostError for a compression this reader cannot undo."""
    parts, start = [section], section.find(CCOB_MAGIC)
    while start != -1:
        version, method = struct.unpack_from("<HH", section, start + 4)
        layout = CCOB_HEADERS.get(version)
        if layout is None and (version > 9 or method > 1):  # the four letters inside other data, not a header
            start = section.find(CCOB_MAGIC, start + 4)
            continue
        if layout is None:
            raise HostError(f"a compressed offload bundle of version {version}, which hostlab/kernels/elf.py does not "
                            "read yet (LLVM's OffloadBundler.cpp says its layout)")
        sizes = struct.unpack_from(layout[0], section, start + 8)
        data_at = start + 8 + struct.calcsize(layout[0]) + 8
        end = start + sizes[layout[1]] if layout[1] is not None else len(section)
        parts.append(_decompress(method, section[data_at:end], sizes[layout[2]]))
        start = section.find(CCOB_MAGIC, max(end, start + 4))
    return b"".join(parts)


def _decompress(method: int, data: bytes, size: int) -> bytes:
    if method == 0:
        return zlib.decompress(data)
    if method == 1:
        import zstandard  # the host extra's (pyproject.toml): only ROCm locks have compressed bundles

        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    raise HostError(f"a compressed offload bundle with compression method {method}, which is neither zlib (0) nor "
                    "zstd (1): hostlab/kernels/elf.py cannot read its targets")


def sort_archs(archs) -> list[str]:
    """sm_90 before sm_90a before sm_100; each once."""
    return sorted(set(archs), key=lambda a: (version_key(a), a))


def fatbins(data):
    """(start, end) of every fatbin in `data` (a whole library), from its header: magic, u16 version, u16 header size,
    u64 size."""
    start = data.find(FATBIN_MAGIC)
    while start != -1:
        version, header, size = struct.unpack_from("<HHQ", data, start + 4)
        end = start + header + size
        if version != 1 or header != 16 or end > len(data):
            start = data.find(FATBIN_MAGIC, start + 4)
            continue
        yield start, end
        start = data.find(FATBIN_MAGIC, max(end, start + 4))


def fatbin_entries(data, start: int, end: int):
    """(kind, arch name, (ISA major, minor)) of each code entry of the fatbin at data[start:end]: entries of u16 kind,
    u16 version, u32 header size, u32 padded payload size, ... u16 minor and u16 major (at 24 and 26: for a PTX entry
    the PTX ISA version, which its `.version` line repeats: on vllm 0.31.0's _vllm_fa2_C all 76 PTX entries read 9.0
    both ways, the other by `cuobjdump -xptx all`), u32 arch (at 28), ... u64 flags (at 40)."""
    entry = start + 16
    while entry + 48 <= end:
        kind, _, entry_header, payload = struct.unpack_from("<HHII", data, entry)
        minor, major, arch = struct.unpack_from("<HHI", data, entry + 24)
        flags = struct.unpack_from("<Q", data, entry + 40)[0]
        if entry_header == 0:
            break
        if kind in (FATBIN_SASS, FATBIN_PTX) and 10 <= arch < 1000:
            yield kind, f"sm_{arch}" + ("a" if flags & FATBIN_ARCH_SPECIFIC else ""), (major, minor)
        entry += entry_header + payload


def fatbin_code(data, inside: tuple[int, int] | None = None) -> tuple[tuple[list, list], tuple[list, list], int]:
    """Every fatbin in `data` (a whole library), from its headers: ((SASS, PTX) within `inside`, (SASS, PTX)
    elsewhere, how many fatbins were elsewhere)."""
    found = {True: (set(), set()), False: (set(), set())}
    elsewhere = 0
    for start, end in fatbins(data):
        within = inside is not None and inside[0] <= start < inside[1]
        elsewhere += not within
        for kind, name, _ in fatbin_entries(data, start, end):
            found[within][0 if kind == FATBIN_SASS else 1].add(name)
    (sass_in, ptx_in), (sass_out, ptx_out) = found[True], found[False]
    return (sort_archs(sass_in), sort_archs(ptx_in)), (sort_archs(sass_out), sort_archs(ptx_out)), elsewhere


def ptx_isa_versions(data) -> dict[str, str]:
    """The newest PTX ISA version ("9.0") of each PTX arch in `data`'s fatbins."""
    newest: dict[str, tuple[int, int]] = {}
    for start, end in fatbins(data):
        for kind, name, isa in fatbin_entries(data, start, end):
            if kind == FATBIN_PTX:
                newest[name] = max(newest.get(name, isa), isa)
    return {arch: f"{major}.{minor}" for arch, (major, minor) in sorted(newest.items())}


def cuobjdump() -> str:
    """NVIDIA's cuobjdump: the PyPI package nvidia-cuda-cuobjdump's (site-packages/nvidia/cu13/bin), else PATH's."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob("cu*/bin/cuobjdump"), reverse=True):
            return str(candidate)
    found = shutil.which("cuobjdump")
    if not found:
        raise HostError(
            "NVIDIA's cuobjdump is not installed: `uv pip install nvidia-cuda-cuobjdump` (it is in pyproject.toml's "
            "test extra, lockfiles/test-tools.txt), or put a CUDA toolkit's bin/ on PATH"
        )
    return found


def cuobjdump_lists(output: str) -> tuple[list[str], list[str]]:
    """(SASS archs, PTX archs) from `cuobjdump --list-elf --list-ptx` output, sorted, each once."""
    sass, ptx = set(), set()
    for line in output.splitlines():
        m = CUOBJDUMP_ENTRY.match(line.strip())
        if m:
            (sass if m.group(1) == "ELF" else ptx).add(m.group(2).replace("compute_", "sm_"))
    return sort_archs(sass), sort_archs(ptx)


def cuda_code(file: Path) -> tuple[list[str], list[str]]:
    """SASS and PTX archs of one library, read by cuobjdump (executable fatbins; relocatable ones when that is all)."""
    outputs = []
    for flag in ("--list-elf", "--list-ptx"):
        proc = subprocess.run([cuobjdump(), flag, str(file)], capture_output=True, text=True)
        if proc.returncode != 0 and "does not contain device code" not in proc.stderr:
            raise HostError(
                f"cuobjdump {flag} {file.name} failed (exit {proc.returncode}): {proc.stderr.strip()[:300]}"
            )
        outputs.append(proc.stdout)
    return cuobjdump_lists("\n".join(outputs))
