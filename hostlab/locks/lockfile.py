"""The lock file's format: where each track's lock lives, its header's keys, and reading and writing one. A lock is
a header of `# key: json` lines that says what it was made from, then uv's hashed requirements (the body)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from grpolab.common.filehash import sha256_of_file
from grpolab.common.tracks import Track
from packaging.utils import canonicalize_name

from .. import REPO

LOCK_DIR = REPO / "lockfiles"
FORMAT = "grpolab-lock v1"
HEADER_KEYS = (
    "track",
    "python-version",
    "python-platform",
    "indexes",
    "environment",
    "inputs",
    "pins",
    "trl",
    "trl-vllm-extra",
    "vllm",
    "vllm-torch",
    "versions-from",
    "overrides",
    "excludes",
    "vllm-build-requirements",
    "uv",
    "command",
    "body-sha256",
)
# Written only by tracks that have them (versions_from, overrides, excludes, a vLLM build other than upstream's), so
# the other locks' headers stay as they were.
OPTIONAL_HEADER_KEYS = ("versions-from", "overrides", "excludes", "vllm-build-requirements")


def lock_path(track: Track, lock_dir: Path = LOCK_DIR) -> Path:
    return lock_dir / f"{track.name}.txt"


def instructions_path(track: Track, lock_dir: Path = LOCK_DIR) -> Path:
    """Where a track whose lock can't be made here documents how to make it (e.g. lockfiles/x.README)."""
    return lock_dir / f"{track.name}.README"


def lock_sha256(path: Path) -> str:
    return sha256_of_file(path)


def body_sha256(body: str) -> str:
    """The sha256 the header records of the body `invoke lock` wrote: a hand edit changes it."""
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass
class Lock:
    header: dict
    packages: dict[str, str]  # canonical name -> version
    hashes: dict[str, list[str]]  # canonical name -> sha256 hashes
    body: str

    def version(self, name: str) -> str | None:
        return self.packages.get(canonicalize_name(name))


REQ_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def parse_body(body: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    packages, hashes, current = {}, {}, None
    for line in body.splitlines():
        m = REQ_LINE.match(line)
        if m:
            current = canonicalize_name(m.group(1))
            packages[current], hashes[current] = m.group(2), []
        elif current and line.strip().startswith("--hash="):
            hashes[current].append(line.strip().split("=", 1)[1].rstrip(" \\"))
        elif line and not line.startswith((" ", "#")):
            current = None
    return packages, hashes


def parse_lock(text: str) -> Lock:
    lines = text.splitlines(keepends=True)
    if not lines or FORMAT not in lines[0]:
        raise ValueError("it has no grpolab-lock header (was it written by hand or by another tool?)")
    header, i = {}, 1
    while i < len(lines) and lines[i].startswith("# ") and ": " in lines[i]:
        key, _, value = lines[i][2:].rstrip("\n").partition(": ")
        if key not in HEADER_KEYS:
            break
        header[key] = json.loads(value)
        i += 1
    missing = [k for k in HEADER_KEYS if k not in header and k not in OPTIONAL_HEADER_KEYS]
    if missing:
        raise ValueError(f"its header lacks {', '.join(missing)}")
    body = "".join(lines[i:])
    packages, hashes = parse_body(body)
    return Lock(header, packages, hashes, body)


def read_lock(track: Track, lock_dir: Path = LOCK_DIR) -> Lock:
    """The track's lock file, parsed: read once by a command and handed down to what needs it."""
    return parse_lock(lock_path(track, lock_dir).read_text())


def render_lock(track: Track, header: dict, body: str) -> str:
    header = {**header, "body-sha256": body_sha256(body)}
    out = [
        f"# {FORMAT}: lock for track {track.name}, made by `invoke lock --track {track.name}`. Never edit it: "
        "change the inputs (images/tracks.toml, pyproject.toml's lab extra) and re-run that command.\n"
    ]
    out += [f"# {k}: {json.dumps(header[k])}\n" for k in HEADER_KEYS if k in header or k not in OPTIONAL_HEADER_KEYS]
    return "".join(out) + body


# ------------------------------------------------------------ the locks beside a track's (build tools, Debian)
def render_side_lock(title: str, header: dict, body: str) -> str:
    """A lock beside a track's: its first line `title` (which names its format), `# key: json` lines saying what it
    was made from, the body's sha256 last (a hand edit changes it), then the body."""
    header = {**header, "body-sha256": body_sha256(body)}
    return title.rstrip("\n") + "\n" + "".join(f"# {k}: {json.dumps(v)}\n" for k, v in header.items()) + body


def parse_side_lock(text: str, format_name: str) -> tuple[dict, str]:
    """(header, body) of a lock written by render_side_lock; ValueError when it is not one of `format_name`."""
    lines = text.splitlines(keepends=True)
    if not lines or format_name not in lines[0]:
        raise ValueError(f"its first line does not name {format_name} (was it written by hand or by another tool?)")
    header, i = {}, 1
    while i < len(lines) and lines[i].startswith("# ") and ": " in lines[i]:
        key, _, value = lines[i][2:].rstrip("\n").partition(": ")
        try:
            header[key] = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"its header line {i + 1} ({key}) is not JSON: {err}") from None
        i += 1
        if key == "body-sha256":
            break
    if "body-sha256" not in header:
        raise ValueError("its header has no body-sha256")
    return header, "".join(lines[i:])
