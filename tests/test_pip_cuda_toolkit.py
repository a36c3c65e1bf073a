"""FlashInfer, vLLM's attention backend on compute 10.x (docs/kernels.md), ships no compiled kernels in the s and n
locks: it compiles them at first use with nvcc, which it finds through CUDA_HOME, else `which nvcc`, else
/usr/local/cuda (flashinfer/jit/cpp_ext.py, get_cuda_path). The locks pin NVIDIA's toolkit as wheels, which lay
themselves out as one CUDA tree (site-packages/nvidia/cu13: bin/nvcc, nvvm's cicc, crt's and cccl's headers), so the
GPU tracks' rows point CUDA_HOME there; their images carry g++ (flashinfer-python's RUNTIME_LIBRARIES row), which
nvcc runs as its host compiler. Here: the row's path is where the image's venv puts those wheels, and the very wheels
of n's lock, installed by their hashes, compile a kernel for B200 (sm_100a) with a g++, and not without one. No GPU is
needed to compile."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "entrypoint")]

from grpolab.common.tracks import get_track  # noqa: E402
from hostlab.locks.lockfile import LOCK_DIR, parse_lock  # noqa: E402

TOOLKIT = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime")
IMAGE_SITE_PACKAGES = "/opt/venv/lib/python{python}/site-packages"  # images/Dockerfile's venv
KERNEL = """
__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""


@pytest.mark.parametrize("track", ["s", "n"])
def test_cuda_home_is_where_the_image_puts_the_locked_toolkit(track):
    row = get_track(track)
    assert row.env["CUDA_HOME"] == IMAGE_SITE_PACKAGES.format(python=row.python) + "/nvidia/cu13"
    lock = parse_lock((LOCK_DIR / f"{track}.txt").read_text())
    assert "flashinfer-python" in lock.packages and all(name in lock.packages for name in TOOLKIT)


def locked_toolkit(tmp_path: Path, track: str = "n") -> Path:
    """The lock's toolkit wheels, installed by their hashes into a folder laid out as the image's site-packages;
    returns the CUDA tree in it."""
    row, lock = get_track(track), parse_lock((LOCK_DIR / f"{track}.txt").read_text())
    requirements = tmp_path / "toolkit.txt"
    requirements.write_text("".join(
        f"{name}=={lock.packages[name]} " + " ".join(f"--hash=sha256:{h.removeprefix('sha256:')}"
                                                     for h in lock.hashes[name]) + "\n"
        for name in TOOLKIT))
    site = tmp_path / "site-packages"
    subprocess.run(["uv", "pip", "install", "--quiet", "--no-deps", "--require-hashes", "--target", str(site),
                    "--python-version", row.python, "--python-platform", row.uv_platform, "-r", str(requirements)],
                   check=True, timeout=600)
    return site / "nvidia" / "cu13"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine: the images' is tested in CI's images")
def test_the_locked_toolkit_compiles_a_kernel_with_gpp_and_not_without(tmp_path):
    cuda_home = locked_toolkit(tmp_path)
    source = tmp_path / "scale.cu"
    source.write_text(KERNEL)
    compile_for_b200 = [str(cuda_home / "bin" / "nvcc"), "-cubin", "-arch=sm_100a", "-o", str(tmp_path / "scale.cubin"),
                        str(source)]
    env = {**os.environ, "CUDA_HOME": str(cuda_home)}
    done = subprocess.run(compile_for_b200, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-800:]
    assert (tmp_path / "scale.cubin").read_bytes()[:4] == b"\x7fELF"
    no_compiler = tmp_path / "bin-without-gpp"  # what the image's PATH was before its g++
    no_compiler.mkdir()
    done = subprocess.run(compile_for_b200, capture_output=True, text=True, timeout=300,
                          env={**env, "PATH": str(no_compiler)})
    assert done.returncode != 0 and "Failed to preprocess host compiler properties" in done.stderr, done.stderr[-800:]
