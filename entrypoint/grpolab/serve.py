"""`grpolab serve`: vLLM's own server, started the way TRL's server mode needs it, for the lab's model.

TRL 1.16 talks to a stock `vllm serve`; its deprecated `trl vllm-serve` now only builds that command, and we
build it with the same function (`trl.scripts.vllm_serve.build_command`), so the flags are TRL's own:
- `--weight-transfer-config '{"backend": "nccl"}'`: the trainer streams its weights into the server after
  every optimiser step, which keeps server-mode rollouts on-policy (NCCL: CUDA only);
- `--logprobs-mode processed_logprobs --max-logprobs -1`: the sampler's log-probabilities after temperature,
  uncapped, which TRL's importance-sampling correction compares with the trainer's;
- `VLLM_SERVER_DEV_MODE=1` in its environment: exposes /server_info, which TRL reads to set up the transfer.
The model, dtype and context length come from the settings the lab resolves (track row, config, flags), so
the server holds the model the trainer will stream into it.

Safe by default: it listens on the loopback interface. The server has no authentication: vLLM's `--api-key`
would lock TRL out, since TRL 1.16's client (trl/generation/vllm_client.py) sends no key and has no setting
for one. Listening on another address prints what that exposes (grpolab.health.EXPOSED_WARNING).
"""

from __future__ import annotations

import os
import shlex
import sys

from .errors import LayerFailure
from .health import DEFAULT_HOST, exposure_warning  # noqa: F401 (re-exported for the CLI: its --host default and warning)
from .rollouts import check_vllm_version, installed_vllm_version

TRL_SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
DEFAULT_PORT = 8000  # TRL's vllm_server_port
# The server has its GPU to itself (server mode's rule), so vLLM's own default, not colocate's 0.3.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def serve_command(
    settings,
    model: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The server's argv (`python -m vllm.entrypoints.cli.main serve MODEL ...`), built by TRL for the lab's model."""
    try:
        from trl.scripts.vllm_serve import ScriptArguments, build_command
    except ImportError as error:
        raise LayerFailure(
            "rollout", f"TRL's vllm-serve command builder is not importable here ({error})",
            "run it where the lab is installed: in the track's image (`docker compose run --rm lab serve --dry-run`) or after `pip install -e '.[lab]'`",
        ) from error
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"--gpu-memory-utilization {gpu_memory_utilization} must be in (0, 1]")
    server = ScriptArguments(
        model=model,
        host=host,
        port=port,
        gpu_memory_utilization=gpu_memory_utilization,
        dtype=settings.dtype,  # auto, float32, bfloat16, float16: the lab's names are vLLM's
        max_model_len=settings.max_prompt_length + settings.max_completion_length,
    )
    return build_command(server, ["--seed", str(settings.seed), *extra])


def display(argv: list[str]) -> str:
    """The command as a person would type it: `VLLM_SERVER_DEV_MODE=1 vllm serve MODEL ...`."""
    env = " ".join(f"{k}={v}" for k, v in TRL_SERVER_ENV.items())
    return f"{env} {shlex.join(['vllm', *argv[argv.index('serve'):]])}"


def refuse_unless_servable(platform: str = sys.platform) -> str:
    """Why this environment can't serve TRL's server mode (a LayerFailure), else the vLLM version line."""
    if platform == "darwin":
        raise LayerFailure("rollout", "vLLM does not run on macOS", "use --rollout inprocess (track m)")
    version_line = check_vllm_version(installed_vllm_version())
    import torch

    build = "hip" if torch.version.hip else "cuda" if torch.version.cuda else "cpu"
    if build != "cuda":
        raise LayerFailure(
            "rollout",
            f"this PyTorch is a {build} build: TRL streams weights to a vLLM server over NCCL, which TRL implements for CUDA only",
            "use --rollout inprocess (or vllm-colocate where vLLM runs) on this machine; serve from an NVIDIA track's image (s, n)",
        )
    if torch.cuda.device_count() == 0:
        raise LayerFailure("device", "no CUDA GPU is visible to this process", "check `nvidia-smi` and the container's GPU access (the NVIDIA Container Toolkit)")
    return version_line


def exec_server(argv: list[str], gpu: str | None = None) -> None:
    """Replace this process with the server (Ctrl-C and the exit status are vLLM's own)."""
    env = {**os.environ, **TRL_SERVER_ENV}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    sys.stdout.flush()
    os.execve(argv[0], argv, env)
