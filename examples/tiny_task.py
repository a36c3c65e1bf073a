"""The model and data the examples train: not a lesson section, the two things its quick start leaves to you.

The lesson's fragment names "Qwen/Qwen3-1.7B" and a `dataset` it does not show. Here the model is the image's built-in
tiny model (a 0.5 M parameter Qwen3 that adds two numbers, committed at /opt/grpolab/entrypoint/tiny-model), because
it needs no Hub and trains in seconds on a CPU; on a GPU track with the Hub, swap in the lesson's model name.

The data is the tiny model's own task, in its own prompt format: "What is A plus B?" as a chat message, with the sum
in an `answer` column that numeric_reward reads. The tiny model learned only this format; with prompts of another
shape it answers nothing a reward can score, every reward is zero, and a first run looks like the group collapse
the lesson warns about. The problems come from the lab's training split (grpolab.task.problems), never its held-out
one.
"""

import random

import torch
from datasets import Dataset

from grpolab.common.paths import TINY_MODEL_DIR
from grpolab.task.problems import arithmetic_splits

MODEL = str(TINY_MODEL_DIR)  # /opt/grpolab/entrypoint/tiny-model in the image

# TRL asks for bfloat16 by default, and on a machine with no GPU transformers stops in GRPOConfig ("Your setup doesn't
# support bf16/gpu. You need to assign use_cpu ..."). No environment variable changes that (transformers checks bf16
# before it reads ACCELERATE_USE_CPU), so the examples pass use_cpu=ON_CPU: True on the CPU tracks, False where there
# is a GPU, and there TRL's bfloat16 default stands.
ON_CPU = not (torch.cuda.is_available() or torch.backends.mps.is_available())

# A short run instead of TRL's defaults (learning rate 1e-6, three epochs of the dataset, 256-token completions):
# 24 steps at a rate the tiny model learns at, so the rewards visibly rise within half a minute on 2 CPU cores (on
# this machine, over three seeds, the mean reward of the last 6 steps was 0.03 to 0.08 above the first 6's at 3e-4;
# at 1e-3 it fell, at 1e-4 it moved less than the noise).
SHORT_RUN = dict(
    max_steps=24,
    learning_rate=3e-4,
    per_device_train_batch_size=64,  # 8 prompts x TRL's 8 completions each
    max_completion_length=16,  # the tiny model answers in about 6 tokens
    logging_steps=1,
    report_to="none",
    save_strategy="no",
    output_dir="/tmp/grpo-example",
)


def arithmetic_dataset(size: int = 192, seed: int = 0) -> Dataset:
    """`size` problems: a `prompt` column of chat messages and an `answer` column (the sum, as text)."""
    rows = random.Random(seed).sample(arithmetic_splits()["train"], size)
    return Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows]})


if __name__ == "__main__":
    dataset = arithmetic_dataset(3)
    print(f"model: {MODEL}")
    for row in dataset:
        print(f"prompt {row['prompt']} -> answer {row['answer']!r}")


def reward_summary(trainer) -> str:
    """One line on how the mean reward moved over the run's logged steps (TRL's `reward`, the weighted sum): each
    step's, then the mean of the first and of the last quarter of the steps (one step's is mostly which prompts it
    drew)."""
    rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]
    quarter = max(1, len(rewards) // 4)
    return (
        f"mean reward per step: {' '.join(f'{r:.2f}' for r in rewards)} ({len(rewards)} steps; first {quarter} steps "
        f"{sum(rewards[:quarter]) / quarter:.3f}, last {quarter} steps {sum(rewards[-quarter:]) / quarter:.3f})"
    )
