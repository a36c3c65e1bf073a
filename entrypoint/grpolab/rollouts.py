"""Where completions come from: vLLM (colocate or server) configured for TRL, or llama.cpp through rollout_func.

The lab calls one function, `configure_rollout(settings, track, device_type, model_path, tokenizer)`. It
returns GRPOTrainer keyword arguments (GRPOConfig fields, plus `rollout_func` for llama.cpp and a `log`
dict for the run log) and the line the smoke test prints, or raises LayerFailure("rollout", ...) with the
reason a path cannot run here. The decision itself is `choose_rollout(...)`, a pure function of the facts
(platform, GPUs, installed vLLM, memory), so every refusal is tested without a GPU.

llama.cpp has no way to receive the trainer's weights after each optimiser step, so its rollouts are
sampled from an older policy. `LlamaCppRollout` records, for every batch, the policy version the sampler
holds (the optimiser step whose weights it loaded) against the trainer's step, in a `RolloutLedger`; with
`refresh_every=K` it re-exports the policy to GGUF and reloads the sampler whenever the lag reaches K, so
the lag stays below K. Without refresh the lag grows by one every step: the lesson's stale rollouts.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from .errors import LayerFailure

# GRPO samples from the policy as it is: no top-k, top-p, min-p, typical-p or repetition penalty.
# (llama.cpp's defaults are temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.1: wrong for GRPO.)
GRPO_SAMPLING = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}

VLLM_PATHS = ("vllm-colocate", "vllm-server")
LOCAL_HOSTS = {"localhost", "127.0.0.1", "0.0.0.0", "::1", ""}
# On unified memory vLLM's profiler does not keep to its fraction (vllm#46307) and can wedge the host:
# the engine gets what the other terms leave, less this share of the total as headroom.
UNIFIED_MEMORY_HEADROOM_FRACTION = 0.05
MIN_GPU_MEMORY_UTILIZATION = 0.05
VLLM_SERVER_WAIT_S = 240.0  # TRL's vllm_server_timeout default
LLAMA_SERVER_REQUEST_TIMEOUT_S = 120.0
SMALL_GGUF_BYTES = 100_000_000  # below this one llama.cpp thread is fastest (see default_threads)


def refused(what: str, action: str) -> LayerFailure:
    return LayerFailure("rollout", what, action)


# --- The ledger: which policy produced each batch ---------------------------------------------------------


@dataclass
class RolloutBatch:
    trainer_step: int  # optimiser steps the trainer had taken when it asked for this batch
    policy_version: int  # the optimiser step whose weights the sampler held
    completions: int = 0
    seconds: float = 0.0

    @property
    def lag(self) -> int:
        return self.trainer_step - self.policy_version


@dataclass
class Refresh:
    trainer_step: int
    export_seconds: float
    reload_seconds: float

    @property
    def seconds(self) -> float:
        return self.export_seconds + self.reload_seconds


@dataclass
class RolloutLedger:
    """Every rollout batch's policy version against the trainer's step, and every refresh of the sampler."""

    refresh_every: int = 0  # 0: never
    engine: str = ""
    batches: list[RolloutBatch] = field(default_factory=list)
    refreshes: list[Refresh] = field(default_factory=list)

    def record(self, trainer_step: int, policy_version: int, completions: int = 0, seconds: float = 0.0) -> RolloutBatch:
        batch = RolloutBatch(trainer_step, policy_version, completions, seconds)
        self.batches.append(batch)
        return batch

    @property
    def lags(self) -> list[int]:
        return [b.lag for b in self.batches]

    @property
    def max_lag_steps(self) -> int:
        return max(self.lags, default=0)

    @property
    def stale(self) -> bool:
        """True when any batch was sampled from weights older than the trainer's."""
        return self.max_lag_steps > 0

    def summary(self) -> dict:
        """What the run log keeps (rollout.stale, rollout.max_lag_steps, ...)."""
        lags = self.lags
        refresh_s = [r.seconds for r in self.refreshes]
        return {
            "engine": self.engine,
            "stale": self.stale,
            "max_lag_steps": self.max_lag_steps,
            "mean_lag_steps": round(sum(lags) / len(lags), 3) if lags else 0.0,
            "rollout_batches": len(self.batches),
            "refresh_every": self.refresh_every,
            "refreshes": len(self.refreshes),
            "refresh_seconds_mean": round(sum(refresh_s) / len(refresh_s), 3) if refresh_s else None,
            "refresh_export_seconds_mean": round(sum(r.export_seconds for r in self.refreshes) / len(refresh_s), 3) if refresh_s else None,
            "refresh_reload_seconds_mean": round(sum(r.reload_seconds for r in self.refreshes) / len(refresh_s), 3) if refresh_s else None,
            "sampling_seconds": round(sum(b.seconds for b in self.batches), 3),
        }

    def describe(self) -> str:
        if not self.batches:
            return "no rollout batches"
        if not self.stale:
            return f"{len(self.batches)} batches, all on-policy (lag 0)"
        how = f"refreshed every {self.refresh_every} steps ({len(self.refreshes)} refreshes)" if self.refresh_every else "never refreshed"
        return f"STALE: {len(self.batches)} batches sampled up to {self.max_lag_steps} optimiser steps behind the trainer; {how}"

    def as_dict(self) -> dict:
        return {**self.summary(), "batches": [asdict(b) | {"lag": b.lag} for b in self.batches], "refresh_log": [asdict(r) for r in self.refreshes]}


# --- llama.cpp samplers ----------------------------------------------------------------------------------


def require_llama_cpp():
    try:
        import llama_cpp
    except ImportError as error:
        raise refused(
            f"the llamacpp rollout path needs llama-cpp-python, which is not installed ({error})",
            "install it: `pip install llama-cpp-python==0.3.36` compiles llama.cpp from the sdist (~6 min on 2 cores); "
            "a wheel built once is reused from ~/.cache/grpolab/wheels (`pip install --no-index --find-links ~/.cache/grpolab/wheels llama-cpp-python`). "
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


class InProcessLlama:
    """llama-cpp-python's `Llama` in this process: token ids in, token ids and log-probabilities out.

    One sequence at a time (the shared prompt prefix of a group stays in llama.cpp's KV cache). Each
    completion gets its own sampler seed; without that, llama-cpp-python reseeds identically for every call
    and a group of 8 would be 8 copies of one completion.
    """

    engine = "llama-cpp-python (in-process)"

    def __init__(self, gguf_path, n_ctx: int = 1024, n_threads: int | None = None, seed: int = 0):
        self.n_ctx, self.seed = n_ctx, seed
        self.n_threads = n_threads or default_threads(gguf_path)
        self.llm = None
        self.gguf_path = None
        self._draws = 0
        self.load(gguf_path)

    def load(self, gguf_path) -> None:
        from .gguf import check_gguf

        llama_cpp = require_llama_cpp()
        path = check_gguf(gguf_path)
        self.close()
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(path), n_ctx=self.n_ctx, n_batch=min(512, self.n_ctx), n_threads=self.n_threads,
                seed=self.seed, logits_all=False, verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as error:
            raise refused(f"llama.cpp could not load {path}: {error} (a truncated or corrupt GGUF, or one from a newer llama.cpp)",
                          "delete the file and export the policy again (`python -m grpolab.gguf export`)") from error
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

    def sample(self, prompt_ids: list[int], max_tokens: int, temperature: float, stop_ids=()) -> tuple[list[int], list[float]]:
        import llama_cpp
        import numpy as np

        if len(prompt_ids) + max_tokens > self.n_ctx:
            raise refused(f"prompt of {len(prompt_ids)} tokens + {max_tokens} completion tokens exceed llama.cpp's context of {self.n_ctx}",
                          "raise n_ctx or shorten max_completion_length")
        stop = set(stop_ids) | {self.eos_token_id}
        self._draws += 1
        self.llm.set_seed(self.seed * 1_000_003 + self._draws)
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

    def sample_batch(self, prompt_ids: list[list[int]], max_tokens: int, temperature: float, stop_ids=()):
        out = [self.sample(ids, max_tokens, temperature, stop_ids) for ids in prompt_ids]
        return [ids for ids, _ in out], [lps for _, lps in out]


def _http_json(url: str, payload: dict | None = None, timeout_s: float = 10.0) -> tuple[int, dict | str]:
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read().decode("utf-8", "replace")
            status = response.status
    except urllib.error.HTTPError as error:
        body, status = error.read().decode("utf-8", "replace"), error.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def wait_for_health(base_url: str, timeout_s: float, what: str, interval_s: float = 1.0, start_hint: str = "", progress=None) -> float:
    """Poll GET {base_url}/health until it answers 200, for at most timeout_s; returns the seconds waited.
    progress(seconds waited), when given, is called after each poll that found the server not ready."""
    started = time.monotonic()
    last = "no answer"
    while True:
        try:
            status, body = _http_json(f"{base_url.rstrip('/')}/health", timeout_s=max(0.5, min(5.0, timeout_s)))
            if status == 200:
                return time.monotonic() - started
            last = f"HTTP {status}: {str(body)[:200]}"
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            last = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
        waited = time.monotonic() - started
        if waited >= timeout_s:
            raise refused(f"{what} at {base_url} did not answer /health within {timeout_s:g} s (last: {last})",
                          start_hint or "start it, check the URL and port, or wait longer")
        if progress:
            progress(waited)
        time.sleep(min(interval_s, max(0.0, timeout_s - waited)))


class LlamaServerClient:
    """llama.cpp's own `llama-server` over HTTP: POST /completion with prompt token ids.

    Asks for `n_probs` and `return_tokens` so the response carries token *ids* and their log-probabilities;
    a response with token strings only (llama-cpp-python's OpenAI-style server does that) is refused:
    the lesson's "the response shape is the first failure of a served path". The server cannot take new
    weights (LoRA adapters load only at start), so refreshing means restarting it: pass `restart(gguf_path)`.
    """

    engine = "llama-server (HTTP)"

    def __init__(self, base_url: str, wait_s: float = 60.0, request_timeout_s: float = LLAMA_SERVER_REQUEST_TIMEOUT_S, seed: int = 0, restart=None):
        self.base_url = base_url.rstrip("/")
        self.request_timeout_s, self.seed, self.restart = request_timeout_s, seed, restart
        self._draws = 0
        self.eos_token_id = None
        wait_for_health(self.base_url, wait_s, "llama-server", start_hint="start it with `llama-server -m POLICY.gguf --port 8080`, or use --rollout llamacpp in-process")

    def load(self, gguf_path) -> None:
        if self.restart is None:
            raise refused("llama-server cannot load new weights while it runs (POST /lora-adapters changes scales, not weights)",
                          "refresh needs a restart: give LlamaServerClient a restart(gguf_path) callable, or use the in-process sampler")
        self.restart(gguf_path)

    def close(self) -> None:
        pass

    def sample(self, prompt_ids: list[int], max_tokens: int, temperature: float, stop_ids=()) -> tuple[list[int], list[float]]:
        self._draws += 1
        payload = {
            "prompt": list(prompt_ids), "n_predict": max_tokens, "temperature": temperature, **GRPO_SAMPLING,
            "n_probs": 1, "return_tokens": True, "stream": False, "cache_prompt": True, "seed": self.seed * 1_000_003 + self._draws,
        }
        url = f"{self.base_url}/completion"
        try:
            status, body = _http_json(url, payload, timeout_s=self.request_timeout_s)
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            raise refused(f"llama-server at {self.base_url} did not answer POST /completion within {self.request_timeout_s:g} s ({error})",
                          "check that it is running and not overloaded; restart it") from error
        if status != 200:
            raise refused(f"llama-server answered POST /completion with HTTP {status}: {str(body)[:300]}", "check the server's log")
        return parse_completion_response(body, url, stop_ids)

    def sample_batch(self, prompt_ids, max_tokens, temperature, stop_ids=()):
        out = [self.sample(ids, max_tokens, temperature, stop_ids) for ids in prompt_ids]
        return [ids for ids, _ in out], [lps for _, lps in out]


def parse_completion_response(body, url: str = "/completion", stop_ids=()) -> tuple[list[int], list[float]]:
    """Token ids and log-probabilities from a llama-server /completion response, or a clear refusal."""
    shape_action = (
        "use llama.cpp's own `llama-server` and its /completion endpoint with n_probs > 0, return_tokens true and stream "
        "false; OpenAI-style endpoints (llama-cpp-python's server, /v1/completions) return token strings, which cannot be "
        "turned back into the ids the trainer needs"
    )
    if not isinstance(body, dict):
        raise refused(f"{url} answered with {type(body).__name__}, not a JSON object: {str(body)[:200]}", shape_action)
    probs = body.get("completion_probabilities")
    if not isinstance(probs, list):
        raise refused(f"{url}'s response has no completion_probabilities list (keys: {', '.join(sorted(body))})", shape_action)
    ids: list[int] = []
    logprobs: list[float] = []
    for position, entry in enumerate(probs):
        token_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(token_id, int) or isinstance(token_id, bool):
            shown = entry.get("token") if isinstance(entry, dict) else entry
            raise refused(
                f"{url} returned token strings instead of token ids (position {position}: {shown!r}, no integer 'id'): "
                "the response shape is the first failure of a served path", shape_action,
            )
        logprob = entry.get("logprob")
        if not isinstance(logprob, (int, float)):
            raise refused(f"{url} returned no logprob for token {token_id} at position {position}", shape_action)
        ids.append(token_id)
        logprobs.append(float(logprob))
    tokens = body.get("tokens")
    if tokens is not None and (not isinstance(tokens, list) or any(not isinstance(t, int) for t in tokens)):
        raise refused(f"{url}'s 'tokens' are not token ids: {str(tokens)[:120]}", shape_action)
    if isinstance(tokens, list) and tokens and tokens != ids[: len(tokens)]:
        raise refused(f"{url}'s 'tokens' {tokens[:8]}... disagree with completion_probabilities' ids {ids[:8]}...", shape_action)
    # llama-server ends at an end-of-generation token without always listing it; the trainer needs it to
    # tell a finished completion from a truncated one.
    if body.get("stop_type") == "eos" and stop_ids and (not ids or ids[-1] not in stop_ids):
        ids.append(next(iter(stop_ids)))
        logprobs.append(0.0)
    return ids, logprobs


# --- The rollout_func ------------------------------------------------------------------------------------


def encode_prompts(prompts: list, tokenizer, chat_template=None, chat_template_kwargs=None) -> list[list[int]]:
    """Chat messages -> prompt token ids, exactly as TRL's in-process path tokenises them."""
    if prompts and isinstance(prompts[0], str):
        return [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    encoded = tokenizer.apply_chat_template(
        conversation=prompts, chat_template=chat_template, add_generation_prompt=True, tokenize=True, return_dict=True,
        **(chat_template_kwargs or {}),
    )
    return [list(ids) for ids in encoded["input_ids"]]


class LlamaCppRollout:
    """TRL's `rollout_func(prompts, trainer) -> dict`, sampling from llama.cpp, with the policy version ledger.

    `prompts` arrive as chat messages, each already repeated num_generations times by TRL's sampler; we
    return one completion per entry. `refresh_every=K` (0 = never): when the trainer has taken K optimiser
    steps since the sampler's weights were exported, the current policy (the LoRA adapter merged into a
    copy) is exported to GGUF and the sampler reloads it, so every batch's lag is below K.
    """

    def __init__(self, sampler, tokenizer, *, temperature: float = 1.0, max_completion_length: int = 512,
                 refresh_every: int = 0, export_dir=None, outtype: str = "f32", policy_version: int = 0, progress=print):
        if refresh_every < 0:
            raise ValueError("refresh_every must be 0 (never) or a number of optimiser steps")
        if temperature <= 0:
            raise ValueError("GRPO samples at a positive temperature (the lesson's 1.0)")
        self.sampler, self.tokenizer = sampler, tokenizer
        self.temperature, self.max_completion_length = temperature, max_completion_length
        self.refresh_every, self.outtype, self.progress = refresh_every, outtype, progress
        self.export_dir = Path(export_dir) if export_dir else None
        if refresh_every and self.export_dir is None:
            raise ValueError("refresh_every needs an export_dir for the refreshed GGUF files")
        self.policy_version = policy_version
        self.ledger = RolloutLedger(refresh_every=refresh_every, engine=getattr(sampler, "engine", type(sampler).__name__))
        eos = tokenizer.eos_token_id
        self.stop_ids = tuple(i for i in (eos if isinstance(eos, list) else [eos]) if i is not None)
        self.__name__ = "llamacpp_rollout"

    def needs_refresh(self, trainer_step: int) -> bool:
        return bool(self.refresh_every) and trainer_step - self.policy_version >= self.refresh_every

    def refresh(self, model, trainer_step: int) -> Refresh:
        """Export `model` (the trainer's current policy) to GGUF and reload the sampler with it."""
        from .gguf import export_gguf

        started = time.perf_counter()
        path = self.export_dir / f"policy-step{trainer_step:06d}.gguf"
        export_gguf(model, path, outtype=self.outtype, tokenizer=self.tokenizer, progress=self.progress)
        exported = time.perf_counter()
        previous = getattr(self.sampler, "gguf_path", None)
        self.sampler.load(path)
        done = time.perf_counter()
        if previous and Path(previous) != path and Path(previous).parent == self.export_dir and Path(previous).name.startswith("policy-step"):
            Path(previous).unlink(missing_ok=True)  # keep one refreshed copy on disk, not one per refresh
        self.policy_version = trainer_step
        refresh = Refresh(trainer_step, round(exported - started, 4), round(done - exported, 4))
        self.ledger.refreshes.append(refresh)
        return refresh

    def close(self, remove_files: bool = True) -> None:
        """Free the sampler; by default delete the GGUF copies this rollout wrote (a real model's is GBs)."""
        self.sampler.close()
        if remove_files and self.export_dir is not None:
            for path in self.export_dir.glob("policy-step*.gguf*"):
                path.unlink(missing_ok=True)
            try:
                self.export_dir.rmdir()  # only if nothing else is in it
            except OSError:
                pass

    def __call__(self, prompts: list, trainer) -> dict:
        trainer_step = int(trainer.state.global_step)
        trainer.rollout_ledger = self.ledger  # where the lab reads it after training
        if self.needs_refresh(trainer_step):
            model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
            was_training = model.training
            self.refresh(model, trainer_step)
            model.train(was_training)
        started = time.perf_counter()
        prompt_ids = encode_prompts(prompts, self.tokenizer, getattr(trainer, "chat_template", None), getattr(trainer, "chat_template_kwargs", None))
        completion_ids, logprobs = self.sampler.sample_batch(prompt_ids, self.max_completion_length, self.temperature, self.stop_ids)
        self.ledger.record(trainer_step, self.policy_version, len(completion_ids), round(time.perf_counter() - started, 4))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}


# --- Choosing the path -----------------------------------------------------------------------------------


@dataclass
class RolloutChoice:
    path: str
    grpo_kwargs: dict  # GRPOConfig fields for this path
    reason: str  # one sentence for the log
    log: dict = field(default_factory=dict)


def installed_vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def _trl_range():
    try:
        from .doctor import trl_vllm_range, vllm_in_trl_range
    except ImportError:
        return (lambda: None), (lambda version: None)
    return trl_vllm_range, vllm_in_trl_range


def check_vllm_version(vllm_version: str | None, where: str = "installed") -> str:
    """Refuse a vLLM outside installed TRL's declared range; returns the sentence saying it is inside."""
    trl_vllm_range, vllm_in_trl_range = _trl_range()
    declared = trl_vllm_range()
    if vllm_version is None:
        raise refused("vllm is not installed in this environment", "use a track whose image includes vLLM (s, n), install trl[vllm], or use --rollout inprocess or llamacpp")
    inside = vllm_in_trl_range(vllm_version)
    if inside is False:
        raise refused(
            f"vLLM {vllm_version} ({where}) is outside the range installed TRL declares ({declared}): TRL only warns, "
            "and then the engine fails on its version, not on memory",
            f"install a vLLM inside {declared} (let the lock resolve trl[vllm]), or use --rollout inprocess",
        )
    return f"vLLM {vllm_version} inside TRL's declared range {declared}" if inside else f"vLLM {vllm_version} (TRL's range unknown: {declared})"


def colocate_memory_fraction(settings, model, device_total_gb: float, unified_memory: bool, estimate=None) -> tuple[float, str]:
    """vllm_gpu_memory_utilization for colocate mode, from the memory estimate, and the reason as a sentence.

    The engine's share is what the policy, reference (beta > 0), adapter and its optimiser, the update's
    activations and the operating system's reservation leave. On unified memory (one pool for CPU and GPU)
    the requested fraction is capped to that, with headroom, because vLLM's profiling can exceed its fraction
    there and wedge the host; on a discrete card the requested fraction stands if it fits. Refuses when the
    engine would not even hold a copy of the weights and the rollout key-value cache.
    """
    from dataclasses import replace

    from .estimate import estimate_memory

    requested = settings.vllm_gpu_memory_utilization
    if estimate is None:
        estimate = estimate_memory(model, replace(settings, rollout="vllm-colocate"), device_total_gb=device_total_gb)
    others_gb = sum(gb for name, gb, _ in estimate.terms if not name.startswith("vLLM"))
    policy_gb = estimate.terms[0][1]
    kv_gb = estimate_memory(model, replace(settings, rollout="inprocess"), device_total_gb=device_total_gb).term("Rollout key-value cache") or 0.0
    engine_needs_gb = policy_gb + kv_gb
    headroom_gb = UNIFIED_MEMORY_HEADROOM_FRACTION * device_total_gb if unified_memory else 0.0
    available_gb = device_total_gb - others_gb - estimate.os_reserved_gb - headroom_gb
    cap = math.floor(100 * available_gb / device_total_gb) / 100 if device_total_gb > 0 else 0.0
    parts = (f"policy, reference, adapter and activations {others_gb:.1f} GB + OS {estimate.os_reserved_gb:.1f} GB"
             + (f" + headroom {headroom_gb:.1f} GB" if headroom_gb else "") + f" of {device_total_gb:.1f} GB")
    if cap * device_total_gb < engine_needs_gb or cap < MIN_GPU_MEMORY_UTILIZATION:
        raise refused(
            f"vLLM colocate does not fit: {parts} leave {max(available_gb, 0):.1f} GB for the engine, which needs at least "
            f"{engine_needs_gb:.1f} GB (its copy of the weights and the rollout key-value cache)",
            "set beta 0, fewer or shorter completions, a smaller model, or --rollout inprocess",
        )
    if unified_memory and requested > cap:
        return cap, (f"vllm_gpu_memory_utilization {cap:.2f} (capped from {requested:g}): unified memory, and {parts} "
                     f"leave {cap * device_total_gb:.1f} GB; vLLM's profiler can overrun its fraction on unified memory (vllm#46307)")
    if requested > cap:
        return cap, f"vllm_gpu_memory_utilization {cap:.2f} (lowered from {requested:g}): {parts} leave {cap * device_total_gb:.1f} GB"
    return requested, (f"vllm_gpu_memory_utilization {requested:g} ({requested * device_total_gb:.1f} GB): fits, {parts} "
                       f"leave up to {cap:.2f}" + (" (unified memory: capped there if asked for more)" if unified_memory else ""))


def server_is_on_this_machine(url: str) -> bool:
    """localhost, or a single-label name such as a Compose service ("vllm"): a server sharing this machine's GPUs.
    A dotted name or an IP address other than loopback is taken to be another machine."""
    host = (urlparse(url).hostname or "").lower()
    if host in LOCAL_HOSTS or host.startswith("127."):
        return True
    return "." not in host and ":" not in host


def choose_rollout(settings, track, *, device_type: str, platform: str = sys.platform, vllm_version: str | None = None,
                   gpu_count: int = 0, device_total_gb: float | None = None, model=None, estimate=None) -> RolloutChoice:
    """The GRPOConfig keyword arguments for settings.rollout on this machine, or LayerFailure with the reason.

    Pure: every fact is an argument (configure_rollout gathers them), so each refusal is testable anywhere.
    """
    path = settings.rollout
    if path == "inprocess":
        return RolloutChoice(path, {}, "in-process: the policy's own generate(), always on-policy")
    if path == "llamacpp":
        return RolloutChoice(path, {}, "llama.cpp through rollout_func: sampled from a GGUF copy of the policy, stale between refreshes")
    if path not in VLLM_PATHS:
        raise refused(f"unknown rollout path {path!r}", "choose inprocess, vllm-colocate, vllm-server or llamacpp")

    if platform == "darwin" or track.expected_device == "mps":
        raise refused("vLLM does not run on macOS (no macOS wheels; its GPU path does not cover Metal)", "use --rollout inprocess (or llamacpp)")
    if device_type != "cuda":
        raise refused(f"vLLM needs a CUDA or ROCm GPU and this run is on {device_type}", "use --rollout inprocess (or llamacpp)")

    if path == "vllm-server":
        if server_is_on_this_machine(settings.vllm_server_url) and gpu_count < 2:
            raise refused(
                f"vLLM server mode on this machine needs a second GPU: the server and the trainer must run on separate CUDA "
                f"devices, and this machine has {gpu_count}",
                "use --rollout vllm-colocate (vLLM inside the trainer, sharing the one GPU), or point --vllm-server-url at a "
                "server on another machine (by its full name or IP address)",
            )
        version_line = check_vllm_version(vllm_version, "installed here") if vllm_version is not None else "server's vLLM checked on connect"
        kwargs = {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": settings.vllm_server_url.rstrip("/"),
                  "vllm_server_timeout": VLLM_SERVER_WAIT_S}
        return RolloutChoice(path, kwargs, f"vLLM server at {settings.vllm_server_url}: weights streamed over NCCL after every step; {version_line}",
                             {"vllm_version": vllm_version, "vllm_server_url": settings.vllm_server_url})

    version_line = check_vllm_version(vllm_version)
    if device_total_gb is None:
        from .estimate import device_total_memory_gb

        device_total_gb = device_total_memory_gb()[0]
    fraction, why = colocate_memory_fraction(settings, model or settings.model, device_total_gb, track.unified_memory, estimate)
    kwargs = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": fraction}
    return RolloutChoice(path, kwargs, f"vLLM colocate (in the trainer's process, same GPU): {why}; {version_line}",
                         {"vllm_version": vllm_version, "vllm_gpu_memory_utilization": fraction, "memory_reason": why})


def wait_for_vllm_server(url: str, timeout_s: float = VLLM_SERVER_WAIT_S, interval_s: float = 2.0, model: str | None = None) -> dict:
    """Wait (bounded) for a vLLM server TRL can use: /health, its version inside TRL's range, weight transfer on,
    and (when `model` is given) serving the model the trainer will stream its weights into.

    Returns {"vllm_version", "waited_s"}; raises LayerFailure("rollout", ...) with what to do otherwise.
    """
    url = url.rstrip("/")
    waited = wait_for_health(url, timeout_s, "the vLLM server", interval_s,
                             start_hint="start it (`invoke serve`, or the compose vllm service) and check --vllm-server-url; it can take minutes to load a model")
    try:
        status, body = _http_json(f"{url}/version", timeout_s=10)
    except (urllib.error.URLError, OSError) as error:
        raise refused(f"the vLLM server at {url} answered /health but not /version ({error})", "check the server's log") from error
    version = body.get("version") if isinstance(body, dict) else None
    if status != 200 or not isinstance(version, str):
        raise refused(f"the server at {url} is not a vLLM server TRL can use: /version answered HTTP {status} {str(body)[:120]}",
                      "point --vllm-server-url at `vllm serve`")
    check_vllm_version(version, f"served at {url}")
    status, body = _http_json(f"{url}/server_info?config_format=json", timeout_s=10)
    if status == 404:
        raise refused(f"the vLLM server at {url} does not expose /server_info, which TRL uses to synchronise weights",
                      "restart it with VLLM_SERVER_DEV_MODE=1 in its environment")
    config = body.get("vllm_config") if isinstance(body, dict) else None
    if status == 200 and isinstance(config, dict) and config.get("weight_transfer_config") is None:
        raise refused(f"the vLLM server at {url} has no weight-transfer engine, so it would keep sampling from the weights it loaded",
                      """restart it with --weight-transfer-config '{"backend":"nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1""")
    if model is not None:
        status, body = _http_json(f"{url}/v1/models", timeout_s=10)
        served = [m.get("root") or m.get("id") for m in body.get("data", [])] if status == 200 and isinstance(body, dict) else []
        if served and str(model) not in served:
            raise refused(f"the vLLM server at {url} serves {', '.join(map(str, served))}, but the lab trains {model}: the weights "
                          "streamed after each step would not fit it",
                          f"start the server for the same model (`grpolab serve --model {model}`, or `invoke serve` with the same settings)")
    return {"vllm_version": version, "waited_s": round(waited, 3)}


# --- What the lab calls ----------------------------------------------------------------------------------


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def initial_gguf(model_path, out_dir, outtype: str = "f32", progress=print) -> tuple[Path, float]:
    """The GGUF the sampler starts from (policy version 0): the model as loaded, before any step."""
    from .gguf import export_gguf

    started = time.perf_counter()
    path = export_gguf(model_path, Path(out_dir) / "policy-step000000.gguf", outtype=outtype, progress=progress)
    return path, time.perf_counter() - started


def make_llamacpp_rollout(settings, model_path, tokenizer, out_dir, *, n_threads: int | None = None, outtype: str | None = None, progress=print) -> LlamaCppRollout:
    """Export the starting policy to GGUF, load it in llama.cpp and return the rollout_func (with .ledger)."""
    require_llama_cpp()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    outtype = outtype or ("f32" if settings.dtype == "float32" else "f16")  # float32 models (CPU, MPS) stay exact
    path, seconds = initial_gguf(model_path, out_dir, outtype, progress)
    n_ctx = min(settings.max_prompt_length + settings.max_completion_length, _trained_context(model_path) or 1 << 30)
    sampler = InProcessLlama(path, n_ctx=max(n_ctx, 64), n_threads=n_threads, seed=settings.seed)
    rollout = LlamaCppRollout(sampler, tokenizer, temperature=settings.temperature, max_completion_length=settings.max_completion_length,
                              refresh_every=settings.llamacpp_refresh_every, export_dir=out_dir, outtype=outtype, progress=progress)
    rollout.initial_export_seconds = round(seconds, 3)
    return rollout


def _trained_context(model_path) -> int | None:
    """max_position_embeddings from a local model folder's config.json (llama.cpp warns past it)."""
    try:
        return int(json.loads((Path(model_path) / "config.json").read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def configure_rollout(settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print) -> tuple[dict, str]:
    """(GRPOTrainer keyword arguments + "log", the line to print) for settings.rollout; LayerFailure if it can't run.

    For llamacpp the kwargs hold `rollout_func` (a LlamaCppRollout; its `.ledger` is also set on the trainer
    as `trainer.rollout_ledger` at the first batch). For vllm-server it waits (bounded) for the server.
    """
    if settings.rollout == "llamacpp":
        from .paths import runs_dir

        # One folder per run: concurrent runs must not overwrite each other's GGUF files.
        out_dir = Path(out_dir) if out_dir else runs_dir() / "gguf" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        rollout = make_llamacpp_rollout(settings, model_path, tokenizer, out_dir, progress=progress)
        K = settings.llamacpp_refresh_every
        line = (f"llama.cpp ({rollout.sampler.engine}) through rollout_func, GGUF {rollout.sampler.gguf_path.name} exported in "
                f"{rollout.initial_export_seconds:.1f} s; " + (f"refreshed every {K} steps (lag < {K})" if K else "never refreshed: rollouts go stale, the lag grows every step"))
        log = {"engine": rollout.sampler.engine, "gguf": str(rollout.sampler.gguf_path), "initial_export_seconds": rollout.initial_export_seconds,
               "refresh_every": K, "sampling": {"temperature": settings.temperature, **GRPO_SAMPLING}}
        return {"rollout_func": rollout, "log": log}, line

    choice = choose_rollout(settings, track, device_type=device_type, vllm_version=installed_vllm_version(), gpu_count=gpu_count(), model=str(model_path))
    log = dict(choice.log)
    if choice.path == "vllm-server":
        log.update(wait_for_vllm_server(settings.vllm_server_url, model=str(model_path)))
    progress(f"rollout: {choice.reason}")
    return {**choice.grpo_kwargs, "log": {**log, "reason": choice.reason}}, choice.reason
