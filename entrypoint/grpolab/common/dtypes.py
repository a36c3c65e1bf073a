"""The dtype the weights load in on a device: the one place the lab's "auto" is decided (see
settings/lab_settings.py), shared by the lab and the host's generated tables (hostlab/kernels/readme.py)."""

from __future__ import annotations


def dtype_on(dtype: str, device_type: str) -> str:
    """The dtype the weights load in on `device_type`: `dtype` itself, or for "auto" bf16 on CUDA and ROCm (torch
    calls both "cuda") and float32 on MPS and the CPU (see settings/lab_settings.py). The one place that rule lives."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device_type == "cuda" else "float32"
