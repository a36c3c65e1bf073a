"""The GRPO lab: the pipeline's LAB shape (pass@1 before, GRPO with a LoRA adapter, pass@1 after, one run-log
line and a plot), preceded by the smoke test of the same run when one is needed."""

from __future__ import annotations

from .pipeline import LAB, SMOKE, run_pipeline
from .settings import LabSettings, smoke_settings
from .tracks import Track

SMOKE_MODES = ("auto", "always", "never")


def counts_as_smoke_before(run: dict, settings: LabSettings) -> bool:
    """A passing smoke test of this lab: same track, same rollout path, and the device the track expects checked
    (a pass with --expect-device overridden checked another device, so it does not count)."""
    path = (run.get("rollout") or {}).get("path") or (run.get("settings") or {}).get("rollout")
    return (run.get("kind") == "smoke" and run.get("status") == "passed" and run.get("track") == settings.track
            and path == settings.rollout and run.get("device_checked") is True)


def smoke_needed(mode: str, settings: LabSettings, log_path=None) -> list[str]:
    """Why the smoke test must run before the lab (empty: it need not).

    auto: when no smoke test of this track and rollout path has passed with the device checked, or the
    environment drifted since the last one that did (the lesson: re-run the small one after every change).
    """
    from .fingerprint import environment_fingerprint, fingerprint_drift
    from .runlog import read_runs

    if mode == "never":
        return []
    if mode == "always":
        return ["asked for (--smoke always)"]
    runs = read_runs(log_path)
    matching = [run for run in runs if counts_as_smoke_before(run, settings)]
    if not matching:
        if not any(run.get("kind") == "smoke" and run.get("status") == "passed" for run in runs):
            return ["no smoke test has passed in this environment yet"]
        return [f"no smoke test has passed on track {settings.track} with rollout path {settings.rollout} and the device checked"]
    return fingerprint_drift(matching[-1].get("fingerprint"), environment_fingerprint())


def run_lab(settings: LabSettings, track: Track, smoke: str = "auto", log_path=None, say=print) -> dict:
    """The lab; first the smoke test of the same run (its rollout path, rewards, dtype, model family) when needed."""
    reasons = smoke_needed(smoke, settings, log_path)
    if reasons:
        say("running the smoke test first: " + "; ".join(reasons))
        run_pipeline(smoke_settings(settings, track), track, SMOKE, log_path=log_path, say=say)
        say("smoke test passed; starting the lab\n")
    return run_pipeline(settings, track, LAB, log_path=log_path, say=say)
