"""Read package facts from a package index without installing anything, and which indexes a track reads.

Which files a project has on an index (PEP 691 JSON, or a static PEP 503 page, as AMD's may be), which versions, and
what one wheel's METADATA says (read through HTTP range requests, as pip's fast-deps does: a few KB instead of a 300 MB
vLLM wheel). A track's indexes are its row's, or a mirror's (GRPOLAB_INDEX_URLS_<TRACK>), then PyPI, or the index
UV_DEFAULT_INDEX names: the ones uv resolves from are the ones read here.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import ssl
import urllib.request
import zipfile
from email.parser import Parser
from urllib.parse import unquote, urljoin, urlsplit

from grpolab.common.tracks import Track
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .. import HostError

PYPI = "https://pypi.org/simple/"
TIMEOUT_S = 60


def _open(url: str, headers: dict | None = None):
    # OpenSSL's default paths honour SSL_CERT_FILE, which is how a TLS-intercepting proxy's bundle arrives.
    ctx = ssl.create_default_context()
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=TIMEOUT_S, context=ctx)


def default_index() -> str:
    """PyPI, or the index uv is told to use in its place (UV_DEFAULT_INDEX, or its older name UV_INDEX_URL): what is
    read here is what uv resolved from."""
    return os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or PYPI


def index_files(project: str, index_url: str = PYPI) -> list[dict]:
    """Every file an index offers for `project`: {filename, url, sha256, size, yanked}, from its PEP 691 JSON or,
    where it serves only the PEP 503 page (a static folder, as PyTorch's index is and AMD's may be), from that page's
    links: their `#sha256=` fragment, no size (0), the name unquoted (`%2B` is the `+` of a local version)."""
    page = urljoin(index_url.rstrip("/") + "/", canonicalize_name(project) + "/")
    with _open(page, {"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}) as resp:
        body = resp.read().decode()
        kind = resp.headers.get("Content-Type", "")
    if "json" in kind:
        return [
            {"filename": f["filename"], "url": urljoin(page, f["url"]), "sha256": f.get("hashes", {}).get("sha256", ""),
             "size": int(f.get("size") or 0), "yanked": bool(f.get("yanked"))}
            for f in json.loads(body)["files"]
        ]
    files = []
    for anchor in re.findall(r"<a\s[^>]*>", body):
        href = re.search(r'href="([^"]+)"', anchor)
        if not href:
            continue
        url, _, fragment = urljoin(page, html.unescape(href.group(1))).partition("#")
        files.append({"filename": unquote(urlsplit(url).path.rsplit("/", 1)[-1]), "url": url,
                      "sha256": fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else "",
                      "size": 0, "yanked": "data-yanked" in anchor})
    return files


def project_files(project: str, index_url: str = PYPI) -> list[tuple[str, str]]:
    """(filename, url) of every file an index offers for `project`, yanked ones left out."""
    return [(f["filename"], f["url"]) for f in index_files(project, index_url) if not f["yanked"]]


def remote_size(url: str) -> int:
    """A file's size in bytes as the server states it (HEAD's Content-Length), 0 when it does not say."""
    request = urllib.request.Request(url, method="HEAD")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=ssl.create_default_context()) as resp:
        return int(resp.headers.get("Content-Length") or 0)


def wheel_versions(project: str, index_urls: list[str]) -> list[Version]:
    """Final (non-pre-release) versions with at least one wheel on any of the indexes, newest first."""
    versions: set[Version] = set()
    for index in index_urls:
        try:
            files = project_files(project, index)
        except OSError:
            continue
        for filename, _ in files:
            if filename.endswith(".whl"):
                try:
                    v = parse_wheel_filename(filename)[1]
                except (InvalidVersion, ValueError):
                    continue
                if not v.is_prerelease:
                    versions.add(v)
    return sorted(versions, reverse=True)


class _RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file; every read is one HTTP range request."""

    def __init__(self, url: str):
        self.url, self.pos = url, 0
        with _open(url, {"Range": "bytes=-1"}) as resp:
            self.size = int(resp.headers["Content-Range"].rsplit("/", 1)[1])

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def read(self, n=-1):
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        with _open(self.url, {"Range": f"bytes={self.pos}-{end - 1}"}) as resp:
            data = resp.read()
        self.pos += len(data)
        return data


def wheel_metadata(url: str):
    """The METADATA of a remote wheel, as an email.message.Message."""
    with zipfile.ZipFile(_RangeFile(url)) as whl:
        name = next(n for n in whl.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return Parser().parsestr(whl.read(name).decode())


def pick_wheel(files: list[tuple[str, str]], version: Version, machine_hint: str = "") -> str | None:
    """A wheel of `version`, preferring one whose platform tag mentions `machine_hint` (e.g. x86_64)."""
    wheels = [(f, u) for f, u in files if f.endswith(".whl") and parse_wheel_filename(f)[1] == version]
    wheels.sort(key=lambda fu: machine_hint not in fu[0])
    return wheels[0][1] if wheels else None


def requires_dist(project: str, version: Version, index_urls: list[str], machine_hint: str = "") -> list[Requirement]:
    """Requires-Dist of `project==version`, read from the first index that has a wheel of it."""
    for index in index_urls:
        try:
            url = pick_wheel(project_files(project, index), version, machine_hint)
        except OSError:
            continue
        if url:
            return [Requirement(r) for r in wheel_metadata(url).get_all("Requires-Dist") or []]
    raise LookupError(f"no wheel of {project}=={version} on {', '.join(index_urls)}")


def requirement_for(reqs: list[Requirement], name: str, env: dict[str, str]) -> Requirement | None:
    """The requirement on `name` that applies in the marker environment `env` (which may set `extra`)."""
    for req in reqs:
        if canonicalize_name(req.name) == canonicalize_name(name) and (req.marker is None or req.marker.evaluate(env)):
            return req
    return None


def marker_env(uv_platform: str, python: str, extra: str = "") -> dict[str, str]:
    """PEP 508 marker values for a uv --python-platform and Python version."""
    machine = uv_platform.split("-", 1)[0]
    darwin = "apple-darwin" in uv_platform
    return {
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "darwin" if darwin else "linux",
        "platform_system": "Darwin" if darwin else "Linux",
        "platform_machine": ("arm64" if darwin and machine == "aarch64" else machine),
        "python_version": python,
        "python_full_version": python + ".0",
        "platform_release": "",
        "platform_version": "",
        "implementation_version": python + ".0",
        "extra": extra,
    }


# ------------------------------------------------------------------------------------- a track's indexes
def index_variable(track: Track) -> str:
    """The environment variable that replaces the track's own indexes (GRPOLAB_INDEX_URLS_X)."""
    return f"GRPOLAB_INDEX_URLS_{track.name.upper()}"


def track_index_urls(track: Track) -> list[str]:
    """The track's own indexes: its row's index_urls, or the URLs its variable (index_variable) names instead, space
    separated: a mirror of them, or a stand-in on loopback as tests/test_learner_lock.py serves. uv and every reader
    here take the same ones, and a lock's header records them, so `invoke lock.check` wants the same setting."""
    given = os.environ.get(index_variable(track), "").split()
    if given and not track.index_urls:
        raise HostError(
            f"{index_variable(track)} is set, but track {track.name}'s row names no index for it to replace "
            f"(images/tracks.toml's index_urls): unset it"
        )
    return given or list(track.index_urls)


def index_urls(track: Track) -> list[str]:
    """The indexes in uv's priority order: the track's own first, PyPI last (uv's default index, or the one
    UV_DEFAULT_INDEX names)."""
    return track_index_urls(track) + [default_index()]
