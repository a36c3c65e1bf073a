"""llama.cpp in this process (llama-cpp-python's `Llama`), as a LlamaSampler."""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..common.tracks import packages_left_out
from .base import refused
from .sampler import GRPO_SAMPLING, LlamaSampler

SMALL_GGUF_BYTES = 100_000_000  # below this one llama.cpp thread is fastest (see default_threads)


def require_llama_cpp():
    if "llama-cpp-python" in packages_left_out():
        raise refused(
            "the llamacpp rollout path needs llama-cpp-python, which this image leaves out (GRPOLAB_NOT_INSTALLED): "
            "its compile, minutes long, is paid only by the runs that load it",
            "on the host, `invoke up --rollout llamacpp` builds the image that has it (compiled once, then cached) and "
            "runs "
            "the lab there; or `invoke build --rollout llamacpp`, then `docker compose run lab lab --rollout llamacpp`",
        )
    try:
        import llama_cpp
    except ImportError as error:
        raise refused(
            f"the llamacpp rollout path needs llama-cpp-python, which is not installed ({error})",
            "install it: `pip install llama-cpp-python==0.3.36` compiles llama.cpp from the sdist (~6 min on 2 cores); "
            "a wheel built once is reused from ~/.cache/grpolab/wheels (`pip install --no-index --find-links "
            "~/.cache/grpolab/wheels llama-cpp-python`). "
            "Or use --rollout inprocess",
        ) from error
    return llama_cpp


def _log_softmax_at(logits, token: int, temperature: float) -> float:
    import numpy as np

    scaled = logits.astype(np.float64) / temperature
    top = scaled.max()
    return float(scaled[token] - top - math.log(np.exp(scaled - top).sum()))


def default_threads(gguf_path) -> int:
    """GRPOLAB_LLAMACPP_THREADS, else 1 for a small model, else every core.

    llama.cpp's worker threads spin while they wait for each other: on a model as small as the tiny one the
    matrices are too small to share, and on a busy machine (the trainer, other jobs) spinning threads slow
    every token down several times over.
    """
    configured = os.environ.get("GRPOLAB_LLAMACPP_THREADS")
    if configured:
        return max(1, int(configured))
    try:
        small = Path(gguf_path).stat().st_size < SMALL_GGUF_BYTES
    except OSError:
        small = False
    return 1 if small else max(1, os.cpu_count() or 1)


class InProcessLlama(LlamaSampler):
    """llama-cpp-python's `Llama` in this process: token ids in, token ids and log-probabilities out.

    One sequence at a time (the shared prompt prefix of a group stays in llama.cpp's KV cache). Each
    completion gets its own sampler seed (LlamaSampler.next_seed); without that, llama-cpp-python reseeds
    identically for every call.
    """

    engine = "llama-cpp-python (in-process)"

    def __init__(self, gguf_path, n_ctx: int = 1024, n_threads: int | None = None, seed: int = 0):
        super().__init__(seed)
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads(gguf_path)
        self.llm = None
        self.gguf_path = None
        self.load(gguf_path)

    def load(self, gguf_path) -> None:
        from ..model.gguf import check_gguf

        llama_cpp = require_llama_cpp()
        path = check_gguf(gguf_path)
        self.close()
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(path), n_ctx=self.n_ctx, n_batch=min(512, self.n_ctx), n_threads=self.n_threads,
                seed=self.seed, logits_all=False, verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as error:
            raise refused(
                f"llama.cpp could not load {path}: {error} "
                "(a truncated or corrupt GGUF, or one from a newer llama.cpp)",
                "delete the file and export the policy again (`python -m grpolab.model.gguf export`)",
            ) from error
        self.gguf_path = path

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
            self.llm = None

    @property
    def eos_token_id(self) -> int:
        return self.llm.token_eos()

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenisation (for checking it against the HF tokenizer)."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def sample(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, stop_ids=()
    ) -> tuple[list[int], list[float]]:
        import llama_cpp
        import numpy as np

        if len(prompt_ids) + max_tokens > self.n_ctx:
            raise refused(
                f"prompt of {len(prompt_ids)} tokens + {max_tokens} completion tokens exceed llama.cpp's context of "
                f"{self.n_ctx}",
                "raise n_ctx or shorten max_completion_length",
            )
        stop = set(stop_ids) | {self.eos_token_id}
        self.llm.set_seed(self.next_seed())
        n_vocab = self.llm.n_vocab()
        ids: list[int] = []
        logprobs: list[float] = []
        for token in self.llm.generate(prompt_ids, temp=temperature, reset=True, **GRPO_SAMPLING):
            # The logits llama.cpp just sampled `token` from (the last position evaluated).
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(n_vocab,))
            ids.append(int(token))
            logprobs.append(_log_softmax_at(logits, int(token), temperature))
            if token in stop or len(ids) >= max_tokens:
                break
        return ids, logprobs
