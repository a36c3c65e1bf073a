"""Two images that should be one: which layer differs, which files in it, and how.

The layers are read from `docker save` as it streams (nothing of the image is written to disk): each layer tar's
diff id is its sha256, and each file in a differing layer is listed with its type, mode, owner, size, mtime, link
and content digest. Files whose content differs are then taken out (a few, up to a size) and handed to diffoscope
when it is installed (`pip install diffoscope` or `apt-get install diffoscope`), which explains a .so, .pyc or
archive difference in words; without it, the first differing bytes are shown.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..host.tools import resolved

EXPLAINED_FILES = 3  # differing files handed to diffoscope
EXPLAINED_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Entry:
    kind: str  # "file", "dir", "symlink", "hardlink", "other"
    mode: int
    owner: tuple[int, int]
    size: int
    mtime: int
    link: str
    sha256: str


class _Hashing:
    """A read-only stream that hashes what passes through it (the layer tar's diff id, as it is read)."""

    def __init__(self, stream):
        self.stream, self.digest = stream, hashlib.sha256()

    def read(self, size=-1):
        data = self.stream.read(size)
        self.digest.update(data)
        return data


def _entry(member: tarfile.TarInfo, layer: tarfile.TarFile) -> Entry:
    kind = ("file" if member.isreg() else "dir" if member.isdir() else "symlink" if member.issym()
            else "hardlink" if member.islnk() else "other")
    digest = ""
    if member.isreg():
        h, f = hashlib.sha256(), layer.extractfile(member)
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        digest = h.hexdigest()
    return Entry(kind, member.mode, (member.uid, member.gid), member.size, int(member.mtime), member.linkname, digest)


def _save(image: str) -> subprocess.Popen:
    return subprocess.Popen(resolved(["docker", "save", image]), stdout=subprocess.PIPE)


def layer_contents(
    image: str, wanted: set[str], keep: dict[str, set[str]] | None = None, into: Path | None = None
) -> dict[str, dict[str, Entry]]:
    """{diff id: {path: Entry}} for the image's layers in `wanted`. With `keep` ({diff id: paths}) and `into`, those
    files are also written to into/<diff id>/<path>."""
    found: dict[str, dict[str, Entry]] = {}
    proc = _save(image)
    with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
        for member in outer:
            if not member.name.endswith("layer.tar") or not member.isreg():
                continue
            stream = _Hashing(outer.extractfile(member))
            entries: dict[str, Entry] = {}
            kept: dict[str, bytes] = {}
            with tarfile.open(fileobj=stream, mode="r|") as layer:
                for inner in layer:
                    path = inner.name.removeprefix("./")
                    if (
                        keep is not None
                        and inner.isreg()
                        and inner.size <= EXPLAINED_MAX_BYTES
                        and any(path in k for k in keep.values())
                    ):
                        data = layer.extractfile(inner).read()
                        kept[path] = data
                        entries[path] = Entry(
                            "file",
                            inner.mode,
                            (inner.uid, inner.gid),
                            inner.size,
                            int(inner.mtime),
                            "",
                            hashlib.sha256(data).hexdigest(),
                        )
                    else:
                        entries[path] = _entry(inner, layer)
            while stream.read(1 << 20):  # the tar's end padding is part of the digest
                pass
            diff_id = "sha256:" + stream.digest.hexdigest()
            if diff_id in wanted:
                found[diff_id] = entries
                for path, data in kept.items():
                    if into is not None and keep and path in keep.get(diff_id, set()):
                        target = into / diff_id.removeprefix("sha256:")[:12] / path
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(data)
    proc.wait(timeout=60)
    return found


def describe(a: Entry | None, b: Entry | None) -> str:
    if a is None or b is None:
        return "only in the " + ("second" if a is None else "first") + " build"
    how = []
    if a.kind != b.kind:
        how.append(f"{a.kind} vs {b.kind}")
    if a.sha256 != b.sha256:
        how.append(f"content ({a.size} vs {b.size} bytes)")
    if a.mtime != b.mtime:
        how.append(f"mtime {a.mtime} vs {b.mtime}")
    if a.mode != b.mode:
        how.append(f"mode {a.mode:o} vs {b.mode:o}")
    if a.owner != b.owner:
        how.append(f"owner {a.owner} vs {b.owner}")
    if a.link != b.link:
        how.append(f"link {a.link} vs {b.link}")
    return ", ".join(how)


def explain(first: str, second: str, first_layers: list[str], second_layers: list[str], shown: int = 20) -> list[str]:
    """Lines naming each differing layer (by position), its differing files and how they differ, and diffoscope's (or
    the bytes') account of the first few whose content differs."""
    pairs = [(i, a, b) for i, (a, b) in enumerate(zip(first_layers, second_layers)) if a != b]
    if len(first_layers) != len(second_layers):
        return [f"the builds have {len(first_layers)} and {len(second_layers)} layers"]
    if not pairs:
        return ["every layer is the same: the difference is in the image's config (times, environment, labels)"]
    lines: list[str] = []
    left = layer_contents(first, {a for _, a, _ in pairs})
    right = layer_contents(second, {b for _, _, b in pairs})
    content_differs: list[tuple[str, str, str]] = []
    for index, a, b in pairs:
        mine, theirs = left.get(a, {}), right.get(b, {})
        differing = sorted(p for p in set(mine) | set(theirs) if mine.get(p) != theirs.get(p))
        lines.append(f"layer #{index}: {len(differing)} of {len(set(mine) | set(theirs))} paths differ")
        for path in differing[:shown]:
            lines.append(f"  /{path}: {describe(mine.get(path), theirs.get(path))}")
        if len(differing) > shown:
            lines.append(f"  ... and {len(differing) - shown} more")
        content_differs += [
            (a, b, p)
            for p in differing
            if mine.get(p) and theirs.get(p) and mine[p].sha256 != theirs[p].sha256 and mine[p].kind == "file"
        ]
    if content_differs:
        lines += _explain_contents(first, second, content_differs[:EXPLAINED_FILES])
    return lines


def _explain_contents(first: str, second: str, files: list[tuple[str, str, str]]) -> list[str]:
    lines = []
    with tempfile.TemporaryDirectory(prefix="grpolab-imagediff-") as tmp:
        root = Path(tmp)
        layer_contents(
            first,
            {a for a, _, _ in files},
            {a: {p for x, _, p in files if x == a} for a, _, _ in files},
            root / "first",
        )
        layer_contents(
            second,
            {b for _, b, _ in files},
            {b: {p for _, y, p in files if y == b} for _, b, _ in files},
            root / "second",
        )
        diffoscope = shutil.which("diffoscope")
        for a, b, path in files:
            one = root / "first" / a.removeprefix("sha256:")[:12] / path
            two = root / "second" / b.removeprefix("sha256:")[:12] / path
            if not (one.exists() and two.exists()):
                continue
            if diffoscope:
                out = subprocess.run([diffoscope, "--text", "-", "--max-report-size", "20000", str(one), str(two)],
                                     capture_output=True, text=True, timeout=300)
                lines.append(f"diffoscope /{path}:")
                lines += ["  " + line for line in out.stdout.splitlines()[:40]]
            else:
                x, y = one.read_bytes(), two.read_bytes()
                at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
                lines.append(
                    f"/{path}: first differing byte at offset {at} ({x[at : at + 16].hex()} vs "
                    f"{y[at : at + 16].hex()}); "
                    "diffoscope (`pip install diffoscope`) says what the bytes are"
                )
    return lines
