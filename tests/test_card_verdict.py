"""Each card's verdict for the lab as configured (issue 52): the dtype each rollout path runs in, vLLM's attention
backend, the kernels that run only by JIT and the driver they need; every rule read from the locked libraries' own
code (hostlab/kernels/library_rules.py) into the kernels tables, and judged by a pure function for every card of every
GPU track. No GPU here: the tables are the committed ones, the cards are their rows."""

import copy
import json
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "entrypoint")]

from grpolab.common.card_verdict import card_verdict, choose_dtype  # noqa: E402
from grpolab.common.errors import LayerFailure  # noqa: E402
from grpolab.common.gpucode import driver_key, load_table, parse_arch, table_path  # noqa: E402
from grpolab.common.tracks import get_track  # noqa: E402
from grpolab.environment.doctor_machine import card_item  # noqa: E402
from grpolab.run.checks import card_note  # noqa: E402
from hostlab.kernels import library_rules  # noqa: E402
from hostlab.kernels.readme import lab_dtype  # noqa: E402
from hostlab.locks.lockfile import LOCK_DIR  # noqa: E402

GPU_TRACKS = ("s", "n", "cluster")


def table(track: str) -> dict:
    found = load_table(table_path(track, LOCK_DIR))
    assert found is not None, f"lockfiles/{track}.kernels.json is missing: `invoke kernels --track {track}`"
    return found


CARDS = [(t, gpu) for t in GPU_TRACKS for gpu in get_track(t).gpus]


@pytest.mark.parametrize("track, gpu", CARDS)
def test_every_card_a_track_lists_has_a_verdict_and_its_own_cards_run_as_set(track, gpu):
    t, row = table(track), get_track(track)
    found = card_verdict(t, gpu, row.rollout, lab_dtype(track))
    assert found.dtype.dtype in ("bfloat16", "float16", "float32") and found.words().startswith(found.card)
    if gpu in row.gpus_required:  # the cards the track promises: they run, in the track's dtype, on a known driver
        assert found.runs and found.dtype.dtype == lab_dtype(track) and not found.jit_unplaced, found.words()
        assert found.jit_driver is None or driver_key(found.jit_driver)[0] <= driver_key(t["driver_minimum"])[0]
        if row.rollout.startswith("vllm"):
            assert found.attention, f"no attention backend read for {gpu}: {found.words()}"


def test_the_tables_rules_were_read_from_the_locked_code():
    for track in GPU_TRACKS:
        rules = table(track)["library_rules"]
        assert rules["vllm"]["bfloat16_min_capability"] == [8, 0], rules["vllm"]["read_from"]
        assert rules["torch"]["bfloat16"] == {"native_from_major": 8, "emulated_below": True}
        assert rules["triton"]["choice"] == {"blackwell_from": 100, "arch_specific_from": 90}
    s_triton = table("s")["library_rules"]["triton"]
    assert "sm_121a" in s_triton["ptxas"]["ptxas-blackwell"]["archs"], s_triton


def test_a_turing_laptop_runs_vllm_in_float16_and_in_process_as_asked():
    n = table("n")
    vllm = card_verdict(n, "sm_75", "vllm-colocate", "bfloat16")
    assert vllm.runs and vllm.dtype.dtype == "float16" and "below compute 8.0" in vllm.dtype.reason
    assert vllm.attention == "TRITON_ATTN"  # FlashAttention and FlashInfer need 8.0
    assert card_verdict(n, "sm_75", "vllm-server", "bfloat16").dtype.dtype == "float16"
    inprocess = card_verdict(n, "sm_75", "inprocess", "bfloat16")
    assert inprocess.dtype.dtype == "bfloat16" and inprocess.bfloat16_in_torch == "emulated"
    assert "float16 is native here" in inprocess.words()
    assert card_verdict(n, "sm_75", "vllm-colocate", "float32").dtype.dtype == "float32"  # only bfloat16 moves
    assert not card_verdict(n, "sm_61", "vllm-colocate", "bfloat16").runs  # CUDA 13 has no Pascal code


def test_attention_and_jit_follow_the_card():
    n = table("n")
    blackwell = card_verdict(n, "sm_100", "vllm-colocate", "bfloat16")
    assert blackwell.attention == "FLASHINFER" and "_vllm_fa2_C" not in blackwell.jit_libraries
    rtx50 = card_verdict(n, "sm_120", "vllm-colocate", "bfloat16")
    assert rtx50.attention == "FLASH_ATTN" and rtx50.jit_libraries == ["_vllm_fa2_C"]
    assert rtx50.jit_driver == "580.65.06"  # its PTX is ISA 9.0: CUDA 13.0's
    assert card_verdict(n, "sm_90", "vllm-colocate", "bfloat16").kernels == "native"


def test_the_rule_is_the_tables_not_the_codes():
    moved = copy.deepcopy(table("n"))
    moved["library_rules"]["vllm"]["bfloat16_min_capability"] = [9, 0]
    assert card_verdict(moved, "sm_89", "vllm-colocate", "bfloat16").dtype.dtype == "float16"
    assert card_verdict(moved, "sm_90", "vllm-colocate", "bfloat16").dtype.dtype == "bfloat16"
    assert choose_dtype({}, "sm_75", "vllm-colocate", "bfloat16").dtype == "bfloat16"  # no rule read: no guess
    moved["library_rules"] = {}
    assert card_verdict(moved, "sm_86", "vllm-colocate", "bfloat16").attention is None


def test_the_lab_takes_the_cards_dtype_before_any_download():
    n = table("n")
    settings = SimpleNamespace(rollout="vllm-colocate", dtype="bfloat16")
    line = card_note(settings, get_track("n"), "sm_75", "580.95.05", n)
    assert settings.dtype == "float16" and "not bfloat16" in line
    settings = SimpleNamespace(rollout="vllm-colocate", dtype="bfloat16")
    with pytest.raises(LayerFailure) as failure:  # RTX 50xx on driver 575: fa2's PTX (ISA 9.0) needs 580.65.06
        card_note(settings, get_track("n"), "sm_120", "575.51.03", n)
    assert failure.value.layer == "device" and "580.65.06" in failure.value.action


def test_the_doctor_gives_the_cards_verdict():
    def ctx(arch, driver):
        return SimpleNamespace(track=get_track("n"), devices=SimpleNamespace(type="cuda", arch=arch),
                               host=SimpleNamespace(nvidia_driver=driver), rollout="vllm-colocate")
    turing = card_item(ctx("sm_75", "580.95.05"))
    assert turing["status"] == "warn" and turing["details"]["dtype"]["dtype"] == "float16"
    assert card_item(ctx("sm_86", "580.95.05"))["status"] == "ok"
    assert card_item(ctx("sm_120", "575.51.03"))["status"] == "fail"
    assert card_item(ctx("sm_61", "580.95.05"))["status"] == "fail"


# --- the reader, on wheels made here ------------------------------------------------------------------------
VLLM_CUDA = '''
class CudaPlatform:
    @classmethod
    def check_if_supports_dtype(cls, dtype):
        if dtype == torch.bfloat16:
            if not cls.has_device_capability({floor}):
                raise ValueError("Bfloat16 is only supported on GPUs with compute capability of at least 8.0")
'''


def wheel_with(tmp_path, files: dict[str, str | bytes]) -> Path:
    path = tmp_path / "made.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return path


def test_the_reader_reads_vllms_floor_and_says_unknown_when_the_code_moved(tmp_path):
    made = wheel_with(tmp_path, {"vllm/platforms/cuda.py": VLLM_CUDA.format(floor=90)})
    assert library_rules.read_vllm(made, "9.9.9")["bfloat16_min_capability"] == [9, 0]
    reshaped = wheel_with(tmp_path, {"vllm/platforms/cuda.py": "def check_dtype(dtype):\n    return True\n"})
    assert library_rules.read_vllm(reshaped, "9.9.9")["bfloat16_min_capability"] is None


def test_the_reader_reads_what_tritons_ptxas_knows(tmp_path):
    compiler = ("def get_ptxas(arch):\n    return knobs.nvidia.ptxas_blackwell if arch >= 100 else knobs.nvidia.ptxas\n"
                "def sm_arch_from_capability(capability):\n    suffix = 'a' if capability >= 90 else ''\n")
    made = wheel_with(tmp_path, {
        "triton/backends/nvidia/compiler.py": compiler,
        "triton/backends/nvidia/bin/ptxas-blackwell": b"\0Cuda compilation tools, release 13.1\0sm_120a\0sm_121a\0",
    })
    read = library_rules.read_triton(made, "3.7.1")
    assert read["choice"] == {"blackwell_from": 100, "arch_specific_from": 90}
    assert read["ptxas"]["ptxas-blackwell"] == {"cuda": "13.1", "archs": ["sm_120a", "sm_121a"]}


def test_every_required_card_of_the_committed_tables_names_its_capability():
    for track in GPU_TRACKS:
        for gpu in get_track(track).gpus:
            assert parse_arch(gpu), gpu
    assert json.loads((LOCK_DIR / "n.kernels.json").read_text())["library_rules"]["vllm"]["read_from"].startswith(
        "vllm 0.31.0: vllm/platforms/cuda.py")
