"""vLLM colocate on a CPU: the engine inside the trainer's process, set up as vLLM's CPU build needs it.

What is different from colocate on a GPU, and why each setting is made here:
- the key-value cache is VLLM_CPU_KVCACHE_SPACE (whole GiB, read by vllm/platforms/cpu.py as an int), not a
  fraction of device memory: set from the estimate's rollout key-value term with KV_SPACE_HEADROOM, printed,
  and refused before the engine starts when the engine's copy of the weights plus that space exceed
  MemAvailable;
- one process holds the trainer and the engine: vLLM's CPU worker pins its OpenMP threads to cores
  (VLLM_CPU_OMP_THREADS_BIND=auto) and, without OMP_NUM_THREADS, drops torch to one thread for serving
  (vllm/utils/torch_utils.py set_torch_threads_for_runtime), which would leave the trainer's update on one
  core. So the binding is off (nobind) and OMP_NUM_THREADS is the usable cores, unless the user set them;
- TRL's colocate mode wants torch.distributed's environment even for one process: TRL sets RANK, LOCAL_RANK
  and WORLD_SIZE itself just before it builds the engine (trl/generation/vllm_generation.py); the lab sets only
  MASTER_ADDR and MASTER_PORT (a free port). Setting LOCAL_RANK before the trainer is built, as the lab once
  did, makes accelerate choose MULTI_CPU, whose prepare_model wraps the model in DistributedDataParallel even
  at world size 1 (on a GPU, MULTI_GPU at world size 1 is not wrapped): a gloo all-reduce of the gradients
  and, with transformers' default find_unused_parameters on a CPU, a walk of the autograd graph every step;
- TRL builds `vllm.LLM` itself and exposes neither its dtype nor enforce_eager: `engine_arguments` adds them
  for the one call TRL makes (float32 like the trainer, so the sync checks compare like with like; eager,
  because vLLM's CPU default compiles the model with inductor, minutes on a small CPU);
- the engine's context is capped at the run's longest prompt plus max_completion_length (TRL's
  vllm_max_model_length), so the cache is sized for what the run generates, and a run longer than the
  model's context is refused naming the limit and the flag.
"""

from __future__ import annotations

import contextlib
import os
import socket

from ..environment.machine import usable_cores
from ..memory.vllm_cpu import GB, GIB, engine_plan
from .base import RolloutChoice, importance_sampling_correction, refused

def cpu_engine_variables(kv_gib: int) -> dict[str, str]:
    """What vLLM's CPU build reads, for an engine in the trainer's process or a server alone: its key-value space,
    no thread pinning (a trainer may share the cores) and OpenMP on every usable core."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": str(max(1, usable_cores())),
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check_fits_in_ram(kv_gib: int, weights_gb: float, available_gb: float | None, source: str) -> str:
    """Refuse before the engine starts when its key-value space and its copy of the weights exceed MemAvailable."""
    needs_gb = kv_gib * GIB / GB + weights_gb
    if available_gb is not None and needs_gb > available_gb:
        raise refused(
            f"vLLM's key-value cache does not fit in free RAM: VLLM_CPU_KVCACHE_SPACE={kv_gib} GiB "
            f"({kv_gib * GIB / GB:.1f} GB, {source}) "
            f"+ the engine's copy of the weights {weights_gb:.2f} GB = {needs_gb:.1f} GB, and MemAvailable is "
            f"{available_gb:.1f} GB",
            "unset VLLM_CPU_KVCACHE_SPACE (the lab sizes it from the run) or lower it, free memory, or use fewer or "
            "shorter completions",
        )
    return (
        f"{needs_gb:.2f} GB of {available_gb:.1f} GB available" if available_gb is not None else "MemAvailable unknown"
    )


# --- The environment of the one process ----------------------------------------------------------------------

# Set before the trainer is built, LOCAL_RANK makes accelerate wrap the model in DDP at world size 1 (see above).
DISTRIBUTED_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


def engine_environment(kv_gib: int, environ=os.environ) -> dict:
    """The variables vLLM's CPU build and TRL's colocate mode read, with the user's own values kept.
    Returns what the run uses (for the run log)."""
    wanted = {**cpu_engine_variables(kv_gib), "MASTER_ADDR": "127.0.0.1"}
    for name, value in wanted.items():
        environ.setdefault(name, value)
    if environ.get("MASTER_PORT", "") in ("", "0", "auto"):
        environ["MASTER_PORT"] = str(free_port())
    # RANK, LOCAL_RANK, WORLD_SIZE: TRL's (set when it builds the engine), or the user's, which the run log shows.
    ranks = {name: environ.get(name, "set by TRL when it builds the engine") for name in DISTRIBUTED_RANK_VARIABLES}
    return {
        **{name: environ[name] for name in (*wanted, "MASTER_PORT")},
        **ranks,
        "torch_compile": sampler_compilation(),
    }


def sampler_compilation() -> str:
    """vLLM's CPU build samples through torch.compile'd functions (vllm/v1/sample/ops/topk_topp_sampler.py
    compiled_random_sample, and logprobs.py batched_count_greater_than for the logprobs TRL asks for; inductor
    backend), and inductor needs a C++ compiler: an image whose lock has vllm-cpu keeps g++ for it. Where there is
    none (a venv on a host without g++; before, the images: the first generation failed with "InvalidCxxCompiler: No
    working C++ compiler found"), torch.compile is turned off for this process (torch._dynamo.config.disable: the
    functions then run as plain PyTorch); the lab compiles nothing else. With one, it is left as vLLM has it."""
    import shutil

    compiler = os.environ.get("CXX") or "g++"
    if shutil.which(compiler):
        return f"on ({compiler} found: vLLM compiles its sampler)"
    import torch._dynamo

    torch._dynamo.config.disable = True
    return f"off: no C++ compiler ({compiler}) for inductor, so vLLM's compiled sampler runs as plain PyTorch"


@contextlib.contextmanager
def engine_arguments(dtype_name: str):
    """While the trainer is built, TRL's one `vllm.LLM(...)` call also gets dtype and enforce_eager (TRL 1.16 has no
    setting for either); everything TRL passes is passed unchanged."""
    import trl.generation.vllm_generation as trl_vllm

    original = trl_vllm.LLM

    def llm(*args, **kwargs):
        kwargs.setdefault("dtype", dtype_name)
        kwargs.setdefault("enforce_eager", True)
        return original(*args, **kwargs)

    trl_vllm.LLM = llm
    try:
        yield
    finally:
        trl_vllm.LLM = original


def sync_through_vllm_reload(vllm_generation) -> None:
    """Make TRL's weight sync work on vLLM's CPU build, without changing what it sends.

    After loading, the CPU build moves every linear layer's weight into a oneDNN (or sgl) packed copy and leaves
    an empty Parameter without a weight loader (vllm/model_executor/layers/utils.py dispatch_cpu_unquantized_gemm,
    remove_weight=True), so TRL's `model.load_weights([(name, tensor)])` fails with "'Parameter' object has no
    attribute 'weight_loader'". vLLM's own reload_weights brackets load_weights with its layerwise reload
    (initialize_layerwise_reload: the checkpoint-format parameters back, with loaders; finalize_layerwise_reload:
    each layer processed and packed again). TRL's sync_weights is run unchanged inside that bracket."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    trl_sync = vllm_generation.sync_weights
    runner = vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner

    def sync_weights():
        model = runner.get_model()
        initialize_layerwise_reload(model)
        try:
            trl_sync()
        finally:
            finalize_layerwise_reload(model, runner.model_config)

    vllm_generation.sync_weights = sync_weights


# --- The choice ------------------------------------------------------------------------------------------------


def colocate_cpu_choice(
    settings,
    vllm_version: str,
    version_line: str,
    model,
    prompt_tokens: int | None,
    available_gb: float | None,
    environ=os.environ,
):
    """vLLM colocate on the CPU: the engine's context, its key-value space from the estimate, the environment."""
    plan = engine_plan(model, settings, prompt_tokens, environ)
    kv_gib, dtype, context = plan["kv_gib"], plan["dtype"], plan["context"]
    fits = check_fits_in_ram(kv_gib, plan["weights_gb"], available_gb, plan["kv_source"])
    env = engine_environment(kv_gib, environ)
    correction, correction_why = importance_sampling_correction(
        settings.vllm_importance_sampling_correction, engine_cpu_float32=dtype == "float32"
    )
    kwargs = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": settings.vllm_gpu_memory_utilization,
        "vllm_max_model_length": context,
        "engine_dtype": dtype,
        "vllm_importance_sampling_correction": correction,
    }
    reason = (
        f"vLLM colocate on CPU, vLLM {vllm_version} (cpu build) in the trainer's process, {dtype}, eager: "
        f"VLLM_CPU_KVCACHE_SPACE={kv_gib} GiB ({plan['kv_source']}); engine needs {fits}; context {context} tokens; "
        f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, VLLM_CPU_OMP_THREADS_BIND={env['VLLM_CPU_OMP_THREADS_BIND']}; "
        f"torch.compile {env['torch_compile']}; TRL's importance-sampling correction {correction_why.split(':')[0]}; "
        f"{version_line}"
    )
    log = {
        "vllm_version": vllm_version,
        "vllm_build": "cpu",
        "vllm_cpu_kvcache_space_gib": kv_gib,
        "kv_cache_source": plan["kv_source"],
        "rollout_kv_term_gb": round(plan["kv_term_gb"], 6),
        "engine_max_model_len": context,
        "engine_dtype": dtype,
        "engine_enforce_eager": True,
        "engine_env": {k: v for k, v in env.items() if k != "MASTER_PORT"},
        "memory_available_gb": available_gb and round(available_gb, 2),
        "importance_sampling_correction": correction,
        "importance_sampling_correction_reason": correction_why,
    }
    return RolloutChoice("vllm-colocate", kwargs, reason, log)
