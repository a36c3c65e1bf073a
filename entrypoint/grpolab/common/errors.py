"""Failures the user acts on: each names the layer that broke, what happened, and what to do.

The exit status of `grpolab smoke` and `grpolab lab` says which layer failed (documented in docs/troubleshooting.md).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

# The lesson's layers, in the order a first run meets them, with their exit statuses.
EXIT_STATUS = {
    "input": 2,  # settings, track, model or dataset that cannot be used as given
    "device": 10,  # accelerator and driver, PyTorch build
    "adapter": 11,  # LoRA matched nothing
    "rewards": 12,  # reward functions missing, failing, or their dataset columns absent
    "first_step": 13,  # trainer: group collapse on the first logged step, or training crashed
    "rollout": 14,  # rollout engine refused or failed
    # the run log or the run's outputs could not be written: runs/ unwritable, too full for the run (checked before
    # training), or filled while saving
    "runlog": 15,
    "out_of_memory": 16,
    # not a layer's verdict: the run raised an error no check expected (a bug, or an unsupported setting)
    "crashed": 17,
    "interrupted": 130,
}


class LayerFailure(Exception):
    """A layer failed. `str()` is the whole message a user sees."""

    def __init__(self, layer: str, what: str, action: str = ""):
        if layer not in EXIT_STATUS:
            raise ValueError(f"unknown layer {layer!r}")
        self.layer, self.what, self.action = layer, what, action
        super().__init__(f"[{layer}] {what}" + (f"\n  what to do: {action}" if action else ""))

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.layer]


def run_reporting_failures(command: Callable[[], int]) -> int:
    """Run a command of `grpolab` or `python -m grpolab.bench`: a failed layer is one FAILED line and its exit
    status, not a traceback (a crash keeps its trace: it is a bug to report); an interrupt and a bad value likewise."""
    try:
        return command()
    except LayerFailure as failure:
        if failure.layer == "crashed" and failure.__cause__ is not None:
            traceback.print_exception(failure.__cause__, file=sys.stderr)
        print(f"\nFAILED {failure}", file=sys.stderr)
        return failure.exit_status
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_STATUS["interrupted"]
    except ValueError as error:
        print(f"\nFAILED [input] {error}", file=sys.stderr)
        return EXIT_STATUS["input"]
