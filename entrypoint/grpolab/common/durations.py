"""A duration as people read it in a table or a summary line: "42.0 s", "3m05s", "2h10m"."""

from __future__ import annotations


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m" if whole >= 3600 else f"{whole // 60}m{whole % 60:02d}s"
