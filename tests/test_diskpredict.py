"""`invoke build.disk-predict`: a track's disk need predicted from its locks (hostlab/images/diskpredict.py), and the
README's disk table (hostlab/images/diskneed.py). The wheel's unpacked size is read over real HTTP range requests from
a server on loopback; the prediction is checked against the second measured track's figures kept in lockfiles/."""

import json
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grpolab.common.tracks import UnknownTrack, get_track, load_tracks
from hostlab import HostError
from hostlab.images import diskpredict
from hostlab.images.diskneed import DISK_END, DISK_START, disk_table, need_basis, need_path, read_needs
from hostlab.locks.debian import write_pins
from hostlab.locks.wheels import LockedFile

from conftest import REPO

CALIBRATION = {"image_gb": 5.0,
               "need_gb": {"buildah_store": 10.0, "buildah_tmp": 15.0, "engine": 10.0, "uv_cache": 0.0},
               "kept_gb": {"buildah_store": 0.25, "buildah_tmp": 0.0, "engine": 5.0, "uv_cache": 0.0},
               "measured": {"date": "2027-01-01"}}


class RangeHandler(SimpleHTTPRequestHandler):
    """A static server that answers `Range: bytes=a-b` and `bytes=-n` as PyPI's CDN does."""

    def do_GET(self):
        path = self.translate_path(self.path)
        data = open(path, "rb").read()
        start, _, end = self.headers["Range"].removeprefix("bytes=").partition("-")
        first, last = (len(data) - int(end), len(data) - 1) if not start else (int(start), int(end or len(data) - 1))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        self.wfile.write(data[first:last + 1])

    def log_message(self, *args):
        pass


def test_a_wheels_unpacked_size_is_read_from_its_central_directory_over_range_requests(tmp_path):
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as whl:
        whl.writestr("demo/big.bin", b"\0" * 3_000_000)  # compresses to a few KB
        whl.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(RangeHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{wheel.name}"
        found = diskpredict.unpacked_bytes(LockedFile("demo", "1.0", wheel.name, url, "", wheel.stat().st_size))
    finally:
        server.shutdown()
    assert found == 3_000_000 + len("Name: demo\n") and wheel.stat().st_size < 100_000


def test_installed_sizes_read_a_packages_index():
    index = ("Package: gcc-14\nVersion: 14.2.0-19\nInstalled-Size: 100\nArchitecture: amd64\n\n"
             "Package: libc6\nVersion: 2.41-12\nInstalled-Size: 2000\n\nPackage: no-size\nVersion: 1\n")
    assert diskpredict.installed_sizes(index) == {("gcc-14", "14.2.0-19"): 102400, ("libc6", "2.41-12"): 2048000}


def test_the_runtime_pins_count_less_the_bases_and_those_the_index_lacks_are_named(tmp_path):
    lockfiles = tmp_path / "lockfiles"
    lockfiles.mkdir()
    write_pins(lockfiles / "cv.debian.txt", "# grpolab-debian-lock v1: test", {},
               {"runtime": ["gcc-14=14.2.0-19", "libc6=2.41-12", "libgone=1.0"]})
    write_pins(lockfiles / "base-trixie-amd64.debian.txt", "# grpolab-debian-lock v1: test", {},
               {"base": ["libc6=2.41-12"]})
    sizes = {("gcc-14", "14.2.0-19"): 100, ("libc6", "2.41-12"): 2000}
    assert diskpredict.debian_runtime_bytes(get_track("cv"), sizes, tmp_path) == (100, ["libgone=1.0"])


def test_the_prediction_scales_the_calibrations_measurement_by_the_image():
    calibration_lock = {"wheels_unpacked_bytes": 4_500_000_000, "debian_runtime_bytes": 0}
    same = diskpredict.scaled(calibration_lock, calibration_lock, CALIBRATION)
    assert same["image_gb"] == 5.0 and same["need_gb"] == CALIBRATION["need_gb"]  # c predicts its own measurement
    bigger = diskpredict.scaled({"wheels_unpacked_bytes": 9_000_000_000, "debian_runtime_bytes": 500_000_000},
                                calibration_lock, CALIBRATION)
    assert bigger["image_gb"] == 10.0 and bigger["calibration"]["rest_gb"] == 0.5  # c's rest + this lock's contents
    assert bigger["need_gb"]["engine"] == 20.0 and bigger["need_gb"]["buildah_tmp"] == 30.0
    assert bigger["kept_gb"] == {"buildah_store": 0.25, "buildah_tmp": 0.0, "engine": 10.0, "uv_cache": 0.0}


def test_a_prediction_is_the_need_only_where_nothing_is_measured_and_the_refusal_says_which(tmp_path):
    (tmp_path / "lockfiles").mkdir()
    n = get_track("n")
    assert read_needs(n, tmp_path) is None
    predicted = diskpredict.scaled({"wheels_unpacked_bytes": 1, "debian_runtime_bytes": 0},
                                   {"wheels_unpacked_bytes": 1, "debian_runtime_bytes": 0}, CALIBRATION)
    need_path(n, tmp_path).write_text(json.dumps({"track": "n", "predicted": predicted}))
    assert read_needs(n, tmp_path) == CALIBRATION["need_gb"] and need_basis(n, tmp_path).startswith("predicted")
    need_path(n, tmp_path).write_text(json.dumps({"track": "n", "need_gb": {"engine": 1.0}, "predicted": predicted}))
    assert read_needs(n, tmp_path) == {"engine": 1.0} and need_basis(n, tmp_path) == "measured, n.disk.json"


def test_a_bad_track_list_is_refused_in_one_line_before_anything_is_read(tmp_path):
    """No network here: each refusal comes before the calibration's lock is read from the indexes."""
    with pytest.raises(HostError, match=r"^\[input\] `invoke build.disk-predict` needs the tracks"):
        diskpredict.predict_need([""], tmp_path)
    with pytest.raises(UnknownTrack):
        diskpredict.predict_need(["n", "nosuchtrack"], tmp_path)
    with pytest.raises(HostError, match=r"^\[input\] track m is a native venv, not an image"):
        diskpredict.predict_need(["m"], tmp_path)
    (tmp_path / "lockfiles").mkdir()
    (tmp_path / "lockfiles" / "n.txt").write_text("")
    with pytest.raises(HostError, match=r"^\[input\] track x has no lock here"):
        diskpredict.predict_need(["n", "x"], tmp_path)
    with pytest.raises(HostError, match=r"lockfiles/c.disk.json holds none"):  # c is the scale: measured first
        diskpredict.predict_need(["n"], tmp_path)
    assert sorted(p.name for p in (tmp_path / "lockfiles").iterdir()) == ["n.txt"]  # nothing written


def test_the_committed_predictions_hold_against_the_measured_tracks():
    """Where a track is both measured and predicted, the prediction of a cold build's peak is within 15 % of the
    measurement: track c is the calibration; any other is the check."""
    checked = []
    for track in load_tracks().values():
        path = need_path(track)
        kept = json.loads(path.read_text()) if path.exists() else {}
        if "need_gb" in kept and "predicted" in kept:
            measured, predicted = sum(kept["need_gb"].values()), sum(kept["predicted"]["need_gb"].values())
            assert abs(predicted / measured - 1) <= 0.15, (track.name, predicted, measured)
            checked.append(track.name)
    if checked == ["c"] or not checked:
        pytest.skip("no track but the calibration is both measured and predicted")


def test_the_readme_disk_table_is_the_one_the_files_make():
    readme = (REPO / "README.md").read_text()
    start, end = readme.index(DISK_START) + len(DISK_START) + 1, readme.index(DISK_END)
    assert readme[start:end] == disk_table(), "run `invoke bench.docs`: the README's disk table is stale"
    rows = {line.split("|")[1].strip(" `"): line for line in disk_table().splitlines()[2:]}
    assert set(rows) == {t.name for t in load_tracks().values() if t.is_container}
    assert "its lock is made on your machine" in rows["x"]
