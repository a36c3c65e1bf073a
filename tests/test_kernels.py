"""Which GPUs each image runs on (issue 27): the verdict rules, the lock's refusals, the committed tables, the fatbin
reader against NVIDIA's cuobjdump on a real locked library, and what the doctor and the smoke test say on a GPU."""

import dataclasses
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "entrypoint")]

from grpolab.common import gpucode  # noqa: E402
from grpolab.run.checks import kernels_note  # noqa: E402
from grpolab.common.errors import LayerFailure  # noqa: E402
from grpolab.common.tracks import get_track  # noqa: E402

from hostlab import HostError  # noqa: E402

from hostlab.kernels import table as kernels, readme as kernelsreadme  # noqa: E402
from hostlab.locks.wheels import fetch, locked_files  # noqa: E402
from hostlab.locks.lockfile import LOCK_DIR, parse_lock  # noqa: E402
from hostlab.kernels.elf import SharedObject, cuda_code, cuobjdump, fatbin_code, read_elf  # noqa: E402


# --- the rules of CUDA compatibility -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "gpu, sass, ptx, want",
    [
        ("sm_86", ["sm_80"], [], "native"),  # same major, older minor
        ("sm_121", ["sm_120"], [], "native"),  # sm_120's kernels on GB10
        ("sm_90", ["sm_80"], ["sm_80"], "jit"),  # a newer major only through PTX
        ("sm_90", ["sm_80"], [], "none"),
        ("sm_100", ["sm_90a"], [], "none"),  # arch-specific: exactly sm_90
        ("sm_90", ["sm_90a"], [], "native"),
        ("sm_121", ["sm_120a"], [], "none"),
        ("sm_121", ["sm_120f"], [], "native"),  # family: every minor of 12 from 0 up
        ("sm_61", ["sm_75", "sm_80"], ["sm_75"], "none"),  # PTX never runs on an older GPU
        ("gfx1151", [], [], "none"),
    ],
)
def test_verdict(gpu, sass, ptx, want):
    assert gpucode.verdict(gpu, sass, ptx) == want


def test_gfx_targets_are_exact():
    assert gpucode.verdict("gfx1151", [], [], ["gfx1100", "gfx1151"]) == "native"
    assert gpucode.verdict("gfx1151", [], [], ["gfx1100"]) == "none"


# --- the lock's refusals, on tables built from constructed shared objects --------------------------------
TORCH = SharedObject(
    "torch/lib/libtorch_cuda.so",
    needed=["libcudart.so.13", "libcuda.so.1", "libc.so.6"],
    glibc="GLIBC_2.28",
    cuda_major=13,
    sass=["sm_80", "sm_120"],
    ptx=[],
    device_code=True,
)
CUDART = SharedObject("nvidia/cu13/lib/libcudart.so.13", soname="libcudart.so.13", needed=["libc.so.6"], cuda_major=13)


def table_of(track_name="s", **wheels):
    track = get_track(track_name)
    scans = {
        "torch 2.13.0": [TORCH],
        "nvidia-cuda-runtime 13.0.96": [CUDART],
        **{k.replace("_", " "): v for k, v in wheels.items()},
    }
    return kernels.build_table(track, scans, "13.0", "0" * 64)


def test_a_clean_table_is_not_refused():
    table = table_of()
    assert kernels.problems(table) == ([], [])
    assert table["driver_minimum"] == "580" and table["host_driver_libraries"] == {
        "libcuda.so.1": kernels.HOST_DRIVER["libcuda.so.1"]
    }


def test_refused_a_needed_library_without_code_for_the_tracks_gpu():
    fa3 = SharedObject("vllm/_C.abi3.so", needed=["libcudart.so.13"], cuda_major=13, sass=["sm_90a"], device_code=True)
    refusals, _ = kernels.problems(table_of(**{"vllm_0.31.0": [fa3]}))
    assert refusals == [
        "vllm 0.31.0, vllm/_C.abi3.so: no code for sm_121 (GB10, DGX Spark (compute 12.1)), which track s's "
        "vllm-colocate path needs (SASS sm_90a; PTX none)"
    ]


def fa2_of_isa(isa: str | None) -> SharedObject:
    """vLLM's FlashAttention 2 as vllm 0.31.0 ships it (sm_80 SASS, compute_80 PTX), its PTX of ISA `isa`."""
    return SharedObject("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", cuda_major=13, sass=["sm_80"], ptx=["sm_80"],
                        device_code=True, ptx_isa={"sm_80": isa} if isa else {})


def test_a_library_only_the_jit_runs_is_a_warning_not_a_refusal():
    refusals, warnings = kernels.problems(table_of(**{"vllm_0.31.0": [fa2_of_isa("9.0")]}))
    assert (
        refusals == [] and len(warnings) == 1 and "only PTX for sm_121" in warnings[0] and "_vllm_fa2_C" in warnings[0]
    )


def test_refused_jit_only_ptx_newer_than_the_tracks_driver_compiles():
    # CUDA 13.1's PTX (ISA 9.1) needs driver 590.44.01; track s declares CUDA 13's 580: GB10 would fail at first use
    # with cudaErrorUnsupportedPtxVersion
    refusals, _ = kernels.problems(table_of(**{"vllm_0.31.0": [fa2_of_isa("9.1")]}))
    assert len(refusals) == 1 and "of PTX ISA 9.1: the driver compiles it from 590.44.01 on, newer than the 580" in (
        refusals[0])
    unplaced, _ = kernels.problems(table_of(**{"vllm_0.31.0": [fa2_of_isa("9.9")]}))
    assert len(unplaced) == 1 and "of PTX ISA 9.9, which grpolab/common/gpucode.py's PTX_ISA_CUDA does not" in (
        unplaced[0])
    unread, _ = kernels.problems(table_of(**{"vllm_0.31.0": [fa2_of_isa(None)]}))
    assert len(unread) == 1 and "PTX ISA unread" in unread[0]


@pytest.mark.parametrize("isa, driver", [("9.0", "580.65.06"), ("9.1", "590.44.01"), ("8.8", "575.51.03"),
                                         ("8.6", "570.26"), ("9.9", None)])
def test_the_driver_each_ptx_isa_needs(isa, driver):
    assert gpucode.driver_for_ptx(isa) == driver


def test_refused_a_triton_whose_ptxas_does_not_know_the_tracks_gpu():
    ptxas = {"ptxas": {"cuda": "12.8", "archs": ["sm_90a", "sm_120a"]},
             "ptxas-blackwell": {"cuda": "12.9", "archs": ["sm_120a", "sm_121a"]}}
    rule = {"read_from": "triton 3.7.1: ...", "choice": {"blackwell_from": 100, "arch_specific_from": 90},
            "ptxas": ptxas}
    table = kernels.build_table(get_track("s"), {"torch 2.13.0": [TORCH], "nvidia-cuda-runtime 13.0.96": [CUDART]},
                                "13.0", "0" * 64, {"triton": rule})
    assert kernels.problems(table)[0] == []
    rule["ptxas"]["ptxas-blackwell"]["archs"] = ["sm_120a"]  # the ptxas of CUDA 12.8, before GB10
    assert kernels.problems(table)[0] == [
        "triton 3.7.1: its ptxas-blackwell (CUDA 12.9) does not know sm_121a, which Triton compiles for on sm_121 "
        "(GB10, DGX Spark (compute 12.1))"
    ]


def test_a_library_the_path_uses_only_on_other_gpus_is_not_refused():
    # vLLM loads FlashAttention 3 on Hopper only: on GB10 it is FlashAttention 2's turn
    fa3 = SharedObject("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", cuda_major=13, sass=["sm_90a"], device_code=True)
    table = table_of(**{"vllm_0.31.0": [fa3]})
    assert kernels.problems(table) == ([], []) and table["libraries"][-1]["verdicts"] == {"sm_121": "none"}
    on_hopper = kernels.build_table(dataclasses.replace(get_track("s"), gpus=["sm_90"], gpus_required=["sm_90"]),
                                    {"vllm 0.31.0": [dataclasses.replace(fa3, sass=["sm_80"])]}, "13.0", "0" * 64)
    assert kernels.problems(on_hopper)[0][0].startswith(
        "vllm 0.31.0, vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so: no code for sm_90"
    )


def test_refused_libraries_built_for_another_cuda_major():
    old = SharedObject("flashinfer/libold.so", needed=["libcudart.so.12"], cuda_major=12)
    cudart12 = SharedObject("nvidia/cuda_runtime/lib/libcudart.so.12", soname="libcudart.so.12", cuda_major=12)
    refusals, _ = kernels.problems(table_of(**{"flashinfer_0.6": [old, cudart12]}))
    assert len(refusals) == 1 and refusals[0].startswith(
        "built for CUDA 12, but torch is built for CUDA 13: flashinfer 0.6: flashinfer/libold.so"
    )


def test_refused_an_unresolved_library_and_a_glibc_newer_than_the_base():
    lonely = SharedObject("thing/_ext.so", needed=["libavcodec.so.61", "libc.so.6"], glibc="GLIBC_2.42")
    refusals, _ = kernels.problems(table_of(**{"thing_1.0": [lonely]}))
    assert refusals == [
        "thing 1.0, thing/_ext.so: links libavcodec.so.61, which no locked wheel, the base image or the host's driver "
        "provides",
        "thing 1.0, thing/_ext.so: needs GLIBC_2.42, newer than the base image's glibc 2.41",
    ]


def test_an_optional_plugin_is_listed_with_its_reason_not_refused():
    plugin = SharedObject("torchcodec/libtorchcodec_core7.so", needed=["libavcodec.so.61"])
    table = table_of(**{"torchcodec_0.17.0": [plugin]})
    assert kernels.problems(table) == ([], [])
    assert table["optional_unresolved"]["torchcodec/libtorchcodec_core7.so"]["needed"] == ["libavcodec.so.61"]


# --- the committed tables: current, obeyed, and what the README and docs/kernels.md say
# --------------------------------------
@pytest.mark.parametrize("track", ["s", "n"])
def test_committed_table_is_current_and_passes(track):
    assert kernels.check_table(get_track(track))[0] == []


def copy_lockfiles(tmp_path, track):
    for name in (f"{track}.txt", f"{track}.kernels.json"):
        shutil.copy(LOCK_DIR / name, tmp_path / name)
    return json.loads((tmp_path / f"{track}.kernels.json").read_text())


def test_check_fails_on_a_stale_table(tmp_path):
    table = copy_lockfiles(tmp_path, "s")
    table["lock_body_sha256"] = "f" * 64  # as if the lock changed and nobody re-ran invoke kernels
    (tmp_path / "s.kernels.json").write_text(json.dumps(table))
    problems, _ = kernels.check_table(get_track("s"), tmp_path)
    assert len(problems) == 1 and "s.kernels.json is stale" in problems[0] and "invoke kernels --track s" in problems[0]


@pytest.mark.parametrize("track", ["s", "n"])
def test_committed_table_was_read_by_this_reader(track):
    """Edit the reader (READER_FILES) and this fails until `invoke kernels` has read the wheels with it again."""
    assert kernels.load_table(LOCK_DIR / f"{track}.kernels.json")["reader_sha256"] == kernels.reader_sha256(), (
        f"the reader changed since lockfiles/{track}.kernels.json was made: run `invoke kernels --track {track}` and "
        "commit it"
    )


def test_ci_reads_the_wheels_again_only_when_the_lock_or_the_reader_moved(tmp_path, monkeypatch):
    copy_lockfiles(tmp_path, "s")
    reads = []

    def read(track, lock_dir):  # stands in only to count: the real read downloads 4 GB (CI runs it when either moved)
        reads.append(track.name)
        raise HostError("read")

    monkeypatch.setattr(kernels, "make_table", read)
    assert kernels.verify_committed("s", tmp_path) == {"wheels_read_again": False} and reads == []
    table = json.loads((tmp_path / "s.kernels.json").read_text())
    for key in ("reader_sha256", "lock_body_sha256"):
        moved = {**table, key: "0" * 64}
        (tmp_path / "s.kernels.json").write_text(json.dumps(moved))
        with pytest.raises(HostError, match="read"):
            kernels.verify_committed("s", tmp_path)
    assert reads == ["s", "s"]
    # Unchanged inputs are not a pass by themselves: a table the track's row or the refusals reject still fails.
    torch_cuda = next(lib for lib in table["libraries"] if lib["path"] == "torch/lib/libtorch_cuda.so")
    torch_cuda["sass"], torch_cuda["ptx"] = ["sm_80"], []
    (tmp_path / "s.kernels.json").write_text(json.dumps(table))
    with pytest.raises(HostError, match="no code for sm_121"):
        kernels.verify_committed("s", tmp_path)
    assert reads == ["s", "s"]


def test_check_refuses_a_recorded_table_whose_torch_lost_the_tracks_gpu(tmp_path):
    table = copy_lockfiles(tmp_path, "s")
    torch_cuda = next(lib for lib in table["libraries"] if lib["path"] == "torch/lib/libtorch_cuda.so")
    torch_cuda["sass"] = ["sm_80", "sm_90", "sm_100"]  # a torch without sm_12x and without PTX
    (tmp_path / "s.kernels.json").write_text(json.dumps(table))
    problems, _ = kernels.check_table(get_track("s"), tmp_path)
    assert any("torch/lib/libtorch_cuda.so: no code for sm_121" in p for p in problems)


def test_docs_hold_the_section_made_from_the_tables():
    assert kernelsreadme.readme_section() in (REPO / "docs" / "kernels.md").read_text()
    readme = (REPO / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():  # the first table of tracks, the track table (the disk table comes later)
        if line.startswith("| `"):
            rows.setdefault(line.split("|")[1].strip(" `"), line)
    for track in ("s", "n"):  # the course's tracks in the README's track table (cluster has a section of its own)
        assert rows[track].rstrip(" |").endswith(kernelsreadme.gpu_cell(kernelsreadme.tables()[track])), (
            f"README's track table lacks track {track}'s GPU cell"
        )


# --- the fatbin reader against cuobjdump, on a small real library of n's lock ------------------------------
SMALL_CUDA_WHEEL, SMALL_CUDA_LIBRARY = (
    "nvidia-cufile",
    "libcufile.so.",
)  # a 1 MB wheel; its 3 MB library has SASS and PTX


def small_cuda_library(tmp_path) -> tuple[Path, str]:
    track = get_track("n")
    lock = parse_lock((LOCK_DIR / "n.txt").read_text())
    file = next(f for f in locked_files(track, lock=lock) if f.project == SMALL_CUDA_WHEEL)
    wheel = fetch(file)  # by the lock's hash, kept in ~/.cache/grpolab/provenance
    with zipfile.ZipFile(wheel) as whl:
        name = next(n for n in whl.namelist() if n.rsplit("/", 1)[-1].startswith(SMALL_CUDA_LIBRARY))
        target = tmp_path / "lib.so"
        target.write_bytes(whl.read(name))
    return target, name


def test_fatbin_reader_agrees_with_cuobjdump_on_a_real_library(tmp_path):
    library, name = small_cuda_library(tmp_path)
    listed = cuda_code(library)
    assert listed[0] and listed[1], f"cuobjdump lists no SASS or no PTX in {name}: pick another small CUDA library"
    data = library.read_bytes()
    shared = read_elf(library, name)  # raises when the two readers disagree inside .nv_fatbin
    inside, _, _ = fatbin_code(data, (0, len(data)))
    assert inside == listed
    assert (shared.sass, shared.ptx) == listed
    # the PTX ISA the fatbin headers give is the `.version` of the PTX cuobjdump extracts
    extracted = tmp_path / "ptx"
    extracted.mkdir()
    subprocess.run([cuobjdump(), "-xptx", "all", str(library)], cwd=extracted, check=True, capture_output=True,
                   timeout=120)
    versions = {}
    for ptx in extracted.glob("*.ptx"):
        arch = "sm_" + ptx.name.rsplit(".", 2)[-2].split("_")[-1]
        version = next(line.split()[1] for line in ptx.read_text().splitlines() if line.startswith(".version"))
        versions[arch] = max(versions.get(arch, version), version, key=gpucode.driver_key)
    assert versions and shared.ptx_isa == versions
    recorded = next(
        lib for lib in json.loads((LOCK_DIR / "n.kernels.json").read_text())["libraries"] if lib["path"] == name
    )
    assert (recorded["sass"], recorded["ptx"]) == listed


# --- at run time: the doctor and the smoke test's device line, on recorded tables --------------------------
def test_smoke_names_a_library_that_only_jits():
    table = json.loads((LOCK_DIR / "s.kernels.json").read_text())
    note = kernels_note(get_track("s"), "sm_121", "vllm-colocate", "580.95.05", table)
    assert (
        "_vllm_fa2_C.abi3.so (vllm 0.31.0) has no machine code for sm_121: the driver compiles its PTX at first use"
        in note
    )


def test_smoke_stops_in_the_device_layer_on_a_gpu_without_code():
    table = json.loads((LOCK_DIR / "n.kernels.json").read_text())
    with pytest.raises(LayerFailure) as failure:
        kernels_note(get_track("n"), "sm_61", "vllm-colocate", "580.95.05", table)
    assert failure.value.layer == "device"
    assert (
        "torch/lib/libtorch_cuda.so (torch 2.13.0) has no code for sm_61: the run fails when it launches one of its "
        "kernels"
        in str(failure.value)
    )


def test_smoke_stops_on_a_driver_older_than_the_tables_cuda():
    table = json.loads((LOCK_DIR / "n.kernels.json").read_text())
    with pytest.raises(LayerFailure) as failure:
        kernels_note(get_track("n"), "sm_89", "inprocess", "570.86.10", table)
    assert "NVIDIA driver 570.86.10 is older than 580, the oldest that runs this image's CUDA 13 libraries" in str(
        failure.value
    )


# --- `invoke lock` keeps the lock it had when the new one is refused ----------------------------------------
def test_a_refused_lock_leaves_the_old_one_in_place(tmp_path, monkeypatch):
    from hostlab import HostError
    from hostlab.run import lock as lockcli

    lock = tmp_path / "s.txt"
    lock.write_text("the lock that was there\n")
    monkeypatch.setattr(lockcli, "lock_path", lambda track, lock_dir: lock)
    monkeypatch.setattr(
        lockcli, "make_lock", lambda track, vllm, lock_dir: lock.write_text("a new lock whose vLLM lost sm_121\n")
    )

    def refuse(track, text, lock_dir):
        assert text == "a new lock whose vLLM lost sm_121\n"  # the table is read from the new lock
        raise HostError("refusing the lock for track s: ...")

    monkeypatch.setattr(lockcli, "table_for_new_lock", refuse)
    with pytest.raises(HostError):
        lockcli.make_checked_lock(get_track("s"))
    assert lock.read_text() == "the lock that was there\n"
