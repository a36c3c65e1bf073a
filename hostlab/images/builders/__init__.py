"""Which program builds the image: one interface (Builder), one module per builder, one registry (BUILDERS).

Same commit, same image id. An image id is the digest of the image's config, which holds every layer's diff id and the
image's created times; a layer's diff id is the digest of its tar, which holds every file's mtime. So two builds of one
commit give one id only when every time in them comes from the commit (inputs.py), not from the clock, and every file
is made the same way. A builder says what it can do (`sets_times`: stamps git's times, not the clock;
`loads_into_engine`: its image lands in the Docker engine without a hand-over) and the build asks it, never its name.

- buildah.py: buildah (its store, buildah_store.py, which one command writes at a time, storelock.py; the hand-over to
  the engine, handover.py; one copy, onecopy.py);
- buildx.py: the engine's own BuildKit where it can set every time (preferred: nothing to install, one copy);
- engine.py: the engine's own builder otherwise: the image works the same, its id differs build to build.
facts.py holds what every builder says of itself (name, version, what it can do) and how it is described.
Adding a builder is a module with a `detect()` and a line in BUILDERS. docs/locks-and-images.md, "Reproducible
images", says which builder each release gets.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ... import HostError
from . import buildah, buildx, engine
from .buildah_store import BUILDAH_HINT
from .engine_images import engine_image_id, engine_layers
from .inputs import commit_time, deps_inputs, lab_inputs


class Builder(Protocol):
    """What the build asks of the program that builds a stage (`build_target`) and of what it built."""

    name: str
    version: str
    sets_times: bool  # every time in the image comes from git: same commit, same image id
    loads_into_engine: bool  # its image lands in the Docker engine by itself (else `hand_to_engine`)
    keeps_own_copy: bool  # its own store keeps a second copy of what it hands over (onecopy.py removes it)

    def describe(self) -> str: ...

    def base_ref(self, engine_base_id: str, base_image: str) -> str:
        """The base as this builder's FROM takes it (copied into its own store where it keeps one)."""

    def build_target(
        self,
        dockerfile: Path,
        context: Path,
        target: str,
        epoch: int,
        args: dict[str, str],
        platform: str,
        ca: Path | None,
        tag: str | None,
    ) -> tuple[str, str, list[str]]:
        """One build of the Dockerfile's `target` with every time set to `epoch`: (image id, what a later stage's FROM
        takes for it, the log's last lines); an empty id when it failed."""

    def hand_to_engine(self, image_id: str, image: str) -> None:
        """The built image into the Docker engine as `image`, keeping its id."""

    def layers(self, image_id: str, ref: str) -> list[str]:
        """The built image's layers' diff ids, bottom first."""

    def from_nothing(self, folder: Path) -> AbstractContextManager:
        """A context in which builds start from nothing and leave the everyday caches as they were."""


# In the order tried when none is asked for: the first that can build here wins.
BUILDERS: dict[str, Callable[[], tuple[Builder | None, str]]] = {
    buildx.NAME: buildx.detect,
    buildah.NAME: buildah.detect,
    engine.NAME: engine.detect,
}


def choose_builder(wanted: str | None = None) -> Builder:
    """`wanted` (--builder, or GRPOLAB_BUILDER), else the first of BUILDERS that can build here."""
    wanted = wanted or os.environ.get("GRPOLAB_BUILDER") or None
    if wanted is not None and wanted not in BUILDERS:
        raise HostError(f"--builder {wanted}: choose one of {', '.join(BUILDERS)} (buildx and buildah: same commit, "
                        "same image id)")
    for name in [wanted] if wanted else BUILDERS:
        builder, why_not = BUILDERS[name]()
        if builder is not None:
            return builder
        if wanted:
            raise HostError(f"--builder {wanted}: {why_not}")
    raise HostError("no builder can build here: install Docker (`bash images/setup-host.sh`)")


__all__ = ["BUILDAH_HINT", "BUILDERS", "Builder", "choose_builder", "commit_time", "deps_inputs", "engine_image_id",
           "engine_layers", "lab_inputs"]
