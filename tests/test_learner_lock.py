"""Track x's lock, made on the learner's machine by the first `invoke build` (hostlab/run/learner_lock.py), for real
against a stand-in of AMD's index on loopback: the real uv resolution with every hash, the real kernels read of a
gfx1151 code object, the real side locks and lock check, up to where the image build starts.

The stand-ins, started here: a PEP 503 folder like AMD's (static pages, `+` written `%2B`, no sizes), answering 403
for every project it does not host, with a torch[device-gfx1151] and the ROCm wheels that extra pulls in; and a
second folder in PyPI's place (UV_DEFAULT_INDEX) with a tiny wheel for each other input of x's lock (their names and
versions read from the lock's own inputs), torch's dependency, and a newer CPU torch that must not win. What differs
from AMD's real index is said in docs/locks-and-images.md ("Track x's lock, made on your machine")."""

import hashlib
import http.server
import io
import json
import os
import struct
import subprocess
import sys
import threading
import zipfile
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.specifiers import SpecifierSet  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402
from packaging.version import Version  # noqa: E402

from hostlab import REPO, HostError  # noqa: E402
from hostlab.images.build import image_uv_config  # noqa: E402
from hostlab.kernels.elf import read_elf  # noqa: E402
from hostlab.kernels.table import problems  # noqa: E402
from hostlab.locks.lockfile import lock_path, parse_lock  # noqa: E402
from hostlab.locks.resolve import check_lock, index_variable, lock_inputs  # noqa: E402
from hostlab.run import learner_lock  # noqa: E402

TORCH_VERSION = "2.12.0+rocm7.14.0"  # TheRock's form: a local version naming the ROCm release
ROCM_VERSION = "7.14.0"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so a wheel's sha256 is the same every run (and cached once)


# --- an ELF shared object, written byte by byte (no compiler needed) ----------------------------------------------
def elf(sections: list[tuple[str, int, bytes, int, int]], machine: int = 62, osabi: int = 0, abi: int = 0,
        flags: int = 0) -> bytes:
    """A little-endian ELF64 ET_DYN with `sections` (name, sh_type, data, sh_link, sh_entsize), after the null one."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name, *_ in sections) + b".shstrtab\0"
    body, headers, offset = b"", [bytes(64)], 64
    for name, kind, data, link, entsize in sections + [(".shstrtab", 3, names, 0, 0)]:
        name_at = names.index(b"\0" + name.encode() + b"\0") + 1
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, offset, len(data), link, 0, 1, entsize))
        body, offset = body + data, offset + len(data)
    ident = b"\x7fELF" + bytes([2, 1, 1, osabi, abi]) + bytes(7)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, offset, flags, 64, 56, 0, 64,
                                 len(headers), len(headers) - 1)
    return header + body + b"".join(headers)


def shared_object(needed: list[str], soname: str = "", hip_fatbin: bytes = b"") -> bytes:
    """A shared object that links `needed` (DT_NEEDED), is called `soname`, and carries `hip_fatbin` as its
    .hip_fatbin section (where hipcc puts a library's GPU code) when given."""
    strings, tags = b"\0", []
    for tag, text in [(1, n) for n in needed] + ([(14, soname)] if soname else []):  # DT_NEEDED, DT_SONAME
        tags.append(struct.pack("<QQ", tag, len(strings)))
        strings += text.encode() + b"\0"
    dynamic = b"".join(tags) + struct.pack("<QQ", 0, 0)  # DT_NULL ends it
    sections = [(".dynstr", 3, strings, 0, 0), (".dynamic", 6, dynamic, 1, 16)]  # SHT_STRTAB; SHT_DYNAMIC -> .dynstr
    return elf(sections + ([(".hip_fatbin", 1, hip_fatbin, 0, 0)] if hip_fatbin else []))


def offload_bundle(gfx_targets: list[str]) -> bytes:
    """clang's uncompressed offload bundle: its magic, the entry count, each entry's (offset, size, id), then the code
    objects: the host's (empty) and one AMDGPU code object per target. Each of those is an ELF header as AMD's are
    (EM_AMDGPU 224, ELFOSABI_AMDGPU_HSA 64, ABI version 3: code object v5) with the target in its flags only for
    gfx1151 (EF_AMDGPU_MACH_AMDGCN_GFX1151 = 0x4a, LLVM's ELF.h); the reader reads the entries' ids."""
    entries = [("host-x86_64-unknown-linux-gnu-", b"")] + [
        (f"hipv4-amdgcn-amd-amdhsa--{gfx}", elf([], 224, osabi=64, abi=3, flags=0x4A if gfx == "gfx1151" else 0))
        for gfx in gfx_targets
    ]
    header_size = 24 + 8 + sum(24 + len(name) for name, _ in entries)
    table, code, offset = b"", b"", header_size
    for name, data in entries:
        table += struct.pack("<QQQ", offset, len(data), len(name)) + name.encode()
        code, offset = code + data, offset + len(data)
    return b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries)) + table + code


def compressed(bundle: bytes, version: int, method: int) -> bytes:
    """`clang-offload-bundler --compress`'s form of a bundle (LLVM's CompressedOffloadBundle): CCOB, version, method
    (0 zlib, 1 zstd), the sizes its version carries, a hash, the compressed bytes."""
    import zlib

    import zstandard

    data = zlib.compress(bundle) if method == 0 else zstandard.ZstdCompressor().compress(bundle)
    sizes = {1: struct.pack("<I", len(bundle)), 2: struct.pack("<II", 24 + len(data), len(bundle)),
             3: struct.pack("<QQ", 32 + len(data), len(bundle))}[version]
    return b"CCOB" + struct.pack("<HH", version, method) + sizes + b"\x11" * 8 + data


@pytest.mark.parametrize("version, method", [(3, 1), (2, 1), (2, 0), (1, 0)])
def test_the_reader_finds_the_targets_in_compressed_bundles(tmp_path, version, method):
    # PyTorch's ROCm build compresses its bundles (--offload-compress): uncompressed, no target name would show
    plain = offload_bundle(["gfx1100", "gfx1151"])
    packed = compressed(plain, version, method)
    assert b"gfx1151" not in packed
    library = tmp_path / "libtorch_hip.so"
    library.write_bytes(shared_object(["libamdhip64.so.7"], hip_fatbin=packed + b"\0" * 8 + compressed(
        offload_bundle(["gfx942"]), version, method) if version > 1 else packed))
    found = read_elf(library, "torch/lib/libtorch_hip.so")
    assert found.gfx == (["gfx1100", "gfx1151", "gfx942"] if version > 1 else ["gfx1100", "gfx1151"])
    assert found.device_code


# --- wheels and the PEP 503 folders that serve them ---------------------------------------------------------------
def wheel(folder: Path, name: str, version: str, tag: str = "py3-none-any", requires: tuple[str, ...] = (),
          extras: tuple[str, ...] = (), files: dict[str, bytes] | None = None) -> None:
    """A wheel of `name` `version` in folder/<name>/, listed in that project's index.html with its sha256."""
    project = folder / canonicalize_name(name)
    project.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Provides-Extra: {e}\n"
                for e in extras) + "".join(f"Requires-Dist: {r}\n" for r in requires))
    members = {**(files or {}), f"{dist}.dist-info/METADATA": metadata.encode(),
               f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
               f"{'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n".encode(),
               f"{dist}.dist-info/RECORD": b""}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as whl:
        for member, data in members.items():
            whl.writestr(zipfile.ZipInfo(member, ZIP_TIME), data)
    filename = f"{dist}-{tag}.whl"
    (project / filename).write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    links = (project / "index.html").read_text() if (project / "index.html").exists() else ""
    (project / "index.html").write_text(links + f'<a href="{quote(filename)}#sha256={digest}">{filename}</a>\n')


def amd_folder(root: Path, gfx_targets: list[str]) -> Path:
    """What AMD's index holds for x: torch with a `device-gfx1151` extra, whose libtorch_hip.so carries code for
    `gfx_targets` and links the HIP runtime, which comes in ROCm's own wheels."""
    fatbin = offload_bundle(gfx_targets)
    wheel(root, "torch", TORCH_VERSION, "cp312-cp312-linux_x86_64",
          requires=("filelock", f'rocm-sdk-libraries-gfx1151=={ROCM_VERSION}; extra == "device-gfx1151"'),
          extras=("device-gfx1151",),
          files={"torch/__init__.py": b"", "torch/version.py": f"__version__ = '{TORCH_VERSION}'\ncuda = None\n"
                 f"hip = '{ROCM_VERSION}'\n".encode(),
                 "torch/lib/libtorch_hip.so": shared_object(["libamdhip64.so.7", "libc.so.6"], "libtorch_hip.so",
                                                            fatbin)})
    wheel(root, "rocm-sdk-libraries-gfx1151", ROCM_VERSION, "py3-none-linux_x86_64", requires=("rocm-sdk-core",),
          files={"_rocm_sdk_libraries_gfx1151/lib/librocblas.so.5": shared_object(
              ["libamdhip64.so.7", "libc.so.6"], "librocblas.so.5", fatbin)})
    wheel(root, "rocm-sdk-core", ROCM_VERSION, "py3-none-linux_x86_64",
          files={"_rocm_sdk_core/lib/libamdhip64.so.7": shared_object(["libc.so.6"], "libamdhip64.so.7")})
    return root


def lowest_allowed(specifier: SpecifierSet) -> str:
    """A version the requirement accepts: its lowest bound where it names one, else 1.0."""
    bounds = [s.version for s in specifier if s.operator in (">=", "==", "~=")]
    version = max(bounds, key=Version) if bounds else "1.0"
    assert Version(version) in specifier, f"pick another version for {specifier}"
    return version


def pypi_folder(root: Path, inputs: list[str]) -> Path:
    """PyPI's stand-in: one tiny wheel for each input of the lock but torch (AMD's), at a version it accepts and
    with the extras it asks for; torch's own dependency; and a CPU torch newer than AMD's, which uv must not take."""
    wanted: dict[str, list] = {}
    for text in inputs:
        req = Requirement(text)
        specs, extras = wanted.setdefault(canonicalize_name(req.name), [SpecifierSet(), set()])
        wanted[canonicalize_name(req.name)] = [specs & req.specifier, extras | req.extras]
    wanted.pop("torch")
    for name, (specifier, extras) in wanted.items():
        wheel(root, name, lowest_allowed(specifier), extras=tuple(sorted(extras)))
    wheel(root, "filelock", "3.20.0")
    wheel(root, "torch", "9.0.0", "cp312-cp312-manylinux_2_28_x86_64", files={"torch/version.py": b"cuda = None\n"})
    return root


class Index:
    """A folder served over HTTP on 127.0.0.1; `only_its_own`: 403 for every project it does not hold, as AMD's
    index answers. Every request is logged as (method, path, status)."""

    def __init__(self, root: Path, only_its_own: bool):
        self.root = root
        log = self.log = []

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self):  # noqa: N802 (http.server's name)
                if only_its_own and not (root / self.path.strip("/").split("/")[0]).is_dir():
                    return self.send_error(403)
                return super().do_GET()

            def log_request(self, code="-", size="-"):
                log.append((self.command, self.path, int(code)))

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def x_on_loopback(tmp_path, monkeypatch):
    """Track x's row as committed less its llamacpp extra (whose side locks need Python 3.12, Docker and Debian's
    archive: tests/test_sourcewheels.py and CI's image builds hold those), AMD's index replaced by its stand-in through
    the variable a learner would use for a mirror, PyPI by its stand-in through uv's UV_DEFAULT_INDEX, uv's cache
    here, and no CI. Yields (track, AMD's stand-in, PyPI's stand-in, the lock folder, a function that builds AMD's
    folder for given gfx targets)."""
    track = replace(get_track("x"), extras=[])
    amd_root = tmp_path / "amd"
    pypi = Index(pypi_folder(tmp_path / "pypi", lock_inputs(track)), only_its_own=False)
    amd = Index(amd_root, only_its_own=True)
    monkeypatch.setenv(index_variable(track), amd.url)
    monkeypatch.setenv("UV_DEFAULT_INDEX", pypi.url)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.delenv("CI", raising=False)
    (tmp_path / "lockfiles").mkdir()
    yield track, amd, pypi, tmp_path / "lockfiles", lambda targets: amd_folder(amd_root, targets)
    for index in (amd, pypi):
        index.server.shutdown()


# --- the whole mechanism -----------------------------------------------------------------------------------------
def test_first_build_asks_then_makes_reads_and_checks_the_lock(x_on_loopback, capsys):
    track, amd, pypi, lock_dir, serve_amd = x_on_loopback
    serve_amd(["gfx1100", "gfx1151"])
    asked = []
    made = learner_lock.ensure_lock(track, skip_host_check=True, lock_dir=lock_dir, interactive=True,
                                    ask=lambda question: asked.append(question) or "")  # Enter: yes
    out = capsys.readouterr().out
    assert made and asked == ["Make lockfiles/x.txt now? [Y/n] "]
    # What it said it would do, before doing it: the steps, the time (predicted, and labelled so), the index in use.
    said = out[: out.index("$ ")]
    assert "has no lock yet" in said and "predicted, not measured" in said and "1.8 GB" in said
    assert f"{index_variable(track)} replaces the row's {get_track('x').index_urls[0]} with {amd.url}" in said
    # The lock: AMD's torch (not PyPI's newer one: uv's first index wins), its ROCm wheels, every file hashed, the
    # rest from PyPI's stand-in after AMD's 403.
    lock = parse_lock(lock_path(track, lock_dir).read_text())
    assert lock.version("torch") == TORCH_VERSION and lock.version("rocm-sdk-core") == ROCM_VERSION
    assert lock.hashes["torch"] == [f"sha256:{sha256_of_only_wheel(amd.root / 'torch')}"]
    assert lock.version("trl") and lock.version("filelock") == "3.20.0" and all(lock.hashes.values())
    assert lock.header["indexes"] == [amd.url] and f"--extra-index-url {amd.url}" in lock.body
    assert any(status == 403 for _, _, status in amd.log), "AMD's stand-in never answered 403: the test lost its point"
    # The kernels table, read from the wheels by their hashes: libtorch_hip.so runs natively on gfx1151, and the HIP
    # runtime it links comes from ROCm's wheel.
    table = json.loads((lock_dir / "x.kernels.json").read_text())
    hip = next(lib for lib in table["libraries"] if lib["path"] == "torch/lib/libtorch_hip.so")
    assert hip["gfx"] == ["gfx1100", "gfx1151"] and hip["verdicts"] == {"gfx1151": "native"}
    assert table["unresolved"] == [] and problems(table) == ([], [])
    assert "gfx1151 (Ryzen AI Max 300" in out and "inprocess path: libtorch_hip.so native" in out  # the learner sees
    # The lock check ran and passed; the files are the learner's; the build's own gate takes the lock as it is.
    assert "x: ok (trl" in out and "These files are yours: keep them and commit them" in out
    assert check_lock(track, lock_dir).ok
    # The next build finds the lock and asks nothing.
    assert not learner_lock.ensure_lock(track, skip_host_check=True, lock_dir=lock_dir, interactive=True,
                                        ask=lambda question: pytest.fail("asked again"))



def test_the_images_install_passes_over_the_403_as_the_resolution_did(x_on_loopback, tmp_path):
    """images/Dockerfile installs the lock with `uv pip sync --config-file uv.toml --require-hashes`, uv.toml being
    what `invoke build` stages (image_uv_config): the lock names AMD's index, which answers 403 for every package it
    does not host; without the track's settings uv stops there, with them it installs the whole lock."""
    track, amd, pypi, lock_dir, serve_amd = x_on_loopback
    serve_amd(["gfx1151"])
    assert learner_lock.ensure_lock(track, skip_host_check=True, lock_dir=lock_dir, interactive=True, ask=lambda q: "y")
    config = tmp_path / "uv.toml"
    config.write_text(image_uv_config(track))
    assert "ignore-error-codes = [403]" in config.read_text() and image_uv_config(get_track("c")) == ""

    def sync(*config_args):  # into a folder, for the track's Python and platform (no Python 3.12 needed here)
        return subprocess.run(["uv", "pip", "sync", *config_args, "--target", str(tmp_path / f"site{len(config_args)}"),
                               "--python-version", track.python, "--python-platform", track.uv_platform,
                               "--require-hashes", str(lock_path(track, lock_dir))], capture_output=True, text=True,
                              timeout=300)

    without = sync()
    assert without.returncode != 0 and "403" in without.stderr, without.stderr[-600:]
    installed = sync("--config-file", str(config))
    assert installed.returncode == 0, installed.stderr[-600:]


def sha256_of_only_wheel(folder: Path) -> str:
    (whl,) = folder.glob("*.whl")
    return hashlib.sha256(whl.read_bytes()).hexdigest()


def test_a_torch_without_gfx1151_code_is_refused_and_leaves_no_lock_behind(x_on_loopback, capsys):
    """AMD's index serving a torch built for other targets: the lock is refused by the kernels read, naming the
    library, and none of its files stay, so the next build asks again."""
    track, amd, pypi, lock_dir, serve_amd = x_on_loopback
    serve_amd(["gfx1100", "gfx1201"])
    with pytest.raises(HostError) as refused:
        learner_lock.ensure_lock(track, make_lock=True, skip_host_check=True, lock_dir=lock_dir)
    assert "torch/lib/libtorch_hip.so: no code for gfx1151" in str(refused.value)
    assert list(lock_dir.iterdir()) == []


def test_no_at_the_prompt_downloads_nothing(x_on_loopback, capsys):
    track, amd, pypi, lock_dir, serve_amd = x_on_loopback
    serve_amd(["gfx1151"])
    with pytest.raises(HostError, match="no lock made for track x, nothing downloaded"):
        learner_lock.ensure_lock(track, skip_host_check=True, lock_dir=lock_dir, interactive=True, ask=lambda q: "n")
    assert "How long: about" in capsys.readouterr().out  # it said what and how long before asking
    assert amd.log == [] and pypi.log == [] and list(lock_dir.iterdir()) == []


def test_end_of_input_at_the_prompt_is_no():
    def closed(question):
        raise EOFError

    assert not learner_lock.said_yes(closed, "?") and learner_lock.said_yes(lambda q: "", "?")
    assert learner_lock.said_yes(lambda q: " Y ", "?") and not learner_lock.said_yes(lambda q: "no", "?")


# --- when a lock is made, and when it is not: every case, without a machine ------------------------------------
X = get_track("x")


@pytest.mark.parametrize("track, lock_exists, make_lock, interactive, ci, want", [
    (X, True, False, True, False, learner_lock.NOTHING),  # the lock is there: the build uses it
    (get_track("n"), False, False, True, False, learner_lock.NOTHING),  # made on our machines: the build refuses
    (X, False, False, True, False, learner_lock.ASK),  # a terminal: it asks
    (X, False, True, False, True, learner_lock.MAKE),  # --make-lock, even in CI: asked for in words
    (X, False, False, False, False, "there is no terminal to ask on"),
    (X, False, False, True, True, "CI is set"),  # a terminal in CI asks nothing and makes nothing
])
def test_when_the_first_build_makes_the_lock(track, lock_exists, make_lock, interactive, ci, want):
    if want in (learner_lock.NOTHING, learner_lock.ASK, learner_lock.MAKE):
        assert learner_lock.choice(track, lock_exists, make_lock, interactive, ci) == want
        return
    with pytest.raises(HostError) as refused:
        learner_lock.choice(track, lock_exists, make_lock, interactive, ci)
    assert want in str(refused.value) and "--make-lock" in str(refused.value)
    assert "`invoke lock --track x` (lockfiles/x.README)" in str(refused.value)


def invoke(*args, **env):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**os.environ, **env}, timeout=120)


@pytest.mark.skipif(lock_path(X).exists(), reason="lockfiles/x.txt exists: nothing is made")
def test_invoke_build_in_ci_makes_no_lock_and_says_what_to_type():
    proc = invoke("build", "--track", "x", CI="true")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "CI is set, so none is made" in proc.stderr and "--make-lock" in proc.stderr
    assert not lock_path(X).exists()


def test_the_help_names_the_flag_and_the_index_variables():
    for task in ("build", "up"):
        shown = " ".join(invoke("--help", task).stdout.split())
        assert "--make-lock" in shown and "GRPOLAB_INDEX_URLS_X" in shown and "UV_DEFAULT_INDEX" in shown
