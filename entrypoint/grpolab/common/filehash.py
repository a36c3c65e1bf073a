"""A file's sha256, read in blocks, and a model folder's weights' sha256 from it: the one hash the tiny model's fixture
check, a run's model identity and a benchmark result's provenance share."""

from __future__ import annotations

import hashlib
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin")
BLOCK_BYTES = 1 << 20  # 1 MiB: large enough that Python's loop costs nothing beside the hash itself


def sha256_of_file(path: Path) -> str:
    """The hex sha256 of the file at `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


_hashed: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: a run hashes a file once


def file_sha256(path: Path) -> str:
    """The sha256 of a file's content, computed once per process (a Hub cache's blob too: its name is not trusted)."""
    target = Path(path).resolve()
    stat = target.stat()
    key = (str(target), stat.st_size, stat.st_mtime_ns)
    if key not in _hashed:
        _hashed[key] = sha256_of_file(target)
    return _hashed[key]


def weights_sha256(folder: Path) -> str | None:
    """The weights' sha256 of a model folder: of its one weights file (safetensors preferred, as from_pretrained
    prefers it), or, for a model in several shards, of the `sha256sum`-style listing "<sha256>  <file name>\n" of every
    shard in name order; None when it holds no weights."""
    files = sorted(p for p in Path(folder).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.name != "training_args.bin")
    safetensors = [p for p in files if p.suffix == ".safetensors"]
    files = safetensors or files  # from_pretrained prefers safetensors when both are there
    if not files:
        return None
    if len(files) == 1:
        return file_sha256(files[0])
    listing = "".join(f"{file_sha256(p)}  {p.name}\n" for p in files)
    return hashlib.sha256(listing.encode()).hexdigest()
