"""The CPU-seconds `invoke test` prints for each of its parts (hostlab/ci/cpuuse.py), read from /proc/stat."""

import os
import time

import pytest

from hostlab.ci import cpuuse
from hostlab.ci.cpuuse import CpuUse, cpu_ticks

pytestmark = pytest.mark.skipif(cpu_ticks() is None, reason="no /proc/stat: not Linux")


def test_a_part_counts_the_work_done_in_it_against_what_the_cpus_had():
    use = CpuUse()
    started = time.monotonic()
    while time.monotonic() - started < 0.6:  # one core busy for 0.6 s
        pass
    elapsed = time.monotonic() - started
    use.part("busy")
    [(name, busy, had)] = use.parts
    assert name == "busy" and 0.45 <= busy <= had
    assert had == pytest.approx(elapsed * os.cpu_count(), rel=0.25)  # every CPU's seconds, not one's
    summary = use.summary().splitlines()
    assert summary[0].startswith(f"CPU ({os.cpu_count()} here): busy ") and summary[1].startswith("  busy: busy ")


def test_a_part_busy_in_every_tick_is_busy_for_all_it_had(tmp_path, monkeypatch):
    """Seen in a run beside the builds: a part with both cores busy throughout said busy 1.1900000000023283 of
    1.1899999999877764, since boot-long counts of ticks were turned into seconds before they were subtracted. These
    counts (user and idle ticks since boot) round apart that way; in whole ticks they cannot."""
    stat = tmp_path / "stat"
    monkeypatch.setattr(cpuuse, "PROC_STAT", stat)
    monkeypatch.setattr(cpuuse.os, "sysconf", lambda name: 100)
    idle = 436888398 - 408608741
    stat.write_text(f"cpu  408608741 0 0 {idle} 0 0 0 0 0 0\n")
    use = CpuUse()
    stat.write_text(f"cpu  {408608741 + 49} 0 0 {idle} 0 0 0 0 0 0\n")
    use.part("every tick busy")
    assert use.parts == [("every tick busy", 0.49, 0.49)]
    assert use.summary().splitlines()[1] == "  every tick busy: busy 0.5 of 0.5 (100 %)"
