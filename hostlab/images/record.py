"""lockfiles/<track>.image.json: the dependency image this commit's Dockerfile and locks give, recorded beside the lock.

The record holds the dependency stage's image id and its layers' diff ids, the inputs they were made from (each
file's sha256), the base it was built on and how it was checked (two builds from nothing, same ids). Every build with
a reproducible builder on the recorded base is compared with it: a different id for the same inputs means the build
is not reproducible; different inputs without a new record mean someone changed the Dockerfile, a lock or the base
and did not record what it gives (`invoke build.reproducible --track T --record`). CI fails on either.
The lab stage (the code) is not recorded: it changes with every commit; `invoke build.reproducible` checks it by
building twice. The image with the lock's source-only packages compiled in (grpolab:c-llamacpp) has a record of its
own, lockfiles/c-llamacpp.image.json: the same dependency image, and the compile stage's image (source-builds), which
depends on the same inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

from grpolab.common.tracks import Track

from .. import REPO, HostError
from ..host.console import say, warn
from ..host.environ import in_ci
from .builders.inputs import input_hashes  # noqa: F401  (record.input_hashes: the tests' name for it)


def record_path(track: Track, repo: Path = REPO, name: str = "") -> Path:
    """lockfiles/<name>.image.json: `name` is a build's record_name (c, or c-llamacpp), the track's name by default."""
    return repo / "lockfiles" / f"{name or track.name}.image.json"


def read_record(track: Track, repo: Path = REPO, name: str = "") -> dict | None:
    path = record_path(track, repo, name)
    return json.loads(path.read_text()) if path.exists() else None


def write_record(track: Track, result, checked: dict, repo: Path = REPO) -> Path:
    """Record `result` (a BuildResult from a reproducible builder) with how it was checked."""
    record = {
        "track": track.name,
        "what": "the dependency stage's image (images/Dockerfile --target deps) that these inputs give on this base; "
        "written by `invoke build.reproducible --track T --record`, compared by every build",
        "inputs": input_hashes(track, repo),
        "source_date_epoch": result.epochs["deps"],
        "base": {"name": result.base, "id": result.base_id},
        "deps_image_id": result.deps_image_id,
        "deps_layers": result.deps_layers,
        **({"compiled_image_id": result.compiled_image_id, "compiled_layers": result.compiled_layers}
           if result.compiled_image_id else {}),
        "builder": result.builder,
        "checked": checked,
    }
    path = record_path(track, repo, result.record_name)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def strict() -> bool:
    """In CI a build that differs from the record fails; on a learner's machine it is said loudly."""
    return in_ci()


def compare_with_record(track: Track, result, repo: Path = REPO) -> tuple[str, list[str]]:
    """("same" | "differs" | "stale" | "other base" | "none", lines saying so). `result`: a BuildResult."""
    record = read_record(track, repo, result.record_name)
    name = record_path(track, repo, result.record_name).relative_to(repo)
    redo = f"`invoke build.reproducible --track {track.name}{_rollout_option(result, track)} --record`"
    if record is None:
        return "none", [f"no {name} yet: {redo} makes it"]
    if not result.deps_image_id:
        return "none", [
            f"this build's builder ({result.builder}) does not set its times from git: nothing to compare with {name}"
        ]
    if record["base"]["id"] != result.base_id and record["base"]["name"] == result.base:
        return "stale", [
            f"{name} was recorded on {result.base} as it was then ({record['base']['id'][:19]}); it is now "
            f"{result.base_id[:19]} (its pins or its recipe changed): record what the inputs give on it with "
            f"`invoke build.reproducible --track {track.name} --base {result.base} --record`"
        ]
    if record["base"]["id"] != result.base_id:
        return "other base", [
            f"{name} was recorded on the base {record['base']['name']} ({record['base']['id'][:19]}), this build ran "
            "on "
            f"{result.base} ({result.base_id[:19]}): nothing to compare. `invoke base` and `invoke build --track "
            f"{track.name} --base {record['base']['name']}` compare with it."
        ]
    now = input_hashes(track, repo)
    changed = sorted(p for p in set(now) | set(record["inputs"]) if now.get(p) != record["inputs"].get(p))
    if changed:
        return "stale", [
            f"{name} was recorded for other inputs ({', '.join(changed)} changed since): record what they give now "
            f"with {redo}"
        ]
    lines = _differences("dependency image", result.deps_image_id, result.deps_layers, record["deps_image_id"],
                         record["deps_layers"], name)
    if record.get("compiled_image_id"):
        lines += _differences("compile stage's image", result.compiled_image_id, result.compiled_layers,
                              record["compiled_image_id"], record["compiled_layers"], name)
    if not lines:
        compiled = f", compile stage {result.compiled_image_id[:19]}" if record.get("compiled_image_id") else ""
        return "same", [
            f"dependency image {result.deps_image_id[:19]}{compiled}: the same as {name} records (byte for byte)"
        ]
    lines.append(f"  which files differ, and how: `invoke build.reproducible --track {track.name}"
                 f"{_rollout_option(result, track)}`")
    return "differs", lines


def _rollout_option(result, track: Track) -> str:
    """` --rollout R` for an image with source builds (record c-llamacpp: R is llamacpp), else nothing."""
    suffix = (result.record_name or track.name).removeprefix(track.name)
    return f" --rollout {suffix.removeprefix('-')}" if suffix else ""


def _differences(what: str, mine: str, my_layers: list[str], recorded: str, recorded_layers: list[str],
                 name) -> list[str]:
    """Where one stage's image differs from the record's: nothing when it is the same."""
    if mine == recorded:
        return []
    lines = [f"{what} {mine[:19] or '(none)'} differs from {name}'s {recorded[:19]} (same inputs)"]
    for index, (layer, theirs) in enumerate(zip(my_layers, recorded_layers)):
        if layer != theirs:
            lines.append(f"  first differing layer: #{index} ({layer[:19]} here, {theirs[:19]} recorded)")
            break
    else:
        if len(my_layers) != len(recorded_layers):
            lines.append(f"  {len(my_layers)} layers here, {len(recorded_layers)} recorded")
        else:
            lines.append("  every layer is the same: the image's config differs (its times, environment or labels)")
    return lines


def enforce(track: Track, result, repo: Path = REPO) -> str:
    """Compare, print, and in CI fail on a differing or stale record. The verdict."""
    verdict, lines = compare_with_record(track, result, repo)
    if verdict in ("differs", "stale") and strict():
        raise HostError("\n".join(lines))
    (warn if verdict in ("differs", "stale") else say)("\n".join(lines))
    return verdict
