"""Benchmark results a reader can trust and find: each result under bench/ says where it came from (commit, locks,
model, machine), is the latest of its kind and case, and docs/benchmarks.md is made from exactly those results."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hostlab.bench.docs import DOCS_PAGE, render
from hostlab.bench.record import BENCH_DIR, missing_provenance, provenance, result_path, stamped_from_git, write_result
from hostlab.locks.lockfile import parse_lock

REPO = Path(__file__).resolve().parents[1]


def test_docs_benchmarks_is_made_from_the_results():
    assert DOCS_PAGE.read_text() == render(BENCH_DIR), "docs/benchmarks.md is stale: `invoke bench --docs` writes it again"


def test_every_result_says_where_it_came_from_and_is_kept_under_its_kind_and_case():
    results = sorted(BENCH_DIR.glob("*.json"))
    assert len(results) >= 10
    for path in results:
        record = json.loads(path.read_text())
        assert missing_provenance(record) == [], path.name
        assert path == result_path(record["kind"], record.get("case")), f"{path.name} is not where its kind and case keep it"
        for track, digest in record["provenance"]["locks"].items():
            assert re.fullmatch(r"[0-9a-f]{64}", digest), (path.name, track)


def test_a_result_without_provenance_is_named():
    assert missing_provenance({"kind": "lab"}) == ["commit", "tree_dirty", "locks", "models", "machine"]
    assert missing_provenance({"provenance": {"commit": "abc", "tree_dirty": False, "locks": {}, "models": {}}}) == ["machine"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()  # fmt: skip


@pytest.fixture
def small_repo(tmp_path) -> Path:
    """A git repository with the real track c lock and the committed tiny model's weights, one commit."""
    repo = tmp_path / "repo"
    (repo / "lockfiles").mkdir(parents=True)
    (repo / "entrypoint" / "tiny-model").mkdir(parents=True)
    shutil.copy(REPO / "lockfiles" / "c.txt", repo / "lockfiles" / "c.txt")
    shutil.copy(REPO / "entrypoint" / "tiny-model" / "model.safetensors", repo / "entrypoint" / "tiny-model" / "model.safetensors")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    return repo


def test_provenance_names_this_commit_the_locks_body_the_weights_and_this_machine(small_repo):
    record = provenance(("c",), {"tiny": str(small_repo / "entrypoint" / "tiny-model")}, small_repo)
    assert record["commit"] == git(small_repo, "rev-parse", "HEAD") and record["tree_dirty"] is False
    assert record["locks"]["c"] == parse_lock((small_repo / "lockfiles" / "c.txt").read_text()).header["body-sha256"]
    assert record["models"]["tiny"].startswith("fb79d1be")  # the committed tiny model's weights
    machine = record["machine"]
    cpuinfo = Path("/proc/cpuinfo").read_text()
    assert machine["cpu_model"] == re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)[1].strip()
    assert machine["cores"] == len(os.sched_getaffinity(0)) and machine["memory_gib"] > 0
    assert ("avx512f" in machine["cpu_flags"]) == (" avx512f " in re.search(r"^flags\s*:(.+)$", cpuinfo, re.M)[1] + " ")
    (small_repo / "lockfiles" / "c.txt").write_text((small_repo / "lockfiles" / "c.txt").read_text() + "\n")
    assert provenance(("c",), {}, small_repo)["tree_dirty"] is True  # a change on top of the commit is said


def test_a_result_written_twice_keeps_the_latest_under_its_kind_and_case(small_repo, tmp_path):
    first = write_result("projection", {"x": 1}, ("c",), {}, case="c, in-process (host)", bench_dir=tmp_path / "b", repo=small_repo)
    second = write_result("projection", {"x": 2}, ("c",), {}, case="c, in-process (host)", bench_dir=tmp_path / "b", repo=small_repo)
    assert first == second == tmp_path / "b" / "projection-c-in-process-host.json"
    assert json.loads(second.read_text())["x"] == 2 and sorted(p.name for p in (tmp_path / "b").iterdir()) == [second.name]


def test_a_result_stamped_after_the_fact_takes_the_commit_that_added_it(small_repo):
    (small_repo / "bench").mkdir()
    (small_repo / "bench" / "lab-20261201T000000Z.json").write_text("{}\n")
    git(small_repo, "add", ".")
    git(small_repo, "commit", "-qm", "the result")
    added, lock_then = git(small_repo, "rev-parse", "HEAD"), parse_lock((small_repo / "lockfiles" / "c.txt").read_text()).header["body-sha256"]
    lock = (small_repo / "lockfiles" / "c.txt").read_text()
    (small_repo / "lockfiles" / "c.txt").write_text(re.sub(r"^accelerate==\S+", "accelerate==0.0.1", lock, count=1, flags=re.M))  # a later lock
    git(small_repo, "commit", "-qam", "a later lock")
    stamp = stamped_from_git(small_repo / "bench" / "lab-20261201T000000Z.json", ("c",), ("tiny",), small_repo)
    assert stamp["commit"] == added and stamp["locks"]["c"] == lock_then  # the lock as it was then, not now
    assert stamp["models"]["tiny"].startswith("fb79d1be") and stamp["machine"].startswith("not recorded")
    assert missing_provenance({"provenance": stamp}) == []
    with pytest.raises(ValueError, match="never committed"):
        stamped_from_git(small_repo / "bench" / "new.json", ("c",), (), small_repo)
