"""The track table (images/tracks.toml) and what the host side derives from it: detection, prerequisites."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import UnknownTrack, get_track, load_tracks  # noqa: E402

from hostlab import REPO, HostError  # noqa: E402
from hostlab.host.detect import HostFacts, detect_track, host_problems  # noqa: E402

TRACKS = load_tracks()
CONTAINER_TRACKS = [t for t in TRACKS.values() if t.is_container]


def test_every_track_is_complete():
    for t in TRACKS.values():
        assert t.kind in {"container", "venv"}, t.name
        assert t.python.count(".") == 1 and t.uv_platform and t.lock_inputs, t.name
        assert t.device_access in {"none", "nvidia", "rocm"}, t.name
        if t.is_container:
            assert t.platform.startswith("linux/") and t.base_image, t.name


@pytest.mark.parametrize("track", CONTAINER_TRACKS, ids=lambda t: t.name)
def test_base_images_pinned_by_digest_and_carry_the_tracks_python(track):
    # python:X.Y-slim-trixie@sha256:<64 hex>: the digest makes the build reproducible, the tag says which Python.
    name, _, digest = track.base_image.partition("@sha256:")
    assert re.fullmatch(r"[0-9a-f]{64}", digest), f"{track.name}: {track.base_image} is not pinned by a sha256 digest"
    assert f":{track.python}-" in name


@pytest.mark.parametrize("track", CONTAINER_TRACKS, ids=lambda t: t.name)
def test_device_access_has_a_compose_file(track):
    assert track.device_access == "none" or (REPO / "compose" / f"{track.device_access}.yaml").exists()


def test_unknown_track_names_the_known_ones():
    with pytest.raises(UnknownTrack) as err:
        get_track("q")
    # Every known track by name, in one list a user can copy from, and the file that defines them.
    assert str(err.value).startswith(f"unknown track 'q': the tracks are {', '.join(sorted(TRACKS))} (defined in ")
    assert str(err.value).endswith("images/tracks.toml)")


@pytest.mark.parametrize(
    "facts, expected",
    [
        (HostFacts("linux", "arm64", nvidia_gpu="GPU 0: NVIDIA GB10"), "s"),
        (HostFacts("linux", "amd64", nvidia_gpu="GPU 0: NVIDIA GeForce RTX 4090"), "n"),
        (HostFacts("linux", "amd64", kfd=True, dri=True), "x"),
        (HostFacts("darwin", "arm64"), "m"),
        (HostFacts("linux", "amd64"), "c"),
    ],
)
def test_detection_from_host_facts(facts, expected):
    name, why = detect_track(facts, TRACKS)
    assert name == expected and why


def test_detection_without_a_fitting_track_says_so():
    with pytest.raises(HostError, match="no track"):
        detect_track(HostFacts("linux", "riscv64"), TRACKS)


def test_this_host_detects_a_track():
    name, why = detect_track()
    assert name in TRACKS and why


def test_nvidia_track_without_toolkit_names_it():
    problems = host_problems(get_track("n"), HostFacts("linux", "amd64"), engine_runtimes={"runc"})
    text = "\n".join(problems)
    assert "nvidia-smi" in text and "NVIDIA Container Toolkit" in text and "runc" in text


def test_nvidia_track_with_gpu_and_runtime_is_fine():
    facts = HostFacts("linux", "amd64", nvidia_gpu="GPU 0: NVIDIA RTX")
    assert host_problems(get_track("n"), facts, engine_runtimes={"runc", "nvidia"}) == []


def test_rocm_track_without_kfd_names_it():
    problems = host_problems(get_track("x"), HostFacts("linux", "amd64"))
    assert any("/dev/kfd" in p for p in problems)


def test_cpu_track_needs_nothing():
    assert host_problems(get_track("c"), HostFacts("linux", "amd64")) == []
