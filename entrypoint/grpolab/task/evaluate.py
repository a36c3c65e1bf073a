"""Held-out pass@1: greedy decoding, scored by the same numeric reward the run trains on.

Works with any Hugging Face causal LM and its tokenizer (the built-in tiny model included), on any device.
It imports no TRL, so it measures a model the same way before training, after it, and outside the lab.
"""

from __future__ import annotations

from .rewards import numeric_reward


def greedy_completions(
    model, tokenizer, prompts, max_new_tokens: int, batch_size: int = 64, chat_template_kwargs=None
) -> list[str]:
    """Greedy completions (new tokens only, special tokens skipped) for chat prompts, batched with left padding."""
    import torch

    padding_side, pad_token = tokenizer.padding_side, tokenizer.pad_token
    was_training = model.training
    tokenizer.padding_side = "left"  # generation continues from the right end of every row
    if tokenizer.pad_token is None:  # some base models have none; padding is masked out anyway
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    completions: list[str] = []
    try:
        for start in range(0, len(prompts), batch_size):
            texts = [
                tokenizer.apply_chat_template(
                    p, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
                )
                for p in prompts[start : start + batch_size]
            ]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.inference_mode():
                output = model.generate(
                    **batch,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    temperature=None,
                    top_p=None,
                    top_k=None,
                    pad_token_id=tokenizer.pad_token_id,
                )
            new_tokens = output[:, batch["input_ids"].shape[1] :]
            completions.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = padding_side
        if pad_token is None:
            tokenizer.pad_token = None
        model.train(was_training)
    return completions


def pass_at_1(model, tokenizer, rows, max_new_tokens: int, batch_size: int = 64, chat_template_kwargs=None) -> float:
    """Fraction of `rows` (dicts or a datasets.Dataset with `prompt` and `answer`) whose greedy completion's
    final number equals the answer. Raises ValueError on no rows: an empty evaluation has no pass rate."""
    rows = list(rows)
    if not rows:
        raise ValueError("pass_at_1 got no rows: there is nothing to evaluate (heldout_size is 0?)")
    completions = greedy_completions(
        model, tokenizer, [r["prompt"] for r in rows], max_new_tokens, batch_size, chat_template_kwargs
    )
    rewards = numeric_reward(completions, answer=[r["answer"] for r in rows])
    return sum(rewards) / len(rewards)
