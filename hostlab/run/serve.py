"""`invoke serve`: the vLLM server for TRL's server mode, as the Compose `vllm` service of the image last built.

The image's `grpolab serve` builds the command (TRL's flags, the lab's model); this side only checks the host
and starts the service. On NVIDIA tracks the server takes one GPU (VLLM_GPU, default 1); the trainer needs
another. Track cv's image serves on the CPU (vLLM's CPU build): the server answers and generates, but TRL's
weight transfer is NCCL (CUDA GPUs), so a trainer against it is refused and colocate is the way to train.
It is published on this host's loopback interface (VLLM_BIND=127.0.0.1) unless `expose` says otherwise, in
which case the image's own warning (what an unauthenticated server exposes) is printed first.
"""

from __future__ import annotations

import os
import subprocess

from grpolab.common.health import DEFAULT_HOST, ServerNotReady, exposure_warning, wait_for_health
from grpolab.common.tracks import get_track, load_tracks

from .. import REPO, HostError
from ..host import engine
from ..host.console import say, warn
from ..host.detect import HostFacts, host_problems
from ..host.tools import compose_command, resolved
from ..images.compose import ENV_FILE, recorded_track, serves_vllm, syncs_with_server


def server_tracks() -> list[str]:
    return [name for name, track in load_tracks().items() if serves_vllm(track)]


def server_up_command(detach: bool) -> list[str]:
    return compose_command("--profile", "server", "up", *(["--detach"] if detach else []), "vllm")


def server_exited() -> bool:
    """Has the Compose service `vllm` stopped (vLLM's start failed)? Then waiting longer cannot help."""
    proc = subprocess.run(
        resolved(compose_command("--profile", "server", "ps", "--all", "--status", "exited", "--quiet", "vllm")),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return bool(proc.stdout.strip())


def wait_until_healthy(port: int, timeout_s: float, interval_s: float = 5.0, exited=lambda: False) -> float:
    """Poll the published /health until it answers, printing progress; HostError after timeout_s, or as soon as
    `exited()` says the server stopped."""

    def progress(waited: float) -> None:
        if exited():
            raise HostError(
                f"the vLLM server stopped after {waited:.0f} s without answering /health: see `docker compose "
                "logs vllm` for why (its last lines name the failure), fix that, then `invoke serve` again"
            )
        say(f"  waiting for the vLLM server to load the model ... {waited:.0f} s")

    try:
        return wait_for_health(
            f"http://localhost:{port}", timeout_s, "the vLLM server", interval_s,
            start_hint="see `docker compose logs vllm` (a model still downloading, too little GPU memory, or a crash)",
            progress=progress,
        )
    except ServerNotReady as failure:
        raise HostError(str(failure)) from None


EVERY_INTERFACE = "0.0.0.0"


def bind_address(expose: bool) -> str:
    """The host address the server's port is published on: loopback, or every interface when asked (warned)."""
    if not expose:
        return DEFAULT_HOST
    warn(exposure_warning(EVERY_INTERFACE).removeprefix("WARNING: "))
    return EVERY_INTERFACE


def serve(
    gpu: str = "1",
    port: int = 8000,
    detach: bool = False,
    wait_s: float = 900.0,
    facts: HostFacts | None = None,
    env_file=ENV_FILE,
    expose: bool = False,
) -> int:
    recorded = recorded_track(env_file)
    if recorded is None:
        raise HostError(
            f"no image is recorded in {env_file.name}: build one first, e.g. `invoke build --track "
            f"{server_tracks()[0]}`"
        )
    track = get_track(recorded)
    if not serves_vllm(track):
        raise HostError(
            f"the image recorded in .env is track {track.name}'s, which has no vLLM to serve with. Tracks whose image "
            f"can: {', '.join(server_tracks())} (`invoke build --track NAME`); elsewhere use --rollout inprocess"
        )
    engine.client()  # is the engine running? a clear error rather than Compose's
    facts = facts or HostFacts.probe()
    problems = host_problems(track, facts, engine_runtimes=engine.runtimes())
    if problems:
        raise HostError("\n".join(problems))
    if not syncs_with_server(track):
        warn(
            f"track {track.name}'s server runs on the CPU: it answers and generates, but TRL streams the trainer's "
            "weights "
            "with NCCL, which needs CUDA GPUs, so a trainer (`docker compose run lab-server`) is refused; train with "
            "--rollout vllm-colocate on this machine"
        )
    elif facts.nvidia_gpus < 2:
        warn(
            f"this host has {facts.nvidia_gpus} NVIDIA GPU(s): server mode needs the server and the trainer on "
            "separate "
            "GPUs, so a trainer here would be refused. With one GPU use colocate mode (the track's default); this "
            "server can still feed a trainer on another machine"
        )
    bind = bind_address(expose)
    env = {**os.environ, "VLLM_GPU": str(gpu), "VLLM_PORT": str(port), "VLLM_BIND": bind}
    cmd = server_up_command(detach)
    say(
        f"$ {'VLLM_GPU=' + str(gpu) + ' ' if syncs_with_server(track) else ''}VLLM_PORT={port} VLLM_BIND={bind} "
        + " ".join(cmd)
    )
    status = subprocess.run(resolved(cmd), cwd=REPO, env=env).returncode
    if status or not detach:
        return status
    waited = wait_until_healthy(port, wait_s, exited=server_exited)
    reach = f"http://<this host>:{port} from other machines" if expose else f"http://localhost:{port} (this host only)"
    if not syncs_with_server(track):
        say(
            f"vLLM server ready at {reach} after {waited:.0f} s (on the CPU): ask it for completions "
            "(/v1/completions); "
            "stop it with `docker compose --profile server down`"
        )
        return 0
    say(
        f"vLLM server ready at {reach} after {waited:.0f} s (GPU {gpu}). Next: `docker compose run lab-server`, "
        f"or on this host `invoke lab --rollout vllm-server --args '--vllm-server-url http://localhost:{port}'`; "
        "stop it with `docker compose --profile server down`"
    )
    return 0
