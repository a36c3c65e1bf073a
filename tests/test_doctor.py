"""The doctor, for real on this machine: no GPU, tokens never printed, drift since the last smoke test."""

import importlib.metadata
import json
import re

import pytest

from grpolab.doctor import doctor_report, render_report, trl_vllm_range, vllm_in_trl_range
from grpolab.fingerprint import environment_fingerprint
from grpolab.runlog import append_run

SECTIONS = ["accelerator", "torch", "packages", "disk", "huggingface token", "last smoke test"]


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GRPOLAB_TRACK", "c")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)


def section(report, name):
    return next(s for s in report["sections"] if s["name"] == name)


def test_report_on_this_machine_is_complete():
    # Not timed (the project's rule: speed is a benchmark's job). With PyPI's CUDA torch, as CI now has, the
    # fingerprint imports torch to ask for a device, which alone took over 5 s on a loaded 2-core machine.
    report = doctor_report()
    assert [s["name"] for s in report["sections"]] == SECTIONS
    for s in report["sections"]:
        assert s["status"] in ("ok", "warn", "fail") and s["summary"]
        if s["status"] != "ok":
            assert s["action"], s
    json.dumps(report)
    text = render_report(report)
    for name in SECTIONS:
        assert name in text
    fp = report["fingerprint"]
    if fp["device_type"] == "cpu":
        assert "no GPU" in section(report, "accelerator")["summary"]
    disk = section(report, "disk")
    assert disk["details"]["huggingface cache"]["free_gb"] > 0


def test_a_gpu_track_without_a_gpu_fails_with_an_action(monkeypatch):
    if environment_fingerprint()["device_type"] != "cpu":
        pytest.skip("this machine has an accelerator")
    monkeypatch.setenv("GRPOLAB_TRACK", "s")
    report = doctor_report()
    acc = section(report, "accelerator")
    assert acc["status"] == "fail" and "expects cuda" in acc["summary"]
    assert report["status"] == "fail"
    assert "->" in render_report(report)


def test_token_is_never_printed(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_DoNotPrintThis123")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_NorThisOne456")
    report = doctor_report()
    dumped = json.dumps(report) + render_report(report)
    assert "DoNotPrintThis" not in dumped and "NorThisOne" not in dumped
    tok = section(report, "huggingface token")
    assert "HF_TOKEN" in tok["summary"] and "not shown" in tok["summary"]


def test_no_token_is_reported():
    assert "no HF_TOKEN" in section(doctor_report(), "huggingface token")["summary"]


def test_no_smoke_yet_warns():
    s = section(doctor_report(), "last smoke test")
    assert s["status"] == "warn" and "grpolab smoke" in s["action"]


def test_drift_since_last_passing_smoke():
    now = environment_fingerprint()
    old = json.loads(json.dumps(now))
    old["torch_version"] = old["packages"]["torch"] = "2.12.0"
    old["driver"] = "570.1"
    append_run({"kind": "smoke", "status": "passed", "run_id": "r1", "finished_at": "2026-11-01T10:00:00Z", "fingerprint": old})
    s = section(doctor_report(), "last smoke test")
    assert s["status"] == "warn"
    assert f"torch 2.12.0 -> {now['torch_version'] or 'absent'}" in s["details"]["drift"]
    assert f"driver 570.1 -> {now['driver'] or 'absent'}" in s["details"]["drift"]
    assert "2026-11-01" in s["summary"]

    append_run({"kind": "smoke", "status": "passed", "run_id": "r2", "finished_at": "2026-11-02T10:00:00Z", "fingerprint": now})
    append_run({"kind": "smoke", "status": "failed", "run_id": "r3", "fingerprint": old})
    s = section(doctor_report(), "last smoke test")
    assert s["status"] == "ok" and s["details"]["run_id"] == "r2" and s["details"]["drift"] == []


def declared_vllm_specifiers():
    """TRL's vllm requirement, read from its metadata with a plain regex (independent of the code under test)."""
    for line in importlib.metadata.requires("trl") or []:
        m = re.match(r"vllm\s*([^;]*);.*extra\s*==\s*['\"]vllm['\"]", line)
        if m:
            return {s.strip() for s in m.group(1).split(",") if s.strip()}
    return None


def test_trl_vllm_range_from_installed_metadata():
    try:
        trl_version = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        assert trl_vllm_range() is None and vllm_in_trl_range("0.30.0") is None
        return
    declared = declared_vllm_specifiers()
    text = trl_vllm_range()
    assert set(text.split(",")) == declared
    assert text.startswith(">=")  # lower bound first
    if trl_version == "1.16.0":  # facts.md: trl 1.16.0 declares vllm>=0.22.0,<=0.31.0
        assert text == ">=0.22.0,<=0.31.0"
    for spec in declared:
        bound = re.sub(r"^[<>=!~]+", "", spec)
        if spec.startswith((">=", "<=", "==")):
            assert vllm_in_trl_range(bound) is True
            assert vllm_in_trl_range(bound + "+cu130") is True  # local build tags do not matter
    if any(s.startswith("<=") for s in declared):
        upper = next(re.sub(r"^<=", "", s) for s in declared if s.startswith("<="))
        major, minor, *_ = upper.split(".")
        assert vllm_in_trl_range(f"{major}.{int(minor) + 2}.0") is False
    if any(s.startswith(">=") for s in declared):
        assert vllm_in_trl_range("0.0.1") is False
