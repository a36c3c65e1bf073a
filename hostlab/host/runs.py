"""Where the lab's runs land, as the host reads them. The lab answers where it writes (grpolab.common.paths: runs/ in
its working folder, or GRPOLAB_RUNS_DIR); the host asks it and never spells the path again."""

from __future__ import annotations

import os
from pathlib import Path

from grpolab.common.paths import runlog_path, runs_dir

from .. import REPO


def venv_runs_dir() -> Path:
    """Where a lab the host starts in a venv on this machine writes: the host starts it in the repository, so runs/
    there, or GRPOLAB_RUNS_DIR (relative to the repository, or absolute) when this shell sets it."""
    return REPO / runs_dir()


def venv_runlog() -> Path:
    return REPO / runlog_path()


def image_runs_dir() -> Path:
    """Where a lab in an image writes, seen from the host: the repository's runs/, which compose/base.yaml mounts as
    the image's runs folder whatever this shell's GRPOLAB_RUNS_DIR says, or the folder GRPOLAB_HOST_RUNS_DIR names
    (the test command's own, so that a learner's runs/ stays as it was: hostlab/ci/checkout.py)."""
    return Path(os.environ.get("GRPOLAB_HOST_RUNS_DIR") or REPO / "runs")


def image_runlog() -> Path:
    return runlog_in(image_runs_dir())


def runlog_in(runs: Path) -> Path:
    """The run log in a runs folder the host chose for a lab (GRPOLAB_RUNS_DIR=runs): the lab's own file name."""
    return runs / runlog_path().name
