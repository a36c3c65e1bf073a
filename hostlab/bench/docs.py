"""docs/benchmarks.md, made from the results under bench/: one section per kind, one row per case, each row with its
headline figures and where they came from (commit, lock, model, machine), linking the JSON. `invoke bench --docs`
writes it; tests/test_benchdocs.py fails when the page and the results disagree."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .record import BENCH_DIR, write_result

DOCS_PAGE = BENCH_DIR.parent / "docs" / "benchmarks.md"

# kind: (what it measures, [(column, dotted path into the result)]). A kind not listed gets a row with no figures.
HEADLINES = {
    "build": ("`invoke bench --build`: track c's image built cold, and rebuilt after a code change",
              [("cold build (s)", "cold_build_seconds"), ("rebuild (s)", "rebuild_after_entrypoint_change_seconds"), ("image (bytes)", "image_bytes")]),
    "cold-up": ("`invoke bench --cold-up`: the README's first command in a fresh clone, nothing warm (the Docker engine installed)",
                [("total (s)", "total_s"), ("set-up (s)", "parts.setup_host_s"), ("stand-in base (s)", "parts.stand_in_base_s"),
                 ("image (s)", "parts.image_build_s"), ("of it, hand-over to the engine (s)", "parts.of_it_handover_to_engine_s"),
                 ("smoke test and lab (s)", "parts.smoke_and_lab_s"),
                 ("then `invoke up --rollout llamacpp` (s)", "then_llamacpp.total_s"),
                 ("of it, llama.cpp's image (s)", "then_llamacpp.image_build_s")]),
    "lab": ("`invoke bench`: track c's smoke test and lab, start-up included",
            [("smoke (s)", "runs.smoke.seconds"), ("lab (s)", "runs.lab.seconds")]),
    "lab-learning": ("`invoke bench --learning`: held-out pass@1 before and after, 3 seeds and a random-reward control", [("runs", "runs")]),
    "lab-stale": ("`invoke bench --stale`: llama.cpp's refresh interval against pass@1", [("runs", "runs")]),
    "lab-colocate": ("`invoke bench --colocate`: vLLM colocate against in-process on the tiny model",
                     [("in-process (s/step)", "seconds_per_step.inprocess"), ("colocate (s/step)", "seconds_per_step.vllm-colocate"),
                      ("colocate / in-process", "colocate_over_inprocess")]),
    "lab-colocate-size": ("`invoke bench --colocate --case`: vLLM colocate against in-process at a real size",
                          [("colocate step / in-process", "against_inprocess.vllm-colocate.step_over_inprocess_step"),
                           ("colocate update / in-process", "against_inprocess.vllm-colocate.update_over_inprocess_update")]),
    "memory": ("`invoke bench --memory`: the memory estimate against the measured peak",
               [("predicted (GB)", "predicted.modelled_gb"), ("measured (GB)", "measured.peak_memory_gb_measured"),
                ("predicted / measured", "ratio_predicted_over_measured")]),
    "memory-lab-folder": ("the lab on a Qwen3-0.6B-shaped folder: its peak against the estimate",
                          [("predicted (GB)", "run_log_line.peak_memory_gb_predicted"), ("measured (GB)", "run_log_line.peak_memory_gb_measured")]),
    "projection": ("`invoke bench --projection [--cold] [--rounds N]`: the smoke test's projection of the lab's seconds per step against the lab",
                   [("cold", "cold"), ("projection / lab, each round", "projection_over_lab_by_round"), ("within 0.8-1.25", "rounds_within_band"),
                    ("calibration's largest share of the smoke run", "calibration_share_of_smoke_run_max"),
                    ("lab's first logged steps over its steady state (s)", "lab_first_steps_extra_s_by_round")]),
    "reproducible": ("`invoke build --check-reproducible`: a track's image built twice from nothing, compared byte for byte",
                     [("same image id", "same_image_id"), ("same layers", "same_layers"), ("image id", "image_ids.1"),
                      ("build 1 (s)", "seconds.0.build_s"), ("build 2 (s)", "seconds.1.build_s")]),
    "stock-host": ("`bash images/stock-host-check.sh`: the README's first command in a stock Debian root filesystem",
                   [("first run (s)", "first_run_s"), ("re-run (s)", "rerun_s"), ("Compose", "compose")]),
    "versus-trl": ("`invoke bench --versus-trl`: the lab against plain TRL on the same settings", [("lab / plain TRL", "lab_over_plain_trl")]),
}


def _at(record: dict, dotted: str):
    """The value at a dotted path; keys may hold dots' neighbours such as "vllm-colocate", never a dot."""
    value = record
    for key in dotted.split("."):
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):  # "seconds.0.build_s": the first
            value = value[int(key)]
            continue
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, list) and all(isinstance(item, (int, float)) or item is None for item in value):  # a figure per round
        return ", ".join("–" if item is None else str(item) for item in value)
    if isinstance(value, list):  # a list of runs: each one's case and pass@1 before -> after
        return "; ".join(f"{run.get('case')}: {run.get('pass_at_1_before')} -> {run.get('pass_at_1_after')}" for run in value)
    return str(value)


def _where(provenance: dict, host: dict | None) -> list[str]:
    machine = provenance.get("machine")
    if isinstance(machine, dict):
        machine = f"{machine.get('cpu_model')}, {machine.get('cores')} cores, {', '.join(machine.get('cpu_flags') or []) or 'no AVX2'}"
    else:  # stamped from git: all that is known is what the result's own `host` field said, if it has one
        machine = "not recorded" + (f" ({host.get('machine')}, {host.get('cpus')} cores)" if host else "")
    locks = ", ".join(f"{track} `{digest[:12]}`" for track, digest in (provenance.get("locks") or {}).items()) or "–"
    models = ", ".join(f"{name} `{digest[:12]}`" if len(digest) == 64 else name for name, digest in (provenance.get("models") or {}).items()) or "–"
    return [f"`{str(provenance.get('commit'))[:10]}`", locks, models, str(machine)]


def render(bench_dir: Path = BENCH_DIR) -> str:
    results = [(path, json.loads(path.read_text())) for path in sorted(bench_dir.glob("*.json"))]
    out = ["# Benchmark results", "",
           "Made by `invoke bench --docs` from the results in [`bench/`](../bench/): the latest of each kind and case (git keeps",
           "the ones before). Each row names the commit it was measured at, the body hash of each lock it ran on, the",
           "model's weights and the machine. A row stamped from git after the fact has no machine: it was not recorded",
           "then. What each benchmark does and why: [speed](speed.md), [memory](memory.md), [the smoke test](smoke-test.md),",
           "[rollout paths](rollout-paths.md).", ""]
    for kind in sorted({record.get("kind") for _, record in results}):
        what, columns = HEADLINES.get(kind, (kind, []))
        out += [f"## {kind}", "", what + ".", "",
                "| case | " + " | ".join(label for label, _ in columns) + (" | " if columns else "") + "measured | commit | locks | models | machine | result |",
                "|---|" + "---|" * (len(columns) + 6)]
        for path, record in results:
            if record.get("kind") != kind:
                continue
            figures = [_cell(_at(record, dotted)) for _, dotted in columns]
            out.append("| " + " | ".join([record.get("case") or "–", *figures, record.get("when", "–"), *_where(record.get("provenance") or {}, record.get("host")),
                                          f"[{path.name}](../bench/{path.name})"]) + " |")
        out.append("")
    return "\n".join(out)


def write_page(bench_dir: Path = BENCH_DIR, page: Path = DOCS_PAGE) -> Path:
    page.write_text(render(bench_dir))
    return page


def main(argv: list[str] | None = None) -> int:
    """`python -m hostlab.bench.docs KIND --case CASE [--bench-dir DIR] < result.json`: one result from a writer that is
    not Python, kept like every other (provenance, its name, and this page again when it lands in bench/)."""
    parser = argparse.ArgumentParser(prog="python -m hostlab.bench.docs", description=main.__doc__)
    parser.add_argument("kind")
    parser.add_argument("--case")
    parser.add_argument("--bench-dir", type=Path, default=BENCH_DIR, help="where the result goes (default bench/)")
    args = parser.parse_args(argv)
    try:
        record = json.load(sys.stdin)
    except json.JSONDecodeError as error:
        parser.error(f"the result on stdin is not JSON: {error}")
    path = write_result(args.kind, record, tracks=(), models={}, case=args.case, bench_dir=args.bench_dir)
    print(f"wrote {path}" + (f" and {write_page()}" if args.bench_dir.resolve() == BENCH_DIR.resolve() else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
