"""The smoke test on the track's tiny model, told the lab it stands before: a lab on another model (a folder), as
the track rows with a smoke_model run it. The projection benchmark (`invoke bench.projection`) runs it through
`python -m grpolab.bench smoke-for-lab` to check how well the calibration and the size probe project a lab on a bigger
model; what it measured is in its run-log line."""

from __future__ import annotations

from dataclasses import replace

from ..common.tracks import get_track
from ..run.smoke import run_smoke
from ..settings.lab_settings import resolve_settings, smoke_settings


def smoke_before_lab(track_name: str, lab_model: str, lab_settings: dict[str, str]) -> int:
    """Exit status 0 once the smoke test passed (a failure raises its LayerFailure, as `grpolab smoke` does)."""
    track = get_track(track_name)
    lab = replace(resolve_settings(track), model=lab_model, **{key: int(value) for key, value in lab_settings.items()})
    run_smoke(replace(smoke_settings(lab, track), model="tiny"), track, lab=lab)
    return 0
