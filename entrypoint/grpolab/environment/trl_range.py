"""The vLLM versions installed TRL declares in its `vllm` extra (">=0.22.0,<=0.31.0"), read from TRL's own metadata,
and whether a vLLM version is inside them. The doctor's vllm item, the smoke test's rollout layer and the rollout
choice all stand on it. When the range cannot be told, `range_unknown_because()` says why in words (TRL not
installed, no vllm extra, `packaging` not importable), so that no caller shows "range unknown" without a reason."""

from __future__ import annotations

import importlib.metadata


class RangeUnknown(Exception):
    """TRL's declared vLLM range cannot be read; the message says why and what to do."""


def _trl_vllm_specifier():
    """TRL's requirement on vllm from its `vllm` extra, as a packaging SpecifierSet; RangeUnknown when there is none."""
    try:
        trl_version = importlib.metadata.version("trl")
        requires = importlib.metadata.requires("trl") or []
    except importlib.metadata.PackageNotFoundError:
        raise RangeUnknown("TRL is not installed in this environment: install the track's lock") from None
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError as error:  # packaging comes with transformers and TRL: its absence is a broken environment
        raise RangeUnknown(f"the `packaging` module could not be imported ({type(error).__name__}: {error}), so TRL "
                           f"{trl_version}'s requirements cannot be read: reinstall the track's lock") from None
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if (
            req.name.lower() == "vllm"
            and req.marker is not None
            and req.marker.evaluate({"extra": "vllm"})
            and not req.marker.evaluate({"extra": ""})
        ):
            return req.specifier
    raise RangeUnknown(f"TRL {trl_version} declares no vllm extra: check TRL's release notes for the vLLM it supports")


def range_unknown_because() -> str | None:
    """Why TRL's declared vLLM range cannot be told, in words; None when it can."""
    try:
        _trl_vllm_specifier()
    except RangeUnknown as unknown:
        return str(unknown)
    return None


def trl_vllm_range() -> str | None:
    """The declared range, lower bound first (">=0.22.0,<=0.31.0"); None when it cannot be told (see
    range_unknown_because)."""
    try:
        spec = _trl_vllm_specifier()
    except RangeUnknown:
        return None
    order = {">": 0, "~": 1, "=": 2, "<": 3, "!": 4}
    return ",".join(sorted((str(s) for s in spec), key=lambda s: (order.get(s[0], 5), s))) or None


def vllm_in_trl_range(version: str) -> bool | None:
    """Whether vllm `version` is inside installed TRL's declared range; None when the range cannot be told."""
    try:
        return _trl_vllm_specifier().contains(version, prereleases=True)
    except RangeUnknown:
        return None


def describe_range() -> str:
    """The range as a sentence's object: ">=0.22.0,<=0.31.0", or "unknown (why)"."""
    return trl_vllm_range() or f"unknown ({range_unknown_because()})"
