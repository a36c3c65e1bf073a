"""Shared test set-up: the package under entrypoint/ is imported from the working tree, with its committed
tiny model (entrypoint/tiny-model/), and a cache of the tests' own (.cache/tests, ignored by git)."""

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hostlab.ci.testcommand import ENGINE_FREE_ENV

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "entrypoint"))
sys.path.insert(0, str(REPO / "tests"))  # rewards_for_tests, imported by name like a user's own rewards

TEST_CACHE = REPO / ".cache" / "tests"

# The real entry point (grpolab.cli.main, as `python -m grpolab` runs it), which also says at exit which heavy
# modules the process imported (`python -c ENTRY_SAYING_WHAT_LOADED ARGS`): a refusal must come before any of them.
HEAVY = ("torch", "transformers", "datasets", "trl", "peft")
ENTRY_SAYING_WHAT_LOADED = (
    "import atexit, sys\n"
    f"atexit.register(lambda: print('imported:', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr))\n"
    "from grpolab.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The committed tiny model (entrypoint/tiny-model/), its hashes checked; the tests' cache is .cache/tests."""
    os.environ["GRPOLAB_CACHE_DIR"] = str(TEST_CACHE)
    from grpolab.model.tiny import verify_tiny_model

    return verify_tiny_model()


# `python -m grpolab` with our own package's deprecations always shown (a regex on the module the warning points at;
# -W cannot say it: its module field is matched literally, so -W default::DeprecationWarning:grpolab would miss
# grpolab.run.training). Python's defaults show DeprecationWarning only for __main__, so without it a deprecated call
# in our code (the warning points at its caller) would pass unseen; FutureWarning is shown from anywhere by default.
ENTRY_SHOWING_OUR_DEPRECATIONS = (
    "import runpy, warnings\n"
    "for category in (DeprecationWarning, PendingDeprecationWarning):\n"
    "    warnings.filterwarnings('always', category=category, module=r'grpolab(\\.|$)')\n"
    "runpy.run_module('grpolab', run_name='__main__', alter_sys=True)\n"
)


@pytest.fixture(scope="session")
def short_lab(tiny_model_path, tmp_path_factory) -> dict:
    """One real short lab on track c, trained once for every test that reads it (tests/test_lab.py, test_quiet.py):
    `grpolab lab` in a runs/ folder where no smoke test has passed, so it runs the smoke test first, then 6 steps,
    logged every 2, with our deprecations shown. Its exit status, stdout, stderr and runs/ folder."""
    runs = tmp_path_factory.mktemp("short-lab-runs")
    env = {**track_c_subprocess_env(), "GRPOLAB_RUNS_DIR": str(runs)}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            ENTRY_SHOWING_OUR_DEPRECATIONS,
            "lab",
            "--track",
            "c",
            "--max-steps",
            "6",
            "--logging-steps",
            "2",
            "--heldout-size",
            "40",
            "--train-size",
            "200",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "runs": runs}


def track_c_subprocess_env() -> dict:
    """Environment for a `python -m grpolab` subprocess on track c, with the tests' own cache."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "entrypoint"), str(REPO / "tests")]),
        "GRPOLAB_CACHE_DIR": str(TEST_CACHE),
        "GRPOLAB_TRACK": "c",
    }


@pytest.fixture
def tiny_model_env(tiny_model_path) -> dict:
    """Environment for a `python -m grpolab` subprocess on track c, with the tests' own cache."""
    return track_c_subprocess_env()


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    """A fresh runs/ folder for the run log of one test."""
    monkeypatch.setenv("GRPOLAB_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


def read_until(process: subprocess.Popen, seen, timeout_s: float) -> str:
    """What the child (stdout piped) has printed, once one of its lines makes `seen(line)` true or it has exited. A
    child that does neither within timeout_s is killed and the test fails with what it printed: a deadline, where a
    bare readline() would wait for ever on a child that hangs silently. Reads the pipe's file descriptor directly (a
    buffered readline could hold a line that select() no longer sees), so everything read so far is returned, and
    what the child prints later is left in the pipe for communicate()."""
    fd, read, deadline = process.stdout.fileno(), b"", time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left_s = deadline - time.monotonic()
            if left_s <= 0 or not selector.select(timeout=left_s):
                process.kill()
                process.wait(timeout=30)
                raise AssertionError(
                    f"waited {timeout_s:.0f} s for a line that never came; the child "
                    f"printed:\n{read.decode(errors='replace')}"
                )
            chunk = os.read(fd, 65536)
            read += chunk
            text = read.decode(errors="replace")
            if not chunk or any(seen(line) for line in text.splitlines(keepends=True) if line.endswith("\n")):
                return text


def sigint_as_at_a_terminal() -> None:
    """A Popen preexec_fn for children a test interrupts with SIGINT. A process started in a shell's background job
    (CI harnesses, `nohup ... &`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so
    the child would never see the Ctrl-C the test sends: give it the default disposition a terminal's process has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def lab_in_training(env: dict, runs: Path, steps: int = 500, timeout_s: float = 240):
    """A `grpolab lab` subprocess on track c, returned once its first training step is printed (for tests that
    interrupt or kill a run mid-training), with the output read so far."""
    process = subprocess.Popen(
        [sys.executable, "-m", "grpolab", "lab", "--track", "c", "--smoke", "never", "--max-steps", str(steps)],
        cwd=REPO,
        env={**env, "GRPOLAB_RUNS_DIR": str(runs)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_as_at_a_terminal,
    )
    return process, read_until(
        process, lambda line: "step " in line and f"/{steps}" in line, timeout_s
    )  # training under way


# `invoke test` runs the tests not marked `docker` beside its image builds, with the engine out of reach
# (hostlab.ci.testcommand: DOCKER_HOST names no socket there, ENGINE_FREE_ENV set). A test in that half that skips for
# want
# of the engine, an image, buildah or the stand-in would then run in neither half: it fails instead, asking for the
# mark.
WANTS_THE_ENGINE = re.compile(r"engine|docker|buildah|stand-in|image \S+ not built|no \S+ image here", re.IGNORECASE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (os.environ.get(ENGINE_FREE_ENV) and report.skipped and "docker" not in item.keywords):
        return
    reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
    if WANTS_THE_ENGINE.search(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} skipped ({reason}) in the half of the tests that runs without the engine, so it "
            "would run in neither half: mark it @pytest.mark.docker"
        )


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs of the test's own (root only): `tmpfs(size_mib)` is its folder, unmounted after the test. The disk
    tests' small filesystems: nothing else writes there, so free space is exact and a full disk is a real one."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []
    # Under /var/tmp, not the test's folder under /tmp: a build refuses a buildah store under /tmp (buildah 1.28 leaves
    # mount targets in the layers there: hostlab/host/disk.py, MOUNT_TARGET_TOPS).
    parent = Path(tempfile.mkdtemp(prefix="grpolab-test-tmpfs-", dir="/var/tmp"))

    def mount(size_mib: int) -> Path:
        folder = parent / f"tmpfs-{len(mounted)}"
        folder.mkdir()
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(folder)],
                              capture_output=True, timeout=120)
        if made.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "--lazy", str(folder)], capture_output=True, timeout=120)
    shutil.rmtree(parent, ignore_errors=True)

