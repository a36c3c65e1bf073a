"""The one interface of a llama.cpp sampler, which both the in-process sampler and the server client implement.

LlamaCppRollout needs from a sampler: `engine` (its name for the log), `gguf_path` (the policy it holds),
`load(gguf_path)` (take new weights), `close()`, and `sample_batch(...)` (token ids and their
log-probabilities for each prompt). A sampler writes `sample` for one prompt; the batch is theirs in order.
"""

from __future__ import annotations

from pathlib import Path

# GRPO samples from the policy as it is: no top-k, top-p, min-p, typical-p or repetition penalty.
# (llama.cpp's defaults are temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.1: wrong for GRPO.)
GRPO_SAMPLING = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}


class LlamaSampler:
    """Samples completions from a GGUF copy of the policy: token ids in, token ids and log-probabilities out."""

    engine = "llama.cpp"
    gguf_path: Path | None = None
    eos_token_id: int | None = None

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._draws = 0

    def next_seed(self) -> int:
        """A fresh sampler seed for each completion: with one seed for all, a group of 8 would be 8 copies
        of one completion."""
        self._draws += 1
        return self.seed * 1_000_003 + self._draws

    def load(self, gguf_path) -> None:
        """Sample from the policy in `gguf_path` from now on."""
        raise NotImplementedError

    def close(self) -> None:
        """Free what the sampler holds (nothing by default)."""

    def sample(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, stop_ids=()
    ) -> tuple[list[int], list[float]]:
        """One completion of `prompt_ids`: its token ids and the log-probability of each."""
        raise NotImplementedError

    def sample_batch(
        self, prompt_ids: list[list[int]], max_tokens: int, temperature: float, stop_ids=()
    ) -> tuple[list[list[int]], list[list[float]]]:
        """One completion per prompt, in order: (token ids of each, log-probabilities of each)."""
        out = [self.sample(ids, max_tokens, temperature, stop_ids) for ids in prompt_ids]
        return [ids for ids, _ in out], [lps for _, lps in out]
