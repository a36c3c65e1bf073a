"""`invoke bench.cold-up`'s own parts that run here without taking the machine's images away: how it sets the host's
caches aside and always puts them back (its refusal without root runs as a user without root: tests/test_not_root.py).
The bench itself is run by hand
(bench/cold-up.json names the commit and machine it ran on)."""

import pytest

from hostlab import HostError

from hostlab.bench import coldup as coldupbench


def test_caches_are_set_aside_for_the_run_and_put_back_after_it(tmp_path):
    uv, pip, absent = tmp_path / "uv", tmp_path / "pip", tmp_path / "never-made"
    uv.mkdir()
    (uv / "wheel").write_text("kept")
    pip.mkdir()
    with coldupbench.set_aside((uv, pip, absent)):
        assert not uv.exists() and not pip.exists()  # the run meets no cache
        uv.mkdir()
        (uv / "made-by-the-run").write_text("new")
    assert (uv / "wheel").read_text() == "kept" and not (uv / "made-by-the-run").exists()
    assert pip.is_dir() and not absent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pip", "uv"]


def test_caches_come_back_when_the_run_fails(tmp_path):
    uv = tmp_path / "uv"
    uv.mkdir()
    with pytest.raises(HostError, match="boom"):
        with coldupbench.set_aside((uv,)):
            raise HostError("boom")
    assert uv.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["uv"]


def test_a_leftover_from_an_unfinished_run_is_said_not_overwritten(tmp_path):
    uv = tmp_path / "uv"
    uv.mkdir()
    (tmp_path / "uv.grpolab-cold-up").mkdir()
    with pytest.raises(HostError, match="left from an earlier --cold-up"):
        with coldupbench.set_aside((uv,)):
            pass
    assert uv.is_dir() and (tmp_path / "uv.grpolab-cold-up").is_dir()


def test_a_bare_machine_lacks_every_package_setup_host_installs_but_the_python():
    """--bare purges what setup-host.sh's plan installs on a machine without any of it (this machine's release)."""
    names = coldupbench.bare_packages()
    assert {"docker.io", "buildah", "mmdebstrap", "debootstrap"} <= set(names)
    assert not any(name.startswith("python3") for name in names)  # the bench itself runs in a venv of that Python
