"""Is every requirement of every installed package met? The check `pip check` and `uv pip check` make (each installed
package's Requires-Dist, its markers judged for this interpreter with no extra asked for, against the versions
installed), read from the same metadata here, so that the doctor and a learner's own check give one answer. Then each
unmet one is judged against the track's table: left out on purpose (`excludes`) or overridden (`overrides`), with the
reason the table gives, or broken."""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from typing import Iterable


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Unmet:
    package: str  # the installed package that asks, "torch 2.15.0"
    requirement: str  # what it asks, as its metadata writes it
    name: str  # the canonical name of the package asked for
    installed: str | None  # that package's installed version; None where it is not installed
    why: str = ""  # for one the track means: its reason from images/tracks.toml; "" for one that is broken

    def describe(self) -> str:
        has = f"{self.installed} is installed" if self.installed else "not installed"
        return f"{self.package} requires {self.requirement}: {has}"


def unmet_requirements(distributions: Iterable | None = None) -> list[Unmet]:
    """Every requirement of an installed package that no installed package meets, in pip check's terms: the required
    package is missing, or its installed version is outside the specifier (pre-releases allowed). ImportError without
    `packaging` (which transformers and TRL require: without it the environment is broken anyway)."""
    from packaging.requirements import InvalidRequirement, Requirement

    dists = [d for d in (importlib.metadata.distributions() if distributions is None else distributions)
             if d.metadata["Name"]]
    installed = {canonical(d.metadata["Name"]): d.version for d in dists}
    unmet = []
    for dist in sorted(dists, key=lambda d: canonical(d.metadata["Name"])):
        for text in dist.requires or []:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue  # pip check skips what it cannot parse too
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            name = canonical(requirement.name)
            have = installed.get(name)
            if have is None or not requirement.specifier.contains(have, prereleases=True):
                asks = f"{dist.metadata['Name']} {dist.version}"
                unmet.append(Unmet(asks, str(requirement).split(";")[0].strip(), name, have))
    return unmet


def other_platform(distributions: Iterable | None = None) -> list[tuple[str, str, list[str]]]:
    """(name, version, tags) of each installed package whose WHEEL file names no tag this interpreter supports: what
    pip check calls "not supported on this platform" and uv pip check "built for a different platform"."""
    from packaging.tags import parse_tag, sys_tags

    supported = set(sys_tags())
    found = []
    for dist in distributions if distributions is not None else importlib.metadata.distributions():
        wheel = dist.read_text("WHEEL") or ""
        tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
        # a Tag line may be a compressed set (py3-none-manylinux2014_x86_64.musllinux_1_1_x86_64): parse_tag opens it
        if tags and not any(supported & parse_tag(tag) for tag in tags) and dist.metadata["Name"]:
            found.append((canonical(dist.metadata["Name"]), dist.version, tags))
    return sorted(found)


def judged(unmet: list[Unmet], track) -> tuple[list[Unmet], list[Unmet]]:
    """(meant, broken): the unmet requirements the track's table means, each with its reason (a package it `excludes`
    and that is not installed; one it `overrides`, installed at another version than asked), and the rest."""
    excludes = {canonical(k): v for k, v in (getattr(track, "excludes", None) or {}).items()}
    overrides = {canonical(k): v for k, v in (getattr(track, "overrides", None) or {}).items()}
    meant, broken = [], []
    for one in unmet:
        why = excludes.get(one.name) if one.installed is None else overrides.get(one.name)
        if why:
            meant.append(Unmet(one.package, one.requirement, one.name, one.installed, why))
        else:
            broken.append(one)
    return meant, broken
