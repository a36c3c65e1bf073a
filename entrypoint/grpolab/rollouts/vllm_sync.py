"""Lag 0 in vLLM colocate mode, verified rather than assumed.

TRL copies the policy's weights into the colocated engine before a generation whenever the optimiser step
changed (GRPOTrainer._generate_single_turn -> VLLMGeneration.sync_weights). The ledger follows those syncs through
that weight-sync client, trainer.vllm_generation.sync_weights: the step each sync loaded is the policy version vLLM
samples with until the next one. After a generation this ledger records that version and, on the checked syncs, asks
the engine for a fixed probe prompt's greedy completion with its log-probabilities and scores the same tokens
with the trainer's policy (the LoRA adapter as trained, unmerged). The sync is good when the trainer's greedy
choice is vLLM's at every position and the log-probabilities agree within LOGPROB_TOLERANCE. Nothing TRL does
is changed: the check runs after TRL's own generation, on the engine TRL built.

Every check also scores the previous check's vLLM tokens with the current policy: how far they moved is what
a sync that silently did nothing would have left between vLLM and the trainer (`stale_diff`), so the run log
shows the check could have told the two apart.

The probe costs a greedy generation and two forward passes: 0.05-0.1 s on the tiny model, 4 s a sync at the
Qwen3-0.6B shape on a 2-core CPU (bench/lab-colocate-size-*.json), where a step takes 28 s. A lab does not pay it
on every sync: TRL's own importance-sampling pass (vllm_importance_sampling_correction, its default) already scores
every token vLLM sampled with the trainer's policy, and logs the largest difference
(`sampling/sampling_logp_difference/max`). Where both sides run float32, that difference is as tight as the
probe's (measured: docs/rollout-paths.md, "vLLM colocate on a CPU"), so it checks every sync of a lab for nothing, and
the probe runs on
the first sync only. The smoke test still probes every sync (its model is small, and it is the diagnosis).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from .base import refused
from .ledger import RolloutLedger

# float32 on both sides; vLLM's CPU kernels and torch's differ in summation order only (measured on the tiny
# model, five runs: at most 2.9e-6), while one learning step moved the probe's log-probabilities by 0.00097 at
# the least (stale_diff, smoke tests): the tolerance sits between the two.
LOGPROB_TOLERANCE = 1e-4
# bf16 and fp16 keep about three significant digits, so two correct engines differ by far more there (vLLM's GPU
# kernels against the trainer's): a guess, not yet measured on a GPU (none was lent to this work).
HALF_PRECISION_TOLERANCE = 5e-2
PROBE_TOKENS = 16
# Which syncs a lab probes where TRL's per-token comparison is not in force (half precision, or TRL's
# importance-sampling pass turned off): the first, every CHECK_EVERY-th and the last.
CHECK_EVERY = 10
# TRL's logged metric: the largest |trainer - vLLM| log-probability over every token vLLM sampled in one generation.
TRL_LOGP_DIFFERENCE = "sampling/sampling_logp_difference/max"


@dataclass
class SampledTokensCheck:
    """One generation's sync, judged by TRL's importance-sampling pass over every sampled token."""

    policy_version: int
    max_logprob_diff: float
    matched: bool


@dataclass
class SyncCheck:
    policy_version: int  # the optimiser step whose weights TRL synced
    matched: bool
    tokens: int  # probe tokens compared
    first_mismatch: int | None  # position of the first token where the trainer's greedy choice differs
    max_logprob_diff: float  # largest |vLLM - trainer| log-probability over the probe's tokens
    stale_diff: float | None  # the same, had the engine kept the previous check's weights (None at the first check)
    seconds: float


def verdict(
    vllm_tokens: list[int],
    vllm_logprobs: list[float],
    trainer_greedy: list[int],
    trainer_logprobs: list[float],
    tolerance: float = LOGPROB_TOLERANCE,
    trainer_max_logprobs: list[float] | None = None,
) -> tuple[bool, int | None, float]:
    """(matched, first position where the greedy choices differ or None, largest log-probability difference).
    A different greedy choice is a tie, not a mismatch, when the trainer rates vLLM's token within `tolerance` of its
    own."""
    best = trainer_max_logprobs or [None] * len(trainer_greedy)
    first = next((i for i, (a, b, lp, top) in enumerate(zip(vllm_tokens, trainer_greedy, trainer_logprobs, best))
                  if a != b and (top is None or top - lp > tolerance)), None)
    diff = max((abs(a - b) for a, b in zip(vllm_logprobs, trainer_logprobs)), default=0.0)
    return first is None and diff <= tolerance, first, diff


class VllmSyncLedger(RolloutLedger):
    """The policy version of every vLLM batch, and the sync checks (rollout.sync_checks / sync_failures)."""

    def __init__(
        self, probe_ids: list[int], max_steps: int, probe_every_sync: bool = False, probe_tokens: int = PROBE_TOKENS
    ):
        super().__init__(refresh_every=1, engine="vLLM colocate")
        self.probe_ids = list(probe_ids)
        self.probe_tokens = probe_tokens
        self.max_steps = max_steps
        self.probe_every_sync = probe_every_sync
        self.checks: list[SyncCheck] = []
        self.sampled_checks: list[SampledTokensCheck] = []
        self.sampled_tokens_in_force: bool | None = None  # known after the first generation's scoring
        self._previous: tuple[list[int], list[float]] | None = None
        self.torch_threads: int | None = None
        self.tolerance = LOGPROB_TOLERANCE
        self.synced_step: int | None = None  # the optimiser step whose weights the last sync loaded into vLLM
        self._version_at_last_generation: int | None = None
        self._batches_scored = 0

    # --- hooked onto the trainer (run/training.py's attach_sync_ledger) -----------------------------------------

    def follow_weight_syncs(self, trainer) -> None:
        """Note the optimiser step of every weight sync TRL makes through its weight-sync client, whatever wraps it
        (TRL syncs once per step, before that step's generation). Put on last, so that it counts what TRL asked
        for: a sync that reached the engine or not is for the checks to tell."""
        sync = trainer.vllm_generation.sync_weights

        def noted_sync():
            result = sync()
            self.synced_step = trainer.state.global_step
            return result

        trainer.vllm_generation.sync_weights = noted_sync

    def after_generation(self, trainer, generation_seconds: float) -> None:
        version = self.synced_step
        synced = version != self._version_at_last_generation  # TRL synced before this generation
        self._version_at_last_generation = version
        if self.torch_threads is None:  # after the engine started: vLLM's CPU worker may have changed torch's threads
            import torch

            self.torch_threads = torch.get_num_threads()
        self.record(trainer.state.global_step, version, seconds=round(generation_seconds, 4))
        if synced and self.should_check(version):
            self.checks.append(self.check(trainer, version))

    def after_scoring(self, trainer, logged_metrics: dict) -> None:
        """After TRL scored a generation: its largest trainer-vs-vLLM log-probability difference over the sampled
        tokens is this sync's check where the trainer runs float32 (the engine then does too). Called at each step's
        end; a step that generated nothing (TRL reusing an earlier generation) has nothing new to hand over."""
        if len(self.batches) == self._batches_scored:
            return
        self._batches_scored = len(self.batches)
        values = logged_metrics.get(TRL_LOGP_DIFFERENCE) or []
        float32 = tolerance_for(next(trainer.model.parameters()).dtype) == LOGPROB_TOLERANCE
        if self.sampled_tokens_in_force is None:
            self.sampled_tokens_in_force = bool(values) and float32
        if self.sampled_tokens_in_force and values and self.batches:
            diff = float(values[-1])
            self.sampled_checks.append(
                SampledTokensCheck(self.batches[-1].policy_version, round(diff, 8), diff <= LOGPROB_TOLERANCE)
            )

    def should_check(self, version: int) -> bool:
        """Probe this sync? Every one in the smoke test; in a lab the first, and, only where TRL's comparison of the
        sampled tokens is not in force, every CHECK_EVERY-th and the last."""
        if self.probe_every_sync or version <= 0:
            return True
        if self.sampled_tokens_in_force:
            return False
        return (
            version >= self.max_steps - 1 or version % CHECK_EVERY == 0
        )  # the last sync: before the last step's generation

    def check(self, trainer, version: int) -> SyncCheck:
        started = time.perf_counter()
        tokens, vllm_logprobs = self.engine_greedy(trainer.vllm_generation.llm)
        greedy, logprobs, best = self.policy_scores(trainer.model, tokens)
        self.tolerance = tolerance_for(next(trainer.model.parameters()).dtype)
        matched, first, diff = verdict(tokens, vllm_logprobs, greedy, logprobs, self.tolerance, best)
        stale = None
        if self._previous is not None:
            previous_tokens, previous_logprobs = self._previous
            _, now, _ = self.policy_scores(trainer.model, previous_tokens)
            stale = max((abs(a - b) for a, b in zip(previous_logprobs, now)), default=0.0)
        self._previous = (tokens, vllm_logprobs)
        return SyncCheck(
            version,
            matched,
            len(tokens),
            first,
            round(diff, 8),
            None if stale is None else round(stale, 8),
            round(time.perf_counter() - started, 4),
        )

    def engine_greedy(self, llm) -> tuple[list[int], list[float]]:
        """vLLM's greedy completion of the probe prompt and the log-probability of each token it chose."""
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=self.probe_tokens, logprobs=0)
        output = llm.generate([{"prompt_token_ids": self.probe_ids}], params, use_tqdm=False)[0].outputs[0]
        tokens = list(output.token_ids)
        return tokens, [float(step[token].logprob) for token, step in zip(tokens, output.logprobs)]

    def policy_scores(self, model, tokens: list[int]) -> tuple[list[int], list[float], list[float]]:
        """The trainer's greedy choice at each probe position, its log-probability of `tokens` and of its own
        greedy choice (one forward)."""
        import torch

        if not tokens:
            return [], [], []
        ids = torch.tensor([self.probe_ids + tokens[:-1]], device=next(model.parameters()).device)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(self.probe_ids) - 1 :].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        chosen = logprobs.gather(1, torch.tensor(tokens, device=logprobs.device).unsqueeze(1)).squeeze(1)
        top = logprobs.max(-1)
        return top.indices.tolist(), chosen.tolist(), top.values.tolist()

    # --- what the run log keeps, and the rollout layer's verdict -------------------------------------------------

    @property
    def failures(self) -> list[SyncCheck | SampledTokensCheck]:
        """One failed check per failed sync, in step order (the probe's where both checks failed it)."""
        failed = {}
        for check in [*self.sampled_checks, *self.checks]:
            if not check.matched:
                failed[check.policy_version] = check
        return [failed[version] for version in sorted(failed)]

    def summary(self) -> dict:
        probe = [c.seconds for c in self.checks]
        stale = [c.stale_diff for c in self.checks if c.stale_diff is not None]
        checked = {c.policy_version for c in [*self.checks, *self.sampled_checks]}
        return {
            **super().summary(),
            "lag_measured": True,
            "policy_versions": [b.policy_version for b in self.batches],
            "sync_checks": len(checked),  # syncs checked, by the probe or by TRL's comparison of the sampled tokens
            "sync_failures": len(self.failures),
            "sync_probes": len(self.checks),
            "sync_probe_schedule": "every sync"
            if self.probe_every_sync
            else (
                "the first sync; TRL's importance-sampling pass checks every sync's sampled tokens"
                if self.sampled_tokens_in_force
                else f"the first, every {CHECK_EVERY}th and the last sync"
            ),
            "sync_check_tolerance": self.tolerance,
            "sync_max_logprob_diff": max((c.max_logprob_diff for c in self.checks), default=None),
            "sync_sampled_tokens_max_logprob_diff": max(
                (c.max_logprob_diff for c in self.sampled_checks), default=None
            ),
            "sync_sampled_tokens_log": [asdict(c) for c in self.sampled_checks],
            "sync_min_stale_diff": min(stale, default=None),
            "sync_probe_seconds_mean": round(sum(probe) / len(probe), 4) if probe else None,
            "sync_check_log": [asdict(c) for c in self.checks],
            "torch_threads_after_engine_start": self.torch_threads,
        }

    def check_verdict(self) -> None:
        """The rollout layer fails when a checked sync left vLLM sampling from weights other than the trainer's."""
        if not self.failures:
            return
        first = self.failures[0]
        if isinstance(first, SyncCheck):
            seen = (
                "vLLM's greedy probe completion differs from the trainer's policy (first differing token "
                f"{first.first_mismatch}, "
                f"largest log-probability difference {first.max_logprob_diff:.4g}, tolerance {self.tolerance:g})"
            )
        else:
            seen = (
                f"TRL's importance-sampling pass scored the tokens vLLM sampled up to {first.max_logprob_diff:.4g} "
                "apart from the "
                f"trainer's policy in log-probability (tolerance {self.tolerance:g})"
            )
        checked = self.summary()["sync_checks"]
        raise refused(
            f"{len(self.failures)} of {checked} checked weight syncs did not reach vLLM: after the sync of step "
            f"{first.policy_version}, {seen}, so its rollouts were sampled from stale or other weights",
            "check that TRL and vLLM are the locked versions (`grpolab doctor`: lock drift), that the model's "
            "parameter names "
            "map onto vLLM's (a model vLLM loads with another implementation), or use --rollout inprocess",
        )


def tolerance_for(dtype) -> float:
    import torch

    return LOGPROB_TOLERANCE if dtype == torch.float32 else HALF_PRECISION_TOLERANCE


def probe_prompt_ids(tokenizer, train_dataset) -> list[int]:
    """The fixed probe: the first training prompt with the chat template applied, as token ids."""
    prompt = train_dataset[0]["prompt"]
    if isinstance(prompt, list):
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    else:
        text = prompt
    return tokenizer(text, add_special_tokens=False)["input_ids"]
