"""`invoke build`: one image per container track from images/Dockerfile and the track's lock."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from grpolab.common.tracks import ROLLOUT_PATHS, Track, get_track

from .. import REPO, HostError
from ..host import engine
from ..host.console import say, stream, warn
from ..host.detect import HostFacts, detect_track, host_problems
from ..host.tools import resolved
from ..locks.buildtools import build_lock_path, check_build_lock
from ..locks.debian import (
    SUITE,
    check_debian_lock,
    debian_lock_path,
    mirror_list,
    pins_arg,
    read_debian_lock,
    snapshot_list,
)
from ..locks.lockfile import Lock, lock_path, lock_sha256
from ..locks.resolve import check_lock, uv_config
from ..locks.sourcebuilds import SOURCE_BUILD_FILE_NAMES, rollouts_needing_source_builds, source_builds
from .builders import BUILDAH_HINT, Builder, choose_builder, commit_time, deps_inputs, lab_inputs
from .builders.onecopy import deps_from_engine, deps_key, keep_one_copy
from .builders.storelock import store_held
from .compose import compose_env, write_env_file
from .diskneed import build_log, check_room, full_disk_named
from .record import enforce
from .standin import standin_name
from .vendor import PackageSources, load_base, offline_sources, read_manifest, served

CA_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")


def runtime_build_args(track: Track, lock: Lock, lock_dir: Path = REPO / "lockfiles") -> dict[str, str]:
    """RUNTIME_PACKAGES: the Debian pins (package=version, lockfiles/<track>.debian.txt's runtime group) of the
    libraries
    RUNTIME_LIBRARIES names for the lock's packages (empty for most); DEBIAN_SUITE: the suite the refusal names."""
    return {"RUNTIME_PACKAGES": pins_arg(track, lock, "runtime", lock_dir), "DEBIAN_SUITE": SUITE}


def source_build_args(track: Track, lock: Lock, lock_dir: Path = REPO / "lockfiles") -> dict[str, str]:
    """Build args for the lock's source-only packages, which the Dockerfile's dependency stage leaves out and its
    source-builds stage compiles for the image that has them (`invoke build --rollout llamacpp`): SOURCE_PACKAGES,
    BUILD_PACKAGES (the Debian pins of their compilers, package=version,
    lockfiles/<track>.debian.txt's build group), BUILD_CONFIG_SETTINGS (pip options: every package's settings go to each
    compile, harmless while there is one), IMPORT_CHECK, KEEP_SDISTS; all empty when the lock has none. The build tools
    themselves come from lockfiles/<track>.build.txt, in the build context as build.txt (stage_context)."""
    builds = source_builds(lock)
    return {
        "SOURCE_PACKAGES": " ".join(builds),
        "BUILD_PACKAGES": pins_arg(track, lock, "build", lock_dir),
        "BUILD_CONFIG_SETTINGS": " ".join(
            f"--config-settings={setting}" for b in builds.values() for setting in b.config_settings
        ),
        "IMPORT_CHECK": " ".join(b.module for b in builds.values() if b.module),
        "KEEP_SDISTS": " ".join(name for name, b in builds.items() if b.keep_sdist),
        "DEBIAN_SUITE": SUITE,
    }


def image_build_args(track: Track, lock: Lock, base_image: str, base_digest: str, repo: Path = REPO) -> dict[str, str]:
    """Every build arg the Dockerfile takes for the track on that base, from its lock (parsed) and the repository as it
    stands."""
    lock_dir = repo / "lockfiles"
    return {
        "TRACK": track.name,
        "PYTHON_VERSION": track.python,
        "BASE_IMAGE": base_image,
        "BASE_DIGEST": base_digest,
        "LOCK_SHA256": lock_sha256(lock_path(track, lock_dir)),
        "GIT_REVISION": git_revision(repo),
        "TRACK_ENV": track_env_file(track),
        **source_build_args(track, lock, lock_dir),
        **runtime_build_args(track, lock, lock_dir),
    }


@dataclass
class BuildResult:
    image: str
    track: str
    size_bytes: int
    lock_sha256: str
    seconds: float
    base: str
    base_digest: str
    labels: dict = field(default_factory=dict)
    log_tail: list[str] = field(default_factory=list, repr=False)  # the build's last lines, for the bench
    image_id: str = ""  # the config's digest: same commit, same id (with a reproducible builder)
    builder: str = ""  # e.g. "buildah 1.28.2"
    epochs: dict = field(default_factory=dict)  # {"deps": s, "lab": s}: the times stamped into each part, from git
    base_id: str = ""  # the base image's id (its config digest) as the engine holds it
    deps_image_id: str = ""  # the dependency stage's image (buildah only): what lockfiles/<track>.image.json records
    deps_layers: list[str] = field(default_factory=list)  # its layers' diff ids, bottom first
    handover_s: float = 0.0  # of `seconds`, sending the built image to the Docker engine (buildah's builds)
    # The image with the lock's source-only packages compiled in (grpolab:c-llamacpp): its compile stage's image and
    # layers, which its record (lockfiles/c-llamacpp.image.json) holds beside the dependency image's.
    compiled_image_id: str = ""
    compiled_layers: list[str] = field(default_factory=list)
    record_name: str = ""  # lockfiles/<record_name>.image.json: the track's name, or its image's (c-llamacpp)

    def summary(self) -> str:
        return (
            f"built {self.image} (track {self.track}) in {self.seconds:.0f} s: {self.size_bytes / 1e9:.2f} GB, "
            f"image id {self.image_id[:19]}, lock sha256 {self.lock_sha256[:16]}..., base {self.base}"
            + (f" @ {self.base_digest}" if self.base_digest else "")
            + (f", with {self.builder}" if self.builder else "")
            + (
                f"; {self.handover_s:.0f} s of it handing the image to the Docker engine"
                if self.handover_s >= 1
                else ""
            )
        )


def image_name(track: Track) -> str:
    return f"grpolab:{track.name}"


def resolve_track(name: str | None, facts: HostFacts | None = None) -> Track:
    """The named track, or the one detected from this host (printing why)."""
    if name:
        return get_track(name)
    detected, why = detect_track(facts)
    say(f"track {detected}: detected from this host ({why}); pass --track to choose another")
    return get_track(detected)


def ca_bundle_path(explicit: str | None = None) -> Path | None:
    """The extra CA bundle for TLS-intercepting proxies: --ca-bundle, else the environment's certificate setting."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise HostError(f"--ca-bundle {explicit}: no such file")
        return path
    for var in CA_ENV_VARS:
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return Path(value)
    return None


def choose_base(track: Track, override: str | None) -> tuple[str, str]:
    """(base image to build FROM, its digest or "" when unknown)."""
    arch = track.platform.partition("/")[2]
    if override:
        image = engine.image_or_none(override)
        if image is None:
            ok, reason = engine.pull(override, track.platform)
            if not ok:
                raise HostError(f"base image {override} is neither here nor pullable ({reason})")
            image = engine.image_or_none(override)
        return override, _digest_of(override, image)
    pinned = track.base_image
    if "@sha256:" not in pinned:
        warn(
            f"track {track.name}'s base image {pinned} is not pinned by digest in images/tracks.toml: builds "
            "may differ from one day to the next"
        )
    image = engine.image_or_none(pinned)
    if image is None:
        say(f"pulling {pinned} ...")
        ok, reason = engine.pull(pinned, track.platform)
        if ok:
            image = engine.image_or_none(pinned)
        else:
            standin = standin_name(arch)
            hint = f"`invoke base{'' if arch == 'amd64' else ' --arch ' + arch}`"
            if engine.image_or_none(standin) is None:
                raise HostError(
                    f"cannot pull the base image {pinned} ({reason}). Where no registry is reachable, "
                    f"build the stand-in base with {hint}, then `invoke build --track {track.name} "
                    f"--base {standin}`"
                )
            warn(f"cannot pull {pinned} ({reason}); building on the stand-in base {standin} instead (made by {hint})")
            return standin, _digest_of(standin, engine.image_or_none(standin))
    return pinned, _digest_of(pinned, image)


def _digest_of(name: str, image) -> str:
    if "@sha256:" in name:
        return name.split("@", 1)[1]
    digests = [d.split("@", 1)[1] for d in (image.attrs.get("RepoDigests") or []) if "@" in d] if image else []
    return digests[0] if digests else (image.id if image else "")


def check_base_python(base: str, track: Track) -> None:
    status, out = engine.run_in(base, ["sh", "-c", f"command -v python{track.python}"], track.platform)
    if status != 0:
        raise HostError(
            f"base image {base} has no python{track.python}, which track {track.name} needs "
            f"({out.strip() or 'not found'}): use a base that ships it (python:{track.python}-slim-trixie), "
            "or the stand-in from `invoke base`"
        )


def track_env_file(track: Track) -> str:
    """The track's `env`, as KEY=VALUE lines the entrypoint exports (shell-quoted values)."""
    import shlex

    return "\n".join(f"{k}={shlex.quote(str(v))}" for k, v in track.env.items())


def stage_context(track: Track, repo: Path, into: Path, sources: PackageSources | None = None) -> Path:
    """The build context: only what images/Dockerfile uses, with this track's lock as lock.txt. Made the same on any
    machine: the code is the files git tracks or would track (nothing it ignores: bytecode, the egg-info an editable
    install writes), and every file is mode 0644, or 0755 where it is executable (all git records of a mode), whatever
    the checkout's umask made them. `sources`: where pip, uv and apt take every package from instead (a vendored
    folder, hostlab/images/vendor.py); bound in the RUN steps, so the image is the same either way."""
    shutil.copy2(lock_path(track, repo / "lockfiles"), into / "lock.txt")
    # The kernels table beside the lock (`invoke kernels`), which the doctor and the smoke test read; "{}" for a
    # track without one (no GPU), so the Dockerfile copies one file either way.
    kernels = repo / "lockfiles" / f"{track.name}.kernels.json"
    (into / "kernels.json").write_text(kernels.read_text() if kernels.exists() else "{}\n")
    shutil.copy2(repo / "lockfiles" / "uv.txt", into / "uv.txt")
    (into / "uv.toml").write_text(sources.uv_toml if sources else image_uv_config(track))
    (into / "pip.conf").write_text(sources.pip_conf if sources else "")  # empty: pip's defaults
    # The hashed tools that compile the source-only packages (empty for a track without any), and the script that
    # installs the Debian pins or refuses in one line.
    build_lock = build_lock_path(track, repo / "lockfiles")
    (into / "build.txt").write_text(build_lock.read_text() if build_lock.exists() else "")
    shutil.copy2(repo / "images" / "apt-install-pinned.sh", into / "apt-install-pinned.sh")
    # Where it takes them from: the main archive (the base's own sources, or GRPOLAB_DEBIAN_MIRROR's), and Debian's
    # snapshot archive at the time the pins were resolved, asked only for a version the main archive lost. Bound in
    # the RUN steps, not build args: which archive served the same .deb files leaves no trace in the image's history.
    (into / "debian-sources").mkdir()
    (into / "debian-sources" / "mirror.list").write_text(sources.mirror_list if sources else mirror_list())
    pins = debian_lock_path(track, repo / "lockfiles")
    (into / "debian-sources" / "snapshot.list").write_text(
        snapshot_list(read_debian_lock(pins).header) if pins.exists() and not sources else ""
    )
    # Files the compile's options name (sourcebuilds.SOURCE_BUILD_FILES), bound there in the source-builds stage.
    (into / "source-build-files").mkdir()
    for name in SOURCE_BUILD_FILE_NAMES:
        shutil.copy2(repo / "images" / name, into / "source-build-files" / name)
    shutil.copy2(repo / "images" / "verify-locked.py", into / "verify-locked.py")
    shutil.copy2(repo / "images" / "tracks.toml", into / "tracks.toml")
    # The lab's code, and the lesson's examples (examples/: the learner's `python examples/quickstart.py`).
    for name in code_files(repo, "entrypoint") + code_files(repo, "examples"):
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, into / name)
    for path in [into, *into.rglob("*")]:
        executable = path.is_dir() or os.access(path, os.X_OK)
        path.chmod(0o755 if executable else 0o644)
    return into


def image_uv_config(track: Track) -> str:
    """The uv.toml the image's `uv pip sync` reads (--config-file): the one the track's lock was resolved beside,
    so that an index that answers 403 for what it does not host (AMD's, track x) is passed over at install as it was
    at resolution; empty (uv's defaults) for every other track."""
    return uv_config(track) or ""


def code_files(repo: Path, folder: str) -> list[str]:
    """The files under `folder` that git tracks or would track (not ignored), deleted ones left out."""
    out = subprocess.run(
        resolved(
            ["git", "-C", str(repo), "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", folder]
        ),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise HostError(
            f"cannot list the code to build from git in {repo}: {out.stderr.strip()} (build from a git clone)"
        )
    return sorted({name for name in out.stdout.split("\0") if name and (repo / name).is_file()})


@contextmanager
def staged_context(track: Track, repo: Path, sources: PackageSources | None = None) -> Iterator[Path]:
    """The build context `stage_context` makes, in a folder of its own inside a temporary one (the builder writes its
    id files beside it), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="grpolab-context-") as tmp:
        (Path(tmp) / "context").mkdir()
        yield stage_context(track, repo, Path(tmp) / "context", sources)


def git_revision(repo: Path) -> str:
    out = subprocess.run(
        resolved(["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=40"]),
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "unknown"


def explain_failure(tail: list[str], track: Track) -> str:
    text = "\n".join(tail)
    m = re.search(r"[Hh]ash mismatch for `?([A-Za-z0-9._-]+)(?:==([^\s`]+))?", text)
    if m:
        pkg = m.group(1) + (f"=={m.group(2)}" if m.group(2) else "")
        return (
            f"the build failed: {pkg}'s file does not match any hash in lockfiles/{track.name}.txt (the lock was "
            f"tampered with, or the index serves a different file). Re-make it: `invoke lock --track {track.name}`"
        )
    errors = [line for line in tail if "ERROR" in line or "error:" in line]
    detail = "\n".join(errors[-6:]) or "\n".join(tail[-10:])
    return f"the image build for track {track.name} failed:\n{detail}"


def check_buildable(track: Track, lock_dir: Path, pyproject: Path, skip_host_check: bool) -> Lock:
    """Refuse, with what to do, before any build work: a native track, a lock that is missing, stale or
    breaks the rules, no container engine, or (unless skipped) a host that can't run the image. The lock, parsed once
    for everything the build does with it."""
    if not track.is_container:
        raise HostError(f"track {track.name} is a native venv, not an image: `invoke venv --track {track.name}`")
    engine.client()  # first: an engine that is stopped, or not ours to use, is said before anything else
    report = check_lock(track, lock_dir=lock_dir, pyproject=pyproject)
    lock = report.lock  # parsed once, by the check
    if not report.problems:  # the build tools and Debian pins are judged against a lock that is itself current
        report.problems += check_build_lock(track, lock, lock_dir) + check_debian_lock(track, lock, lock_dir)
    if report.problems:  # a hand-edited lock too: refused here, before anything is downloaded
        raise HostError("\n".join(report.problems))
    if not skip_host_check:
        problems = host_problems(track, engine_runtimes=engine.runtimes())
        if problems:
            raise HostError(
                "\n".join(problems) + "\n(to build the image anyway, e.g. for another machine: --skip-host-check)"
            )
    return lock


def build_command(
    cli: engine.BuildCli,
    track: Track,
    repo: Path,
    image: str,
    args: dict[str, str],
    ca: Path | None,
    target: str = "lab",
) -> list[str]:
    """The engine's build command line, less the context folder (staged at the last moment)."""
    cmd = list(cli.argv)
    cmd += [
        "--file",
        str(repo / "images" / "Dockerfile"),
        "--target",
        target,
        "--tag",
        image,
        "--platform",
        track.platform,
    ]
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    if ca:
        cmd += ["--secret", f"id=ca_bundle,src={ca}"]
        say(f"CA bundle {ca} goes to the build as a BuildKit secret (in no layer)")
    return cmd


def run_build(
    cli: engine.BuildCli, track: Track, repo: Path, cmd: list[str], sources: PackageSources | None = None
) -> list[str]:
    """Run the build with a freshly staged context; the log's last lines. A failure says why."""
    with staged_context(track, repo, sources) as context:
        cmd = cmd + [str(context)]
        status, tail = stream(cmd, env={**os.environ, **dict(cli.env)})
    if status != 0:
        raise HostError(explain_failure(tail, track))
    return tail


@dataclass(frozen=True)
class TwoStageBuild:
    image_id: str
    deps_image_id: str
    deps_layers: list[str]
    tail: list[str]
    handover_s: float = 0.0  # buildah only: sending the image to the Docker engine
    compiled_image_id: str = ""  # the source-builds stage's image, where the image has it
    compiled_layers: list[str] = field(default_factory=list)


def run_two_stage_build(
    builder: Builder, track: Track, repo: Path, image: str, args: dict[str, str], base_id: str, epochs: dict[str, int],
    ca: Path | None, with_source_builds: bool = False, sources: PackageSources | None = None, one_copy: bool = False,
) -> TwoStageBuild:
    """Two builds from one staged context, by a builder that sets every time (buildah, or buildx where the engine can):
    the dependency stages with their own time, then the lab stage on that image with the code's time; the result in
    the Docker engine as `image`. `with_source_builds`: two more, the compile of the lock's source-only packages with
    the dependency stages' time (so a code change does not compile again) and the lab image with them added, with the
    code's time: that is `image`, and the lab image stays in the builder only (tagged as the track's image).
    `one_copy` (a builder with a store of its own): builders/onecopy.py."""
    if ca:
        say(f"CA bundle {ca} goes to the build as a secret (in no layer)")
    dockerfile = repo / "images" / "Dockerfile"
    one_copy = one_copy and builder.keeps_own_copy
    held = store_held(f"a build of track {track.name} as {image}") if builder.keeps_own_copy else nullcontext()
    with staged_context(track, repo, sources) as context, held:
        stage_args = builder_stage_args(builder, args, base_id)
        key = deps_key(track, repo, stage_args, epochs["deps"], base_id) if one_copy else ""
        deps_id, deps_ref, tail = (one_copy and deps_from_engine(track, key, epochs["deps"])) or build_target(
            builder, track, dockerfile, context, "deps", epochs["deps"], stage_args, ca
        )
        lab_tag = image_name(track) if with_source_builds else image
        lab_id, lab_ref, lab_tail = build_target(builder, track, dockerfile, context, "lab", epochs["lab"],
                                                 {**stage_args, "DEPS": deps_ref}, ca, lab_tag)
        compiled_id, compiled_layers = "", []
        stripped = [deps_id, lab_id]  # without history: not the bottom of the final image (one layer more on top)
        if with_source_builds:
            lab_id, compiled_id, compiled_ref, more_tail = add_source_builds(
                builder, track, dockerfile, context, stage_args, lab_ref, image, epochs, ca
            )
            compiled_layers = builder.layers(compiled_id, compiled_ref)
            lab_tail += more_tail
        deps_layers = builder.layers(deps_id, deps_ref)
        handover_s = 0.0
        if not builder.loads_into_engine:
            handing = time.monotonic()
            builder.hand_to_engine(lab_id, image)
            handover_s = time.monotonic() - handing
        if one_copy:
            keep_one_copy(track, key, deps_ref, stripped, lab_id, base_id)
    return TwoStageBuild(lab_id, deps_id, deps_layers, tail + lab_tail, handover_s, compiled_id, compiled_layers)


def builder_stage_args(builder: Builder, args: dict[str, str], base_id: str) -> dict[str, str]:
    """The build args each stage's build gets: the base as this builder's FROM takes it (buildah: the engine's base
    copied into its store, by id), and its name as the track gives it for the label. `invoke source-wheels` builds the
    compile stage with these too, so that the two builds share buildah's cache."""
    base = builder.base_ref(base_id, args["BASE_IMAGE"])
    return {**args, "BASE_IMAGE": base, "BASE_NAME": args["BASE_IMAGE"]}


def add_source_builds(
    builder: Builder, track: Track, dockerfile: Path, context: Path, args: dict[str, str], lab_ref: str, image: str,
    epochs: dict[str, int], ca: Path | None,
) -> tuple[str, str, str, list[str]]:
    """The compile of the lock's source-only packages (the source-builds stage, with the dependency stages' time: its
    cache outlives code changes), then the lab image `lab_ref` with them added (the code's time), as `image`: its id,
    the compile stage's id and reference, and the log's last lines."""
    compiling = " ".join(args["SOURCE_PACKAGES"].split())
    say(
        f"compiling {compiling} from the lock's sdist, once: later builds of this lock take it from the builder's cache"
    )
    compiled_id, compiled_ref, tail = build_target(
        builder, track, dockerfile, context, "source-builds", epochs["deps"], args, ca
    )
    final_args = {**args, "LAB": lab_ref, "SOURCE_BUILDS": compiled_ref}
    final_id, _, final_tail = build_target(
        builder, track, dockerfile, context, "with-source-builds", epochs["lab"], final_args, ca, image
    )
    return final_id, compiled_id, compiled_ref, tail + final_tail


def build_target(
    builder: Builder, track: Track, dockerfile: Path, context: Path, target: str, epoch: int, args: dict[str, str],
    ca: Path | None, tag: str | None = None,
) -> tuple[str, str, list[str]]:
    """One build of the Dockerfile's `target` at `epoch` by a builder that sets every time: the image's id, what a
    later stage's FROM takes for it (buildah: the image as built, with the history its layer cache needs; buildx: its
    tag in the engine, `tag` or grpolab-<target>:<track>), and the log's last lines. A failure says why."""
    image_id, ref, tail = builder.build_target(dockerfile, context, target, epoch, args, track.platform, ca, tag)
    if not image_id:
        raise HostError(explain_failure(tail, track))
    return image_id, ref, tail


def check_rollout(rollout: str | None) -> None:
    """Refuse a rollout path the lab does not have, before anything is built for it (the lab would refuse it only
    after the build)."""
    if rollout is not None and rollout not in ROLLOUT_PATHS:
        raise HostError(f"--rollout {rollout!r} is not a rollout path: one of {', '.join(ROLLOUT_PATHS)}")


def image_for_rollout(track: Track, rollout: str | None, lock: Lock) -> tuple[str, bool]:
    """The image a run on `rollout` needs, and whether it is the one with the lock's source-only packages compiled in:
    the track's image (grpolab:c), or that image plus them (grpolab:c-llamacpp) for the rollout path that loads them."""
    check_rollout(rollout)
    if rollout and rollout in rollouts_needing_source_builds(lock):
        return f"{image_name(track)}-{rollout}", True
    return image_name(track), False


def _run_builds(
    builder: Builder, track: Track, repo: Path, image: str, args: dict[str, str], base_id: str,
    epochs: dict[str, int], ca: Path | None, with_source_builds: bool, sources: PackageSources | None,
    one_copy: bool = False,
) -> TwoStageBuild:
    """The image built into the engine by `builder`: the log's last lines, the dependency (and compile) stages' ids
    and layers (none from a builder that does not set its times), the seconds the hand-over to the engine took."""
    if builder.sets_times:
        return run_two_stage_build(builder, track, repo, image, args, base_id, epochs, ca, with_source_builds, sources,
                                   one_copy)
    warn(
        f"building with the Docker engine's own builder ({builder.describe()}): the image works the same, but its "
        "id "
        "will differ build to build (the engine stamps the clock into it). For same commit, same image: "
        f"{BUILDAH_HINT}"
    )
    cli = engine.build_cli()
    target = "with-source-builds" if with_source_builds else "lab"
    tail = run_build(
        cli,
        track,
        repo,
        build_command(cli, track, repo, image, {**args, "SOURCE_DATE_EPOCH": str(epochs["lab"])}, ca, target),
        sources,
    )
    return TwoStageBuild("", "", [], tail)


def build(
    track_name: str | None = None,
    base: str | None = None,
    ca_bundle: str | None = None,
    repo: Path = REPO,
    skip_host_check: bool = False,
    tag: str | None = None,
    write_env: bool = True,
    build_args: dict[str, str] | None = None,
    builder: Builder | None = None,
    compare_record: bool = True,
    rollout: str | None = None,
    vendored: Path | None = None,
    one_copy: bool = False,
) -> BuildResult:
    """Build the track's image into the Docker engine and, unless `write_env` is off, point .env at it. `rollout`: a
    run's rollout path; the one that loads the lock's source-only packages (llamacpp) gets the image with them
    compiled in, and any other the plain image, which leaves them out. `vendored`: a folder `invoke vendor` wrote,
    every input taken from it (the network is not asked). `one_copy`: the engine's copy only, once built
    (builders/onecopy.py; `invoke build` and `invoke up` ask for it unless --keep-cache)."""
    started = time.monotonic()
    track = resolve_track(track_name)
    lock_dir = repo / "lockfiles"
    lock = check_buildable(track, lock_dir, repo / "pyproject.toml", skip_host_check)
    manifest = read_manifest(vendored, track) if vendored else None
    if manifest:
        base = load_base(vendored, manifest)
    base_image, base_digest = choose_base(track, base)
    if manifest:  # a loaded image has no registry digest of its own: the one it was saved with
        base_digest = manifest["base"]["digest"]
    check_base_python(base_image, track)
    ca = ca_bundle_path(ca_bundle)
    default_image, with_source_builds = image_for_rollout(track, rollout, lock)
    image = tag or default_image
    builder = builder or choose_builder()
    check_room(track, builder.loads_into_engine, repo)  # before anything is written
    epochs = {"deps": commit_time(repo, deps_inputs(track)), "lab": commit_time(repo, lab_inputs(track))}
    base_id = engine.image_or_none(base_image).id
    args = {**image_build_args(track, lock, base_image, base_digest, repo), **(build_args or {})}
    log = build_log(track, repo)  # the whole log kept; a full disk ends in one line naming the store
    with served(vendored) if vendored else nullcontext() as url, full_disk_named(track, log, repo):
        sources = offline_sources(url) if url else None
        made = _run_builds(builder, track, repo, image, args, base_id, epochs, ca, with_source_builds, sources,
                           one_copy)
    built = engine.image_or_none(image)
    result = BuildResult(
        image=image,
        track=track.name,
        size_bytes=int(built.attrs.get("Size", 0)),
        lock_sha256=args["LOCK_SHA256"],  # what the image's label says
        seconds=time.monotonic() - started,
        base=base_image,
        base_digest=base_digest,
        labels=dict(built.labels),
        log_tail=made.tail,
        image_id=built.id,
        builder=builder.describe(),
        epochs=epochs,
        base_id=base_id,
        deps_image_id=made.deps_image_id,
        deps_layers=made.deps_layers,
        handover_s=made.handover_s,
        compiled_image_id=made.compiled_image_id,
        compiled_layers=made.compiled_layers,
        record_name=default_image.partition(":")[2],  # c, or c-llamacpp
    )
    say(result.summary())
    if compare_record and builder.sets_times:
        enforce(track, result, repo)
    if write_env:
        digests = built.attrs.get("RepoDigests") or []
        env_path = write_env_file(
            compose_env(track, image, ca, repo, image_id=built.id, repo_digest=digests[0] if digests else ""),
            repo / ".env",
        )
        (repo / "runs").mkdir(exist_ok=True)  # made by us, so owned by the host user, before Docker would
        say(f"recorded track {track.name} in {env_path.name}: `docker compose run lab` now runs this image")
    return result
