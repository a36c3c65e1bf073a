"""`invoke bench.projection`: the smoke test's projection of the lab's seconds per step against the lab that
follows it, pair by pair, warm or cold (the page cache dropped before each pair: a learner's first run)."""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from grpolab.common.runlog import read_runs
from grpolab.common.tracks import get_track

from .. import REPO, HostError
from ..host import engine
from ..host.console import say
from ..host.runs import runlog_in
from ..host.tools import resolved
from ..run.lab import lab_command, lab_env
from .labs import TINY, _write
from .record import result_path

# The smoke test's projection of the lab against the lab's measurement (issue 30): each case is the lab with its
# smoke test first (`--smoke always`, the smoke test in a process of its own, as a learner runs it), one case at a
# time, on this checkout's code. The figures are read from the two run-log lines the pair leaves.
PROJECTION_CASES = {
    # name: (track, options of `grpolab lab`, where: "host" (the track's venv) or "image" (grpolab:TRACK))
    "c, in-process (image)": ("c", {}, "image"),
    "c, in-process (host)": ("c", {}, "host"),
    "c, llamacpp (host)": ("c", {"rollout": "llamacpp"}, "host"),
    "cv, vLLM colocate (image)": ("cv", {}, "image"),
    "cv, vLLM colocate (host, track cv's venv)": ("cv", {}, "host"),
}
# A lab on a Qwen3-0.6B-shaped folder projected from the tiny model's smoke test: the smoke test runs on the
# tiny model and is told the lab it stands before (the track rows of s, x, n do this with smoke_model); the lab
# is a short one on the folder, at a step size that 2 cores run in minutes.
SHAPE_CASE = "c, in-process, Qwen3-0.6B-shaped folder projected from the tiny model (host)"
SHAPE_LAB = {
    "num_generations": 4,
    "per_device_train_batch_size": 8,
    "max_steps": 4,
    "logging_steps": 1,
    "train_size": 16,
    "heldout_size": 1,
}


def _cpu_seconds(before) -> dict:
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "user_cpu_s": round(after.ru_utime - before.ru_utime, 1),
        "kernel_cpu_s": round(after.ru_stime - before.ru_stime, 1),
    }


def _image_command(track: str, argv: list[str], runs_dir: Path) -> list[str]:
    """`grpolab ...` in the grpolab:TRACK image, with this checkout's entrypoint/ over the image's (the image's
    environment, this checkout's code) and the runs folder mounted."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    return [
        "docker",
        "run",
        "--rm",
        "--user",
        f"{os.getuid()}:{os.getgid()}",
        "-v",
        f"{REPO / 'entrypoint'}:/opt/grpolab/entrypoint:ro",
        "-v",
        f"{runs_dir}:/work/runs",
        f"grpolab:{track}",
        *argv[3:],
    ]


def _pair_commands(name: str, track: str, options: dict, runs_dir: Path, where: str, env: dict) -> list[list[str]]:
    """The learner's commands of one pair: `grpolab lab --smoke always` (in the image for `where` "image"), or for
    the shape case the tiny model's smoke test projecting a lab on a random Qwen3-0.6B-shaped folder, then that lab."""
    commands = [lab_command("lab", track, {**options, "smoke": "always"}, [])]
    if where == "image":
        commands = [_image_command(track, commands[0], runs_dir)]
    if name == SHAPE_CASE:
        folder = runs_dir / "qwen3-0.6b-shape"
        shape_folder = [commands[0][0], "-m", "grpolab.bench", "shape-folder", "--case", "qwen3-0.6b-shape"]
        subprocess.run([*shape_folder, "--out", str(folder)], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        sizes = [word for key, value in SHAPE_LAB.items() for word in ("--lab-setting", f"{key}={value}")]
        commands = [
            lab_command("smoke-for-lab", track, {"lab_model": folder}, sizes, module="grpolab.bench"),
            lab_command("lab", track, {**SHAPE_LAB, "model": folder, "smoke": "never"}, []),
        ]
    return commands


def _run_pair_command(name: str, argv: list, env: dict, runs_dir: Path, first: bool, out: dict) -> int:
    """One command of a pair, timed, its record appended to out["commands"]; its exit status."""
    say(f"{name}: $ " + " ".join(str(a) for a in argv))
    started_unix_s, started = time.time(), time.monotonic()
    used_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        resolved([str(a) for a in argv]), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if first:  # the smoke test's part of the learner's command, start-up and imports included: to its run's end
        smokes = [line for line in read_runs(runlog_in(runs_dir)) if line.get("kind") == "smoke"]
        smoke_end = smokes[-1].get("finished_at_unix_s") if smokes else None
        out["smoke_part_of_command_s"] = round(smoke_end - started_unix_s, 1) if smoke_end else None
    out["commands"].append({
        "command": " ".join(str(a) for a in argv[1:]),
        "wall_clock_s": round(time.monotonic() - started, 1),
        "exit_status": proc.returncode,
        # CPU seconds in the command's own processes (not a container's: those are the engine's), user and kernel:
        # a kernel share far above the user's says memory work (page faults), not the model, took the time.
        **_cpu_seconds(used_before),
    })
    if proc.returncode:
        out.update(exit_status=proc.returncode, error=proc.stdout[-2000:])
    return proc.returncode


def _projection_pair(name: str, track: str, options: dict, runs_dir: Path, where: str = "host") -> dict:
    """One smoke-then-lab pair: the lab's measured seconds per step over the smoke test's projection of them."""
    env = {**lab_env(get_track(track)), "GRPOLAB_RUNS_DIR": str(runs_dir)}
    commands = _pair_commands(name, track, options, runs_dir, where, env)
    out = {"case": name, "commands": [], "exit_status": 0}
    for n, argv in enumerate(commands):
        if _run_pair_command(name, argv, env, runs_dir, n == 0, out):
            return out
    lines = read_runs(runlog_in(runs_dir))
    smoke = next((line for line in reversed(lines) if line.get("kind") == "smoke"), {})
    lab = next((line for line in reversed(lines) if line.get("kind") == "lab"), {})
    out.update(_pair_figures(smoke, lab, out.get("smoke_part_of_command_s")))
    say(f"{name}: projected {out['projected_lab_seconds_per_step']} s/step, the lab measured "
        f"{out['lab_seconds_per_step']}: x{out['projection_over_lab']}")
    return out


def _ratio(over: float | None, under: float | None) -> float | None:
    return round(over / under, 3) if over and under else None


def _pair_figures(smoke: dict, lab: dict, smoke_part_of_command_s: float | None) -> dict:
    """What a pair measured, from its two run-log lines: the projection against the lab, and the calibration's cost."""
    noted = smoke.get("before_scaling_up") or {}
    calibration = smoke.get("calibration") or {}
    projected, measured = noted.get("projected_lab_seconds_per_step"), lab.get("seconds_per_step")
    cost, smoke_run = calibration.get("cost_s"), smoke.get("wall_clock_s")
    settings = lab.get("settings") or {}
    return {
        "projected_lab_seconds_per_step": projected,
        "lab_seconds_per_step": measured,
        "projection_over_lab": _ratio(projected, measured),
        "within_25_percent": bool(projected and measured and 0.8 <= projected / measured <= 1.25),
        # The two parts apart: the steady state (the calibration's median against the lab's, each after its first
        # step) and the first step's cost over it (projected from the calibration's, against the lab's own).
        "projected_steady_seconds_per_step": noted.get("projected_lab_steady_seconds_per_step"),
        "lab_steady_seconds_per_step": lab.get("steady_seconds_per_step"),
        "steady_projection_over_lab": _ratio(noted.get("projected_lab_steady_seconds_per_step"),
                                             lab.get("steady_seconds_per_step")),
        "projected_first_use_s": noted.get("projected_lab_first_use_s"),
        "lab_first_steps_extra_s": lab.get("first_steps_extra_s"),
        "smoke_before_scaling_up": noted,  # what the smoke test's summary printed, as its run-log line keeps it
        "projection": noted.get("projection"),
        "model_size_s_per_step": noted.get("model_size_s_per_step"),
        "size_probe": calibration.get("size_probe"),
        "calibration": calibration,
        "calibration_cost_s": cost,
        "smoke_run_wall_clock_s": smoke_run,
        # What the calibration adds to the smoke test: its cost over the rest of the smoke run (imports not counted),
        # and over the rest of the smoke test's part of the learner's command (interpreter, imports, container start).
        "calibration_share_of_smoke_run": (
            round(cost / (smoke_run - cost), 3) if cost is not None and smoke_run else None
        ),
        "smoke_part_of_command_s": smoke_part_of_command_s,
        "calibration_share_of_smoke_command": (
            round(cost / (smoke_part_of_command_s - cost), 3) if cost is not None and smoke_part_of_command_s else None
        ),
        "smoke_peak_memory_gb_measured": noted.get("peak_memory_gb_measured"),
        "smoke_peak_memory_gb_predicted": noted.get("peak_memory_gb_predicted"),
        "smoke_peak_memory_ratio": noted.get("peak_memory_ratio"),
        "lab_peak_memory_gb_measured": lab.get("peak_memory_gb_measured"),
        "lab_peak_memory_gb_predicted": lab.get("peak_memory_gb_predicted"),
        "lab_time_split_s_per_step": lab.get("time_split_s_per_step"),
        "lab_wall_clock_s": lab.get("wall_clock_s"),
        # Every logged step of both runs: where a projection and the lab's mean part, these say which steps did.
        "lab_step_seconds": [step.get("seconds") for step in lab.get("steps") or []],
        "smoke_step_seconds": [step.get("seconds") for step in smoke.get("steps") or []],
        "lab_settings": {key: settings.get(key) for key in LAB_SETTINGS_KEPT},
    }


LAB_SETTINGS_KEPT = ("model", "rollout", "per_device_train_batch_size", "num_generations", "max_completion_length",
                     "max_steps")


def projection_bench(cases: tuple[str, ...] | None = None, cold: bool = False, rounds: int = 1) -> list[Path]:
    """Each smoke-then-lab pair of PROJECTION_CASES (and SHAPE_CASE), one at a time: the smoke test's projection of
    the lab's seconds per step over the lab's measurement, the goal 0.8-1.25; what the calibration cost; the smoke
    test's peak at the calibration's shape against its estimate (JSON under bench/, one file per case and
    cold or warm). `rounds` pairs per case; `cold`: the page cache dropped before each (root only)."""
    names = tuple(projection_case(case) for case in cases) if cases else (*PROJECTION_CASES, SHAPE_CASE)
    if cold:
        check_can_drop_page_cache()
    written = []
    for name in names:
        track, options, where = PROJECTION_CASES.get(name, ("c", {}, "host"))
        if where == "host" and track == "cv" and not (REPO / ".venvs" / "cv" / "bin" / "python").exists():
            say(
                f"{name}: skipped, no track cv venv here: `invoke venv --track cv` makes it"
            )  # the last result of that case stands
            continue
        if where == "image" and engine.image_or_none(f"grpolab:{track}") is None:
            say(f"{name}: skipped, no grpolab:{track} image here: `invoke build --track {track}` makes it")
            continue
        load_before = os.getloadavg()
        pairs = []
        for round_ in range(rounds):
            with tempfile.TemporaryDirectory(prefix="grpolab-projection-") as tmp:
                if cold:  # what a learner meets first: nothing of the lab's libraries, model or data in memory
                    drop_page_cache()
                say(f"{name}: round {round_ + 1} of {rounds}{', page cache dropped' if cold else ''}")
                pairs.append(_projection_pair(name, track, options, Path(tmp), where))
        case = f"{name}, cold" if cold else name  # its own file beside the warm result: bench/projection-CASE-cold.json
        if not any(pair.get("projection_over_lab") for pair in pairs):  # nothing measured: the last result stands
            first_error = next(
                (pair.get("error") for pair in pairs if pair.get("error")), "no projection in the run log"
            )
            raise HostError(
                f"{name}: no round measured a projection, so {result_path('projection', case).name} is left as it was; "
                f"the first round's command exited {pairs[0].get('exit_status')}:\n{first_error}"
            )
        record = {
            "case": case,
            "cold": cold,
            "where": "host python (PYTHONPATH=entrypoint) with each track's venv, or the track's image with this "
                     "checkout's entrypoint/ mounted (a new container each command); one pair at a time",
            "goal": GOAL,
            "load_average": {
                "before": [round(x, 2) for x in load_before],
                "after": [round(x, 2) for x in os.getloadavg()],
            },
            **rounds_summary(pairs),
            "rounds": pairs,
        }
        models = {**TINY, "qwen3-0.6b-shape": None} if name == SHAPE_CASE else TINY
        written.append(_write("projection", record, tracks=(track,), models=models, case=case))
    return written


def projection_case(wanted: str) -> str:
    """A case of PROJECTION_CASES or SHAPE_CASE by its name or its result file's ("c, in-process (image)" or
    "c-in-process-image", as in bench/projection-c-in-process-image.json). Anything else is refused before a pair runs:
    a misspelt case once ran track c on the host under the name given and wrote its result over the file named."""
    names = (*PROJECTION_CASES, SHAPE_CASE)
    by_file_name = {result_path("projection", name).stem.removeprefix("projection-"): name for name in names}
    if wanted in names:
        return wanted
    if wanted in by_file_name:
        return by_file_name[wanted]
    raise HostError(f"no projection case {wanted!r}: the cases are {', '.join(by_file_name)}")


GOAL = (
    "projection / the lab's measured seconds per step within 0.8-1.25 in every round, cold (page cache dropped before "
    "each pair) "
    "and warm; the calibration adds at most 20 % to the rest of the smoke test"
)


def rounds_summary(pairs: list[dict]) -> dict:
    """The headline figures over a case's rounds: each round's projection over the lab, how many were within
    0.8-1.25, and the calibration's largest share of the smoke run."""
    ratios = [pair.get("projection_over_lab") for pair in pairs]
    shares = [
        pair.get("calibration_share_of_smoke_run")
        for pair in pairs
        if pair.get("calibration_share_of_smoke_run") is not None
    ]
    within = sum(1 for pair in pairs if pair.get("within_25_percent"))
    return {
        "projection_over_lab_by_round": ratios,
        "rounds_within_band": f"{within} of {len(pairs)}",
        "all_within_band": within == len(pairs) and bool(pairs),
        "calibration_share_of_smoke_run_max": max(shares) if shares else None,
        "lab_first_steps_extra_s_by_round": [pair.get("lab_first_steps_extra_s") for pair in pairs],
        "projected_first_use_s_by_round": [
            (pair.get("smoke_before_scaling_up") or {}).get("projected_lab_first_use_s") for pair in pairs
        ],
    }


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def check_can_drop_page_cache() -> None:
    if not os.access(DROP_CACHES, os.W_OK):
        raise HostError(
            f"--cold drops the page cache before each pair (sync; echo 3 > {DROP_CACHES}), which needs root: "
            "run it as root (sudo -E env PATH=$PATH invoke bench.projection --cold), or without --cold for the warm "
            "case"
        )


def drop_page_cache() -> None:
    os.sync()
    DROP_CACHES.write_text("3\n")
