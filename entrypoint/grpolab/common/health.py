"""A rollout server's network side: whether it is up (one JSON request, the bounded wait on GET /health),
where it listens by default and what listening elsewhere exposes.

Shared by the lab (llama-server and vLLM rollouts, `grpolab serve`) and the host side (`invoke serve`); it
imports only the standard library and grpolab.common.errors.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from .errors import LayerFailure

# What a request to a server that is down, refusing or silent raises.
UNREACHABLE_ERRORS = (urllib.error.URLError, OSError, TimeoutError)


DEFAULT_HOST = "127.0.0.1"  # this machine only; another address is an explicit choice (EXPOSED_WARNING)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
EXPOSED_WARNING = (
    "the vLLM server listens on {host}: it answers every machine that can reach this one there (in a container: "
    "whatever reaches the container's network or a port published from it), with no authentication (TRL's client "
    "cannot send vLLM's API key): anyone there can generate with the model, call vLLM's development endpoints "
    "(VLLM_SERVER_DEV_MODE: server info, sleep/wake, collective RPC) and replace the model's weights through "
    "the weight-transfer endpoints. Expose it only on a network you trust (or behind a firewall or an SSH tunnel)."
)

def exposure_warning(host: str) -> str | None:
    """What listening on `host` exposes, in words; None for the loopback interface."""
    if host in LOOPBACK_HOSTS:
        return None
    return "WARNING: " + EXPOSED_WARNING.format(host=host)



class ServerNotReady(LayerFailure):
    """A server did not answer /health in time; in the lab that is the rollout layer failing."""

    def __init__(self, what: str, action: str):
        super().__init__("rollout", what, action)


def http_json(url: str, payload: dict | None = None, timeout_s: float = 10.0) -> tuple[int, dict | str]:
    """(HTTP status, the body as JSON, or as text when it is not JSON); POSTs `payload` when given."""
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read().decode("utf-8", "replace")
            status = response.status
    except urllib.error.HTTPError as error:
        body, status = error.read().decode("utf-8", "replace"), error.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def wait_for_health(
    base_url: str, timeout_s: float, what: str, interval_s: float = 1.0, start_hint: str = "", progress=None
) -> float:
    """Poll GET {base_url}/health until it answers 200, for at most timeout_s; returns the seconds waited.
    progress(seconds waited), when given, is called after each poll that found the server not ready.
    Raises ServerNotReady, naming `what` and the last answer, with `start_hint` as what to do."""
    started = time.monotonic()
    last = "no answer"
    while True:
        try:
            status, body = http_json(f"{base_url.rstrip('/')}/health", timeout_s=max(0.5, min(5.0, timeout_s)))
            if status == 200:
                return time.monotonic() - started
            last = f"HTTP {status}: {str(body)[:200]}"
        except UNREACHABLE_ERRORS as error:
            last = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
        waited = time.monotonic() - started
        if waited >= timeout_s:
            raise ServerNotReady(f"{what} at {base_url} did not answer /health within {timeout_s:g} s (last: {last})",
                                 start_hint or "start it, check the URL and port, or wait longer")
        if progress:
            progress(waited)
        time.sleep(min(interval_s, max(0.0, timeout_s - waited)))
