"""The lesson's "beta zero" (from "GRPO on a 16 GB machine" and Question 3): beta is TRL's KL coefficient, 0.0 by
default, and at 0.0 the reference model is not loaded and no kl is logged.

Two short runs of the quick start, one at beta 0.0 and one at 0.04, each saying whether TRL built a reference model,
the memory its weights take, and whether kl was logged. Differences from the lesson: the tiny model and its data, and
GRPOConfig(use_cpu=ON_CPU, **SHORT_RUN) with fewer steps (tiny_task.py says why).
Run: `python examples/beta_zero.py` (about 10 s on 2 CPU cores).
"""

from trl import GRPOConfig, GRPOTrainer

from rewards import format_reward, numeric_reward
from tiny_task import MODEL, ON_CPU, SHORT_RUN, arithmetic_dataset

for beta in (0.0, 0.04):
    trainer = GRPOTrainer(
        model=MODEL,
        reward_funcs=[numeric_reward, format_reward],
        train_dataset=arithmetic_dataset(),
        args=GRPOConfig(use_cpu=ON_CPU, beta=beta, **{**SHORT_RUN, "max_steps": 3}),
    )
    trainer.train()
    reference = trainer.ref_model
    if reference is None:
        held = "no reference model"
    else:
        held = f"a reference model of {sum(p.numel() * p.element_size() for p in reference.parameters())} bytes"
    kl_logged = any("kl" in log for log in trainer.state.log_history)
    print(f"beta {beta}: {held}; kl logged: {'yes' if kl_logged else 'no'}")
