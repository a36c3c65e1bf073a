"""llama.cpp's own `llama-server` over HTTP, as a LlamaSampler, and the reading of its /completion answers."""

from __future__ import annotations

from ..common.health import UNREACHABLE_ERRORS, http_json, wait_for_health
from .base import refused
from .sampler import GRPO_SAMPLING, LlamaSampler

LLAMA_SERVER_REQUEST_TIMEOUT_S = 120.0
RESPONSE_SHAPE_ACTION = (
    "use llama.cpp's own `llama-server` and its /completion endpoint with n_probs > 0, return_tokens true and stream "
    "false; OpenAI-style endpoints (llama-cpp-python's server, /v1/completions) return token strings, which cannot be "
    "turned back into the ids the trainer needs"
)


class LlamaServerClient(LlamaSampler):
    """llama.cpp's own `llama-server` over HTTP: POST /completion with prompt token ids.

    Asks for `n_probs` and `return_tokens` so the response carries token *ids* and their log-probabilities;
    a response with token strings only (llama-cpp-python's OpenAI-style server does that) is refused:
    the lesson's "the response shape is the first failure of a served path". The server cannot take new
    weights (LoRA adapters load only at start), so refreshing means restarting it: pass `restart(gguf_path)`.
    """

    engine = "llama-server (HTTP)"

    def __init__(
        self,
        base_url: str,
        wait_s: float = 60.0,
        request_timeout_s: float = LLAMA_SERVER_REQUEST_TIMEOUT_S,
        seed: int = 0,
        restart=None,
    ):
        super().__init__(seed)
        self.base_url = base_url.rstrip("/")
        self.request_timeout_s, self.restart = request_timeout_s, restart
        wait_for_health(
            self.base_url,
            wait_s,
            "llama-server",
            start_hint="start it with `llama-server -m POLICY.gguf --port 8080`, or use --rollout llamacpp in-process",
        )

    def load(self, gguf_path) -> None:
        if self.restart is None:
            raise refused(
                "llama-server cannot load new weights while it runs (POST /lora-adapters changes scales, not weights)",
                "refresh needs a restart: give LlamaServerClient a restart(gguf_path) callable, or use the in-process "
                "sampler",
            )
        self.restart(gguf_path)

    def sample(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, stop_ids=()
    ) -> tuple[list[int], list[float]]:
        payload = {
            "prompt": list(prompt_ids), "n_predict": max_tokens, "temperature": temperature, **GRPO_SAMPLING,
            "n_probs": 1, "return_tokens": True, "stream": False, "cache_prompt": True, "seed": self.next_seed(),
        }
        url = f"{self.base_url}/completion"
        try:
            status, body = http_json(url, payload, timeout_s=self.request_timeout_s)
        except UNREACHABLE_ERRORS as error:
            raise refused(
                f"llama-server at {self.base_url} did not answer POST /completion within {self.request_timeout_s:g} s "
                f"({error})",
                "check that it is running and not overloaded; restart it",
            ) from error
        if status != 200:
            raise refused(
                f"llama-server answered POST /completion with HTTP {status}: {str(body)[:300]}",
                "check the server's log",
            )
        return parse_completion_response(body, url, stop_ids)


def parse_completion_response(body, url: str = "/completion", stop_ids=()) -> tuple[list[int], list[float]]:
    """Token ids and log-probabilities from a llama-server /completion response, or a clear refusal."""
    if not isinstance(body, dict):
        raise refused(
            f"{url} answered with {type(body).__name__}, not a JSON object: {str(body)[:200]}", RESPONSE_SHAPE_ACTION
        )
    probs = body.get("completion_probabilities")
    if not isinstance(probs, list):
        raise refused(
            f"{url}'s response has no completion_probabilities list (keys: {', '.join(sorted(body))})",
            RESPONSE_SHAPE_ACTION,
        )
    ids, logprobs = _ids_and_logprobs(probs, url)
    _check_tokens(body.get("tokens"), ids, url)
    # llama-server ends at an end-of-generation token without always listing it; the trainer needs it to
    # tell a finished completion from a truncated one.
    if body.get("stop_type") == "eos" and stop_ids and (not ids or ids[-1] not in stop_ids):
        ids.append(next(iter(stop_ids)))
        logprobs.append(0.0)
    return ids, logprobs


def _ids_and_logprobs(probs: list, url: str) -> tuple[list[int], list[float]]:
    """Each completion_probabilities entry's integer token id and its logprob; token strings are refused."""
    ids: list[int] = []
    logprobs: list[float] = []
    for position, entry in enumerate(probs):
        token_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(token_id, int) or isinstance(token_id, bool):
            shown = entry.get("token") if isinstance(entry, dict) else entry
            raise refused(
                f"{url} returned token strings instead of token ids (position {position}: {shown!r}, no integer 'id'): "
                "the response shape is the first failure of a served path", RESPONSE_SHAPE_ACTION,
            )
        logprob = entry.get("logprob")
        if not isinstance(logprob, (int, float)):
            raise refused(
                f"{url} returned no logprob for token {token_id} at position {position}", RESPONSE_SHAPE_ACTION
            )
        ids.append(token_id)
        logprobs.append(float(logprob))
    return ids, logprobs


def _check_tokens(tokens, ids: list[int], url: str) -> None:
    """The response's optional `tokens` must be ids agreeing with completion_probabilities'."""
    if tokens is not None and (not isinstance(tokens, list) or any(not isinstance(t, int) for t in tokens)):
        raise refused(f"{url}'s 'tokens' are not token ids: {str(tokens)[:120]}", RESPONSE_SHAPE_ACTION)
    if isinstance(tokens, list) and tokens and tokens != ids[: len(tokens)]:
        raise refused(
            f"{url}'s 'tokens' {tokens[:8]}... disagree with completion_probabilities' ids {ids[:8]}...",
            RESPONSE_SHAPE_ACTION,
        )
