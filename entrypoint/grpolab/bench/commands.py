"""The measurement and proof commands, `python -m grpolab.bench COMMAND`: what the host's benchmarks (`invoke bench
...`) and CI (`invoke verl-cpu`) ask of the lab, each writing JSON or a run-log line the host reads. A learner's
`grpolab` never lists them and never loads this package. Its modules import no torch at the top, so building this
parser loads none; only verl's harness is imported when its command runs (it imports verl)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..common.errors import run_reporting_failures
from ..common.tracks import current_track_name
from .memory_cases import ALL_CASES, write_shape_folder
from .memory_cases import main as memory_bench
from .plain_trl import add_arguments as add_plain_trl_arguments
from .plain_trl import main as plain_trl
from .smoke_for_lab import smoke_before_lab

PROG = "python -m grpolab.bench"
TRACK_HELP = "the track (default: $GRPOLAB_TRACK, else c)"


def cmd_memory(args) -> int:
    return memory_bench(args.case, args.device, args.out, unified_memory=args.unified_memory,
                        predict_only=args.predict_only)


def cmd_plain_trl(args) -> int:
    return plain_trl(args)


def cmd_shape_folder(args) -> int:
    print(json.dumps({"case": args.case, "folder": write_shape_folder(args.case, args.out)}))
    return 0


def cmd_smoke_for_lab(args) -> int:
    return smoke_before_lab(args.track, args.lab_model, dict(setting.split("=", 1) for setting in args.lab_setting))


def verl_cpu_argv(args) -> list[str]:
    """The harness's own arguments: it parses them again, with overrides and --steps in any order."""
    return [str(args.bundle), "--steps", str(args.steps), *args.overrides]


def cmd_verl_cpu(args) -> int:
    from .verl_cpu_proof import main as run_on_the_cpu  # imports verl: only this command needs it

    return run_on_the_cpu(verl_cpu_argv(args))


def add_memory(sub, cases: list[str]) -> None:
    memory = sub.add_parser("memory", help="one case of the memory benchmark (`invoke bench.memory` runs them all): "
                            "a few GRPO steps under the peak-memory meter, then predicted against measured, as JSON")
    memory.add_argument("--case", required=True, choices=cases)
    memory.add_argument("--device", choices=["cpu", "cuda", "mps"], default="cpu", help="where to train (default cpu)")
    memory.add_argument("--unified-memory", action="store_true",
                        help="also log the host's MemAvailable low-water mark")
    memory.add_argument("--out", help="also write the case's JSON to this file")
    memory.add_argument("--predict-only", action="store_true",
                        help="only the estimate the case is judged against, on --device, without running it")
    # Taken so that the host builds this command as it builds a lab's; the case table names each case's track.
    memory.add_argument("--track", help="not used: each case runs on the track its row in the case table names")
    memory.set_defaults(func=cmd_memory)


def add_verl_cpu(sub) -> None:
    verl_help = ("CI's proof that an exported bundle trains (track clustercpu's environment, no GPU): verl's own "
                 "trainer on the bundle on this machine, with vLLM's CPU build on Ray; what a CPU needs is added at "
                 "run time, never written into the bundle. Then the run's run-log line, as `grpolab verl-result` "
                 "writes it, and its figures as JSON.")
    verl = sub.add_parser("verl-cpu", help=verl_help, description=verl_help)
    verl.add_argument("bundle", type=Path, help="the folder `grpolab export --engine verl` wrote")
    verl.add_argument("--steps", type=int, default=2, help="GRPO steps to train (default 2)")
    verl.add_argument("overrides", nargs=argparse.REMAINDER, help="more Hydra overrides for verl, after the CPU's")
    verl.set_defaults(func=cmd_verl_cpu)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("\n", " "))
    sub = parser.add_subparsers(dest="command", required=True)
    add_memory(sub, sorted(ALL_CASES))
    plain = sub.add_parser("plain-trl", help="plain TRL on the lab's settings, as TRL's documentation builds it; "
                           "writes its seconds per step as JSON")
    add_plain_trl_arguments(plain)
    plain.set_defaults(func=cmd_plain_trl)
    shape = sub.add_parser("shape-folder", help="a case's randomly initialised model and tokenizer saved as a model "
                           "folder; prints {case, folder} as JSON")
    shape.add_argument("--case", required=True, choices=sorted(ALL_CASES))
    shape.add_argument("--out", required=True, help="the new folder")
    shape.set_defaults(func=cmd_shape_folder)
    before = sub.add_parser("smoke-for-lab", help="the smoke test on the track's tiny model, projecting a lab on "
                            "--lab-model (its run-log line says what it measured)")
    before.add_argument("--track", default=current_track_name(), help=TRACK_HELP)
    before.add_argument("--lab-model", required=True, help="the lab's model folder")
    before.add_argument("--lab-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the lab (integers), repeatable")
    before.set_defaults(func=cmd_smoke_for_lab)
    add_verl_cpu(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """As `grpolab`'s own main: a failed layer is one FAILED line and its exit status, not a traceback."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = build_parser().parse_args(argv)
    return run_reporting_failures(lambda: args.func(args))
