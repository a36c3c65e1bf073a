"""Command line: grpolab {smoke,lab,estimate,doctor,report,export,serve,verl-result,export-gguf,tiny-model}. Every
setting of the lab is a flag. The benchmarks and CI's verl proof have their own entry point, `python -m grpolab.bench`,
which nothing here imports: a learner's commands never load them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from pathlib import Path

from .common.errors import EXIT_STATUS, LayerFailure, run_reporting_failures
from .common.runlog import runlog_failure
from .common.tracks import get_track
from .settings.lab_settings import ROLLOUT_PATHS, LabSettings, setting_help

EXIT_CODES_HELP = "exit status: " + ", ".join(f"{code} {layer}" for layer, code in EXIT_STATUS.items()) + ", 0 passed"


def add_settings_flags(parser: argparse.ArgumentParser, skip=("track",)) -> None:
    group = parser.add_argument_group(
        "lab settings (defaults: the lesson's, then the track's row in images/tracks.toml; "
        "every value is checked against what it allows before anything loads)"
    )
    for f in fields(LabSettings):
        if f.name in skip:
            continue
        # Text as typed: grpolab.settings.lab_settings converts and checks it with every other setting, so that a bad
        # value
        # is one line of one [input] message, not argparse's usage error.
        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            default=None,
            metavar=f.name.upper().split("_")[-1],
            help=setting_help(f.name),
        )


def settings_from(args, smoke=False, kind=None):
    """The track and its checked settings, their warnings printed. Settings that cannot run fail the input layer
    with every problem at once; for a run (`kind` lab or smoke) the refusal is also its run-log line."""
    from .settings.lab_settings import resolve_settings

    overrides = {f.name: getattr(args, f.name, None) for f in fields(LabSettings) if f.name != "track"}
    try:
        track = get_track(args.track)
        settings = resolve_settings(track, config_file=getattr(args, "config", None), overrides=overrides, smoke=smoke)
    except ValueError as error:  # SettingsRefused, UnknownTrack
        failure = LayerFailure("input", str(error), getattr(error, "action", ""))
        for warning in getattr(error, "warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
        if kind:
            from .run.record import log_refused

            given = getattr(error, "given", None) or {k: v for k, v in overrides.items() if v is not None}
            log_refused(kind, args.track, given, failure, warnings=getattr(error, "warnings", []))
        raise failure from None
    for warning in settings.warnings(kind or "lab"):
        print(f"warning: {warning}", file=sys.stderr)
    for note in settings.notes():
        print(f"note: {note}", file=sys.stderr)
    return track, settings


def require_trainer(track_name: str | None) -> None:
    """The trainer layer (the lesson's third) before anything imports it: an environment without TRL says so in one
    line, and an image built for verl (the cluster tracks': verl runs GRPO there, not TRL) says what runs in it."""
    try:
        import trl  # noqa: F401
    except ImportError:
        try:
            track = get_track(track_name)
        except ValueError:
            track = None
        if track is not None and any(i.startswith("verl") for i in track.lock_inputs):
            raise LayerFailure(
                "first_step",  # the trainer layer's status
                f"TRL is not in this image: track {track.name}'s image runs verl's GRPO trainer, not TRL's lab",
                "run verl here: `invoke verl-cpu` from the host (track clustercpu), or the bundle `invoke export "
                "--engine verl` writes (its run.sh, on a Ray cluster); for TRL's lab, `invoke up --track c` (or your "
                "GPU's track)",
            ) from None
        raise LayerFailure("first_step", "TRL is not installed in this environment, though the track's lock pins it",
                           "rebuild the image (`invoke build`) or the venv (`invoke venv`) from the lock") from None


def cmd_smoke(args) -> int:
    from .environment.fingerprint import environment_fingerprint, fingerprint_drift
    from .common.runlog import last_passing_smoke
    from .run.smoke import run_smoke

    track, settings = settings_from(
        args, smoke=True, kind="smoke"
    )  # the lesson's first-run sizes; flags given are honoured
    require_trainer(track.name)
    last = last_passing_smoke()
    if last is None:
        print("no smoke test has passed here before")
    else:
        changes = fingerprint_drift(last.get("fingerprint", {}), environment_fingerprint())
        print(
            f"since the last passing smoke test ({last.get('finished_at')}): "
            + ("; ".join(changes) if changes else "nothing changed")
        )
    run_smoke(settings, track, expect_device=args.expect_device)
    print("smoke test passed: every layer answered")
    return 0


def cmd_lab(args) -> int:
    track, settings = settings_from(args, kind="lab")
    require_trainer(track.name)
    from .run.lab import run_lab

    run_lab(settings, track, smoke=args.smoke)
    return 0


def cmd_estimate(args) -> int:
    from .memory.estimate import estimate_memory

    track, settings = settings_from(args)
    estimate = estimate_memory(
        args.model_for_estimate or settings.model,
        settings,
        device_total_gb=args.device_memory_gb,
        activations="lesson" if args.lesson_arithmetic else "shape",
    )
    print(json.dumps(estimate.as_dict(), indent=2) if args.json else estimate.render())
    return 0


def cmd_doctor(args) -> int:
    from .environment.doctor import doctor_report, render_report

    report = doctor_report(args.track, rollout=args.rollout, server_url=args.vllm_server_url)
    print(json.dumps(report, indent=2, default=str) if args.json else render_report(report, verbose=args.verbose))
    return 0


def cmd_tiny_model(args) -> int:
    from .model.tiny import FIXTURE_SHA256, rebuild_tiny_model, verify_tiny_model

    if args.rebuild:
        rebuild_tiny_model(Path(args.out or "tiny-model-rebuilt"))
        return 0
    print(
        f"tiny model: {verify_tiny_model()} (committed; model.safetensors sha256 "
        f"{FIXTURE_SHA256['model.safetensors']}, checked)"
    )
    return 0


def cmd_export(args) -> int:
    from .export.verl import export_bundle

    _, settings = settings_from(args)
    out = args.out or f"runs/export-{args.engine}"
    try:
        path = export_bundle(settings, out, engine=args.engine, nodes=args.nodes, gpus_per_node=args.gpus_per_node)
    except OSError as error:  # the bundle's folder cannot be made or written: the runs/ layer's verdict, as for a run
        left = f"; remove what this attempt left in {out} first" if Path(out).exists() else ""
        raise LayerFailure(
            "runlog",
            f"could not write the {args.engine} bundle at {error.filename or out}: {error.strerror or error}",
            f"export into a folder you can write (--out DIR){left}",
        ) from error
    print(
        f"{args.engine} bundle for {args.nodes} node(s) x {args.gpus_per_node} GPU(s): {path}\n  see {path}/README.md; "
        f"launch with {path}/ray.sh head, then {path}/ray.sh submit"
    )
    return 0


def cmd_verl_result(args) -> int:
    from .export.verl_result import METRICS_FILE, VerlResultError, record_verl_run, summary

    try:
        record = record_verl_run(
            args.bundle,
            args.metrics or args.bundle / METRICS_FILE,
            args.checkpoints,
            verl_exit_status=args.verl_exit_status,
        )
    except VerlResultError as error:  # not a bundle: nothing to record (the message says what to do)
        raise LayerFailure("input", str(error)) from None
    except OSError as error:  # the run log could not be written: the lab's own verdict for that
        raise runlog_failure(error) from error
    print(json.dumps(summary(record)))
    return 0 if record["status"] == "passed" else EXIT_STATUS[record["failed_layer"]]


def cmd_export_gguf(args) -> int:
    from .model.gguf import export_gguf
    from .model.tiny import resolve_model_name

    path = export_gguf(resolve_model_name(args.model), Path(args.out), outtype=args.outtype)
    print(f"GGUF written: {path}")
    return 0


def cmd_serve(args) -> int:
    from .rollouts.serve import check_server, display, exec_server, exposure_warning, prepare_server, serve_command
    from .model.tiny import TINY_MODEL, resolve_model_name, tiny_model_dir

    _, settings = settings_from(args)
    extra = tuple(args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args)
    if exposure_warning(args.host):
        print(exposure_warning(args.host), file=sys.stderr)
    if args.check:
        for line in check_server(args.check, resolve_model_name(settings.model), args.wait):
            print(line)
        return 0
    if args.dry_run:
        model = str(tiny_model_dir()) if settings.model == TINY_MODEL else settings.model  # not checked for a dry run
        print(display(serve_command(settings, model, args.host, args.port, args.gpu_memory_utilization, extra)))
        return 0
    argv, env, version_line = prepare_server(
        settings, resolve_model_name(settings.model), args.host, args.port, args.gpu_memory_utilization, extra
    )
    print(f"vLLM server for TRL's server mode ({version_line}); the lab connects with "
          f"--rollout vllm-server --vllm-server-url http://HOST:{args.port}")
    print("$ " + (f"CUDA_VISIBLE_DEVICES={args.gpu} " if args.gpu is not None else "") + display(argv, env), flush=True)
    exec_server(argv, gpu=args.gpu, extra_env=env)
    return 0  # not reached: the server replaced this process


def cmd_report(args) -> int:
    from .report.table import run_report

    return run_report(args.logs, out=args.out, against_lesson=args.against_lesson, every_run=args.every_run)


# One declaration per subcommand and option, flat, so that `--help` and this file read alike; the subcommands in
# groups of a function each, in the order `--help` lists them.
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpolab",
        description="The GRPO lab and its smoke test. Run `smoke` first on a new machine and after any driver or wheel "
                    "change.",
        epilog=EXIT_CODES_HELP,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add = subcommand_adder(sub)
    add_run_commands(add)
    add_doctor_and_report(add, sub)
    add_export_and_serve(add)
    add_model_commands(add)
    return parser


def subcommand_adder(sub):
    """add(name, func, help_text, settings=True, track=True): a subcommand with --track and the settings' flags."""
    from .common.tracks import TracksFileError, current_track_name, load_tracks

    try:
        tracks = "; ".join(f"{name}: {t.description}" for name, t in load_tracks().items())
    except TracksFileError as error:  # said by the command that reads the table, as an [input] line (and run-log line)
        tracks = f"unknown: {error}"
    track_help = "the track (default: $GRPOLAB_TRACK, else c): " + tracks

    def add(name, func, help_text, settings=True, track=True):
        command = sub.add_parser(name, help=help_text, description=help_text, epilog=EXIT_CODES_HELP)
        command.set_defaults(func=func)
        if track:
            command.add_argument("--track", default=current_track_name(), help=track_help)
        if settings:
            command.add_argument("--config", type=Path, help="a TOML or JSON file of lab settings (flags win over it)")
            add_settings_flags(command)
        return command

    return add


def add_run_commands(add) -> None:
    """smoke, lab and estimate."""
    from .run.lab import SMOKE_MODES

    smoke = add("smoke", cmd_smoke, "The lesson's first run on a new machine: the track's smoke model, 10 prompts, "
                "4 rollouts, 10 steps (flags given win over those sizes); one line per layer, stops at the first "
                "failure.")
    smoke.add_argument("--expect-device", choices=["cpu", "cuda", "mps"], help="override the device the track expects")
    lab = add("lab", cmd_lab, "The GRPO lab: held-out pass@1 before, GRPO with LoRA, pass@1 after; a run-log line and "
              "a reward plot in runs/.")
    lab.add_argument("--smoke", choices=SMOKE_MODES, default="auto",
                     help="run the smoke test of this run first (its rollout path, rewards, dtype; the track's smoke "
                     "model): auto (when none passed on this track and rollout path with the device checked, or the "
                     "environment drifted since), always, never")
    estimate = add("estimate", cmd_estimate, "Predict the lesson's five memory terms for a run, before starting it.")
    estimate.add_argument("--json", action="store_true", help="print JSON instead of the table")
    estimate.add_argument("--device-memory-gb", type=float,
                          help="total accelerator (or unified) memory; default: this machine's")
    estimate.add_argument("--lesson-arithmetic", action="store_true",
                          help="the update's row as the lesson counts it (whole logits plus an allowance), which "
                          "reproduces the lesson's tables")
    estimate.set_defaults(model_for_estimate=None)


def add_doctor_and_report(add, sub) -> None:
    from .report.table import add_arguments as add_report_arguments

    doctor = add("doctor", cmd_doctor, "A read-only report of every layer, without training.", settings=False)
    doctor.add_argument("--json", action="store_true",
                        help="the whole report as JSON (format: grpolab/doctor.schema.json)")
    doctor.add_argument("-v", "--verbose", action="store_true", help="the details of every item")
    doctor.add_argument("--rollout", choices=ROLLOUT_PATHS,
                        help="judge the rollout engine for this path (default: the track's)")
    doctor.add_argument("--vllm-server-url",
                        help="check that this vLLM server answers (also done when --rollout is vllm-server)")
    report_help = ("The lesson's validation table from run logs (several machines' logs merge): Markdown, CSV, plots "
                   "and one HTML page in runs/report/.")
    report = sub.add_parser("report", help=report_help, description=report_help)
    report.set_defaults(func=cmd_report)
    add_report_arguments(report)


def add_export_and_serve(add) -> None:
    """export, serve and verl-result."""
    from .rollouts.serve import DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_HOST, DEFAULT_PORT

    export = add("export", cmd_export, "Write a self-contained bundle that runs this lab on a cluster engine (verl on "
                 "Ray): data, reward module, launch commands, README.")
    export.add_argument("--engine", default="verl", help="the distributed engine (supported: verl)")
    export.add_argument("--nodes", type=int, default=1, help="machines in the Ray cluster")
    export.add_argument("--gpus-per-node", type=int, default=1, help="GPUs on each machine")
    export.add_argument("--out", help="an empty or new folder (default: runs/export-ENGINE)")
    export.set_defaults(track="cluster")
    serve = add("serve", cmd_serve, "Start `vllm serve` with the flags TRL's server mode needs (NCCL weight transfer, "
                "processed logprobs) for the lab's model; then run the lab with --rollout vllm-server. The server "
                "needs a GPU of its own.")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: this "
                       "machine only; another address lets other machines in, with no authentication: it prints what "
                       "that exposes)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"port (default {DEFAULT_PORT}, TRL's vllm_server_port)")
    serve.add_argument("--gpu",
                       help="the GPU the server takes (sets CUDA_VISIBLE_DEVICES); the trainer must use another")
    serve.add_argument("--gpu-memory-utilization", type=float, default=DEFAULT_GPU_MEMORY_UTILIZATION,
                       help=f"fraction of the server's GPU vLLM takes (default {DEFAULT_GPU_MEMORY_UTILIZATION}: the "
                       "GPU is the server's alone)")
    serve.add_argument("--dry-run", action="store_true",
                       help="print the command and exit, checking and starting nothing")
    serve.add_argument("--check", metavar="URL", help="start nothing: check the server at URL as the lab would "
                       "(health, version, /server_info, the lab's model), ask it for one completion, then send it "
                       "TRL's own request (token ids, several completions, logprobs)")
    serve.add_argument("--wait", type=float, default=240.0,
                       help="with --check: seconds to wait for /health (default 240, TRL's)")
    serve.add_argument("vllm_args", nargs=argparse.REMAINDER,
                       help="after --: more arguments for `vllm serve` (e.g. -- --enforce-eager)")
    result_help = ("A finished verl run of an exported bundle as a run-log line (kind lab, engine verl) beside the TRL "
                   "lab's in `grpolab report`: verl's step metrics, and held-out pass@1 by grpolab's evaluator before "
                   "training and with the adapter verl saved at its last step (taken out of the checkpoint by verl's "
                   "own model merger). Prints the line's figures as JSON.")
    # The bundle's settings.json names the track.
    result = add("verl-result", cmd_verl_result, result_help, settings=False, track=False)
    result.add_argument("bundle", type=Path, help="the bundle verl ran (its settings.json and held-out data are read)")
    result.add_argument("--metrics", type=Path, help="verl's file-logger output (default: BUNDLE/verl-metrics.jsonl, "
                        "where the bundle's run.sh and ray.sh have verl write it)")
    result.add_argument("--checkpoints", type=Path, help="verl's trainer.default_local_dir (default: "
                        "BUNDLE/checkpoints, where the bundle saves)")
    result.add_argument("--verl-exit-status", type=int, default=0,
                        help="verl's exit status, when it was not 0: the line records a failed run")


def add_model_commands(add) -> None:
    """export-gguf and tiny-model."""
    gguf = add("export-gguf", cmd_export_gguf, "Convert a model (a saved folder, or tiny) to GGUF for llama.cpp; the "
               "lab's llamacpp rollout path does this itself.", settings=False)
    gguf.add_argument("--model", default="tiny", help="a saved Hugging Face model folder, or tiny")
    gguf.add_argument("--out", required=True, help="the .gguf file to write")
    gguf.add_argument("--outtype", choices=["f32", "f16", "bf16"], default="f32")
    tiny = add("tiny-model", cmd_tiny_model, "Check the built-in tiny model (committed in entrypoint/tiny-model/) "
               "against its hashes; --rebuild makes it again with the recipe.", settings=False)
    tiny.add_argument("--rebuild", action="store_true", help="run the recipe (a few minutes on 2 cores) into --out and "
                      "print the hashes that tiny_model.FIXTURE_SHA256 would take")
    tiny.add_argument("--out",
                      help="with --rebuild: the new, empty folder to build into (default ./tiny-model-rebuilt)")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_reporting_failures(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
