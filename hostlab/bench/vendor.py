"""`invoke bench.vendor`: what keeping a track's build costs, filed as bench/vendor-<track>.json.

Cold, as a learner meets it: `invoke vendor` into an empty folder with an empty download cache of its own (every file
fetched from the indexes, the Debian pins by apt), then `invoke vendor.check`: the image built from the folder, from
nothing, with the network cut, compared with lockfiles/<track>.image.json. The folder's size per part is measured; for
every other container track, what its wheels and sdists would weigh is read from the indexes (their stated sizes, no
download), labelled as such."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from grpolab.common.tracks import load_tracks

from .. import REPO
from ..host import engine
from ..host.console import say
from ..images.offline import check_offline, vendor_track
from ..images.vendor import locked_inputs
from .docs import write_page
from .record import write_result


def _parts_bytes(folder: Path) -> dict[str, int]:
    parts = {"base": (folder / "base.tar").stat().st_size}
    for part in ("wheels", "debian"):
        parts[part] = sum(p.stat().st_size for p in (folder / part).rglob("*") if p.is_file())
    return parts


def stated_wheel_bytes() -> dict[str, int]:
    """Every container track whose lock is here: its vendored wheels' and sdists' bytes as the indexes state them."""
    sizes = {}
    for track in load_tracks().values():
        if track.is_container and (REPO / "lockfiles" / f"{track.name}.txt").exists():
            sizes[track.name] = sum(f.size for f in locked_inputs(track))
    return sizes


def vendor_bench(track_name: str = "c", base: str | None = None, repo: Path = REPO) -> Path:
    with tempfile.TemporaryDirectory(prefix="grpolab-vendor-bench-", dir="/var/tmp") as tmp:
        folder, cache = Path(tmp) / "folder", Path(tmp) / "cache"
        made = vendor_track(track_name, folder, base, repo, cache=cache)
        parts = _parts_bytes(folder)
        checked = check_offline(made["track"], folder, repo)
        engine.client().images.remove(checked["tag"], noprune=True)
        shutil.rmtree(folder)
    record = {
        "track": made["track"],
        "base": made["base"],
        "folder_bytes": made["bytes"],
        "folder_parts_bytes": parts,
        "files": len(made["files"]),
        "vendor_s": made["vendor_s"],
        "vendor_parts_s": made["seconds"],
        "offline_build": {key: checked[key] for key in ("image_id", "deps_image_id", "record", "offline_s", "build_s")},
        "stated_wheel_bytes_per_track": stated_wheel_bytes(),
        "how": "cold: an empty folder and download cache; the offline build from nothing (an empty buildah store) in "
        "a network namespace with loopback only; stated_wheel_bytes_per_track: the indexes' stated sizes, not "
        "downloaded",
    }
    path = write_result("vendor", record, (made["track"],), {}, case=made["track"], repo=repo)
    say(f"result: {path.relative_to(repo)}, and {write_page().relative_to(repo)} again")
    return path
