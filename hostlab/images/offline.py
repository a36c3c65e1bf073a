"""`invoke vendor` and `invoke vendor.check`: a track's vendored folder (hostlab/images/vendor.py says what it holds),
and the image built from it from nothing with the network cut, compared with the track's record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import REPO, HostError
from ..host.console import say
from ..host.disk import buildah_tmp
from ..host.tools import resolved
from ..locks.provenance import CACHE
from .build import choose_base, git_revision, resolve_track
from .builders import BUILDAH_HINT, choose_builder
from .record import compare_with_record
from .vendor import read_manifest, vendor


def vendor_track(track_name: str | None, into: Path | None, base: str | None, repo: Path = REPO,
                 cache: Path = CACHE) -> dict:
    """`invoke vendor`: the folder for the track (default vendor/<track>) on its base (the pinned one, or the stand-in
    where no registry answers), with what it holds and what it took said at the end."""
    track = resolve_track(track_name)
    if not track.is_container:
        raise HostError(f"track {track.name} is a native venv, not an image: nothing to vendor")
    into = into or repo / "vendor" / track.name
    base_image, base_digest = choose_base(track, base)
    started = time.monotonic()
    manifest = vendor(track, base_image, base_digest, into, git_revision(repo), repo, cache)
    took = time.monotonic() - started
    say(f"[vendor] {into}: {manifest['bytes'] / 1e9:.2f} GB ({len(manifest['files'])} files and the base image) in "
        f"{took:.0f} s. `invoke build --track {track.name} --vendored {into}` builds from it with no network.")
    return {**manifest, "vendor_s": round(took, 1)}


# Run by check_offline inside the network namespace: one build from nothing, from the folder; its ids as JSON.
_BUILD_HERE = """
import json, sys
from pathlib import Path
from hostlab.images.build import build
from hostlab.images.builders import choose_builder
from hostlab.images.vendor import reachable
reached = reachable()
if reached:
    sys.exit(f"[vendor] the network namespace reaches {', '.join(reached)}: not a build without network")
track, folder, base, store, tag = sys.argv[1:6]
builder = choose_builder()
with builder.from_nothing(Path(store)):
    result = build(track, base=base or None, tag=tag, write_env=False, builder=builder, compare_record=False,
                   vendored=Path(folder))
keys = ("image_id", "deps_image_id", "deps_layers", "base_id", "base", "compiled_image_id", "compiled_layers",
        "record_name")
print("RESULT " + json.dumps({**{key: getattr(result, key) for key in keys}, "build_s": round(result.seconds, 1)}))
"""


def check_offline(track_name: str | None, folder: Path | None, repo: Path = REPO) -> dict:
    """`invoke vendor.check`: the track's image built from the folder, from nothing (a store of its own, empty), in a
    network namespace whose only interface is loopback, then compared with lockfiles/<track>.image.json. Needs root
    (unshare) and a builder that sets its times (buildah)."""
    track = resolve_track(track_name)
    folder = (folder or repo / "vendor" / track.name).resolve()
    manifest = read_manifest(folder, track)
    if not choose_builder().sets_times:
        raise HostError(f"`invoke vendor.check` compares with the record, so needs a builder that sets its times: "
                        f"{BUILDAH_HINT}")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        raise HostError("`invoke vendor.check` cuts the network with a namespace of its own (unshare -n): run it as "
                        "root, on Linux")
    tag = f"grpolab-vendored:{track.name}"
    store = buildah_tmp() / f"grpolab-vendored-{track.name}"
    say(f"[vendor] building track {track.name} from {folder} from nothing, in a network namespace with loopback only")
    started = time.monotonic()
    inner = ["sh", "-c", 'ip link set lo up && exec "$0" -c "$1" "$2" "$3" "$4" "$5" "$6"', sys.executable,
             _BUILD_HERE, track.name, str(folder), manifest["base"]["name"], str(store), tag]
    out_lines = []
    env = {**os.environ, "PYTHONPATH": f"{repo}:{repo / 'entrypoint'}"}
    with subprocess.Popen(resolved(["unshare", "--net", *inner]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd=repo, env=env) as proc:
        for line in proc.stdout:
            out_lines.append(line)
            if not line.startswith("RESULT "):
                print(line, end="", flush=True)
    if proc.returncode != 0 or not out_lines or not out_lines[-1].startswith("RESULT "):
        raise HostError(f"[vendor] the build without network failed (exit {proc.returncode}): its log is above")
    built = json.loads(out_lines[-1].removeprefix("RESULT "))
    verdict, lines = compare_with_record(track, _Built(**built, builder=choose_builder().describe()), repo)
    for line in lines:
        say(line)
    return {**built, "record": verdict, "offline_s": round(time.monotonic() - started, 1), "tag": tag,
            "vendor_bytes": manifest["bytes"]}


@dataclass(frozen=True)
class _Built:
    """What compare_with_record reads of a build (a BuildResult's fields), from the namespace's JSON."""

    image_id: str
    deps_image_id: str
    deps_layers: list
    base_id: str
    base: str
    compiled_image_id: str
    compiled_layers: list
    record_name: str
    build_s: float
    builder: str
