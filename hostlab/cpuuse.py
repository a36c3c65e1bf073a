"""How busy the machine's CPUs were over each part of a run: /proc/stat read where a part starts and ends (reads of one
file, nothing the run notices). `invoke test` prints it, so that its wall clock can be set against the work it did:
on 2 cores, N CPU-seconds of work take at least N/2 seconds, and the idle share says what running more side by
side could still win."""

from __future__ import annotations

import os
from pathlib import Path

PROC_STAT = Path("/proc/stat")


def cpu_seconds() -> tuple[float, float] | None:
    """(busy, in all) CPU-seconds since boot, every CPU together; idle and waiting on the disk are not busy. None
    where there is no /proc/stat (not Linux)."""
    if not PROC_STAT.is_file():
        return None
    ticks = [int(value) for value in PROC_STAT.read_text().splitlines()[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
    per_second = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / per_second, sum(ticks) / per_second


class CpuUse:
    """Parts of a run, each with the CPU-seconds the machine was busy in it and those it had."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, float, float]] = []
        self._mark = cpu_seconds()

    def part(self, name: str) -> None:
        """Ends the part that started at the last call (or at the start) and names it."""
        now = cpu_seconds()
        if now is None or self._mark is None:
            return
        self.parts.append((name, now[0] - self._mark[0], now[1] - self._mark[1]))
        self._mark = now

    def summary(self) -> str:
        if not self.parts:
            return "CPU: not measured (no /proc/stat here)"
        busy, had = sum(part[1] for part in self.parts), sum(part[2] for part in self.parts)
        lines = [f"CPU ({os.cpu_count()} here): busy {busy:,.0f} of {had:,.0f} CPU-seconds ({100 * busy / had:.0f} %)"]
        lines += [f"  {name}: busy {part_busy:,.0f} of {part_had:,.0f} ({100 * part_busy / part_had:.0f} %)"
                  for name, part_busy, part_had in self.parts if part_had > 0]  # fmt: skip
        return "\n".join(lines)
