"""The test command leaves a learner's checkout as it found it (hostlab/ci/checkout.py): `.env` put back byte for
byte, the labs it starts writing into a runs folder of their own, and a change to runs/ or to git's files failing it
by name. `invoke test` runs inside checkout_kept, so every CI run checks the real thing; this tests the guard."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hostlab import HostError  # noqa: E402
from hostlab.ci.checkout import TEST_RUNS, checkout_kept  # noqa: E402
from hostlab.host.runs import image_runs_dir  # noqa: E402


def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    (repo / "runs").mkdir(parents=True)
    (repo / "runs" / "runlog.jsonl").write_text('{"kind": "lab"}\n')
    (repo / "tracked.txt").write_text("as committed\n")
    (repo / ".gitignore").write_text(".env\n/runs/\n")
    for command in (["init", "-q"], ["add", "tracked.txt", ".gitignore"], ["-c", "user.name=t", "-c", "user.email=t@t",
                                                                        "commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, timeout=60)
    (repo / ".env").write_text("LAB_IMAGE=sha256:" + "4" * 64 + "\n")
    return repo


def test_env_is_put_back_and_the_labs_write_elsewhere(tmp_path):
    repo = checkout(tmp_path)
    before = (repo / ".env").read_bytes()
    around = {name: os.environ.get(name) for name in ("GRPOLAB_HOST_RUNS_DIR", "GRPOLAB_RUNS_DIR")}  # CI sets them
    with checkout_kept(repo) as runs:
        assert runs == TEST_RUNS and image_runs_dir() == TEST_RUNS == Path(os.environ["GRPOLAB_RUNS_DIR"])
        (repo / ".env").write_text("LAB_IMAGE=grpolab:c\n")  # what a build in the test command writes
        (runs / "runlog.jsonl").write_text('{"kind": "smoke"}\n')
    assert (repo / ".env").read_bytes() == before
    assert {name: os.environ.get(name) for name in around} == around


def test_a_change_to_runs_or_to_gits_files_fails_it_by_name(tmp_path):
    repo = checkout(tmp_path)
    with pytest.raises(HostError, match=r"runs/: runlog.jsonl"):
        with checkout_kept(repo):
            with (repo / "runs" / "runlog.jsonl").open("a") as log:
                log.write('{"kind": "lab"}\n')
    repo = checkout(tmp_path / "again")
    with pytest.raises(HostError, match=r"files: tracked.txt, untracked.txt"):
        with checkout_kept(repo):
            (repo / "tracked.txt").write_text("changed\n")
            (repo / "untracked.txt").write_text("new\n")


def test_a_missing_env_stays_missing(tmp_path):
    repo = checkout(tmp_path)
    (repo / ".env").unlink()
    with checkout_kept(repo):
        (repo / ".env").write_text("LAB_IMAGE=grpolab:c\n")
    assert not (repo / ".env").exists()
