"""CI's vLLM colocate steps on the CPU, in track cv's image: the smoke test with its sync checks for real, and a
key-value cache larger than free RAM refused before the engine starts. `invoke test` calls
run_cv_colocate_steps after track cv's image is built (hostlab/citest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from grpolab.runlog import read_runs

from . import REPO, HostError
from .console import say

CV_IMAGE = "grpolab:cv"
SMOKE_STEPS = 10  # the smoke test's steps: every one of its syncs is checked
TOO_LARGE_KV_GIB = "100000"


def compose_run(args: list[str], extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """`docker compose run --rm -T ARGS` with track cv's image, whatever .env records (Compose: the shell's
    variables win over .env's)."""
    cmd = ["docker", "compose", "run", "--rm", "-T", *args]
    say("$ LAB_IMAGE=" + CV_IMAGE + " " + " ".join(cmd))
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "LAB_IMAGE": CV_IMAGE, **(extra_env or {})}, capture_output=True, text=True)
    say((proc.stdout + proc.stderr)[-6000:].rstrip())
    return proc


def check_colocate_line(line: dict) -> str:
    """The run-log line of a colocate smoke test: passed on track cv, vLLM's CPU build, every sync checked and
    matched, lag 0 measured. Returns the summary said in CI's output."""
    rollout = line.get("rollout") or {}
    wanted = {
        "status": (line.get("status"), "passed"), "track": (line.get("track"), "cv"), "rollout path": (rollout.get("path"), "vllm-colocate"),
        "vllm_build": (rollout.get("vllm_build"), "cpu"), "sync_checks": (rollout.get("sync_checks"), SMOKE_STEPS),
        "sync_failures": (rollout.get("sync_failures"), 0), "max_lag_steps": (rollout.get("max_lag_steps"), 0),
        "policy_versions": (rollout.get("policy_versions"), list(range(SMOKE_STEPS))),
    }  # fmt: skip
    wrong = {name: got for name, (got, want) in wanted.items() if got != want}
    if wrong:
        raise HostError(f"the colocate smoke test's run-log line is not what it should be: {wrong} (whole line: {line})")
    return (f"vLLM {rollout.get('vllm_version')} (cpu build), {rollout['sync_checks']} syncs checked, 0 failures, largest "
            f"log-probability difference {rollout.get('sync_max_logprob_diff')}, probe {rollout.get('sync_probe_seconds_mean')} s per check")


def run_cv_colocate_steps(timings: dict) -> None:
    """The colocate smoke test in track cv's image, and the refusal of a key-value cache past free RAM."""
    from .citest import _step

    log = REPO / "runs" / "runlog.jsonl"
    with _step("docker compose run smoke --track cv --rollout vllm-colocate (vLLM colocate on the CPU, every sync checked)", timings):
        before = len(read_runs(log))
        proc = compose_run(["smoke", "smoke", "--track", "cv", "--rollout", "vllm-colocate"])  # the service, then grpolab's command
        runs = read_runs(log)[before:]
        if proc.returncode != 0 or not runs:
            raise HostError(f"the colocate smoke test exited {proc.returncode}; run-log lines it wrote: {runs}")
        say(check_colocate_line(runs[-1]))
    with _step("a vLLM key-value cache larger than free RAM: refused before the engine starts", timings):
        before = len(read_runs(log))
        proc = compose_run(["-e", f"VLLM_CPU_KVCACHE_SPACE={TOO_LARGE_KV_GIB}", "smoke", "smoke", "--track", "cv", "--rollout", "vllm-colocate"])
        runs = read_runs(log)[before:]
        words = f"vLLM's key-value cache does not fit in free RAM: VLLM_CPU_KVCACHE_SPACE={TOO_LARGE_KV_GIB} GiB"
        if proc.returncode != 14 or words not in proc.stdout + proc.stderr:
            raise HostError(f"expected exit 14 saying {words!r}; got exit {proc.returncode}")
        if len(runs) != 1 or runs[0].get("failed_layer") != "rollout":
            raise HostError(f"expected one failed run-log line in the rollout layer, found {runs}")


if __name__ == "__main__":  # by hand: python -m hostlab.colocate_ci (track cv's image built)
    timings: dict = {}
    run_cv_colocate_steps(timings)
    say(str(timings))
    sys.exit(0)
