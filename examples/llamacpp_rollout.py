"""The lesson's llama.cpp rollout path ("TRL, and its three rollout paths", the rollout_func escape hatch, and the
"Important" box on stale weights): GRPOTrainer(rollout_func=...) sampling from llama.cpp, which never receives the
trainer's weights, so its rollouts go stale by one optimiser step per step.

Runs in the image with llama.cpp compiled in (grpolab:c-llamacpp: on the host `invoke build --track c --rollout
llamacpp`); elsewhere it stops in one line. Differences from the lesson:
- llama.cpp runs in this process (llama-cpp-python), not as `llama-server`: the image compiles llama.cpp's libraries,
  not its server, and the rollout function is the same either way (token ids in, token ids and log-probabilities out);
- the rollout function and the GGUF export are the lab's (grpolab/rollouts/llamacpp.py, grpolab/model/gguf.py): the
  lesson names the mechanism, not the code;
- the tiny model, its data and GRPOConfig(use_cpu=ON_CPU, **SHORT_RUN), as in quickstart.py (tiny_task.py says why).
Run: `python examples/llamacpp_rollout.py` (about 20 s on 2 CPU cores).
"""

import sys

try:
    import llama_cpp  # noqa: F401  (only to say in one line when the image lacks it)
except ImportError:
    sys.exit(
        "llamacpp_rollout.py: this image has no llama.cpp (llama-cpp-python is compiled only into grpolab:c-llamacpp): "
        "on the host run `invoke build --track c --rollout llamacpp`, then this command again"
    )

from transformers import AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpolab.rollouts.llamacpp import LlamaCppRollout, initial_gguf  # noqa: E402
from grpolab.rollouts.llamacpp_inprocess import InProcessLlama  # noqa: E402
from rewards import format_reward, numeric_reward  # noqa: E402
from tiny_task import MODEL, ON_CPU, SHORT_RUN, arithmetic_dataset, reward_summary  # noqa: E402

# The policy as it is before any step, converted to GGUF: the file llama.cpp samples from for the whole run.
gguf, _ = initial_gguf(MODEL, "/tmp/llamacpp-example")
rollout_func = LlamaCppRollout(
    InProcessLlama(gguf, n_ctx=128),
    AutoTokenizer.from_pretrained(MODEL),
    max_completion_length=SHORT_RUN["max_completion_length"],
)

trainer = GRPOTrainer(
    model=MODEL,
    reward_funcs=[numeric_reward, format_reward],
    train_dataset=arithmetic_dataset(),
    args=GRPOConfig(use_cpu=ON_CPU, **SHORT_RUN),
    rollout_func=rollout_func,  # TRL: "experimental and may change or be removed at any time without prior notice"
)
trainer.train()
print(reward_summary(trainer))
print(f"rollouts: {rollout_func.ledger.describe()}")
rollout_func.close()
