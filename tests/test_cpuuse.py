"""The CPU-seconds `invoke test` prints for each of its parts (hostlab/cpuuse.py), read from /proc/stat."""

import os
import time

import pytest

from hostlab.cpuuse import CpuUse, cpu_seconds

pytestmark = pytest.mark.skipif(cpu_seconds() is None, reason="no /proc/stat: not Linux")


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
