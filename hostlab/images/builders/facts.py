"""What every builder says of itself (BuilderFacts): its name and version, and what it can do. Each builder's class
extends it with its own defaults; how a builder is described follows from these facts, written once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuilderFacts:
    version: str
    name: str
    sets_times: bool  # every time in the image comes from git: same commit, same image id
    loads_into_engine: bool  # its image lands in the Docker engine by itself (else it is handed over)
    keeps_own_copy: bool = False  # a store of its own holds a second copy of what it hands over (onecopy.py)

    def describe(self) -> str:
        return f"{self.name} {self.version}" + ("" if self.sets_times else " (not byte-reproducible)")
