"""The lesson's first run on a new machine: the pipeline's SMOKE shape, six layers checked in order, one
line each, stopping at the first failure (grpolab.run.checks holds the checks, grpolab.run.pipeline the walk)."""

from __future__ import annotations

from .pipeline import run_pipeline
from .pipeline_shapes import SMOKE
from ..settings.lab_settings import LabSettings, lab_for_smoke
from ..common.tracks import Track


def run_smoke(
    settings: LabSettings,
    track: Track,
    expect_device: str | None = None,
    log_path=None,
    say=print,
    lab: LabSettings | None = None,
) -> dict:
    """Run the six layers. Returns the run-log record; raises LayerFailure at the first failing layer.

    `settings` are smoke settings (grpolab.settings.lab_settings.smoke_settings); `expect_device` overrides the device
    the
    track expects, and such a pass does not count as "passed before" for the lab. `lab`: the lab it stands
    before, whose per-step shape it times once its layers pass (default: the track's lab,
    grpolab.settings.lab_settings.lab_for_smoke).
    """
    return run_pipeline(
        settings,
        track,
        SMOKE,
        expect_device=expect_device,
        log_path=log_path,
        say=say,
        lab=lab or lab_for_smoke(settings, track),
    )
