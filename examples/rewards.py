"""The lesson's reward functions ("Reward functions: your Python. Deterministic, tested"), the two its quick start
names: numeric_reward and format_reward.

They are the lab's own (grpolab/task/rewards.py), imported rather than copied so that the examples train on exactly
what the lab trains on. Each takes TRL's reward signature: `completions` (strings, or chat messages), the dataset's
columns as keyword arguments (`answer` here), and returns one float per completion. Running this file scores a few
completions the way TRL calls them, so you can see what each reward pays for before a run optimises it.
Run: `python examples/rewards.py`.
"""

from grpolab.task.rewards import format_reward, numeric_reward

__all__ = ["format_reward", "numeric_reward"]

if __name__ == "__main__":
    # What TRL hands a reward for one prompt, "What is 12 plus 30?", answered four ways (chat completions).
    texts = ["<answer>42</answer>", "<answer>41</answer>", "The sum is 42.", "<answer>forty-two</answer>"]
    completions = [[{"role": "assistant", "content": text}] for text in texts]
    answer = ["42"] * len(completions)
    numeric = numeric_reward(completions, answer=answer)
    shape = format_reward(completions, answer=answer)
    print(f"{'completion':<30} numeric_reward format_reward")
    for text, n, f in zip(texts, numeric, shape):
        print(f"{text!r:<30} {n:>14.1f} {f:>13.1f}")
