"""Environment variables set for a block of the host's work, and put back as they were after it, whatever happens."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def environ_set(**values: str) -> Iterator[None]:
    """os.environ with `values` set inside the block; each variable afterwards as it was before (unset if it was)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def in_ci() -> bool:
    """Does this run under CI (GitHub Actions, GitLab, Buildkite and others set CI=true)? There a build is strict and
    nothing is asked or made on the user's behalf."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
