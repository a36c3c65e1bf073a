"""`invoke bench.reproducible`: the reproducibility check (hostlab.images.reproducible) run as a benchmark, its verdict
and what it cost filed as bench/reproducible-<image>.json with its provenance, and docs/benchmarks.md made again.
The check itself writes nothing tracked; only this command does."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .. import REPO, HostError
from ..host.console import say
from ..images.reproducible import check_reproducible
from .docs import write_page
from .record import write_result


def reproducible_bench(track_name: str | None, base: str | None = None, ca_bundle: str | None = None,
                       rollout: str | None = None, repo: Path = REPO) -> Path:
    """Check the track's image (two builds from nothing) and file the verdict, same or not, under bench/."""
    with tempfile.TemporaryDirectory(prefix="grpolab-reproducible-") as tmp:
        out = Path(tmp) / "verdict.json"
        failure = None
        try:
            check_reproducible(track_name, base=base, ca_bundle=ca_bundle, repo=repo, rollout=rollout, out=out)
        except HostError as err:  # differing builds are a result too: filed, then reported
            if not out.exists():
                raise
            failure = err
        verdict = json.loads(out.read_text())
    case = verdict["image"].partition(":")[2]  # c, or c-llamacpp
    path = write_result("reproducible", verdict, (verdict["track"],), {}, case=case, repo=repo)
    say(f"result: {path.relative_to(repo)}, and {write_page().relative_to(repo)} again")
    if failure:
        raise failure
    return path
