"""The llama.cpp rollout path: TRL's rollout_func sampling from a GGUF copy of the policy, refreshed every K steps.

llama.cpp has no way to receive the trainer's weights after each optimiser step, so its rollouts are
sampled from an older policy. `LlamaCppRollout` records, for every batch, the policy version the sampler
holds (the optimiser step whose weights it loaded) against the trainer's step, in a `RolloutLedger`; with
`refresh_every=K` it re-exports the policy to GGUF and reloads the sampler whenever the lag reaches K, so
the lag stays below K. Without refresh the lag grows by one every step: the lesson's stale rollouts.
The sampler is any LlamaSampler: in this process (InProcessLlama) or llama-server (LlamaServerClient).
This module is the path's engine (check_installed, choose, configure at the end: base.RolloutEngine).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..model.shape import model_context_tokens
from .base import RolloutChoice, RolloutFacts
from .ledger import Refresh, RolloutLedger
from .llamacpp_inprocess import InProcessLlama, require_llama_cpp
from .sampler import GRPO_SAMPLING, LlamaSampler


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

    def __init__(
        self,
        sampler: LlamaSampler,
        tokenizer,
        *,
        temperature: float = 1.0,
        max_completion_length: int = 512,
        refresh_every: int = 0,
        export_dir=None,
        outtype: str = "f32",
        policy_version: int = 0,
        progress=print,
    ):
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
        self.ledger = RolloutLedger(
            refresh_every=refresh_every, engine=getattr(sampler, "engine", type(sampler).__name__)
        )
        eos = tokenizer.eos_token_id
        self.stop_ids = tuple(i for i in (eos if isinstance(eos, list) else [eos]) if i is not None)
        self.__name__ = "llamacpp_rollout"

    def needs_refresh(self, trainer_step: int) -> bool:
        return bool(self.refresh_every) and trainer_step - self.policy_version >= self.refresh_every

    def refresh(self, model, trainer_step: int) -> Refresh:
        """Export `model` (the trainer's current policy) to GGUF and reload the sampler with it."""
        from ..model.gguf import export_gguf

        started = time.perf_counter()
        path = self.export_dir / f"policy-step{trainer_step:06d}.gguf"
        export_gguf(model, path, outtype=self.outtype, tokenizer=self.tokenizer, progress=self.progress)
        exported = time.perf_counter()
        previous = getattr(self.sampler, "gguf_path", None)
        self.sampler.load(path)
        done = time.perf_counter()
        if (
            previous
            and Path(previous) != path
            and Path(previous).parent == self.export_dir
            and Path(previous).name.startswith("policy-step")
        ):
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
            model = (
                trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
            )
            was_training = model.training
            self.refresh(model, trainer_step)
            model.train(was_training)
        started = time.perf_counter()
        prompt_ids = encode_prompts(
            prompts,
            self.tokenizer,
            getattr(trainer, "chat_template", None),
            getattr(trainer, "chat_template_kwargs", None),
        )
        completion_ids, logprobs = self.sampler.sample_batch(
            prompt_ids, self.max_completion_length, self.temperature, self.stop_ids
        )
        self.ledger.record(
            trainer_step, self.policy_version, len(completion_ids), round(time.perf_counter() - started, 4)
        )
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}


def initial_gguf(model_path, out_dir, outtype: str = "f32", progress=print) -> tuple[Path, float]:
    """The GGUF the sampler starts from (policy version 0): the model as loaded, before any step."""
    from ..model.gguf import export_gguf

    started = time.perf_counter()
    path = export_gguf(model_path, Path(out_dir) / "policy-step000000.gguf", outtype=outtype, progress=progress)
    return path, time.perf_counter() - started


def make_llamacpp_rollout(
    settings,
    model_path,
    tokenizer,
    out_dir,
    *,
    n_threads: int | None = None,
    outtype: str | None = None,
    progress=print,
) -> LlamaCppRollout:
    """Export the starting policy to GGUF, load it in llama.cpp and return the rollout_func (with .ledger)."""
    require_llama_cpp()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    outtype = outtype or ("f32" if settings.dtype == "float32" else "f16")  # float32 models (CPU, MPS) stay exact
    path, seconds = initial_gguf(model_path, out_dir, outtype, progress)
    # llama.cpp warns past the context the model was trained for
    n_ctx = min(
        settings.max_prompt_length + settings.max_completion_length, model_context_tokens(model_path) or 1 << 30
    )
    sampler = InProcessLlama(path, n_ctx=max(n_ctx, 64), n_threads=n_threads, seed=settings.seed)
    rollout = LlamaCppRollout(
        sampler,
        tokenizer,
        temperature=settings.temperature,
        max_completion_length=settings.max_completion_length,
        refresh_every=settings.llamacpp_refresh_every,
        export_dir=out_dir,
        outtype=outtype,
        progress=progress,
    )
    rollout.initial_export_seconds = round(seconds, 3)
    return rollout


def configure_llamacpp(settings, model_path, tokenizer, out_dir=None, progress=print) -> tuple[dict, str]:
    """(GRPOTrainer keyword arguments: `rollout_func` and the `log` dict, the line to print) for the llamacpp path."""
    from ..common.paths import runs_dir

    # One folder per run: concurrent runs must not overwrite each other's GGUF files.
    out_dir = Path(out_dir) if out_dir else runs_dir() / "gguf" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    rollout = make_llamacpp_rollout(settings, model_path, tokenizer, out_dir, progress=progress)
    K = settings.llamacpp_refresh_every
    line = (
        f"llama.cpp ({rollout.sampler.engine}) through rollout_func, GGUF {rollout.sampler.gguf_path.name} exported in "
        f"{rollout.initial_export_seconds:.1f} s; "
        + (
            f"refreshed every {K} steps (lag < {K})"
            if K
            else "never refreshed: rollouts go stale, the lag grows every step"
        )
    )
    log = {
        "engine": rollout.sampler.engine,
        "gguf": str(rollout.sampler.gguf_path),
        "initial_export_seconds": rollout.initial_export_seconds,
        "refresh_every": K,
        "sampling": {"temperature": settings.temperature, **GRPO_SAMPLING},
    }
    return {"rollout_func": rollout, "log": log}, line


# --- the path's engine (base.RolloutEngine) ----------------------------------------------------------------


def check_installed() -> None:
    """Refused at once where llama-cpp-python is left out of this image or not installed."""
    require_llama_cpp()


def choose(settings, track, facts: RolloutFacts) -> RolloutChoice:
    reason = "llama.cpp through rollout_func: sampled from a GGUF copy of the policy, stale between refreshes"
    return RolloutChoice(settings.rollout, {}, reason)


def configure(settings, track, device_type: str, model_path, tokenizer, out_dir=None, progress=print,
              prompt_tokens: int | None = None) -> tuple[dict, str]:
    return configure_llamacpp(settings, model_path, tokenizer, out_dir, progress)
