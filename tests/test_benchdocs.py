"""Benchmark results a reader can trust and find: each result under bench/ says where it came from (commit, locks,
model, machine), is the latest of its kind and case, and docs/benchmarks.md is made from exactly those results."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hostlab import HostError
from hostlab.bench.testcommand import ci_steps  # noqa: E402
from hostlab.bench.docs import (DOCS_PAGE, FIGURES_END, FIGURES_START, README, figures_block, readme_figures, render,
                                write_page)
from hostlab.bench.record import BENCH_DIR, missing_provenance, provenance, result_path, stamped_from_git, write_result
from hostlab.locks.lockfile import parse_lock

REPO = Path(__file__).resolve().parents[1]


def test_docs_benchmarks_is_made_from_the_results():
    assert DOCS_PAGE.read_text() == render(BENCH_DIR), "docs/benchmarks.md is stale: `invoke bench.docs` writes it"


def test_the_readmes_figures_are_made_from_the_results():
    """A figure typed into the README's block, or a result newer than the block, fails here."""
    assert figures_block(README.read_text()) == readme_figures(BENCH_DIR), (
        "README.md's figures are not what bench/ holds: `invoke bench.docs` writes them again (never type one)")


def test_every_result_says_where_it_came_from_and_is_kept_under_its_kind_and_case():
    results = sorted(BENCH_DIR.glob("*.json"))
    assert len(results) >= 10
    for path in results:
        record = json.loads(path.read_text())
        assert missing_provenance(record) == [], path.name
        assert path == result_path(record["kind"], record.get("case")), (
            f"{path.name} is not where its kind and case keep it"
        )
        for track, digest in record["provenance"]["locks"].items():
            assert re.fullmatch(r"[0-9a-f]{64}", digest), (path.name, track)


def test_a_result_without_provenance_is_named():
    assert missing_provenance({"kind": "lab"}) == ["commit", "tree_dirty", "locks", "models", "machine"]
    assert missing_provenance({"provenance": {"commit": "abc", "tree_dirty": False, "locks": {}, "models": {}}}) == [
        "machine"
    ]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


@pytest.fixture
def small_repo(tmp_path) -> Path:
    """A git repository with the real track c lock and the committed tiny model's weights, one commit."""
    repo = tmp_path / "repo"
    (repo / "lockfiles").mkdir(parents=True)
    (repo / "entrypoint" / "tiny-model").mkdir(parents=True)
    shutil.copy(REPO / "lockfiles" / "c.txt", repo / "lockfiles" / "c.txt")
    shutil.copy(
        REPO / "entrypoint" / "tiny-model" / "model.safetensors",
        repo / "entrypoint" / "tiny-model" / "model.safetensors",
    )
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
    first = write_result(
        "projection", {"x": 1}, ("c",), {}, case="c, in-process (host)", bench_dir=tmp_path / "b", repo=small_repo
    )
    second = write_result(
        "projection", {"x": 2}, ("c",), {}, case="c, in-process (host)", bench_dir=tmp_path / "b", repo=small_repo
    )
    assert first == second == tmp_path / "b" / "projection-c-in-process-host.json"
    assert json.loads(second.read_text())["x"] == 2 and sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        second.name
    ]


def test_a_result_stamped_after_the_fact_takes_the_commit_that_added_it(small_repo):
    (small_repo / "bench").mkdir()
    (small_repo / "bench" / "lab-20261201T000000Z.json").write_text("{}\n")
    git(small_repo, "add", ".")
    git(small_repo, "commit", "-qm", "the result")
    added, lock_then = (
        git(small_repo, "rev-parse", "HEAD"),
        parse_lock((small_repo / "lockfiles" / "c.txt").read_text()).header["body-sha256"],
    )
    lock = (small_repo / "lockfiles" / "c.txt").read_text()
    (small_repo / "lockfiles" / "c.txt").write_text(
        re.sub(r"^accelerate==\S+", "accelerate==0.0.1", lock, count=1, flags=re.M)
    )  # a later lock
    git(small_repo, "commit", "-qam", "a later lock")
    stamp = stamped_from_git(small_repo / "bench" / "lab-20261201T000000Z.json", ("c",), ("tiny",), small_repo)
    assert stamp["commit"] == added and stamp["locks"]["c"] == lock_then  # the lock as it was then, not now
    assert stamp["models"]["tiny"].startswith("fb79d1be") and stamp["machine"].startswith("not recorded")
    assert missing_provenance({"provenance": stamp}) == []
    with pytest.raises(ValueError, match="never committed"):
        stamped_from_git(small_repo / "bench" / "new.json", ("c",), (), small_repo)


# --- the README's figures from a small bench folder ------------------------------------------------------------------
MACHINE = {"cpu_model": "Example CPU", "cores": 4, "cpu_flags": ["avx2"], "memory_gib": 16.0,
           "os": "Debian GNU/Linux 13 (trixie)", "kernel": "6.1", "arch": "x86_64"}


def result(bench: Path, name: str, machine=MACHINE, **fields) -> None:
    bench.mkdir(exist_ok=True)
    record = {**fields, "provenance": {"commit": "0123456789abcdef0123456789abcdef01234567", "tree_dirty": False,
                                       "locks": {}, "models": {}, "machine": machine}}
    (bench / name).write_text(json.dumps(record))


def test_the_readme_figures_name_the_machine_and_the_day_but_no_commit(tmp_path):
    bench = tmp_path / "bench"
    result(bench, "cold-up.json", kind="cold-up", when="20270102T030405Z", total_s=201.4, goal_s=240)
    result(bench, "reproducible-c.json", kind="reproducible", case="c", when="20270103T000000Z",
           seconds=[{"total_s": 150.2}])
    figures = readme_figures(bench)
    first, second = (" ".join(item.split()) for item in figures.split("\n- "))  # each bullet as one line
    assert "**201 s**" in first and "2027-01-02, 4 cores, Example CPU, Debian GNU/Linux 13 (trixie)" in first
    assert "[bench/cold-up.json](bench/cold-up.json)" in first and "goal 240 s" in first
    # No result times the test command: it says so, and gives what is measured of it instead, not a typed figure.
    assert "not timed yet" in second and "**150 s**" in second and "2027-01-03" in second
    assert "[bench/reproducible-c.json](bench/reproducible-c.json)" in second
    assert "0123456" not in figures and all(len(line) <= 120 for line in figures.splitlines())


def test_the_first_command_figure_is_a_bare_machines_while_one_is_measured(tmp_path):
    bench = tmp_path / "bench"
    result(bench, "cold-up-bare.json", kind="cold-up", case="bare", when="20270102T000000Z", total_s=230.2,
           bare_machine=True)
    result(bench, "cold-up.json", kind="cold-up", when="20270105T000000Z", total_s=160.0, bare_machine=False)
    first = " ".join(readme_figures(bench).split("\n- ")[0].split())
    assert "**230 s**" in first and "a bare machine: the Docker engine's install included" in first
    assert "cold-up-bare.json" in first and "160" not in first
    (bench / "cold-up-bare.json").unlink()  # none measured bare: the engine-installed one, said as such
    first = " ".join(readme_figures(bench).split("\n- ")[0].split())
    assert "**160 s**" in first and "the Docker engine installed" in first


def test_the_readme_figures_take_the_newest_measured_run_of_the_test_command(tmp_path):
    bench = tmp_path / "bench"
    result(bench, "cold-up.json", machine="not recorded (stamped from git)", kind="cold-up", when="20270102T000000Z",
           total_s=201.4)
    result(bench, "ci-old.json", kind="ci", when="20270101T000000Z", command="bash .ci/run", total_s=1500)
    result(bench, "ci-new.json", kind="ci", when="20270105T000000Z", command="bash .ci/run", total_s=1071.2)
    result(bench, "ci-unrecorded.json", machine="not recorded", kind="ci", when="20270109T000000Z",
           command="invoke test", total_s=10)
    figures = readme_figures(bench)
    assert "First command: not measured yet" in figures  # one stamped from git after the fact is no current figure
    assert "Second command: **1,071 s**, 2027-01-05" in figures and "ci-new.json" in figures
    assert "not timed" not in figures and "1,500" not in figures and "**10 s**" not in figures
    # A newer run that failed is no figure for the command; the state a run was in is said beside its time.
    result(bench, "ci-failed.json", kind="ci", when="20270106T000000Z", command="bash .ci/run", total_s=300,
           exit_status=1)
    result(bench, "ci-passed.json", kind="ci", when="20270104T000000Z", command="bash .ci/run", total_s=1100,
           exit_status=0, state="a fresh clone")
    figures = " ".join(readme_figures(bench).split())
    assert "**1,071 s**, 2027-01-05" in figures and "**300 s**" not in figures
    result(bench, "ci-new.json", kind="ci", when="20270103T000000Z", command="bash .ci/run", total_s=1071.2)
    assert "Second command: **1,100 s** (a fresh clone), 2027-01-04" in " ".join(readme_figures(bench).split())


def test_the_test_command_bench_reads_the_steps_ci_run_printed():
    lines = ["noise", "[ci 0s] host setup (the README's first command)", "more", "[ci 128s] invoke test",
             "[ci 1071s] done"]
    assert ci_steps(lines) == [
        {"step": "host setup (the README's first command)", "started_at_s": 0, "seconds": 128},
        {"step": "invoke test", "started_at_s": 128, "seconds": 943},
        {"step": "done", "started_at_s": 1071, "seconds": None},
    ]


def test_write_page_rewrites_the_page_and_only_the_readmes_block(tmp_path):
    bench, page, readme = tmp_path / "bench", tmp_path / "benchmarks.md", tmp_path / "README.md"
    result(bench, "cold-up.json", kind="cold-up", when="20270102T030405Z", total_s=201.4)
    readme.write_text(f"# Title\n\nbefore\n\n{FIGURES_START}\n- First command: **5 s**, typed by hand\n"
                      f"{FIGURES_END}\n\nafter\n")
    assert write_page(bench, page, readme) == page
    assert page.read_text() == render(bench) and "| 201.4 |" in page.read_text()
    text = readme.read_text()
    assert text == f"# Title\n\nbefore\n\n{FIGURES_START}\n{readme_figures(bench)}{FIGURES_END}\n\nafter\n"
    assert "typed by hand" not in text and "**201 s**" in text
    readme.write_text("# a README without the block\n")
    with pytest.raises(HostError, match="no figures block"):
        write_page(bench, tmp_path / "other.md", readme)
    assert not (tmp_path / "other.md").exists()  # nothing written when the README cannot take the figures
