"""A short lab run on the CPU with the tiny model, for real, and the smoke-before-lab drift check."""

import json
from pathlib import Path

from grpolab.run.lab import smoke_needed
from grpolab.common.runlog import append_run, read_runs
from grpolab.settings.lab_settings import resolve_settings
from grpolab.common.tracks import get_track


def test_short_lab_run_logs_everything_and_plots(short_lab):
    assert short_lab["returncode"] == 0, short_lab["stdout"][-4000:] + short_lab["stderr"][-4000:]
    out, tmp_path = short_lab["stdout"], short_lab["runs"]
    # No smoke test had passed in this runs/ folder: the lab ran one first.
    assert "running the smoke test first: no smoke test has passed" in out
    assert "max_steps" in out and "reward_weights" in out  # settings printed in full
    smoke_run, lab_run = read_runs(tmp_path / "runlog.jsonl")
    assert smoke_run["kind"] == "smoke" and smoke_run["status"] == "passed"
    # The smoke test ran the lab's own run at the smoke sizes: rollout path, rewards, dtype, model family.
    for name in ("rollout", "reward_weights", "dtype", "learning_rate", "max_completion_length", "model"):
        assert smoke_run["settings"][name] == lab_run["settings"][name], name
    assert smoke_run["settings"]["max_steps"] == 10 and smoke_run["rollout"]["path"] == lab_run["rollout"]["path"]
    assert lab_run["kind"] == "lab" and lab_run["status"] == "passed" and lab_run["track"] == "c"
    assert 0 <= lab_run["pass_at_1_before"] <= 1 and 0 <= lab_run["pass_at_1_after"] <= 1
    assert [s["step"] for s in lab_run["steps"]] == [2, 4, 6]
    assert set(lab_run["time_split_s_per_step"]) == {"generation", "reward", "update"}
    assert lab_run["time_split_s_per_step"]["generation"] > 0
    assert lab_run["peak_memory_gb_measured"] > 0 and lab_run["peak_memory_gb_predicted"] > 0
    # The smoke test ran first in the same process: the lab's own peak and baseline, not the smoke test's.
    assert (
        lab_run["runtime_baseline_gb"] > 0.1
        and lab_run["peak_memory_parts"]["peak_gb"] >= lab_run["runtime_baseline_gb"]
    )
    assert smoke_run["peak_memory_gb_measured"] > 0 and "above a runtime baseline" in out
    assert lab_run["rollout"]["path"] == "inprocess" and lab_run["rollout"]["stale"] is False
    assert lab_run["first_reward"] is not None and lab_run["seconds_per_step"] > 0
    plot = Path(lab_run["plot"])
    assert plot.exists() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (Path(lab_run["adapter"]) / "adapter_config.json").exists()
    assert "summary" in out and "pass@1" in out


def test_smoke_needed_follows_the_fingerprint(tmp_path):
    from grpolab.environment.fingerprint import environment_fingerprint

    log = tmp_path / "runlog.jsonl"
    lab = resolve_settings(get_track("c"))
    assert smoke_needed("auto", lab, log) == ["no smoke test has passed in this environment yet"]
    assert smoke_needed("never", lab, log) == []
    current = environment_fingerprint()
    passed = {
        "kind": "smoke",
        "status": "passed",
        "track": "c",
        "rollout": {"path": "inprocess"},
        "device_checked": True,
    }
    append_run({**passed, "fingerprint": current}, log)
    assert smoke_needed("auto", lab, log) == []
    assert smoke_needed("always", lab, log)
    changed = json.loads(json.dumps(current))
    changed["torch_version"] = "0.0.1"
    append_run({**passed, "fingerprint": changed}, log)
    reasons = smoke_needed("auto", lab, log)
    assert reasons and any("torch" in reason for reason in reasons)


def test_only_a_smoke_test_of_this_run_counts_as_passed_before(tmp_path):
    from grpolab.environment.fingerprint import environment_fingerprint

    log = tmp_path / "runlog.jsonl"
    lab = resolve_settings(get_track("c"))
    passed = {
        "kind": "smoke",
        "status": "passed",
        "track": "c",
        "rollout": {"path": "inprocess"},
        "device_checked": True,
        "fingerprint": environment_fingerprint(),
    }
    for differs in ({"track": "m"}, {"rollout": {"path": "llamacpp"}}, {"device_checked": False}, {"status": "failed"}):
        append_run({**passed, **differs}, log)
        assert smoke_needed("auto", lab, log), differs
    assert smoke_needed("auto", lab, log) == [
        "no smoke test has passed on track c with rollout path inprocess and the device checked"
    ]
    # A matching pass without a fingerprint is drift, not "nothing changed".
    append_run({**passed, "fingerprint": {}}, log)
    assert smoke_needed("auto", lab, log) == ["no environment fingerprint recorded by the earlier run to compare with"]
    append_run(passed, log)
    assert smoke_needed("auto", lab, log) == []
