"""The words of docs/kernels.md on which GPUs each image runs on, made from the committed kernels tables
(lockfiles/<track>.kernels.json): `invoke kernels.readme` prints the section to paste there, and
tests/test_kernels.py checks that docs/kernels.md holds exactly it and README.md's track table the cells."""

from __future__ import annotations

from pathlib import Path

from grpolab.common.gpucode import CARDS, JIT, NATIVE, NONE, load_table, needed_by, table_path

from ..locks.lockfile import LOCK_DIR

SECTION_TITLE = "## Which GPUs each image runs on"
TRACKS = ("s", "n", "cluster")  # the tracks with a GPU lock here (x's is made elsewhere: no table yet)
SHORT = {NATIVE: "native", JIT: "JIT", NONE: "**none**"}


def tables(lock_dir: Path = LOCK_DIR) -> dict[str, dict]:
    return {t: table for t in TRACKS if (table := load_table(table_path(t, lock_dir))) is not None}


def short_name(path: str) -> str:
    return path.rsplit("/", 1)[-1].split(".")[0]


def gpu_cell(table: dict) -> str:
    """One cell of README.md's track table: the cards whose GPU the default rollout path runs on."""
    needed = [lib for lib in table["libraries"] if lib["needed_by_default_rollout"]]
    runs, jit, none, jit_libraries = [], [], [], set()
    for gpu in table["gpus"]:
        used = [lib for lib in needed if needed_by(lib["path"], table["rollout"], gpu)]
        verdicts = {lib["verdicts"][gpu] for lib in used}
        jit_libraries |= {
            short_name(lib["path"]) for lib in used if lib["verdicts"][gpu] == JIT and NONE not in verdicts
        }
        name = CARDS.get(gpu, gpu).split(",")[0]
        (none if NONE in verdicts else jit if JIT in verdicts else runs).append(name)
    parts = []
    if runs:
        parts.append("native: " + ", ".join(runs))
    if jit:
        parts.append(
            "native but "
            + ", ".join(f"`{n}`" for n in sorted(jit_libraries))
            + " by JIT at first use: "
            + ", ".join(jit)
        )
    if none:
        parts.append("no code: " + ", ".join(none))
    return "; ".join(parts)


def track_section(track: str, table: dict) -> list[str]:
    needed = [lib for lib in table["libraries"] if lib["needed_by_default_rollout"]]
    others = [lib for lib in table["libraries"] if not lib["needed_by_default_rollout"]]
    header = (
        "| GPU | "
        + " | ".join(f"`{short_name(lib['path'])}`" for lib in needed)
        + " | other libraries with GPU code: native / JIT / none |"
    )
    lines = [
        f"### Track `{track}` ({table['platform']})",
        "",
        f"torch built for CUDA {table['torch_cuda']}: NVIDIA driver {table['driver_minimum']} or newer. "
        f"{table['wheels_read']} binary wheels, {table['shared_objects']} shared objects, {len(table['libraries'])} "
        "with GPU code; "
        + (
            "every library they link resolves "
            if not table["unresolved"]
            else f"{len(table['unresolved'])} linked libraries do not resolve "
        )
        + f"(host's driver: {', '.join(f'`{n}`' for n in table['host_driver_libraries']) or 'nothing'}; "
        f"{len(table['optional_unresolved'])} optional plug-ins left out, see the table); newest glibc needed "
        f"{table['newest_glibc_needed']}, "
        f"the base has {table['base_glibc']}. Default rollout path: {table['rollout']}.",
        "",
        header,
        "|---" * (len(needed) + 2) + "|",
    ]
    for gpu in table["gpus"]:
        counts = {v: sum(lib["verdicts"][gpu] == v for lib in others) for v in (NATIVE, JIT, NONE)}
        lines.append(
            f"| {CARDS.get(gpu, gpu)} | "
            + " | ".join(
                SHORT[lib["verdicts"][gpu]] if needed_by(lib["path"], table["rollout"], gpu) else "not used"
                for lib in needed
            )
            + f" | {counts[NATIVE]} / {counts[JIT]} / {counts[NONE]} |"
        )
    jit_on_own = sorted({f"`{lib['path']}` ({lib['wheel']})" for lib in needed for gpu in table["gpus_required"]
                         if lib["verdicts"][gpu] == JIT and needed_by(lib["path"], table["rollout"], gpu)})
    if jit_on_own:
        lines += [
            "",
            "Only by JIT from PTX on the track's own GPUs (allowed, with a warning: the first run pauses while the "
            "driver compiles): " + ", ".join(jit_on_own) + ".",
        ]
    return lines


def readme_section(lock_dir: Path = LOCK_DIR) -> str:
    lines = [
        SECTION_TITLE,
        "",
        "Read from the locked wheels, without a GPU (`invoke kernels --track T`; the table is "
        "`lockfiles/<track>.kernels.json`, next to the lock, and `invoke lock.check` fails when it is stale). For each "
        "GPU and each library the default rollout path launches kernels from: **native** (machine code for that GPU, "
        "or "
        "for an older one of the same major), **JIT** (only PTX: the driver compiles it at first use, so the first run "
        "is slow), or **none** (the run fails at that library). `grpolab doctor` and the smoke test's device line say "
        "the same for the GPU they find, before the model loads. Printed by `invoke kernels.readme`.",
        "",
    ]
    for track, table in tables(lock_dir).items():
        lines += track_section(track, table) + [""]
    return "\n".join(lines).rstrip() + "\n"
