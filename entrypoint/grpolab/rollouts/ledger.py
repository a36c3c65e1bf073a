"""The staleness ledger: which policy version produced each rollout batch, and every refresh of the sampler.

A sampler that cannot receive the trainer's weights after each optimiser step (llama.cpp) samples from an
older policy; the ledger records that lag per batch, and the run log keeps its summary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


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


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


@dataclass
class RolloutLedger:
    """Every rollout batch's policy version against the trainer's step, and every refresh of the sampler."""

    refresh_every: int = 0  # 0: never
    engine: str = ""
    batches: list[RolloutBatch] = field(default_factory=list)
    refreshes: list[Refresh] = field(default_factory=list)

    def record(
        self, trainer_step: int, policy_version: int, completions: int = 0, seconds: float = 0.0
    ) -> RolloutBatch:
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
        return {
            "engine": self.engine,
            "stale": self.stale,
            "max_lag_steps": self.max_lag_steps,
            "mean_lag_steps": _mean(self.lags) or 0.0,
            "rollout_batches": len(self.batches),
            "refresh_every": self.refresh_every,
            "refreshes": len(self.refreshes),
            "refresh_seconds_mean": _mean([r.seconds for r in self.refreshes]),
            "refresh_export_seconds_mean": _mean([r.export_seconds for r in self.refreshes]),
            "refresh_reload_seconds_mean": _mean([r.reload_seconds for r in self.refreshes]),
            "sampling_seconds": round(sum(b.seconds for b in self.batches), 3),
        }

    def describe(self) -> str:
        if not self.batches:
            return "no rollout batches"
        if not self.stale:
            return f"{len(self.batches)} batches, all on-policy (lag 0)"
        how = (
            f"refreshed every {self.refresh_every} steps ({len(self.refreshes)} refreshes)"
            if self.refresh_every
            else "never refreshed"
        )
        return (f"STALE: {len(self.batches)} batches sampled up to {self.max_lag_steps} optimiser steps behind the "
                f"trainer; {how}")

    def as_dict(self) -> dict:
        return {
            **self.summary(),
            "batches": [asdict(b) | {"lag": b.lag} for b in self.batches],
            "refresh_log": [asdict(r) for r in self.refreshes],
        }
