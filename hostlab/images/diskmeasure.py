"""`invoke build.disk --track T`: what a cold build of the track's image writes to each store, measured, written to
lockfiles/<track>.disk.json (the need `invoke build` and `invoke up` check free space against: diskneed.py).

How: buildah's store and its temporary folder (cache mounts, staged context) each on a filesystem of their own, an
ext4 in a sparse file, loop-mounted with discard and empty at first, so the peak and what stays are read from the
filesystem's free space while the build runs (every 0.5 s; no `du` of a growing tree); uv's cache pointed at an empty
folder; then the build as `invoke build --keep-cache` runs it with buildah, tagged grpolab-measure:<track> (what it
keeps: kept_gb_with_keep_cache), and buildah's copies and the uv cache removed as `invoke build` removes them (what
stays: kept_gb). The engine's share: its copy of the image (`du` of the image's layer folders in its data root) plus,
at once, the archive `docker load` unpacks into the engine's temporary folder before it keeps the layers, watched
while the image is sent whole once more, as to an engine that holds none of it. As root (mount), with buildah.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import REPO, HostError
from ..host import engine
from ..host.console import say
from ..host.disk import GB, GIB, DiskWatch, buildah_tmp, engine_root, filesystem_of, free_gb
from ..host.environ import environ_set
from ..host.tools import resolved
from .build import build, git_revision, resolve_track
from .builders import choose_builder
from .builders.buildah_store import fresh_store, run_buildah
from .builders.onecopy import drop_own_copies
from .diskneed import need_file, need_path

LOOP_SIZE_GB = 60  # sparse: only what the build writes takes the disk


@contextmanager
def loop_filesystem(mount: Path, size_gb: int = LOOP_SIZE_GB) -> Iterator[Path]:
    """An empty ext4 of its own at `mount`, in a sparse file beside it, removed afterwards."""
    image = mount.with_name(mount.name + ".ext4")
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(resolved(["truncate", "--size", f"{size_gb}G", str(image)]), check=True)
    try:
        subprocess.run(resolved(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)]), check=True)
        subprocess.run(resolved(["mount", "-o", "loop,discard", str(image), str(mount)]), check=True)
        try:
            yield mount
        finally:
            subprocess.run(resolved(["umount", "--recursive", "--lazy", str(mount)]), capture_output=True)
    finally:
        image.unlink(missing_ok=True)


def disk_usage_gb(*paths: str) -> float:
    """What the folders take on disk together (hard links once), GB."""
    out = subprocess.run(resolved(["du", "-sc", "-B1", *paths]), capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    return int(lines[-1].split()[0]) / GB if lines else 0.0


def engine_copy_gb(image: str) -> float:
    """What the engine's copy of `image` takes in its data root: its layers' folders (overlay2)."""
    data = json.loads(subprocess.run(
        resolved(["docker", "image", "inspect", "--format", "{{json .GraphDriver.Data}}", image]),
        capture_output=True, text=True, check=True).stdout)
    diffs = [d for key in ("LowerDir", "UpperDir") for d in (data.get(key) or "").split(":") if d]
    if not diffs:
        raise HostError(f"the engine keeps {image} where its data root shows no layer folders (not overlay2): "
                        "measure on an engine with the overlay2 store")
    return disk_usage_gb(*sorted({str(Path(d).parent) for d in diffs}))


def load_peak_gb(image_id: str, name: str) -> float:
    """The most the engine's temporary folder held while `image_id`, sent whole from buildah's store, was loaded."""
    tmp = engine_root() / "tmp"
    peak = [0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], disk_usage_gb(str(tmp)))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run_buildah("push", "--quiet", image_id, f"docker-daemon:{name}")
    finally:
        done.set()
        watcher.join()
    return peak[0]


def _growth_gb(watch: DiskWatch, folder: Path) -> tuple[float, float]:
    """(at the peak, left at the end) what was written to `folder`'s own filesystem while the watch looked, GB."""
    device = filesystem_of(folder)
    start = watch.starts_gib[device] * GIB
    return (start - watch.lows_gib[device] * GIB) / GB, (start - free_gb(folder) * GB) / GB


def measure_need(track_name: str | None, base: str | None = None, repo: Path = REPO) -> Path:
    """A cold build of the track's image, measured store by store; the record written, its path returned."""
    track = resolve_track(track_name)
    builder = choose_builder("buildah")
    tag, whole = f"grpolab-measure:{track.name}", f"grpolab-measure:{track.name}-whole"
    folder = Path(tempfile.mkdtemp(prefix=f"grpolab-disk-{track.name}-", dir=buildah_tmp()))
    try:
        with loop_filesystem(folder / "storage") as store, loop_filesystem(folder / "tmp") as tmp, \
                fresh_store(folder), environ_set(UV_CACHE_DIR=str(tmp / "host-uv-cache")):
            (tmp / "host-uv-cache").mkdir()
            with DiskWatch([store, tmp], every_s=0.5) as watch:
                result = build(track.name, base=base, repo=repo, tag=tag, write_env=False, builder=builder,
                               compare_record=False)
            store_peak, store_kept = _growth_gb(watch, store)
            tmp_peak, tmp_kept = _growth_gb(watch, tmp)
            host_uv = disk_usage_gb(str(tmp / "host-uv-cache"))
            copy = engine_copy_gb(tag)
            with_cache = {"buildah_store": round(store_kept, 2), "buildah_tmp": round(tmp_kept, 2)}
            shutil.rmtree(tmp / "buildah-cache", ignore_errors=True)  # measured: room for the load, on a full disk
            loading = load_peak_gb(result.image_id, whole)
            drop_own_copies(result.image_id, result.base_id, [result.deps_image_id])  # as `invoke build` does
            store_kept, tmp_kept = _growth_gb(watch, store)[1], _growth_gb(watch, tmp)[1]
    finally:
        for name in (tag, whole):
            subprocess.run(resolved(["docker", "image", "rm", name]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
    record = {
        "track": track.name,
        "what": "GB a cold build of the track's image wrote to each store at its peak (need_gb) and left there "
        "(kept_gb); `invoke build` and `invoke up` refuse to start where a filesystem has less free than its stores' "
        "need_gb; written by `invoke build.disk --track T`",
        "need_gb": {"buildah_store": round(store_peak, 2), "buildah_tmp": round(tmp_peak, 2),
                    "engine": round(copy + loading, 2), "uv_cache": round(host_uv, 2)},
        "kept_gb": {"buildah_store": round(store_kept, 2), "buildah_tmp": round(tmp_kept, 2), "engine": round(copy, 2),
                    "uv_cache": round(host_uv, 2)},
        "kept_gb_with_keep_cache": {**with_cache, "engine": round(copy, 2), "uv_cache": round(host_uv, 2)},
        "engine_load_archive_gb": round(loading, 2),
        "image_gb": round(result.size_bytes / GB, 2),
        "image_id": result.image_id,
        "measured": {"revision": git_revision(repo), "builder": result.builder, "engine": engine_version(),
                     "base": result.base, "build_s": round(result.seconds, 1), "date": time.strftime("%Y-%m-%d"),
                     "how": __doc__.split("How: ", 1)[1].split(" As root")[0].replace("\n", " ")},
    }
    path = need_path(track, repo)
    earlier = need_file(track, repo)
    if "predicted" in earlier:  # `build.disk-predict`'s, kept beside the measurement it is checked against
        record["predicted"] = earlier["predicted"]
    path.write_text(json.dumps(record, indent=1) + "\n")
    say(f"track {track.name}: buildah's store {store_peak:.2f} GB at the peak ({store_kept:.2f} kept), its cache "
        f"mounts and temporary files {tmp_peak:.2f} GB ({tmp_kept:.2f}), the engine {copy + loading:.2f} GB "
        f"({copy:.2f} kept; {loading:.2f} the unpacked archive), uv's cache {host_uv:.2f} GB: written to {path}")
    return path


def engine_version() -> str:
    return f"Docker {engine.client().version().get('Version', '?')}"
