"""A file's sha256, read in blocks: the one hash the tiny model's fixture check and a run's model identity share."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK_BYTES = 1 << 20  # 1 MiB: large enough that Python's loop costs nothing beside the hash itself


def sha256_of_file(path: Path) -> str:
    """The hex sha256 of the file at `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()
