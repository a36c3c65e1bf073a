"""`invoke bench.lab`, `bench.build`, `bench.memory` and the like: wall-clock timings and predicted against measured
peak memory, written as JSON under bench/ (benchmarks, not timed tests)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from grpolab.common.paths import TINY_MODEL_DIR
from grpolab.common.runlog import read_runs
from grpolab.common.tracks import get_track

from .. import REPO
from ..host import engine
from ..host.console import say
from ..host.runs import runlog_in
from ..host.tools import compose_command, resolved
from ..images.build import build
from ..images.builders.buildah_store import fresh_store
from ..images.compose import recorded_track
from ..images.standin import build_standin, host_arch
from ..run.lab import lab_command, lab_env
from .docs import write_page
from .record import write_result

TINY = {"tiny": str(TINY_MODEL_DIR)}  # the committed tiny model: what most benchmarks run


def _write(
    kind: str,
    record: dict,
    tracks: tuple[str, ...] = ("c",),
    models: dict[str, str | None] = TINY,
    case: str | None = None,
) -> Path:
    """One result, bench/<kind>[-<case>].json, with where it came from (hostlab.bench.record); said in full."""
    path = write_result(kind, record, tracks, models, case)
    say(path.read_text())
    say(f"wrote {path.relative_to(REPO)} and {write_page().relative_to(REPO)}")
    return path


def _timed(cmd: list[str], **kw) -> dict:
    say("$ " + " ".join(cmd))
    t = time.monotonic()
    status = subprocess.run(resolved(cmd), cwd=REPO, **kw).returncode
    return {"command": " ".join(cmd), "seconds": round(time.monotonic() - t, 1), "exit_status": status}


def _in_container() -> bool:
    """Run in the grpolab:c image when it is built and is the recorded track, else with the host's Python."""
    return engine.image_or_none("grpolab:c") is not None and recorded_track() == "c"


# What the image's entrypoint (entrypoint/container-entrypoint.sh) takes as its first word for each module it runs.
CONTAINER_WORDS = {"grpolab": [], "grpolab.bench": ["bench"]}


def _track_c_command(command: str, options: dict, extra: list[str], in_container: bool,
                     module: str = "grpolab") -> tuple[list[str], dict | None]:
    """`python -m MODULE COMMAND --track c ...`: in the image (`docker compose run lab ...`), else with the host's
    Python and the track's environment."""
    argv = lab_command(command, "c", options, extra, module)  # [python, -m, MODULE, COMMAND, ...]
    if in_container:
        return compose_command("run", "--rm", "-T", "lab", *CONTAINER_WORDS[module], *argv[3:]), None
    return argv, lab_env(get_track("c"))


def lab_bench() -> Path:
    """Smoke test and default lab on track c, wall clock including container (or interpreter) start-up."""
    in_container = _in_container()
    runs = {}
    for name, extra in (("smoke", []), ("lab", ["--smoke", "never"])):
        cmd, env = _track_c_command(name, {}, extra, in_container)
        runs[name] = _timed(cmd, env=env)
    return _write(
        "lab",
        {"track": "c", "where": "container (docker compose run)" if in_container else "host python", "runs": runs},
    )


LEARNING_SEEDS = (0, 1, 2)
RANDOM_REWARD = "random_reward=1"  # the control: a coin toss instead of the answer's check


def learning_bench() -> Path:
    """Does the lab on track c learn, and is it the reward that teaches it? The default lab (smoke test
    skipped) on 3 seeds, plus one run on seed 0 trained on a random reward: held-out pass@1 before and after
    each, read from each run's run-log line. The four runs run at once (pass@1 does not depend on it; their
    seconds per step do, so they are not timings)."""
    cases = [(f"seed {seed}", {"seed": seed}, []) for seed in LEARNING_SEEDS]
    cases.append(("random reward (control), seed 0", {"seed": 0}, ["--reward-weights", RANDOM_REWARD]))
    runs = _lab_runs(cases, at_once=len(cases))
    return _write("lab-learning", {"track": "c", "where": f"{LAB_RUNS_WHERE}, the four runs at once", "runs": runs})


STALE_SEEDS = (0, 1)
STALE_REFRESH_EVERY = (0, 10)  # never (the rollouts go stale), and every 10 steps


def stale_bench() -> Path:
    """The llama.cpp path's stale rollouts against refreshed ones: the default lab with `--rollout llamacpp`,
    never refreshed and refreshed every 10 steps, on 2 seeds: held-out pass@1, the largest policy lag and
    what a refresh costs, from each run's run-log line. One run at a time, so seconds per step are timings."""
    cases = [
        (
            f"refresh every {every or 'never'}, seed {seed}",
            {"seed": seed, "rollout": "llamacpp", "llamacpp_refresh_every": every},
            [],
        )
        for every in STALE_REFRESH_EVERY
        for seed in STALE_SEEDS
    ]
    runs = _lab_runs(cases, at_once=1)
    return _write("lab-stale", {"track": "c", "where": f"{LAB_RUNS_WHERE}, one run at a time", "runs": runs})


LAB_RUNS_WHERE = "host python (PYTHONPATH=entrypoint), the committed tiny model (entrypoint/tiny-model/)"


def _lab_runs(cases: list[tuple[str, dict, list[str]]], at_once: int, track: str = "c") -> list[dict]:
    """Each case is the default c lab (smoke test skipped) with its options and extra arguments, run on the
    host's Python with this checkout's code (the shared grpolab:c image may hold other code), `at_once` at a
    time, each with a runs folder of its own. Returns what each run's run-log line says."""
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-runs-") as tmp:
        running = []
        for index, (name, options, extra) in enumerate(cases):
            if len(running) == at_once:
                runs.append(_lab_run(*running.pop(0)))
            runs_dir = Path(tmp) / str(index)
            argv = lab_command("lab", track, {**options, "smoke": "never"}, extra)
            say(f"[{index + 1}/{len(cases)}] {name}: $ " + " ".join(argv))
            output = open(Path(tmp) / f"{index}.log", "w")  # closed with the folder
            process = subprocess.Popen(
                argv,
                cwd=REPO,
                env={**lab_env(get_track(track)), "GRPOLAB_RUNS_DIR": str(runs_dir)},
                stdout=output,
                stderr=subprocess.STDOUT,
            )
            running.append((name, argv, runs_dir, process))
        runs += [_lab_run(*run) for run in running]
    return runs


def _lab_run(name: str, argv: list[str], runs_dir: Path, process) -> dict:
    status = process.wait()
    log = runlog_in(runs_dir)
    line = json.loads(log.read_text().splitlines()[-1]) if log.exists() else {}
    say(f"{name}: exit {status}, pass@1 {line.get('pass_at_1_before')} -> {line.get('pass_at_1_after')}")
    rollout = line.get("rollout") or {}
    return {
        "case": name,
        "command": " ".join(argv),
        "exit_status": status,
        **{key: line.get(key) for key in LEARNING_FIELDS},
        **{key: line[key] for key in EXTRA_LAB_FIELDS if key in line},
        **{key: rollout.get(key) for key in ROLLOUT_FIELDS + SYNC_FIELDS if key in rollout},
    }


LEARNING_FIELDS = (
    "status",
    "pass_at_1_before",
    "pass_at_1_after",
    "first_reward",
    "last_reward",
    "seconds_per_step",
    "wall_clock_s",
    "settings",
    "model_identity",
)  # which model: its weights' sha256 (grpolab.model.identity)
ROLLOUT_FIELDS = (
    "engine",
    "stale",
    "max_lag_steps",
    "refreshes",
    "refresh_seconds_mean",
    "refresh_export_seconds_mean",
    "refresh_reload_seconds_mean",
    "initial_export_seconds",
)
SYNC_FIELDS = (
    "vllm_version",
    "vllm_build",
    "vllm_cpu_kvcache_space_gib",
    "sync_checks",
    "sync_failures",
    "sync_max_logprob_diff",
    "sync_min_stale_diff",
    "sync_probe_seconds_mean",
)
EXTRA_LAB_FIELDS = ("time_split_s_per_step", "peak_memory_gb_measured", "peak_memory_gb_predicted", "peak_memory_ratio")
COLOCATE_PATHS = ("inprocess", "vllm-colocate")


def colocate_bench() -> Path:
    """vLLM colocate on the CPU beside in-process generation: track cv's default lab (the tiny model, 120 steps,
    smoke test skipped) on each path, same settings and seed, one run at a time with this checkout's code and
    track cv's venv (vLLM's CPU build): seconds per step and its split, pass@1, peak memory, the sync checks."""
    cases = [(path, {"rollout": path, "seed": 0}, []) for path in COLOCATE_PATHS]
    runs = _lab_runs(cases, at_once=1, track="cv")
    by_path = {run["case"]: run.get("seconds_per_step") for run in runs}
    ratio = by_path["vllm-colocate"] / by_path["inprocess"] if all(by_path.values()) else None
    return _write(
        "lab-colocate",
        tracks=("cv",),
        record={
            "track": "cv",
            "where": "host python, track cv's venv (.venvs/cv, else this interpreter), one run at a time",
            "seconds_per_step": by_path,
            "colocate_over_inprocess": ratio and round(ratio, 3),
            "runs": runs,
        },
    )


# The lab against plain TRL (grpolab.bench.plain_trl) on the same model, data, rewards and settings: track c's lab at
# 40 steps, each variant in a process of its own, interleaved round by round so that a change in the machine's
# load reaches every variant alike. Seconds per step: transformers' train_runtime over the steps, for all.
VERSUS_STEPS = 40
VERSUS_ROUNDS = 3
VERSUS_VARIANTS = {
    # name: (what runs, its arguments)
    "plain TRL": ("plain", []),
    "plain TRL + meter": ("plain", ["--observers", "meter"]),
    "plain TRL + meter sampling every 20 ms": ("plain", ["--observers", "sampler"]),
    "plain TRL + step recorder": ("plain", ["--observers", "recorder"]),
    "plain TRL + step recorder + per-step checks": ("plain", ["--observers", "checks"]),
    "lab (--smoke never)": ("lab", ["--smoke", "never"]),
    "lab (smoke test first)": ("lab", ["--smoke", "always"]),
}
# Each observer's cost: a variant against the one it adds to.
VERSUS_COSTS = {
    "peak-memory meter (no sampling thread on CPU)": ("plain TRL + meter", "plain TRL"),
    "meter's 50 Hz sampling thread": ("plain TRL + meter sampling every 20 ms", "plain TRL + meter"),
    "step recorder (generation/reward/update split)": ("plain TRL + step recorder", "plain TRL"),
    "per-step checks and progress line": ("plain TRL + step recorder + per-step checks", "plain TRL + step recorder"),
    "smoke test before the lab (per step of the lab after it)": ("lab (smoke test first)", "lab (--smoke never)"),
    "the whole lab against plain TRL": ("lab (--smoke never)", "plain TRL"),
}


def _versus_run(kind: str, extra: list[str], seed: int, runs_dir: Path) -> dict:
    """One variant's run; what it measured (plain TRL's JSON, or the lab's run-log line) and its wall clock."""
    options = {"max_steps": VERSUS_STEPS, "seed": seed}
    result = runs_dir / "plain-trl.json"
    argv = (
        lab_command("plain-trl", "c", {**options, "out": result}, extra, module="grpolab.bench")
        if kind == "plain"
        else lab_command("lab", "c", options, extra)
    )
    runs_dir.mkdir(parents=True, exist_ok=True)
    env = {**lab_env(get_track("c")), "GRPOLAB_RUNS_DIR": str(runs_dir)}
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = {
        "command": " ".join(argv[1:]),
        "exit_status": proc.returncode,
        "wall_clock_s": round(time.monotonic() - started, 1),
    }
    if kind == "plain":
        return {
            **out,
            **(
                json.loads(result.read_text())
                if result.exists() and not proc.returncode
                else {"error": proc.stdout[-2000:]}
            ),
        }
    lines = read_runs(runlog_in(runs_dir))  # ended runs only: a run's start record has no figures
    lab = next((line for line in reversed(lines) if line.get("kind") == "lab"), None)
    if lab is None or proc.returncode:
        return {**out, "error": proc.stdout[-2000:]}
    smoke = next((line for line in lines if line.get("kind") == "smoke"), None)
    return {
        **out,
        "steps": len(lab.get("steps") or []) * lab["settings"]["logging_steps"],
        "train_runtime_s": lab.get("train_runtime_s"),
        "seconds_per_step": round(lab["train_runtime_s"] / VERSUS_STEPS, 4),
        "recorder": {
            "seconds_per_step": lab.get("seconds_per_step"),
            "time_split_s_per_step": lab.get("time_split_s_per_step"),
        },
        "peak_memory_gb_measured": lab.get("peak_memory_gb_measured"),
        "peak_memory_gb_predicted": lab.get("peak_memory_gb_predicted"),
        **(
            {"smoke_wall_clock_s": smoke.get("wall_clock_s"), "smoke_seconds_per_step": smoke.get("seconds_per_step")}
            if smoke
            else {}
        ),
    }


def versus_trl_bench(rounds: int = VERSUS_ROUNDS) -> Path:
    """The lab against plain TRL on the same settings, and each observer's cost (JSON under bench/)."""
    runs: dict[str, list[dict]] = {name: [] for name in VERSUS_VARIANTS}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="grpolab-versus-") as tmp:
        for round_index in range(rounds):
            for index, (name, (kind, extra)) in enumerate(VERSUS_VARIANTS.items()):
                say(f"[round {round_index + 1}/{rounds}] {name}")
                result = _versus_run(kind, extra, seed=0, runs_dir=Path(tmp) / f"{round_index}-{index}")
                say(
                    f"  {result.get('seconds_per_step', 'failed')} s/step"
                    + (f": {result['error'][-400:]}" if "error" in result else "")
                )
                runs[name].append(result)
    median = {
        name: statistics.median(r["seconds_per_step"] for r in results if "seconds_per_step" in r)
        for name, results in runs.items()
        if any("seconds_per_step" in r for r in results)
    }
    costs = {
        what: {
            "s_per_step": round(median[a] - median[b], 4),
            "ratio": round(median[a] / median[b], 3),
            "variants": [a, b],
        }
        for what, (a, b) in VERSUS_COSTS.items()
        if a in median and b in median
    }
    ratio = costs.get("the whole lab against plain TRL", {}).get("ratio")
    say(f"lab / plain TRL, seconds per step (median of {rounds}): {ratio}")
    return _write(
        "versus-trl",
        {
            "track": "c",
            "steps": VERSUS_STEPS,
            "rounds": rounds,
            "where": f"{LAB_RUNS_WHERE}, variants interleaved, one at a time",
            "basis": "seconds per step = transformers' train_runtime / steps (the lab's run-log train_runtime_s; plain "
                     "TRL's TrainOutput)",
            "median_seconds_per_step": {name: round(value, 4) for name, value in median.items()},
            "lab_over_plain_trl": ratio,
            "goal": "lab / plain TRL <= 1.05 on CPU",
            # The machine's load (1, 5, 15 min) around the runs: other jobs slow every variant alike, not their ratio.
            "load_average": {
                "before": [round(x, 2) for x in load_before],
                "after": [round(x, 2) for x in os.getloadavg()],
            },
            "observer_costs": costs,
            "runs": runs,
        },
    )


MEMORY_CASES = ("tiny-track-c", "qwen3-0.6b-shape", "qwen3-1.7b-shape")
MEMORY_TARGET = "predicted within 15% of measured: the modelled part, runtime baseline excluded and given beside it"


def _memory_case(case: str, in_container: bool) -> dict:
    """One case in a process of its own (its own baseline); its result is the JSON it writes into the runs folder."""
    name = f"memory-bench-{case}.json"
    out, host_file = (f"/work/runs/{name}", REPO / "runs" / name) if in_container else (str(REPO / "runs" / name),) * 2
    Path(host_file).unlink(missing_ok=True)
    cmd, env = _track_c_command("memory", {"case": case, "out": out}, [], in_container, module="grpolab.bench")
    say("$ " + " ".join(cmd))
    started = time.monotonic()
    proc = subprocess.run(resolved(cmd), cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    result = (
        json.loads(Path(host_file).read_text())
        if Path(host_file).exists()
        else {"case": case, "error": proc.stdout[-2000:]}
    )
    return {**result, "exit_status": proc.returncode, "seconds": round(time.monotonic() - started, 1)}


def memory_bench(cases: tuple[str, ...] = MEMORY_CASES) -> list[Path]:
    """Predicted against measured peak memory on the CPU, one result per case (bench/memory-c-CASE.json)."""
    in_container = _in_container()
    written = []
    for case in cases:
        r = _memory_case(case, in_container)
        verdict = r.get("skipped") or (
            f"ratio {r['ratio_predicted_over_measured']}" if "ratio_predicted_over_measured" in r else "failed"
        )
        say(f"{r['case']}: {verdict}")
        if "skipped" in r:  # nothing measured: the last result of that case stands
            continue
        model = {"tiny": TINY["tiny"]} if r.get("model") == "tiny" else {case: None}  # the shape cases: random weights
        written.append(
            _write(
                "memory",
                {
                    "track": "c",
                    "where": "container (docker compose run)" if in_container else "host python",
                    "target": MEMORY_TARGET,
                    **r,
                },
                models=model,
                case=f"c-{case}",
            )
        )
    return written


def build_bench() -> Path:
    """Cold build of track c on the stand-in base (no image, no build cache: BuildKit's pruned, and buildah's store,
    cache and cache mounts of the bench's own, empty), in a fresh clone (builds take their times from git), a rebuild
    after an entrypoint/-only change, and the image's size beside the size of the installed packages."""
    standin = build_standin(host_arch())
    tag = "grpolab-bench:c"
    client = engine.client()
    if engine.image_or_none(tag):
        client.images.remove(tag, force=True)
    say("pruning the BuildKit cache (uv's download cache included) for a cold build")
    subprocess.run(resolved(["docker", "builder", "prune", "--all", "--force"]), check=True, capture_output=True)
    # A base with a new image id (same files) so no layer of an image already built can be reused.
    base = "grpolab-bench:base"
    container = client.containers.create(standin, command=["true"], entrypoint=[])
    container.commit(*base.split(":"), changes=[f"LABEL io.grpolab.bench={time.time()}"])
    container.remove()
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-") as tmp:
        repo = Path(tmp) / "clone"
        subprocess.run(resolved(["git", "clone", "--quiet", str(REPO), str(repo)]), check=True)
        with fresh_store():
            cold = build("c", base=base, repo=repo, tag=tag, write_env=False, compare_record=False)
            init = repo / "entrypoint" / "grpolab" / "__init__.py"
            init.write_text(init.read_text() + f"\n# bench: entrypoint-only change {time.time()}\n")
            warm = build("c", base=base, repo=repo, tag=tag, write_env=False, compare_record=False)
    status, out = engine.run_in(tag, ["sh", "-c", "du -sb /opt/venv | cut -f1"])
    packages = int(out.strip().splitlines()[-1]) if status == 0 else None
    record = {
        "track": "c",
        "base": standin,
        "cold_build_seconds": round(cold.seconds, 1),
        "cold_build_handover_to_engine_seconds": round(cold.handover_s, 1),
        "builder": cold.builder,
        # Where the cold build's time went: uv's own account of downloading and compiling, and what it compiled.
        "cold_build_uv": [
            line.split(" ", 2)[-1].strip()
            for line in cold.log_tail
            if re.search(r"Prepared \d+ packages? in|Built \S+==", line)
        ],
        "rebuild_after_entrypoint_change_seconds": round(warm.seconds, 1),
        "image_bytes": warm.size_bytes,
        "installed_packages_bytes": packages,
        "targets": {"cold_build_seconds": 120, "rebuild_seconds": 15},
    }
    client.images.remove(tag, force=True)
    client.images.remove(base, force=True)
    return _write("build", record, models={})
