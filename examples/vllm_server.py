"""The lesson's vLLM server path ("TRL, and its three rollout paths"): GRPOConfig(use_vllm=True, vllm_mode="server"),
the trainer asking a separate vLLM server for completions and streaming its updated weights into it over NCCL after
every optimiser step.

Needs vLLM and CUDA GPUs (NCCL is CUDA's): on the GPU tracks (s, n), with the server started first on a card of its
own, as the lesson's version note says (`CUDA_VISIBLE_DEVICES=1 trl vllm-serve --model MODEL`, or the lab's `grpolab
serve`, which adds the lab's checks). Where there is no vLLM, no CUDA GPU (track cv: vLLM's CPU build serves, but TRL
cannot stream weights into it) or no server, it stops in one line saying which. Differences from the lesson: the tiny
model, its data and GRPOConfig(use_cpu=ON_CPU, **SHORT_RUN), as in quickstart.py (tiny_task.py says why).
Run: `python examples/vllm_server.py` (VLLM_SERVER_URL: the server, default http://localhost:8000).
"""

import os
import sys
import urllib.request

import torch

from grpolab.environment.vllm_installed import vllm_distribution
from tiny_task import MODEL, ON_CPU, SHORT_RUN, arithmetic_dataset, reward_summary

SERVER_URL = os.environ.get("VLLM_SERVER_URL", "http://localhost:8000")

if vllm_distribution()[0] is None:
    sys.exit("vllm_server.py: this image has no vLLM: server mode runs on the GPU tracks' images (s, n)")
if not torch.cuda.is_available() or torch.version.cuda is None:
    sys.exit(
        "vllm_server.py: TRL streams weights into the vLLM server over NCCL, which needs CUDA GPUs, and this machine "
        "has none: on a CPU, train with examples/vllm_colocate.py (track cv's image)"
    )
try:
    urllib.request.urlopen(f"{SERVER_URL}/health", timeout=5)
except OSError as error:
    sys.exit(
        f"vllm_server.py: no vLLM server answers at {SERVER_URL} ({error}): start one first on a card of its own, "
        f"`CUDA_VISIBLE_DEVICES=1 trl vllm-serve --model {MODEL}`, then run this on another (CUDA_VISIBLE_DEVICES=0)"
    )

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rewards import format_reward, numeric_reward  # noqa: E402

trainer = GRPOTrainer(
    model=MODEL,
    reward_funcs=[numeric_reward, format_reward],
    train_dataset=arithmetic_dataset(),
    args=GRPOConfig(use_vllm=True, vllm_mode="server", vllm_server_base_url=SERVER_URL, use_cpu=ON_CPU, **SHORT_RUN),
)
trainer.train()
print(reward_summary(trainer))
