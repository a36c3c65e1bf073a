"""How busy the machine's CPUs were over each part of a run: /proc/stat read where a part starts and ends (reads of one
file, nothing the run notices). `invoke test` prints it, so that its wall clock can be set against the work it did:
on 2 cores, N CPU-seconds of work take at least N/2 seconds, and the idle share says what running more side by
side could still win."""

from __future__ import annotations

import os
from pathlib import Path

PROC_STAT = Path("/proc/stat")


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, in all) clock ticks since boot, every CPU together; idle and waiting on the disk are not busy. None
    where there is no /proc/stat (not Linux)."""
    if not PROC_STAT.is_file():
        return None
    ticks = [
        int(value) for value in PROC_STAT.read_text().splitlines()[0].split()[1:9]
    ]  # user nice system idle iowait irq softirq steal
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


class CpuUse:
    """Parts of a run, each with the CPU-seconds the machine was busy in it and those it had."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, float, float]] = []
        self._mark = cpu_ticks()

    def part(self, name: str) -> None:
        """Ends the part that started at the last call (or at the start) and names it."""
        now = cpu_ticks()
        if now is None or self._mark is None:
            return
        # Subtracted in whole ticks, then divided: a part whose every tick was busy says busy == had exactly (as
        # seconds since boot, the two differences could round apart and say busy > had).
        per_second = os.sysconf("SC_CLK_TCK")
        self.parts.append((name, (now[0] - self._mark[0]) / per_second, (now[1] - self._mark[1]) / per_second))
        self._mark = now

    def summary(self) -> str:
        if not self.parts:
            return "CPU: not measured (no /proc/stat here)"
        busy, had = sum(part[1] for part in self.parts), sum(part[2] for part in self.parts)
        lines = [
            f"CPU ({os.cpu_count()} here): busy {_seconds(busy)} of {_seconds(had)} CPU-seconds "
            f"({100 * busy / had:.0f} %)"
        ]
        lines += [f"  {name}: busy {_seconds(part_busy)} of {_seconds(part_had)} ({100 * part_busy / part_had:.0f} %)"
                  for name, part_busy, part_had in self.parts if part_had > 0]
        return "\n".join(lines)


def _seconds(cpu_s: float) -> str:
    """Whole CPU-seconds, and tenths under 10: a part of a second or two said "busy 0 of 0 (49 %)"."""
    return f"{cpu_s:,.0f}" if cpu_s >= 10 else f"{cpu_s:.1f}"
