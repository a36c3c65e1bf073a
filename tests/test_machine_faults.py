"""Faults of files and machines, not of settings (docs/faults.md, "Faults of files and machines"): a full disk, a broken
download, a missing tool, a broken tracks table. Each through the real command line (`python -m grpolab`, the venv's
`invoke`), each a named verdict: its layer and exit status, no traceback, and what was kept. A full disk is a real
small tmpfs (root only: mounting needs CAP_SYS_ADMIN; skipped with the reason elsewhere)."""

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ENTRY_SAYING_WHAT_LOADED, read_until

from grpolab.run.diskspace import is_disk_full
from grpolab.common.errors import EXIT_STATUS
from grpolab.model.files import safetensors_problem
from grpolab.common.tracks import TRACKS_FILE

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "entrypoint" / "tiny-model"
BIN = Path(sys.executable).parent  # the venv that runs the tests: its invoke and its uv


def grpolab(args: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grpolab", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def log_lines(runs: Path) -> list[dict]:
    log = runs / "runlog.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def assert_one_verdict(proc: subprocess.CompletedProcess, layer: str, *phrases: str) -> str:
    """Exit status of `layer`, one FAILED [layer] line holding every phrase, no traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_STATUS[layer], out
    failed = [line for line in proc.stderr.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 1 and failed[0].startswith(f"FAILED [{layer}] "), out
    for phrase in phrases:
        assert phrase in proc.stderr, (phrase, out)
    assert "Traceback" not in out
    return failed[0]


def mounted_tmpfs(mount_point: Path, size: str):
    mount_point.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], capture_output=True, timeout=60
    ).returncode:
        pytest.skip(
            "this user can't mount a small tmpfs (root only); the full-disk verdict is shown where tests run as root "
            "(CI)"
        )
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True, timeout=60)


@pytest.fixture
def small_runs(tmp_path):
    """A 64 KiB filesystem for runs/: less than the tiny model's adapter."""
    yield from mounted_tmpfs(tmp_path / "small", "64k")


@pytest.fixture
def runs_to_fill(tmp_path):
    """An 8 MiB filesystem for runs/: room for the lab's writes at the start, filled by the test while it trains."""
    yield from mounted_tmpfs(tmp_path / "fills", "8m")


def fill(folder: Path) -> Path:
    """Write into `folder` until its filesystem refuses (ENOSPC): what another program would do to a shared disk."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


# ------------------------------------------------------------------------------------------ disk space
def test_a_runs_folder_without_room_is_refused_before_training_with_the_numbers(small_runs, tiny_model_env):
    env = {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(small_runs)}
    proc = grpolab(["lab", "--track", "c", "--smoke", "never", "--max-steps", "2"], env)
    line = assert_one_verdict(
        proc,
        "runlog",
        f"{small_runs} has ",
        "this run writes about",
        "adapter",
        "Nothing was trained",
        f"df -h {small_runs}",
    )
    assert "KiB (" in line and "bytes) free" in line and "it needs " in line
    assert (
        "step " not in proc.stdout and "pass@1 before" not in proc.stdout
    )  # refused before the evaluation and the training
    start, end = log_lines(small_runs)  # the start record, then the whole failed line: its room was held from the start
    assert start["record"] == "start" and (end["status"], end["failed_layer"]) == ("failed", "runlog")
    assert sorted(p.name for p in small_runs.iterdir()) == ["runlog.jsonl"]  # the line's room was given back


def lab_while_the_disk_fills(runs: Path, env: dict) -> tuple[subprocess.Popen, str]:
    """A 40-step lab into `runs`, whose disk the test fills (as another program would) once training is under way."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpolab",
            "lab",
            "--track",
            "c",
            "--smoke",
            "never",
            "--max-steps",
            "40",
            "--logging-steps",
            "1",
            "--heldout-size",
            "20",
        ],
        cwd=REPO,
        env={**env, "GRPOLAB_RUNS_DIR": str(runs)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = read_until(process, lambda line: "step    1/40" in line, timeout_s=600)  # training is under way
    assert process.poll() is None, output
    filler = fill(runs)
    rest, _ = process.communicate(timeout=600)
    filler.unlink()
    return process, output + rest


@pytest.mark.slow
def test_a_disk_filled_while_the_lab_trains_keeps_the_adapter_elsewhere_and_the_line_whole(
    runs_to_fill, tmp_path, tiny_model_env
):
    cache = tmp_path / "cache"
    process, output = lab_while_the_disk_fills(runs_to_fill, {**tiny_model_env, "GRPOLAB_CACHE_DIR": str(cache)})
    assert process.returncode == EXIT_STATUS["runlog"], output
    (run,) = [line for line in log_lines(runs_to_fill) if line.get("record") != "start"]  # whole, thanks to its room
    rescued = cache / "rescued" / run["run_id"]
    assert f"FAILED [runlog] the disk of {runs_to_fill / run['run_id']} is full (No space left on device)" in output
    assert "was free" in output and f"The trained adapter was saved to {rescued / 'adapter'} instead" in output
    assert (run["status"], run["failed_layer"], run["adapter"]) == ("failed", "runlog", str(rescued / "adapter"))
    assert run["pass_at_1_after"] is not None and len(run["steps"]) == 40
    assert safetensors_problem(rescued / "adapter" / "adapter_model.safetensors") is None  # whole, loadable
    assert (rescued / "reward.png").is_file()
    assert not (runs_to_fill / run["run_id"] / "adapter").exists()  # nothing half-written left behind
    assert "Traceback" not in output


@pytest.mark.slow
def test_a_disk_filled_with_nowhere_else_to_go_says_plainly_the_adapter_is_lost(runs_to_fill, tiny_model_env):
    """The cache and the temporary folder on the same full disk: no place takes the adapter, and the verdict says so."""
    (runs_to_fill / "tmp").mkdir()
    env = {**tiny_model_env, "GRPOLAB_CACHE_DIR": str(runs_to_fill / "cache"), "TMPDIR": str(runs_to_fill / "tmp")}
    process, output = lab_while_the_disk_fills(runs_to_fill, env)
    assert process.returncode == EXIT_STATUS["runlog"], output
    (run,) = [line for line in log_lines(runs_to_fill) if line.get("record") != "start"]
    assert "The trained adapter is lost: nothing half-written was kept in" in output
    assert (
        f"{runs_to_fill / 'cache' / 'rescued' / run['run_id']}: " in output
        and f"{runs_to_fill / 'tmp' / 'grpolab-rescued-'}" in output
    )
    assert (run["status"], run["failed_layer"], run["adapter"]) == ("failed", "runlog", None) and run[
        "pass_at_1_after"
    ] is not None
    assert "Traceback" not in output


@pytest.mark.slow
def test_the_estimate_of_what_a_lab_writes_covers_what_it_wrote(tmp_path, tiny_model_env):
    """The lab's estimate (its run-log line's disk.estimate) against every byte it left under runs/."""
    runs = tmp_path / "runs"
    proc = grpolab(
        ["lab", "--track", "c", "--smoke", "never", "--max-steps", "10", "--heldout-size", "20"],
        {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(runs)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [line for line in log_lines(runs) if line.get("record") != "start"]
    written = {path.relative_to(runs).as_posix(): path.stat().st_size for path in runs.rglob("*") if path.is_file()}
    estimate = run["disk"]["estimate"]
    adapter = sum(size for name, size in written.items() if "/adapter/" in name)
    assert 0.9 * estimate["adapter"] <= adapter <= estimate["adapter"], (
        estimate,
        written,
    )  # weights are most of it, counted exactly
    assert written[f"{run['run_id']}/reward.png"] <= estimate["plot"]
    assert written["runlog.jsonl"] <= estimate["run-log lines"]
    assert sum(written.values()) <= run["disk"]["estimated_bytes"] <= 2 * sum(written.values()), (estimate, written)


def test_a_quota_is_a_full_disk_too():
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded")) and is_disk_full(
        OSError(errno.ENOSPC, "No space left on device")
    )
    wrapped = RuntimeError(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
    )
    assert is_disk_full(wrapped)  # safetensors' own words
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))


def test_a_lora_target_the_model_lacks_still_fails_the_adapter_layer_naming_its_modules(tmp_path, tiny_model_env):
    proc = grpolab(
        ["smoke", "--track", "c", "--lora-target-modules", "query_key_value"],
        {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path)},
    )
    assert_one_verdict(proc, "adapter", "matched no module of this model", "q_proj", "down_proj")


def test_a_runs_folder_that_is_a_file_still_fails_the_runlog_layer(tmp_path, tiny_model_env):
    runs = tmp_path / "runs"
    runs.write_text("not a folder\n")
    proc = grpolab(["smoke", "--track", "c"], {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(runs)})
    assert_one_verdict(proc, "runlog", "could not write the run log", "make runs/ (or GRPOLAB_RUNS_DIR) writable")
    assert runs.read_text() == "not a folder\n"


# ------------------------------------------------------------------------------------------ model files
def model_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(TINY, folder)
    return folder


def cut_short(path: Path, keep_bytes: int) -> None:
    path.write_bytes(path.read_bytes()[:keep_bytes])


BROKEN_FILES = [  # (file, how it is broken, what the verdict says)
    (
        "model.safetensors",
        lambda p: cut_short(p, 100_000),
        "is 100,000 bytes, but its header promises 2,115,040: cut short",
    ),
    ("config.json", lambda p: cut_short(p, 40), "config.json is not valid JSON at line"),
    ("tokenizer.json", lambda p: cut_short(p, 1000), "tokenizer.json is not valid JSON at line 50, column 16"),
    ("tokenizer_config.json", lambda p: p.write_bytes(b""), "tokenizer_config.json is empty (0 bytes)"),
]


@pytest.mark.parametrize("name, breaking, said", BROKEN_FILES, ids=[case[0] for case in BROKEN_FILES])
def test_a_broken_file_in_a_model_folder_is_one_input_line_naming_it(name, breaking, said, tmp_path, tiny_model_env):
    folder = model_copy(tmp_path)
    breaking(folder / name)
    proc = grpolab(
        ["smoke", "--track", "c", "--model", str(folder)],
        {**tiny_model_env, "GRPOLAB_RUNS_DIR": str(tmp_path / "runs")},
    )
    assert_one_verdict(proc, "input", f"model {str(folder)!r} has a broken file: {folder / name}", said,
                       f"hf download ORG/NAME --local-dir {folder} --force-download")
    assert "memory" not in proc.stdout.lower()  # before the estimate and any loader


REVISION = "0123456789abcdef0123456789abcdef01234567"


def fake_hub_cache(hub: Path, source: Path = TINY, hub_id: str = "org/tiny") -> Path:
    """The Hugging Face cache's layout for `hub_id` at REVISION: models--org--name/blobs/<name>,
    snapshots/<revision>/<file>
    -> ../../blobs/<name>, refs/main. Large files (safetensors) are LFS blobs named by their sha256, the rest git blobs
    (named by git's sha1), as the Hub stores them."""
    repo = hub / ("models--" + hub_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    for folder in (repo / "blobs", repo / "refs", snapshot):
        folder.mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    for path in sorted(source.iterdir()):
        data = path.read_bytes()
        name = (
            hashlib.sha256(data).hexdigest()
            if path.suffix == ".safetensors"
            else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        )
        (repo / "blobs" / name).write_bytes(data)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / name)
    return snapshot


@pytest.fixture
def hub_env(tmp_path, tiny_model_env) -> dict:
    """A fake Hub cache holding org/tiny (the tiny model's files), offline: no Hub is reachable here."""
    return {
        **tiny_model_env,
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "HF_HUB_OFFLINE": "1",
        "GRPOLAB_RUNS_DIR": str(tmp_path / "runs"),
    }


def test_a_hub_blob_that_no_longer_matches_its_sha256_is_refused_naming_it(tmp_path, hub_env):
    snapshot = fake_hub_cache(tmp_path / "hub")
    blob = (snapshot / "model.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 1  # one flipped bit: the size and header are right, only the hash tells
    blob.write_bytes(bytes(data))
    proc = grpolab(["smoke", "--track", "c", "--model", "org/tiny"], hub_env)
    assert_one_verdict(
        proc,
        "input",
        f"{snapshot / 'model.safetensors'}: its content has sha256 {hashlib.sha256(data).hexdigest()}, not the "
        f"{blob.name}",
        "`hf download org/tiny --force-download`",
    )
    assert "memory" not in proc.stdout.lower()


def test_a_cut_short_hub_blob_and_a_broken_hub_config_are_named_with_the_download_command(tmp_path, hub_env):
    snapshot = fake_hub_cache(tmp_path / "hub")
    cut_short((snapshot / "model.safetensors").resolve(), 5000)
    (snapshot / "config.json").resolve().write_text("<html>rate limited</html>")
    proc = grpolab(["smoke", "--track", "c", "--model", "org/tiny"], hub_env)
    assert_one_verdict(
        proc,
        "input",
        "has 2 broken files",
        f"{snapshot / 'config.json'} is not valid JSON at line 1, column 1",
        f"{snapshot / 'model.safetensors'} is 5,000 bytes, but its header promises 2,115,040",
        "`hf download org/tiny --force-download`",
    )


@pytest.mark.slow
def test_a_sound_hub_model_runs_and_its_weights_are_hashed_not_taken_from_the_blob_name(tmp_path, hub_env):
    snapshot = fake_hub_cache(tmp_path / "hub")
    proc = grpolab(["smoke", "--track", "c", "--model", "org/tiny"], hub_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [line for line in log_lines(tmp_path / "runs") if line.get("record") != "start"]
    blob = (snapshot / "model.safetensors").resolve().name
    assert run["model_identity"] == {
        "name": "org/tiny",
        "weights_sha256": blob,
        "revision": REVISION,
        "source": "Hugging Face Hub",
    }


# ------------------------------------------------------------------------------------------ missing tools
def python_without_uv(tmp_path: Path) -> tuple[str, dict]:
    """This venv's packages run by its base interpreter (whose folder holds no uv), with a PATH that has no uv."""
    base = Path(os.path.realpath(sys.executable))
    assert not (base.parent / "uv").exists(), f"{base.parent} holds a uv: this test needs an interpreter without one"
    path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if not Path(p, "uv").exists())
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_relative_to(sys.prefix))
    return str(base), {"HOME": os.environ.get("HOME", "/root"), "PATH": path, "PYTHONPATH": site}


def test_uv_is_found_beside_the_running_python_when_path_has_none(tmp_path):
    if not (BIN / "uv").exists():
        pytest.skip(f"no uv in {BIN}: the test venv was made without the host tasks' packages")
    _, env = python_without_uv(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", "from hostlab.host.console import run; run(['uv', '--version'])"],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "$ uv --version" in proc.stdout and "uv 0." in proc.stdout, (
        proc.stdout + proc.stderr
    )


def test_uv_missing_beside_python_and_on_path_is_one_error_line_from_invoke(tmp_path):
    python, env = python_without_uv(tmp_path)
    proc = subprocess.run(
        [python, "-m", "invoke", "venv", "--track", "c"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert out.strip().splitlines() == [
        f"ERROR: `uv` was not found beside this Python ({Path(python).parent}) nor on PATH: it comes with the "
        "host tasks' packages (`bash images/setup-host.sh`, or `pip install uv` in the venv that runs invoke)"
    ]


def test_every_host_subprocess_of_uv_docker_debootstrap_git_is_found_by_hostlab_tools():
    """Every call in hostlab/ and tasks.py that starts a program finds it with hostlab.host.tools (`resolved`, or
    console.run
    and console.stream, which resolve), or is one of the exceptions named here with the reason."""
    import re

    exceptions = {  # (file, what the call starts): why it does not go through hostlab.host.tools
        (
            "hostlab/host/engine.py",
            "[path, ",
        ): "build_cli tries every docker CLI it finds (PATH, /usr/bin, /usr/local/bin) for one with buildx",
        (
            "hostlab/host/packages.py",
            "[path, ",
        ): "setup-host probes the Python it found on PATH and in sbin, skipping the venv's",
        (
            "hostlab/host/packages.py",
            "[docker, ",
        ): "setup-host asks the docker it found (or not) for its plugins: it installs what is missing",
        ("hostlab/host/detect.py", '["nvidia-smi"'): "track detection, only when shutil.which finds nvidia-smi",
        ("hostlab/run/lab.py", "argv"): "a lab command: the track's venv Python (lab_command)",
        ("hostlab/bench/labs.py", "argv"): "a lab command: the track's venv Python (lab_command)",
        ("hostlab/bench/projection.py", "[*shape_folder, "): "the track's venv Python, writing the shape folder",
        ("hostlab/bench/colocate.py", "[str(python), "): "the track's venv Python, writing the shape folder",
        ("hostlab/bench/colocate.py", "argv"): "a lab command: the track's venv Python (lab_command)",
        (
            "hostlab/locks/buildtools.py",
            "[python, ",
        ): "the throwaway venv's Python, asking an sdist's build backend what it needs",
        (
            "hostlab/kernels/elf.py",
            "[cuobjdump(), ",
        ): "NVIDIA's cuobjdump, from the nvidia-cuda-cuobjdump package beside this Python, else PATH",
        (
            "hostlab/images/builders/buildah.py",
            "[path, ",
        ): "detect() asks the buildah shutil.which found for its version (none found: the engine's builder)",
        (
            "hostlab/images/diff.py",
            "[diffoscope, ",
        ): "diffoscope only where shutil.which finds it (optional: without it the first differing bytes are shown)",
    }
    unresolved = []
    for path in [*sorted((REPO / "hostlab").rglob("*.py")), REPO / "tasks.py"]:
        name = path.relative_to(REPO).as_posix()
        text = path.read_text()
        for call in re.finditer(r"subprocess\.(?:run|Popen|call|check_call|check_output)\(\s*(.{0,60})", text):
            started = call[1]
            if name == "hostlab/host/console.py" or started.startswith(("resolved(", "[sys.executable")):
                continue
            if not any(name == file and started.startswith(what) for file, what in exceptions):
                unresolved.append(f"{name}: subprocess.{call[0].split('.')[1]}")
    assert unresolved == [], "start these through hostlab.host.tools.resolved (or console.run): " + "; ".join(
        unresolved
    )


# ------------------------------------------------------------------------------------------ the tracks table
def broken_tracks_table(tmp_path: Path) -> tuple[Path, int]:
    """A copy of images/tracks.toml whose [tracks.c] header was mistyped by hand."""
    lines = TRACKS_FILE.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if line.strip() == "[tracks.c]")
    lines[number] = "[tracks.c]]\n"
    path = tmp_path / "tracks.toml"
    path.write_text("".join(lines))
    return path, number + 1


@pytest.mark.parametrize("command", ["lab", "smoke"])
def test_a_broken_tracks_table_is_one_input_line_with_file_line_and_column(command, tmp_path):
    table, line = broken_tracks_table(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "entrypoint"),
        "GRPOLAB_TRACKS_FILE": str(table),
        "GRPOLAB_RUNS_DIR": str(tmp_path / "runs"),
    }
    proc = subprocess.run([sys.executable, "-c", ENTRY_SAYING_WHAT_LOADED, command, "--track", "c"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert_one_verdict(
        proc,
        "input",
        f"the tracks table {table} is not valid TOML at line {line}, column 11",
        f"fix {table} at that place",
    )
    (refused,) = log_lines(tmp_path / "runs")  # one failed line, as a broken --config gets
    assert (refused["status"], refused["failed_layer"], refused["kind"]) == ("failed", "input", command)
    assert "imported: []" in proc.stderr, (
        proc.stderr
    )  # refused before torch, transformers, datasets, TRL or PEFT loaded


def test_a_broken_tracks_table_is_one_error_line_from_invoke(tmp_path):
    table, line = broken_tracks_table(tmp_path)
    proc = subprocess.run(
        [str(BIN / "invoke"), "lock.check"],
        cwd=REPO,
        env={**os.environ, "GRPOLAB_TRACKS_FILE": str(table)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    assert out.strip().splitlines() == [
        f"ERROR: the tracks table {table} is not valid TOML at line {line}, column 11: Expected newline or end of "
        f"document after a statement; fix {table} at that place, or unset GRPOLAB_TRACKS_FILE to use images/tracks.toml"
    ]


def test_the_faults_page_names_only_tests_that_exist():
    """docs/faults.md's "Faults of files and machines" names, for each fault, the test that shows it: each is here."""
    import re

    page = (REPO / "docs" / "faults.md").read_text()
    section = page[page.index("### Faults of files and machines") :]
    named = {name for name in re.findall(r"`(test_[a-z0-9_]+)(?:\[[^\]]*\])?`", section)}
    defined = set(re.findall(r"^def (test_[a-z0-9_]+)", Path(__file__).read_text(), re.M))
    assert named and named <= defined, named - defined
