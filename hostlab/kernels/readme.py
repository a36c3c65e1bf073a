"""The words of docs/kernels.md on which GPUs each image runs on, made from the committed kernels tables
(lockfiles/<track>.kernels.json): `invoke kernels.readme` prints the section to paste there, and
tests/test_kernels.py checks that docs/kernels.md holds exactly it and README.md's track table the cells."""

from __future__ import annotations

from pathlib import Path

from grpolab.common.card_verdict import card_verdict, gpu_dtype, path_libraries
from grpolab.common.gpucode import CARDS, JIT, NATIVE, NONE, load_table, table_path
from grpolab.common.tracks import get_track

from ..locks.lockfile import LOCK_DIR

SECTION_TITLE = "## Which GPUs each image runs on"
TRACKS = ("s", "n", "cluster")  # the tracks with a GPU lock here (x's is made elsewhere: no table yet)
SHORT = {NATIVE: "native", JIT: "JIT", NONE: "**none**"}


def tables(lock_dir: Path = LOCK_DIR) -> dict[str, dict]:
    return {t: table for t in TRACKS if (table := load_table(table_path(t, lock_dir))) is not None}


def short_name(path: str) -> str:
    return path.rsplit("/", 1)[-1].split(".")[0]


def lab_dtype(track: str) -> str:
    """The dtype the track's lab asks for on a GPU (its row's lab dtype; "auto" is bfloat16 there)."""
    return gpu_dtype(get_track(track))


def verdicts(track: str, table: dict) -> list:
    return [card_verdict(table, gpu, table["rollout"], lab_dtype(track)) for gpu in table["gpus"]]


def gpu_cell(table: dict) -> str:
    """One cell of README.md's track table: the cards the lab as the track sets it runs on, and how."""
    groups: dict[str, list[str]] = {}
    for found in verdicts(table["track"], table):
        if not found.runs:
            key = "no code"
        else:
            how = [f"in {found.dtype.dtype} ({found.dtype.reason.split(' (')[0]})"] if found.dtype.reason else []
            if found.kernels == JIT:
                how.append(", ".join(f"`{n}`" for n in found.jit_libraries) + " by JIT at first use (driver "
                           f"{found.jit_driver or 'unknown'}+)")
            key = "; ".join(how) or f"as set ({found.dtype.dtype})"
        groups.setdefault(key, []).append(found.card)
    return "; ".join(f"{key}: {', '.join(names)}" for key, names in groups.items())


def track_section(track: str, table: dict) -> list[str]:
    needed = [lib for lib in table["libraries"] if lib["needed_by_default_rollout"]]
    others = [lib for lib in table["libraries"] if not lib["needed_by_default_rollout"]]
    used = {gpu: {lib["path"] for lib in path_libraries(table, gpu, table["rollout"], lab_dtype(track))}
            for gpu in table["gpus"]}
    header = (
        "| GPU | "
        + " | ".join(f"`{short_name(lib['path'])}`" for lib in needed)
        + " | other libraries with GPU code: native / JIT / none | the lab's dtype | vLLM attention | JIT: driver |"
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
        "|---" * (len(needed) + 5) + "|",
    ]
    for gpu, found in zip(table["gpus"], verdicts(track, table)):
        counts = {v: sum(lib["verdicts"][gpu] == v for lib in others) for v in (NATIVE, JIT, NONE)}
        lines.append(
            f"| {CARDS.get(gpu, gpu)} | "
            + " | ".join(
                SHORT[lib["verdicts"][gpu]] if lib["path"] in used[gpu] else "not used"
                for lib in needed
            )
            + f" | {counts[NATIVE]} / {counts[JIT]} / {counts[NONE]} | "
            + (f"{found.dtype.dtype}{' (not ' + found.dtype.asked + ')' if found.dtype.reason else ''}"
               if found.runs else "-")
            + f" | {found.attention or '-'} | {found.jit_driver or '-'} |"
        )
    jit_on_own = sorted({f"`{lib['path']}` ({lib['wheel']})" for lib in needed for gpu in table["gpus_required"]
                         if lib["verdicts"][gpu] == JIT and lib["path"] in used[gpu]})
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
        "or for an older one of the same major), **JIT** (only PTX: the driver compiles it at first use, so the first "
        "run is slow), or **none** (the run fails at that library). Then what the lab as the track sets it needs from "
        "that card, by the rules the locked libraries' own code applies (read from their wheels by "
        "`hostlab/kernels/library_rules.py`, each rule with its file and version in the table's `library_rules`): "
        "**the lab's dtype** (vLLM refuses bfloat16 below the capability its `check_if_supports_dtype` names, so a "
        "path with vLLM runs in float16 there), **vLLM attention** (the first backend of vLLM's priority list for "
        "that card whose capability bounds and dtypes admit it), and **JIT: driver** (the oldest NVIDIA driver whose "
        "JIT compiles the PTX ISA of a kernel that runs only by JIT: NVIDIA's PTX release history and the CUDA "
        "release notes' driver table, `grpolab/common/gpucode.py`; the lock is refused when that is newer than the "
        "track's minimum driver, and when Triton's bundled ptxas does not know a GPU the track serves). "
        "`grpolab doctor` (its `card` item) and the smoke test's device line say the same for the GPU they find, "
        "before the model downloads. Printed by `invoke kernels.readme`.",
        "",
    ]
    for track, table in tables(lock_dir).items():
        lines += track_section(track, table) + [""]
    return "\n".join(lines).rstrip() + "\n"
