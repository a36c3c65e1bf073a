"""`invoke verl-cpu`: verl's own trainer on this machine's CPU, on a bundle `invoke export --engine verl` just wrote.

Track clustercpu's environment (.venvs/clustercpu, from its lock: verl, Ray, torch, transformers and peft at track
cluster's versions, vLLM's CPU build at cluster's vLLM) exports the lab on the tiny model, then runs verl on it through
`python -m grpolab.bench verl-cpu` (CI's proof harness, grpolab/bench/verl_cpu_proof.py), which adds what a CPU needs to
the bundle's unedited run.sh and writes the run-log line. The
host reads that line from the run log; it knows nothing of verl.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from grpolab.common.runlog import read_runs
from grpolab.common.tracks import get_track

from .. import REPO, HostError
from ..host.console import say
from ..host.runs import venv_runlog, venv_runs_dir
from ..host.tools import resolved
from .lab import lab_env, make_venv, venv_python

TRACK = "clustercpu"


def export_and_run(steps: int = 2, out: Path | None = None, bundle_edit=None) -> dict:
    """Export track clustercpu's lab into `out` (default runs/export-verl-cpu-<time>), run verl on it for `steps` GRPO
    steps, and return the run-log line it wrote. `bundle_edit(bundle)`, when given, changes the bundle before verl
    runs (CI breaks one on purpose this way). Raises HostError, naming what failed, when verl did not pass."""
    track = get_track(TRACK)
    make_venv(TRACK)  # quick when .venvs/clustercpu already holds the lock
    python, env = str(venv_python(track)), lab_env(track)
    bundle = out or venv_runs_dir() / f"export-verl-cpu-{time.strftime('%Y%m%dT%H%M%S')}"
    exported = subprocess.run(
        resolved([python, "-m", "grpolab", "export", "--engine", "verl", "--track", TRACK, "--out", str(bundle)]),
        env=env,
        cwd=REPO,
    )
    if exported.returncode != 0:
        raise HostError(f"`grpolab export --engine verl --track {TRACK}` exited {exported.returncode} (output above)")
    if bundle_edit is not None:
        bundle_edit(bundle)
    runlog = venv_runlog()  # where the lab writes: runs/, or GRPOLAB_RUNS_DIR
    before = len(read_runs(runlog))
    status = subprocess.run(
        resolved([python, "-m", "grpolab.bench", "verl-cpu", str(bundle), "--steps", str(steps)]), env=env, cwd=REPO
    ).returncode
    lines = [line for line in read_runs(runlog)[before:] if line.get("engine") == "verl"]
    if not lines:
        raise HostError(f"verl on the CPU exited {status} and wrote no run-log line to {runlog} (output above)")
    line = lines[-1]
    if status != 0 or line.get("status") != "passed":
        raise HostError(
            f"verl on the CPU exited {status}; its run-log line says {line.get('status')} at "
            f"{line.get('failed_layer')}: "
            f"{line.get('error')}"
        )
    if len(line.get("steps") or []) != steps or line.get("pass_at_1_after") is None:
        raise HostError(
            f"verl's run-log line has {len(line.get('steps') or [])} step(s) (asked {steps}) and pass@1 after "
            f"{line.get('pass_at_1_after')}: {line}"
        )
    say(
        f"verl on the CPU: {steps} steps, reward {[s['reward'] for s in line['steps']]}, {line['seconds_per_step']} "
        "s/step, "
        f"held-out pass@1 {line['pass_at_1_before']:.3f} -> {line['pass_at_1_after']:.3f} (grpolab's evaluator on "
        "verl's adapter), "
        f"run-log line {line['run_id']}"
    )
    return line
