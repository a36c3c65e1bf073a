"""The Docker engine's own builder, where neither buildx can set the times nor buildah is installed: the image works
the same, but the engine stamps the clock into it, so its id differs build to build (`invoke build` says so). It
builds the image in one go (build.py's classic path), never stage by stage."""

from __future__ import annotations

import subprocess
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ... import HostError
from ...host.tools import resolved
from .engine_images import engine_layers
from .facts import BuilderFacts

NAME = "docker"


@dataclass(frozen=True)
class EngineBuilder(BuilderFacts):
    """The Builder (see __init__) for the engine's classic builder: sets no times; builds into the engine."""

    name: str = NAME
    sets_times: bool = False
    loads_into_engine: bool = True

    def base_ref(self, engine_base_id: str, base_image: str) -> str:
        return base_image

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
        raise HostError("the Docker engine's own builder cannot set a stage's times: it builds the image in one go")

    def hand_to_engine(self, image_id: str, image: str) -> None:
        pass  # built in the engine

    def layers(self, image_id: str, ref: str) -> list[str]:
        return engine_layers(ref)

    def from_nothing(self, folder: Path) -> AbstractContextManager:
        raise HostError("a build from nothing needs a builder that sets every time: buildx or buildah")


def detect() -> tuple[EngineBuilder, str]:
    """Always there where the engine is: its version."""
    out = subprocess.run(resolved(["docker", "version", "--format", "{{.Server.Version}}"]), capture_output=True,
                         text=True)
    return EngineBuilder(out.stdout.strip() or "?"), ""
