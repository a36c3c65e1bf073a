"""How far a measurement may be from the projection of it before the smoke test's summary and the report flag it
(the lab's seconds per step against the smoke test's projection, a peak against its estimate): 25 % either way."""

from __future__ import annotations

# measured / projected within this band is "within 25 %".
WITHIN = (0.8, 1.25)


def ratio(measured: float | None, projected: float | None) -> float | None:
    """measured / projected, or None when either is missing or the projection is 0."""
    if measured is None or not projected:
        return None
    return measured / projected


def off_by_more_than_25_percent(measured: float | None, projected: float | None) -> bool:
    """True when measured / projected falls outside WITHIN (False when either is missing)."""
    found = ratio(measured, projected)
    return found is not None and not WITHIN[0] <= found <= WITHIN[1]
