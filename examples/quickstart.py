"""The lesson's quick start ("TRL, and its three rollout paths"): GRPOTrainer with two rewards, then train().

As the lesson types it, with two differences:
- the model is the image's tiny model and the dataset its arithmetic problems (tiny_task.py says why);
- `args=GRPOConfig(use_cpu=ON_CPU, **SHORT_RUN)`: on a machine with no GPU, TRL's bfloat16 default stops in GRPOConfig
  unless use_cpu is set, and no environment variable sets it (tiny_task.py); SHORT_RUN is 24 steps at a learning rate
  the tiny model moves at, instead of TRL's hours-long defaults. On a GPU track use_cpu is False.
Rollouts: in-process generation (TRL's default, the model's own generate()).
Run: `python examples/quickstart.py` (about 15 s on 2 CPU cores).
"""

from trl import GRPOConfig, GRPOTrainer

from rewards import format_reward, numeric_reward
from tiny_task import MODEL, ON_CPU, SHORT_RUN, arithmetic_dataset, reward_summary

dataset = arithmetic_dataset()

trainer = GRPOTrainer(
    model=MODEL,
    reward_funcs=[numeric_reward, format_reward],
    train_dataset=dataset,  # prompt-only, plus any columns the rewards need
    args=GRPOConfig(use_cpu=ON_CPU, **SHORT_RUN),  # not in the lesson: see the top of this file
)
trainer.train()
print(reward_summary(trainer))
