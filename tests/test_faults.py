"""Faults, each with what the user sees and what was kept (docs/faults.md). Nothing here is mocked: real
processes, real signals, real file-size limits and a real full filesystem where this user may mount one."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import lab_in_training, read_until, sigint_as_at_a_terminal
from grpolab.common.errors import EXIT_STATUS
from grpolab.common.runlog import append_run, read_runs, runs_with_unfinished, unfinished_runs

from hostlab.images.builders.storelock import store_held

REPO = Path(__file__).resolve().parents[1]
PYTHON_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "entrypoint"), str(REPO / "tests")])}


def whole_lines(path: Path) -> list[dict]:
    """Every line of the log parsed; fails on any partial or glued line."""
    text = path.read_text()
    assert text.endswith("\n"), f"the log ends mid-line: {text[-80:]!r}"
    return [json.loads(line) for line in text.splitlines()]


# ------------------------------------------------------------------------------------- concurrent appends
def _append_hundred(path, writer):
    for n in range(100):
        append_run({"writer": writer, "n": n, "padding": "x" * (1000 + 37 * n)}, path)


def test_eight_processes_appending_a_hundred_lines_each_leave_every_line_whole(tmp_path):
    path = tmp_path / "runlog.jsonl"
    writers = [multiprocessing.Process(target=_append_hundred, args=(path, w)) for w in range(8)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(timeout=120)
        assert p.exitcode == 0
    lines = whole_lines(path)
    assert sorted((r["writer"], r["n"]) for r in lines) == [(w, n) for w in range(8) for n in range(100)]


# ------------------------------------------------------------------------------------------- disk full
# A run whose end record can't be written because the file may not grow: the run-log layer's exit status,
# no partial line, every earlier line intact, and the run still visible (its start record) as unfinished. The run
# holds room for its last line from its start (grpolab.run.diskspace.LineRoom), so the line here is made larger than
# that room; where another place takes it, the whole line is saved there (runlog-line.json).
RUN_UNTIL_LOG_FULL = textwrap.dedent(
    """
    import os, resource, signal, sys
    from grpolab.cli import main
    from grpolab.run.record import recorded_run
    from grpolab.common.errors import LayerFailure
    from grpolab.settings.lab_settings import LabSettings

    log, limit = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a size limit then fails the write (EFBIG) instead of killing us
    try:
        with recorded_run("lab", LabSettings(max_steps=2), log_path=log) as record:
            record["padding"] = "y" * 40000  # the end record can't fit in what is left, its room included
            if limit == "rlimit":
                resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(log) + 700, resource.RLIM_INFINITY))
            else:  # a small filesystem: fill it up to the last few hundred bytes
                free = os.statvfs(os.path.dirname(log))
                with open(os.path.join(os.path.dirname(log), "filler"), "wb") as f:
                    try:
                        f.write(b"0" * (free.f_bavail * free.f_frsize))
                    except OSError:
                        pass
    except LayerFailure as failure:
        print(failure)
        sys.exit(failure.exit_status)
    """
)


def _fill_log_until_full(log: Path, limit: str, cache: Path) -> subprocess.CompletedProcess:
    append_run({"run_id": "earlier-1", "kind": "smoke", "status": "passed"}, log)
    append_run({"run_id": "earlier-2", "kind": "lab", "status": "passed", "note": "z" * 300}, log)
    return subprocess.run(
        [sys.executable, "-c", RUN_UNTIL_LOG_FULL, str(log), limit],
        env={**PYTHON_ENV, "GRPOLAB_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _assert_log_full_kept_everything(log: Path, proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == EXIT_STATUS["runlog"], proc.stdout + proc.stderr
    assert "[runlog] could not write the run log" in proc.stdout
    lines = whole_lines(log)
    assert [line.get("run_id") for line in lines][:2] == ["earlier-1", "earlier-2"]
    assert lines[1]["note"] == "z" * 300
    assert [line.get("record") for line in lines[2:]] == ["start"]  # the end record is absent, not partial
    (unfinished,) = unfinished_runs(log)
    assert unfinished["run_id"] == lines[2]["run_id"] and unfinished["status"] == "unfinished"


def test_file_size_limit_while_writing_the_end_record_fails_in_the_runlog_layer_with_no_partial_line(tmp_path):
    log = tmp_path / "runlog.jsonl"
    _assert_log_full_kept_everything(log, _fill_log_until_full(log, "rlimit", tmp_path / "cache"))


def mounted_tmpfs(mount_point, options: str, why_skipped: str):
    """A tmpfs mounted for one test (root only: mounting needs CAP_SYS_ADMIN), unmounted after it."""
    mount_point.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)], capture_output=True, timeout=600
    ).returncode:
        pytest.skip(why_skipped)
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True, timeout=600)


@pytest.fixture
def small_filesystem(tmp_path):
    """A 64 KiB tmpfs."""
    yield from mounted_tmpfs(
        tmp_path / "small",
        "size=64k",
        "this user can't mount a small tmpfs; the file-size-limit test covers the same code path",
    )


def test_full_filesystem_while_writing_the_end_record_fails_in_the_runlog_layer_with_no_partial_line(
    small_filesystem, tmp_path
):
    log = small_filesystem / "runlog.jsonl"
    proc = _fill_log_until_full(log, "tmpfs", tmp_path / "cache")
    _assert_log_full_kept_everything(log, proc)
    (unfinished,) = unfinished_runs(log)
    saved = tmp_path / "cache" / "rescued" / unfinished["run_id"] / "runlog-line.json"  # the line, whole, elsewhere
    assert f"the run's line was saved to {saved}" in proc.stdout and f"`cat {saved} >> {log}`" in proc.stdout
    line = json.loads(saved.read_text())
    assert line["run_id"] == unfinished["run_id"] and line["padding"] == "y" * 40000 and line["status"] == "passed"


# ----------------------------------------------------------------------------------------- SIGKILL
HOLD_A_RUN_OPEN = textwrap.dedent(
    """
    import sys, time
    from grpolab.run.record import recorded_run
    from grpolab.settings.lab_settings import LabSettings

    with recorded_run("lab", LabSettings(), log_path=sys.argv[1]):
        print("running", flush=True)
        time.sleep(600)
    """
)


def test_a_run_killed_with_sigkill_shows_as_unfinished_and_the_next_run_names_it(tmp_path):
    log = tmp_path / "runlog.jsonl"
    append_run({"run_id": "before", "kind": "smoke", "status": "passed"}, log)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_RUN_OPEN, str(log)], env=PYTHON_ENV, stdout=subprocess.PIPE, text=True
    )
    assert read_until(proc, lambda line: line == "running\n", timeout_s=60) == "running\n"
    from grpolab.common.runlog import describe_unfinished

    (running,) = unfinished_runs(log)  # a run in another terminal: alive, and said to be
    assert describe_unfinished(running).endswith("is still running: its line comes when it ends")
    proc.kill()
    proc.wait(timeout=30)
    lines = whole_lines(log)
    (killed,) = unfinished_runs(log)
    assert killed["kind"] == "lab" and killed["pid"] == proc.pid
    assert [run.get("run_id") for run in runs_with_unfinished(log)] == ["before", killed["run_id"]]
    assert [run["run_id"] for run in read_runs(log)] == ["before"]  # finished runs only, as before
    assert len(lines) == 2

    from grpolab.run.record import recorded_run
    from grpolab.settings.lab_settings import LabSettings

    said = []
    with recorded_run("smoke", LabSettings(), log_path=log, say=said.append):
        pass
    assert any(killed["run_id"] in line and "never finished" in line for line in said), said
    assert unfinished_runs(log) == [killed]  # the next run ended, the killed one stays unfinished

    env = {**PYTHON_ENV, "GRPOLAB_RUNS_DIR": str(tmp_path), "GRPOLAB_TRACK": "c"}
    doctor = subprocess.run(
        [sys.executable, "-m", "grpolab", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=600
    )
    (shown,) = [i for i in json.loads(doctor.stdout)["items"] if i["name"] == "unfinished runs"]
    assert (
        shown["status"] == "warn"
        and shown["details"]["run_ids"] == [killed["run_id"]]
        and "never finished" in shown["summary"]
    )


@pytest.mark.slow
def test_a_lab_killed_with_sigkill_mid_training_leaves_no_partial_line_and_shows_unfinished(tmp_path, tiny_model_env):
    process, output = lab_in_training(tiny_model_env, tmp_path)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, output
    log = tmp_path / "runlog.jsonl"
    whole_lines(log)
    assert [(run["kind"], run["status"]) for run in runs_with_unfinished(log)] == [("lab", "unfinished")], output


# ------------------------------------------------------------------------------- Docker engine unreachable
sys.path.insert(0, str(REPO))  # hostlab/ (host-side code) at the repo root


def _engine_message(docker_host: str, uid: int | None, answers) -> None:
    """In a forked child (as `uid` when given): engine.client()'s error, sent back through `answers`."""
    import docker  # noqa: F401  imported before dropping privileges

    from hostlab import HostError

    from hostlab.host import engine

    os.environ["DOCKER_HOST"] = docker_host
    if uid is not None:
        os.setgid(uid)
        os.setuid(uid)
    try:
        engine.client()
        answers.put("connected")
    except HostError as err:
        answers.put(str(err))


def engine_message(docker_host: str, uid: int | None = None) -> str:
    import docker  # noqa: F401

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_engine_message, args=(docker_host, uid, answers))
    child.start()
    message = answers.get(timeout=120)
    child.join(timeout=30)
    return message


def test_a_stopped_engine_is_named_with_how_to_start_it(tmp_path):
    message = engine_message(f"unix://{tmp_path}/docker.sock")  # no engine there
    assert "the Docker engine is not running" in message and "systemctl start docker" in message
    assert "permission denied" not in message


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a socket another user may not use")
def test_a_user_not_allowed_to_use_the_engine_is_told_how_to_get_access(tmp_path):
    import socket

    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as listener:  # an engine that runs, on a socket only root may use
        listener.bind(str(path))
        listener.listen()
        os.chmod(path, 0o600)
        os.chmod(tmp_path, 0o755)
        message = engine_message(f"unix://{path}", uid=65534)
    assert "permission denied" in message and "may not use it" in message
    assert "usermod -aG docker" in message and "not running" not in message


@pytest.mark.parametrize("task", ["build", "up"])
def test_invoke_build_and_up_name_a_stopped_engine_before_anything_else(task, tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/docker.sock"}
    proc = subprocess.run(
        ["invoke", task, "--track", "c"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""  # nothing was done or printed before
    assert proc.stderr.startswith("ERROR: the Docker engine is not running"), proc.stderr


# ------------------------------------------------------------------------------------- a lock edited by hand
def committed_copy(tmp_path: Path) -> Path:
    """What a build reads (entrypoint/, examples/, images/, lockfiles/, pyproject.toml), committed to a git repo of its
    own, at the time this repository's dependency inputs were last committed: an image's times come from git, so the
    copy's dependency stages are this checkout's, cached, and the ones lockfiles/c.image.json records."""
    import shutil

    from grpolab.common.tracks import get_track
    from hostlab.images.builders import commit_time, deps_inputs

    for name in ("entrypoint", "examples", "images", "lockfiles"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    for path in deps_inputs(get_track("c")):  # the host's dependency inputs: the compile's options
        if path.startswith("hostlab/"):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / path, tmp_path / path)
    shutil.copy2(REPO / "pyproject.toml", tmp_path)
    when = f"@{commit_time(REPO, deps_inputs(get_track('c')))} +0000"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True, timeout=600)
    subprocess.run(git + ["add", "."], check=True, timeout=600)
    subprocess.run(git + ["commit", "-qm", "locks as invoke lock wrote them"], check=True, timeout=600,
                   env={**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when})
    return tmp_path


@pytest.mark.docker
def test_a_version_changed_by_hand_is_refused_before_downloading_naming_the_line(tmp_path):
    from grpolab.common.tracks import get_track

    from hostlab import HostError

    from hostlab.host import engine
    from hostlab.images.build import build
    from hostlab.locks.resolve import check_lock

    repo = committed_copy(tmp_path)
    lock = repo / "lockfiles" / "c.txt"
    lines = lock.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if line.startswith("idna=="))
    lines[number] = "idna==9.9.9 \\\n"  # a new version, the old version's hashes below it
    lock.write_text("".join(lines))
    expected = f"line {number + 1} (package idna): idna==9.9.9"
    report = check_lock(get_track("c"), lock_dir=repo / "lockfiles", pyproject=repo / "pyproject.toml")
    assert report.hand_edited and any(expected in p for p in report.problems), report.problems
    if not engine.running():
        pytest.skip("no Docker engine: the refusal is checked on the lock above; the build needs an engine")
    before = len(engine.client().images.list())
    with pytest.raises(HostError) as refused:
        build("c", repo=repo, write_env=False, tag="grpolab-test:hand-edited")
    assert expected in str(refused.value) and "invoke lock --track c" in str(refused.value)
    assert engine.image_or_none("grpolab-test:hand-edited") is None and len(engine.client().images.list()) == before


# ------------------------------------------------------------------------- runs/ read-only, the cache unwritable
@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only filesystem, which even root can't write: runs/ mounted read-only."""
    yield from mounted_tmpfs(tmp_path / "read-only", "ro,size=64k", "this user can't mount a read-only tmpfs")


def test_read_only_runs_folder_fails_in_the_runlog_layer_before_training(read_only_folder, tiny_model_env):
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(read_only_folder)}
    proc = subprocess.run([sys.executable, "-m", "grpolab", "smoke", "--track", "c"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == EXIT_STATUS["runlog"], proc.stdout + proc.stderr
    assert "[runlog] could not write the run log" in proc.stderr and "Read-only file system" in proc.stderr
    assert "step " not in proc.stdout  # refused before training, not after it
    assert list(read_only_folder.iterdir()) == []


def test_a_changed_tiny_model_file_is_named_with_what_to_do(tmp_path):
    """The committed model's files are checked at every load: one changed byte is refused, naming the file."""
    import shutil

    from grpolab.common.errors import LayerFailure
    from grpolab.model.tiny import tiny_model_dir, verify_tiny_model

    copy = tmp_path / "tiny-model"
    shutil.copytree(tiny_model_dir(), copy)
    assert verify_tiny_model(copy) == copy
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(LayerFailure) as failure:
        verify_tiny_model(copy)
    assert failure.value.layer == "input"
    assert f"{copy / 'model.safetensors'} has sha256" in str(
        failure.value
    ) and "git checkout -- entrypoint/tiny-model" in str(failure.value)
    (copy / "tokenizer.json").unlink()
    with pytest.raises(LayerFailure, match="tokenizer.json is missing"):
        verify_tiny_model(copy)


def test_a_model_folder_without_weights_is_refused_before_anything_loads(tmp_path, tiny_model_env):
    folder = tmp_path / "no-weights"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((REPO / "entrypoint" / "tiny-model" / name).read_bytes())
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.run(
        [sys.executable, "-m", "grpolab", "smoke", "--track", "c", "--model", str(folder)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == EXIT_STATUS["input"], proc.stdout + proc.stderr
    assert f"--model {folder}: the folder holds no weights" in proc.stderr
    assert (
        "Traceback" not in proc.stderr and "memory" not in proc.stdout.lower()
    )  # refused before the estimate and the load


EXTRACT_WITH_A_SIZE_LIMIT = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    from grpolab.common.errors import LayerFailure
    from grpolab.model.gguf import extract_converter

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))  # gguf-py's constants.py is ~237 kB
    try:
        extract_converter(Path(sys.argv[1]), Path(sys.argv[2]))
    except LayerFailure as failure:
        print(failure)
        sys.exit(failure.exit_status)
    """
)


def test_a_full_cache_while_the_gguf_converter_is_written_keeps_nothing_half_written(tmp_path):
    from grpolab.model import gguf

    sdist = gguf.HOME_CACHE / "sdist" / gguf.sdist_path(gguf.LLAMA_CPP_PYTHON_VERSION).name
    if not sdist.is_file():
        pytest.skip(f"no {sdist} here (CI keeps the lock's sdist there)")
    out = tmp_path / "cache" / "llama.cpp-converter" / gguf.LLAMA_CPP_PYTHON_VERSION
    proc = subprocess.run([sys.executable, "-c", EXTRACT_WITH_A_SIZE_LIMIT, str(sdist), str(out)], env=PYTHON_ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_STATUS["rollout"], proc.stdout + proc.stderr
    assert (
        "[rollout] could not write llama.cpp's converter into" in proc.stdout
        and "nothing half-written was kept" in proc.stdout
    )
    assert "df -h" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert list(out.parent.iterdir()) == []  # neither the converter nor its staging folder
    # without the limit the same call makes a whole converter, which is what later runs look for
    assert gguf._is_converter(gguf.extract_converter(sdist, out))


# --------------------------------------------------------- invoke build interrupted, failing, or run twice at once
def _engine_and_image(name: str):
    from hostlab.host import engine

    if not engine.running():
        pytest.skip("no Docker engine reachable (CI starts one)")
    if engine.image_or_none(name) is None:
        pytest.skip(f"no {name} image here (CI builds it with `invoke up --track c` before pytest)")


def build_copy(tmp_path: Path) -> Path:
    """A committed copy of what a build reads plus compose/, with a .env naming grpolab:c, the image last built."""
    import shutil

    from grpolab.common.tracks import get_track

    from hostlab.images.compose import compose_env, write_env_file

    _engine_and_image("grpolab:c")
    repo = committed_copy(tmp_path / "repo")
    shutil.copytree(REPO / "compose", repo / "compose")
    write_env_file(compose_env(get_track("c"), "grpolab:c"), repo / ".env")
    (repo / ".env").write_text((repo / ".env").read_text() + "HF_TOKEN=hf_user_line_kept\n")
    return repo


def build_in_a_process(repo: Path, tag: str, extra_env: dict | None = None) -> subprocess.Popen:
    from hostlab.images.standin import host_arch, standin_name

    code = (
        f"from hostlab.images.build import build; build('c', base={standin_name(host_arch())!r}, "
        "repo=__import__('pathlib')"
        f".Path({str(repo)!r}), tag={tag!r}, skip_host_check=True)"
    )
    env = {**PYTHON_ENV, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "entrypoint")]), **(extra_env or {})}
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_as_at_a_terminal,
    )


def compose_still_runs_the_last_image(repo: Path, env_before: str) -> None:
    assert (repo / ".env").read_text() == env_before
    proc = subprocess.run(
        ["docker", "compose", "run", "--rm", "-T", "--entrypoint", "sh", "lab", "-c", "echo $GRPOLAB_TRACK"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    subprocess.run(["docker", "compose", "down", "--volumes"], cwd=repo, capture_output=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "c", proc.stdout + proc.stderr


@pytest.mark.docker
def test_ctrl_c_during_invoke_build_keeps_env_naming_the_last_image(tmp_path):
    repo = build_copy(tmp_path)
    env_before = (repo / ".env").read_text()
    (repo / "entrypoint" / "grpolab" / "changed.py").write_text("# a code change: the build has a layer to make\n")
    build = build_in_a_process(repo, "grpolab-test:interrupted")
    output = read_until(
        build, lambda line: line.startswith("#") or "DONE" in line or "STEP" in line, timeout_s=300
    )  # the builder's progress: under way
    build.send_signal(signal.SIGINT)
    output += build.communicate(timeout=300)[0]
    assert build.returncode != 0, output
    compose_still_runs_the_last_image(repo, env_before)


@pytest.mark.docker
def test_a_build_failing_midway_keeps_env_naming_the_last_image(tmp_path):
    repo = build_copy(tmp_path)
    env_before = (repo / ".env").read_text()
    dockerfile = repo / "images" / "Dockerfile"
    text = dockerfile.read_text()
    dockerfile.write_text(text.replace("COPY entrypoint/", "RUN echo 'failing midway' && exit 3\nCOPY entrypoint/", 1))
    build = build_in_a_process(repo, "grpolab-test:failed")
    output = build.communicate(timeout=900)[0]
    assert build.returncode != 0 and "failing midway" in output, output
    compose_still_runs_the_last_image(repo, env_before)


@pytest.mark.docker
def test_two_builds_of_the_same_track_at_once_both_finish_whole(tmp_path):
    from hostlab.host import engine
    from hostlab.images.compose import read_env_file

    repo = build_copy(tmp_path)
    with store_held("this test, while both builds start"):  # both then wait: they take turns whatever their timing
        builds = [build_in_a_process(repo, "grpolab-test:concurrent") for _ in range(2)]
        said = [read_until(b, lambda line: "waiting for it" in line, timeout_s=300) for b in builds]
    outputs = [before + b.communicate(timeout=900)[0] for before, b in zip(said, builds)]
    failed = [out.splitlines()[-60:] for b, out in zip(builds, outputs) if b.returncode]  # the cause: at the end
    assert not failed, "\n--- the other failed build:\n".join("\n".join(lines) for lines in failed)
    assert all("is in use by this test" in before for before in said), said
    env = read_env_file(repo / ".env")
    assert env["LAB_IMAGE_NAME"] == "grpolab-test:concurrent" and env["HF_TOKEN"] == "hf_user_line_kept"
    assert env["LAB_IMAGE"] == engine.image_or_none("grpolab-test:concurrent").id  # Compose runs it by its id
    assert [p.name for p in repo.iterdir() if p.name.startswith(".env")] == [".env"]  # no temporary left
    image = engine.image_or_none("grpolab-test:concurrent")
    assert image.labels["io.grpolab.track"] == "c"
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--entrypoint",
            "python",
            "grpolab-test:concurrent",
            "-c",
            "import grpolab.common.runlog, torch; print('ok')",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip() == "ok", proc.stderr
    subprocess.run(["docker", "rmi", "-f", "grpolab-test:concurrent"], capture_output=True, timeout=600)


# ------------------------------------------------------------------- the GGUF converter's sdist: the lock's hash only
def test_the_sdist_is_fetched_only_with_the_locks_hash(monkeypatch):
    from grpolab.model import gguf

    monkeypatch.delenv(gguf.LOCK_FILE_ENV, raising=False)
    monkeypatch.setenv("GRPOLAB_TRACK", "c")
    lock_text = (REPO / "lockfiles" / "c.txt").read_text()
    (hash_,) = gguf.locked_sdist_hashes(gguf.LLAMA_CPP_PYTHON_VERSION)
    assert f"llama-cpp-python=={gguf.LLAMA_CPP_PYTHON_VERSION} \\\n    --hash=sha256:{hash_}" in lock_text


def test_a_version_the_lock_does_not_pin_is_refused_with_the_command_that_adds_it(monkeypatch, tmp_path):
    from grpolab.model import gguf
    from grpolab.common.errors import LayerFailure

    monkeypatch.setenv("GRPOLAB_TRACK", "c")
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path))
    with pytest.raises(LayerFailure) as refused:
        gguf.download_sdist("0.3.1")  # refused before pip runs: nothing lands in the cache
    assert refused.value.layer == "rollout" and "pins llama-cpp-python 0.3.36, not 0.3.1" in str(refused.value)
    assert "invoke lock --track c" in refused.value.action and "extras" in refused.value.action
    assert not (tmp_path / "sdist").exists() or list((tmp_path / "sdist").iterdir()) == []
    monkeypatch.setenv(gguf.LOCK_FILE_ENV, str(tmp_path / "no-lock.txt"))
    with pytest.raises(LayerFailure, match="only fetched with a hash from the lock"):
        gguf.download_sdist(gguf.LLAMA_CPP_PYTHON_VERSION)


def test_the_llamacpp_path_in_an_image_that_leaves_llama_cpp_out_is_refused_before_any_model_loads(
    tiny_model_env, tmp_path
):
    """The track's image leaves llama-cpp-python out (GRPOLAB_NOT_INSTALLED): `--rollout llamacpp` stops in the rollout
    layer right after the device, naming the command that builds the image with it, not after the held-out pass@1."""
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path), "GRPOLAB_NOT_INSTALLED": "llama-cpp-python"}
    proc = subprocess.run(
        [sys.executable, "-m", "grpolab", "lab", "--track", "c", "--rollout", "llamacpp", "--smoke", "never"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == EXIT_STATUS["rollout"], proc.stdout + proc.stderr
    assert "which this image leaves out" in proc.stderr and "`invoke up --rollout llamacpp`" in proc.stderr
    assert "pass@1" not in proc.stdout and "Loading weights" not in proc.stdout + proc.stderr


def test_a_hub_model_with_no_hub_is_refused_in_one_line(tmp_path):
    """No route to the Hub (here: an endpoint on loopback where nothing listens) and the model not in the cache: one
    [input] line naming both and `hf download`, not huggingface_hub's retries."""
    env = {**PYTHON_ENV, "GRPOLAB_RUNS_DIR": str(tmp_path / "runs"), "HF_HOME": str(tmp_path / "hf"),
           "HF_ENDPOINT": "http://127.0.0.1:9", "GRPOLAB_TRACK": "c"}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run([sys.executable, "-m", "grpolab", "lab", "--model", "Qwen/Qwen3-0.6B", "--smoke", "never"],
                          env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "Retry" not in out, out[-1000:]
    (failed,) = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert "is not in the Hugging Face cache here" in failed and "http://127.0.0.1:9) cannot be reached" in failed
    assert "`hf download Qwen/Qwen3-0.6B`" in out
