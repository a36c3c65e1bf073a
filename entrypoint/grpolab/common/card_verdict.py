"""What the lab as configured needs from one GPU, and whether it gets it: the dtype each rollout path runs in on that
card, the attention backend vLLM picks there, whether a kernel on the path runs only by JIT and which driver that
JIT needs. Every rule comes from the kernels table's `library_rules`, which `invoke kernels` reads from the locked
libraries' own code (hostlab/kernels/library_rules.py names each file and function); a rule the table lacks gives
"unknown", never a guess.

Pure: a table, a GPU (sm_XY, or gfxNNNN), a rollout path and a dtype in, one answer out; tested on the CPU for every
card of every track (tests/test_card_verdict.py). The lab (run/device_dtype.py), the doctor, the smoke test's device
line, docs/kernels.md and README.md's tracks table all say what this says. Standard library only.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field

from .dtypes import dtype_on
from .gpucode import JIT, NATIVE, NONE, cards, driver_for_ptx, driver_key, jit_isa, needed_by, parse_arch, verdict
from .rollout_paths import registered_path
from .rollout_paths.base import VLLM_GPU_LIBRARIES

WORST_FIRST = (NONE, JIT, NATIVE)
# Libraries vLLM loads only for one attention backend: where the card's backend is another, they are not on the path
# (vllm/v1/attention/backends/flash_attn.py imports vllm.vllm_flash_attn; FlashInfer's backend does not).
ATTENTION_LIBRARIES = {"FLASH_ATTN": "vllm/vllm_flash_attn/*"}
# Attention backends whose package ships no compiled GPU code in the lock: they compile their kernels at first use.
JIT_PACKAGES = {"FLASHINFER": "flashinfer"}


@dataclass(frozen=True)
class DtypeChoice:
    asked: str  # the lab's setting (the track's default or --dtype)
    dtype: str  # what the run uses on this card
    reason: str | None = None  # why they differ, naming the rule and where it was read


@dataclass
class CardVerdict:
    gpu: str
    card: str
    rollout: str
    dtype: DtypeChoice
    kernels: str  # the worst of the path's libraries on this GPU: native, jit or none
    jit_libraries: list[str] = field(default_factory=list)
    jit_driver: str | None = None  # the oldest driver whose JIT compiles those libraries' PTX
    jit_unplaced: list[str] = field(default_factory=list)  # PTX ISA versions no table here places
    attention: str | None = None  # vLLM's attention backend for this card and dtype (None: no vLLM on the path)
    attention_compiles: bool = False  # its package has no compiled GPU code in the lock: it compiles at first use
    bfloat16_in_torch: str | None = None  # native, emulated, or None (not asked, or no rule)

    @property
    def runs(self) -> bool:
        return self.kernels != NONE

    def as_dict(self) -> dict:
        return {**asdict(self), "runs": self.runs, "words": self.words()}

    def words(self) -> str:
        """One line: what this card runs, in what, and what to expect."""
        if not self.runs:
            return f"{self.card}: no code for {self.gpu} in a library the {self.rollout} path needs: it cannot run"
        parts = [self.dtype.dtype + (f" (not {self.dtype.asked}: {self.dtype.reason})" if self.dtype.reason else "")]
        if self.bfloat16_in_torch == "emulated" and self.dtype.dtype == "bfloat16":
            parts.append("torch emulates bfloat16 on this card (slower); --dtype float16 is native here")
        if self.attention:
            parts.append(f"vLLM attention {self.attention}" + (
                " (its kernels compile at first use: no prebuilt ones in the lock)" if self.attention_compiles else ""))
        if self.kernels == JIT:
            driver = f"driver {self.jit_driver} or newer" if self.jit_driver else "PTX ISA not placed here"
            parts.append(f"{', '.join(self.jit_libraries)} by JIT at first use ({driver})")
        return f"{self.card}: " + "; ".join(parts)


def gpu_dtype(track) -> str:
    """The dtype the track's lab asks for on a GPU: its row's lab dtype ("auto" is bfloat16 there)."""
    return dtype_on(str(track.lab.get("dtype", "auto")), "cuda")


def uses_vllm(rollout: str) -> bool:
    """Does the path sample with vLLM (its description launches vLLM's kernels)?"""
    path = registered_path(rollout)
    return path is not None and set(VLLM_GPU_LIBRARIES) <= set(path.GPU_LIBRARIES)


def capability(gpu: str) -> tuple[int, int] | None:
    arch = parse_arch(gpu)
    return (arch[0], arch[1]) if arch else None


def choose_dtype(rules: dict | None, gpu: str | None, rollout: str, asked: str) -> DtypeChoice:
    """The dtype a run of `rollout` uses on `gpu` when `asked` for one. The one adaptation: bfloat16 on a path with
    vLLM, on a card below the capability vLLM's own dtype check requires (the locked vLLM refuses it when its engine
    starts, after the model has downloaded and loaded): float16 instead, which every such card computes natively and
    vLLM's check lets through. Everything else runs as asked."""
    cap = capability(gpu) if gpu else None
    floor = ((rules or {}).get("vllm") or {}).get("bfloat16_min_capability")
    if asked != "bfloat16" or cap is None or not uses_vllm(rollout) or not floor or cap >= tuple(floor):
        return DtypeChoice(asked, asked)
    source = rules["vllm"]["read_from"].split(":")[0]
    return DtypeChoice(
        asked, "float16",
        f"{source} refuses bfloat16 below compute {floor[0]}.{floor[1]} (vllm/platforms/cuda.py, "
        "check_if_supports_dtype)",
    )


def attention_backend(rules: dict | None, gpu: str, dtype: str) -> str | None:
    """The first backend of vLLM's priority list for this card's major whose capability bounds and dtypes admit the
    card and dtype; None where the table has no rule or none admits it."""
    vllm = (rules or {}).get("vllm") or {}
    priorities, backends, cap = vllm.get("attention_priorities"), vllm.get("attention_backends"), capability(gpu)
    if not (priorities and backends and cap):
        return None
    for name in priorities.get(f"major {cap[0]}", priorities["default"]):
        rule = backends.get(name) or {}
        bounds, dtypes = rule.get("capability"), rule.get("dtypes")
        if bounds is None or dtypes is None:
            return None  # a backend the reader could not place stands before the rest: unknown
        if ((bounds["min"] is None or cap >= tuple(bounds["min"])) and (bounds["max"] is None or cap <= tuple(
                bounds["max"])) and dtype in dtypes):
            return name
    return None


def torch_bfloat16(rules: dict | None, gpu: str) -> str | None:
    rule = ((rules or {}).get("torch") or {}).get("bfloat16")
    cap = capability(gpu)
    if not rule or cap is None:
        return None
    return NATIVE if cap[0] >= rule["native_from_major"] else ("emulated" if rule["emulated_below"] else NONE)


def path_kernels(table: dict, gpu: str, rollout: str, attention: str | None = None) -> tuple[str, list[dict]]:
    """(the worst verdict among the libraries the path launches kernels from on this GPU, those libraries), leaving out
    an attention backend's libraries where vLLM picks another backend on this card."""
    unused = [pattern for backend, pattern in ATTENTION_LIBRARIES.items() if attention and backend != attention]
    used = [lib for lib in table.get("libraries", []) if needed_by(lib["path"], rollout, gpu)
            and not any(fnmatch.fnmatch(lib["path"], pattern) for pattern in unused)]
    verdicts = {verdict(gpu, lib.get("sass", []), lib.get("ptx", []), lib.get("gfx")) for lib in used}
    return next((v for v in WORST_FIRST if v in verdicts), NATIVE), used


def path_libraries(table: dict, gpu: str, rollout: str, asked: str) -> list[dict]:
    """The libraries the path launches kernels from on this card, as the verdict counts them (the lock's refusals and
    warnings use the same)."""
    rules = table.get("library_rules")
    dtype = choose_dtype(rules, gpu, rollout, asked)
    attention = attention_backend(rules, gpu, dtype.dtype) if uses_vllm(rollout) else None
    return path_kernels(table, gpu, rollout, attention)[1]


def card_verdict(table: dict, gpu: str, rollout: str, asked: str) -> CardVerdict:
    """The verdict for one card of a track (its kernels table), the lab's rollout path and dtype setting."""
    gpu = gpu.split(":")[0]
    rules = table.get("library_rules")
    dtype = choose_dtype(rules, gpu, rollout, asked)
    attention = attention_backend(rules, gpu, dtype.dtype) if uses_vllm(rollout) else None
    worst, used = path_kernels(table, gpu, rollout, attention)
    jit_libs = [lib for lib in used if verdict(gpu, lib.get("sass", []), lib.get("ptx", []), lib.get("gfx")) == JIT]
    isas = {jit_isa(gpu, lib.get("ptx_isa") or {}) for lib in jit_libs}
    drivers = [d for isa in isas if isa and (d := driver_for_ptx(isa))]
    return CardVerdict(
        gpu=gpu,
        card=cards(gpu).split(",")[0] if gpu.startswith("sm_") else cards(gpu),
        rollout=rollout,
        dtype=dtype,
        kernels=worst,
        jit_libraries=sorted({lib["path"].rsplit("/", 1)[-1].split(".")[0] for lib in jit_libs}),
        jit_driver=max(drivers, key=driver_key) if drivers else None,
        jit_unplaced=sorted(isa or "unread" for isa in isas if not (isa and driver_for_ptx(isa))),
        attention=attention,
        attention_compiles=bool(attention in JIT_PACKAGES and not any(
            lib["wheel"].startswith(JIT_PACKAGES[attention]) for lib in table.get("libraries", []))),
        bfloat16_in_torch=torch_bfloat16(rules, gpu) if dtype.dtype == "bfloat16" else None,
    )
