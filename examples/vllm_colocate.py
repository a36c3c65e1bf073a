"""The lesson's vLLM colocate path ("TRL, and its three rollout paths"): GRPOConfig(use_vllm=True,
vllm_mode="colocate"), vLLM inside the trainer's process with its own copy of the weights, which TRL refreshes after
every optimiser step.

Runs where vLLM is installed: track cv's image (vLLM's CPU build) and the GPU tracks' (s, n); elsewhere it stops in
one line. Differences from the lesson:
- the tiny model, its data and GRPOConfig(use_cpu=ON_CPU, **SHORT_RUN), as in quickstart.py (tiny_task.py says why);
- on a CPU only (vLLM's CPU build), four things TRL 1.16 has no setting for, each the lab's own
  (grpolab/rollouts/vllm_cpu.py says why at length): vLLM's CPU environment (its key-value space in GiB, OpenMP threads
  unpinned so the trainer keeps its cores, the address torch.distributed wants even for one process); the engine built
  in float32 and eager (`engine_arguments`: compiling the model takes minutes on a small CPU); TRL's weight sync run
  inside vLLM's own reload (`sync_through_vllm_reload`: the CPU build repacks its weights, and a plain load fails);
  and TRL's importance-sampling correction off, since float32 on both sides samples what the trainer scores.
  On a GPU none of these lines runs: the lesson's two settings are all it takes.
Run: `python examples/vllm_colocate.py` (45 s at 12 steps in track cv's image on 2 CPU cores; 24 not timed).
"""

import contextlib
import sys

from grpolab.environment.vllm_installed import vllm_build, vllm_distribution
from tiny_task import MODEL, ON_CPU, SHORT_RUN, arithmetic_dataset, reward_summary

BUILD = vllm_build(*vllm_distribution())  # "cpu", "gpu", or None when vLLM is not installed
if BUILD is None:
    sys.exit(
        "vllm_colocate.py: this image has no vLLM: track cv's image has vLLM's CPU build (on the host `invoke build "
        "--track cv`), the GPU tracks' images (s, n) its GPU build"
    )
if ON_CPU and BUILD != "cpu":
    sys.exit("vllm_colocate.py: no GPU here, and this vLLM is a GPU build: use track cv's image (vLLM's CPU build)")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpolab.rollouts.vllm_cpu import engine_arguments, engine_environment, sync_through_vllm_reload  # noqa: E402
from rewards import format_reward, numeric_reward  # noqa: E402

on_vllm_cpu = ON_CPU and BUILD == "cpu"
if on_vllm_cpu:
    engine_environment(kv_gib=1)  # VLLM_CPU_KVCACHE_SPACE and friends, where you have not set them yourself

args = GRPOConfig(
    use_vllm=True,
    vllm_mode="colocate",
    vllm_max_model_length=128,  # the prompt and completion fit in 64 tokens: the engine's cache need be no larger
    **({"vllm_importance_sampling_correction": False} if on_vllm_cpu else {}),
    use_cpu=ON_CPU,
    **SHORT_RUN,
)
with engine_arguments("float32") if on_vllm_cpu else contextlib.nullcontext():
    trainer = GRPOTrainer(
        model=MODEL,
        reward_funcs=[numeric_reward, format_reward],
        train_dataset=arithmetic_dataset(),
        args=args,
    )
if on_vllm_cpu:
    sync_through_vllm_reload(trainer.vllm_generation)
trainer.train()
print(reward_summary(trainer))
print(f"rollouts: vLLM colocate, vLLM's {BUILD} build in this process")
