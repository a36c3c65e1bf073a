"""The GRPO lab: the pipeline's LAB shape (pass@1 before, GRPO with a LoRA adapter, pass@1 after, one run-log
line and a plot), preceded by the smoke test of the same run when one is needed."""

from __future__ import annotations

import sys

from ..common.errors import LayerFailure
from .pipeline import run_pipeline
from .pipeline_shapes import LAB, SMOKE
from ..settings.lab_settings import LabSettings, smoke_settings
from ..common.tracks import Track

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
    from ..environment.fingerprint import environment_fingerprint, fingerprint_drift
    from ..common.runlog import read_runs

    if mode == "never":
        return []
    if mode == "always":
        return ["asked for (--smoke always)"]
    runs = read_runs(log_path)
    matching = [run for run in runs if counts_as_smoke_before(run, settings)]
    if not matching:
        if not any(run.get("kind") == "smoke" and run.get("status") == "passed" for run in runs):
            return ["no smoke test has passed in this environment yet"]
        return [
            f"no smoke test has passed on track {settings.track} with rollout path {settings.rollout} and the device "
            "checked"
        ]
    return fingerprint_drift(matching[-1].get("fingerprint"), environment_fingerprint())


def run_lab(settings: LabSettings, track: Track, smoke: str = "auto", log_path=None, say=print) -> dict:
    """The lab; first the smoke test of the same run (its rollout path, rewards, dtype, model family) when needed."""
    reasons = smoke_needed(smoke, settings, log_path)
    if reasons:
        say("running the smoke test first: " + "; ".join(reasons))
        run_smoke_apart(smoke_settings(settings, track), track, log_path, say, lab=settings)
        say("smoke test passed; starting the lab\n")
    return run_pipeline(settings, track, LAB, log_path=log_path, say=say)


def run_smoke_apart(settings: LabSettings, track: Track, log_path, say, lab: LabSettings) -> None:
    """The smoke test before the lab, in a process of its own (forked, on Linux), so that nothing it allocated
    or started stays in the lab's process: no model, engine or freed-but-resident heap of its run, which the
    lab would otherwise reuse unseen by its memory meter (measured here on track c: the lab's peak above its
    baseline read 0.074 GB after an in-process smoke test, 0.098-0.111 GB without one, 0.103 GB predicted).
    Where forking is not safe (not Linux, or an accelerator already initialised here) it runs in this process."""
    if sys.platform != "linux" or _accelerator_initialised():
        run_pipeline(settings, track, SMOKE, log_path=log_path, say=say, lab=lab)
        return
    import multiprocessing

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_smoke_child, args=(settings, track, log_path, sender, lab), name="grpolab-smoke")
    child.start()
    sender.close()  # ours: the child holds its own copy
    try:
        verdict = _relay(receiver, child, say)
    finally:
        child.join()
    if verdict is None:
        raise LayerFailure("crashed", f"the smoke test's process ended (exit code {child.exitcode}) without a verdict",
                           "run `grpolab smoke` on its own to see where it stops")
    if verdict[0] == "interrupted":
        raise KeyboardInterrupt
    if verdict[0] == "failed":
        raise LayerFailure(*verdict[1:])


def _accelerator_initialised() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _relay(receiver, child, say):
    """Say the child's lines as they come; returns its verdict, or None when it died without one (killed)."""
    while True:
        if not receiver.poll(1.0):
            if child.is_alive():
                continue
            if not receiver.poll():
                return None
        try:
            message = receiver.recv()
        except EOFError:  # the child is gone and said nothing more
            return None
        if message[0] == "say":
            say(message[1])
        else:
            return None if message[0] == "died" else message


def _smoke_child(settings: LabSettings, track: Track, log_path, sender, lab: LabSettings) -> None:
    verdict = ("died",)
    try:
        run_pipeline(
            settings, track, SMOKE, log_path=log_path, say=lambda text: sender.send(("say", str(text))), lab=lab
        )
        verdict = ("passed",)
    except LayerFailure as failure:
        verdict = ("failed", failure.layer, failure.what, failure.action)
    except KeyboardInterrupt:
        verdict = ("interrupted",)
    except BaseException as error:  # noqa: BLE001 - told to the lab, which fails in words
        verdict = (
            "failed",
            "crashed",
            f"the smoke test crashed: {type(error).__name__}: {error}",
            "run `grpolab smoke` on its own for the traceback",
        )
    finally:
        sender.send(verdict)
