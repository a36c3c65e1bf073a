"""The lesson's memory arithmetic, done before a run: five terms, the operating system's share, and what is left.

    estimate_memory("Qwen/Qwen3-1.7B", settings, device_total_gb=16).render()

All figures are decimal gigabytes (1 GB = 1e9 bytes), as in the lesson. The estimate is arithmetic; runs log
it beside the peak that grpolab.memory.peak.PeakMemoryMeter measures on the same basis: the five terms are what a
run adds above its runtime baseline (Python and the libraries, measured when the run starts and shown as a
line of its own when known).

The terms, in the lesson's order:
  1. Policy weights: parameters x bytes per parameter (BF16: 2).
  2. Reference model: the same again, only when beta > 0 (at beta 0 TRL does not load it).
  3. Adapter, gradients and Adam states: 16 bytes per trainable LoRA parameter (fp32 weight, gradient and
     two Adam moments). LoRA on a linear layer in->out at rank r adds r*(in+out) parameters.
  4. The rollout engine, as its path declares it (memory_terms in grpolab/common/rollout_paths/):
       inprocess      key-value cache of the generation batch: sequences x (prompt + completion) tokens x
                      bytes per token (2 x layers x kv_heads x head_dim x dtype bytes; Qwen3-1.7B: 112 KiB).
       vllm-colocate  vllm_gpu_memory_utilization x device memory, whatever the model (TRL's 0.3 default).
       vllm-server    nothing on this device: the server runs on another card.
       llamacpp       llama-server's copy of the weights plus its own key-value cache.
  5. Logits and activations of the update, from the model's shape and the settings (update_activations_gb):
     what each layer keeps per token for the backward pass (with gradient checkpointing: its input, plus one
     layer recomputed) times the tokens of one update, plus TRL's tiled log-probabilities over the vocabulary.
     activations="lesson" counts this row the lesson's way instead (whole logits plus an allowance fitted to
     its two tables), which reproduces the lesson's tables; the default says in one line where it differs.
On CUDA two terms differ, not yet checked on a GPU (grpolab.memory.cuda_terms): one log-probability tile folded in
Triton, and the peak is the larger phase where the engine is freed before the update (row "Freed before the update").
Then the share reserved for the operating system (OS_RESERVED_FRACTION, at least OS_RESERVED_MIN_GB), and Free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..model.shape import DTYPE_BYTES, DTYPE_LABEL, ModelShape, UnknownModel, model_shape, weights_dtype
from ..settings.lab_settings import LabSettings
from ..common.rollout_paths import MemoryBasis, rollout_path
from ..common.tracks import get_track
from .cuda_terms import FREED_ROW, TRITON_TILE_COPIES, cuda_report, folds_in_triton, phases_apart, split_phases
from .vllm_cpu import estimate_terms

GB = 1e9
ADAPTER_BYTES_PER_PARAM = 16  # fp32 weight 4 + fp32 gradient 4 + Adam's two fp32 moments 8 (the course's Part 11)

# TRL 1.16 computes log-probabilities through a fused LM head in tiles of at most 4096 tokens x 32768 vocabulary
# entries (trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE, trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE), with
# one tile buffer in the forward pass and one in the backward pass, plus the fold's temporaries of the same size.
# (That is torch's fold, on the CPU and MPS; on CUDA Triton folds one buffer in place: TRITON_TILE_COPIES.)
TRL_TOKEN_TILE = 4096
TRL_VOCAB_TILE = 32768
LOGIT_TILE_COPIES = 3

# The lesson's own arithmetic for the update's row (activations="lesson"): the whole logits tensor plus an allowance.
# The lesson gives no formula, only two tables: 2 GB in all for
# Qwen3-1.7B and 4 GB for Qwen3-4B, both with 8 completions of 512 tokens, so the allowance is ~0.76 GB and
# ~2.76 GB. No term linear in the model's shape fits both (a 4B model has 1.6x the hidden x layers of a 1.7B
# one, yet 3.6x the allowance), so the allowance grows with the policy's size to the power 1.5, and linearly
# with the tokens of one update, calibrated at the lesson's 8 x (256 + 512) tokens:
#     allowance = ACTIVATION_ALLOWANCE_GB x (params / 1e9) ** 1.5 x update_tokens / 6144
# Refit it against measured peaks (the run log has both) when real numbers arrive.
ACTIVATION_ALLOWANCE_GB = 0.34
ACTIVATION_ALLOWANCE_EXPONENT = 1.5
ACTIVATION_ALLOWANCE_TOKENS = 8 * (256 + 512)

# The lesson reserves 2 GB on a 16 GB machine and 4 GB on a 128 GB one: 1/32 of the total, never under 2 GB.
OS_RESERVED_FRACTION = 1 / 32
OS_RESERVED_MIN_GB = 2.0

def lora_trainable_parameters(shape: ModelShape, rank: int, target_modules: str) -> int:
    """LoRA parameters: r*(in+out) for each targeted linear layer of every decoder layer."""
    linears = shape.linear_shapes()
    if target_modules.strip() == "all-linear":
        names = list(linears)
    else:
        names = []
        for raw in target_modules.split(","):
            key = raw.strip()
            key = key if key in linears else f"{key}_proj"
            if key not in linears:
                raise ValueError(
                    f"unknown LoRA target module {raw.strip()!r}: use all-linear or some of {', '.join(linears)}"
                )
            names.append(key)
    per_layer = sum(rank * (linears[n][0] + linears[n][1]) for n in dict.fromkeys(names))
    return per_layer * shape.num_hidden_layers


def os_reserved_default_gb(total_gb: float) -> float:
    return max(OS_RESERVED_MIN_GB, total_gb * OS_RESERVED_FRACTION)


def device_total_memory_gb() -> tuple[float, str]:
    """This machine's accelerator memory (or host RAM without one), in GB, and where the number came from."""
    from ..environment.torch_build import ACCELERATOR_BUILDS, torch_build

    if torch_build().kind not in ACCELERATOR_BUILDS:
        return host_memory_gb(), "host RAM"  # a CPU-only torch (or none): no need to pay for importing it
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.mem_get_info()[1] / GB, f"torch.cuda.mem_get_info ({torch.cuda.get_device_name(0)})"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.mps.recommended_max_memory() / GB, "torch.mps.recommended_max_memory"
    except ImportError:
        pass
    return host_memory_gb(), "host RAM"


def host_memory_gb() -> float:
    from ..environment.machine import meminfo_bytes

    total = meminfo_bytes().get("MemTotal")
    return (total if total is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / GB


@dataclass
class MemoryEstimate:
    model: str
    model_source: str
    dtype: str
    device_total_gb: float
    device_total_source: str
    os_reserved_gb: float
    terms: list[tuple[str, float, str]]  # (name, GB, how it was computed), in the lesson's order
    total_gb: float
    free_gb: float
    inputs: dict = field(default_factory=dict)
    runtime_baseline_gb: float | None = None  # measured when the run starts; None when not known yet
    lesson_difference: str | None = None  # one line where the update's row differs from the lesson's arithmetic
    # Each phase's own terms with those both hold (the weights, the adapter): "generation" adds the rollout engine's,
    # "update" the update's. Where the engine is freed before the update (CUDA), the peak is the larger of the two.
    phases_gb: dict[str, float] = field(default_factory=dict)
    freed_before_update_gb: float = 0.0  # the smaller phase's own terms, not held with the larger's (0: all add)
    freed_before_update_note: str | None = None
    cuda_terms: dict | None = None  # the CUDA terms used, with their status (cuda_terms.cuda_report)

    @property
    def fits(self) -> bool:
        return self.free_gb >= 0

    @property
    def modelled_gb(self) -> float:
        """The five terms: what the run adds above its runtime baseline (the meter's peak_memory_gb_measured), less
        what is freed before the update where the phases are apart."""
        return sum(gb for _, gb, _ in self.terms) - self.freed_before_update_gb

    @property
    def peak_gb(self) -> float:
        """The whole peak: the five terms plus the runtime baseline where it is known."""
        return self.modelled_gb + (self.runtime_baseline_gb or 0.0)

    def term(self, prefix: str) -> float | None:
        """The GB of the first term whose name starts with `prefix` (None when absent)."""
        return next((gb for name, gb, _ in self.terms if name.startswith(prefix)), None)

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "model_source": self.model_source,
            "dtype": self.dtype,
            "terms": [{"name": n, "gb": round(gb, 3), "note": note} for n, gb, note in self.terms],
            "os_reserved_gb": round(self.os_reserved_gb, 3),
            "free_gb": round(self.free_gb, 3),
            "modelled_gb": round(self.modelled_gb, 3),
            "runtime_baseline_gb": None if self.runtime_baseline_gb is None else round(self.runtime_baseline_gb, 3),
            "peak_gb": round(self.peak_gb, 3),
            "lesson_difference": self.lesson_difference,
            "phases_gb": {phase: round(gb, 3) for phase, gb in self.phases_gb.items()},
            "freed_before_update_gb": round(self.freed_before_update_gb, 3),
            "cuda_terms": self.cuda_terms,
            "total_gb": round(self.total_gb, 3),
            "device_total_source": self.device_total_source,
            "fits": self.fits,
            "inputs": self.inputs,
        }

    def render(self) -> str:
        rows = [(n, gb) for n, gb, _ in self.terms]
        if self.freed_before_update_gb:
            rows.append((FREED_ROW, -self.freed_before_update_gb))
        if self.runtime_baseline_gb is not None:
            rows.append(("Runtime baseline (measured at the start)", self.runtime_baseline_gb))
        rows += [
            ("Reserved for the operating system", self.os_reserved_gb),
            ("Free", self.free_gb),
            ("Total", self.total_gb),
        ]
        width = max(len(n) for n, _ in rows)
        decimals = 1 if self.modelled_gb >= 1 else 3  # the lesson's tenths, or enough to see a small model's terms
        lines = [
            f"GRPO memory estimate: {self.model} ({self.dtype}) on {self.total_gb:.1f} GB ({self.device_total_source})",
            "",
        ]
        for n, gb in rows:
            if n == "Free":
                lines.append(f"  {'':<{width}}  {'-' * (decimals + 8)}")
            lines.append(f"  {n:<{width}}  {gb:{decimals + 5}.{decimals}f} GB")
        lines.append("")
        lines += [f"  {n}: {note}" for n, _, note in self.terms]
        if self.freed_before_update_note:
            lines.append(f"  {FREED_ROW}: {self.freed_before_update_note}")
        if self.cuda_terms:
            lines.append(f"  CUDA terms ({self.cuda_terms['status']}): {'; '.join(self.cuda_terms['terms'])}.")
        if self.runtime_baseline_gb is None:
            lines.append(
                "  Not counted: the runtime baseline (Python, torch and the libraries before the model loads); the lab "
                "measures it at the start."
            )
        if self.lesson_difference:
            lines.append(f"  {self.lesson_difference}")
        lines.append("")
        if self.fits:
            lines.append(
                "Estimate from arithmetic, not a measurement: the lab logs the measured peak on the same basis beside "
                "it."
            )
        else:
            lines.append(
                f"Does not fit: {-self.free_gb:.1f} GB short. Set beta to 0 (drops the reference model), lower "
                "vllm_gpu_memory_utilization, fewer or shorter completions, or a smaller model."
            )
        return "\n".join(lines)


def activation_elements_per_token(shape: ModelShape, lora_rank: int) -> int:
    """Values one decoder layer keeps per token for the backward pass (no checkpointing), LoRA on all linears.

    Counted from Qwen3's layer: the two RMSNorms keep their inputs and outputs (4 x hidden); attention keeps
    q_norm's and k_norm's inputs, the rotated queries, keys and values repeated to every query head and the
    attention output (5 x heads x head_dim + kv_heads x head_dim); the MLP keeps gate, up, SiLU(gate) and their
    product (4 x intermediate); each LoRA keeps its rank-r middle (7 x rank)."""
    q = shape.num_attention_heads * shape.head_dim
    kv = shape.num_key_value_heads * shape.head_dim
    return 4 * shape.hidden_size + 5 * q + kv + 4 * shape.intermediate_size + 7 * lora_rank


def update_activations_gb(
    shape: ModelShape, settings: LabSettings, dbytes: int, sequence_tokens: int, checkpointing: bool,
    triton_fold: bool = False,
) -> tuple[float, str]:
    """The update's activations and its log-probabilities, from the model's shape and the settings.

    Without gradient checkpointing every layer keeps activation_elements_per_token values per token; with it,
    each layer keeps its input and one layer at a time is recomputed. The backward pass adds one layer's
    gradients at its peak. TRL (1.16) scores the vocabulary in tiles
    (at most TRL_TOKEN_TILE tokens x TRL_VOCAB_TILE vocabulary entries), never the whole logits tensor; the tiles'
    buffers, the final hidden states and their float32 gradient are counted. triton_fold (CUDA): TRL folds one tile
    buffer in Triton and scores the completion tokens only (cuda_terms); otherwise torch's fold over every position."""
    completions = settings.per_device_train_batch_size
    tokens = completions * sequence_tokens
    per_layer = activation_elements_per_token(shape, settings.lora_rank) * dbytes
    layers = shape.num_hidden_layers
    # The backward pass holds one layer's gradients beside what is kept (with checkpointing, beside the
    # layer it recomputes): one more layer's worth of values at the peak.
    if checkpointing:
        kept = tokens * (layers * shape.hidden_size * dbytes + 2 * per_layer)
        how = f"checkpointing: {layers} layer inputs + one layer recomputed and its gradients"
    else:
        kept = tokens * (layers + 1) * per_layer
        how = f"{layers} layers + one layer of gradients x {per_layer / 1024:.0f} KiB per token"
    if triton_fold:
        scored, copies = completions * settings.max_completion_length, TRITON_TILE_COPIES
    else:
        scored, copies = completions * max(1, sequence_tokens - 1), LOGIT_TILE_COPIES
    tile = min(scored, TRL_TOKEN_TILE) * min(shape.vocab_size, TRL_VOCAB_TILE) * dbytes * copies
    head = tile + scored * shape.hidden_size * (dbytes + 4)
    note = (
        f"{tokens} tokens ({completions} x {sequence_tokens}), {how} = {kept / GB:.2f} GB, plus {head / GB:.2f} GB for "
        "the "
        f"log-probabilities over the {shape.vocab_size} vocabulary in tiles"
    )
    if triton_fold:
        note += f" (CUDA: one tile folded in Triton over the {scored} completion tokens)"
    return (kept + head) / GB, note


def lesson_activations_gb(shape: ModelShape, settings: LabSettings, dbytes: int) -> tuple[float, float]:
    """The lesson's own arithmetic for this row: the whole logits tensor plus an allowance fitted to its two
    tables. Returns (total GB, logits GB)."""
    completions = settings.per_device_train_batch_size
    logits_gb = completions * settings.max_completion_length * shape.vocab_size * dbytes / GB
    update_tokens = completions * (settings.max_prompt_length + settings.max_completion_length)
    allowance_gb = (
        ACTIVATION_ALLOWANCE_GB
        * (shape.num_parameters / 1e9) ** ACTIVATION_ALLOWANCE_EXPONENT
        * update_tokens
        / ACTIVATION_ALLOWANCE_TOKENS
    )
    return logits_gb + allowance_gb, logits_gb


def _device_of(settings: LabSettings, device_type: str | None) -> str:
    if device_type:
        return device_type
    try:
        return get_track(settings.track).expected_device
    except Exception:  # noqa: BLE001 - an unknown track or no table: the lesson's GPU
        return "cuda"


def _device_budget(device_total_gb: float | None, os_reserved_gb: float | None) -> tuple[float, str, float]:
    """(device memory in GB, where that figure came from, the operating system's share): this machine's unless given."""
    if device_total_gb is None:
        device_total_gb, total_source = device_total_memory_gb()
    else:
        total_source = "given"
    return (
        device_total_gb,
        total_source,
        os_reserved_default_gb(device_total_gb) if os_reserved_gb is None else os_reserved_gb,
    )


def _weight_terms(shape: ModelShape, settings: LabSettings, label: str, dbytes: int, weights_gb: float) -> list:
    """The policy's weights, the reference copy when beta > 0, and the adapter with its gradients and Adam states."""
    terms = [
        (
            f"Policy weights, {label}",
            weights_gb,
            f"{shape.num_parameters / 1e9:.2f}B parameters x {dbytes} bytes ({shape.source})",
        )
    ]
    if settings.beta > 0:
        terms.append(
            (
                f"Reference model, {label}",
                weights_gb,
                f"beta {settings.beta:g} > 0 loads a frozen copy; beta 0 drops this term",
            )
        )
    lora = lora_trainable_parameters(shape, settings.lora_rank, settings.lora_target_modules)
    terms.append(
        (
            "Adapter, gradients and Adam states",
            lora * ADAPTER_BYTES_PER_PARAM / GB,
            f"{lora / 1e6:.1f}M LoRA parameters (rank {settings.lora_rank}, {settings.lora_target_modules}) x "
            f"{ADAPTER_BYTES_PER_PARAM} bytes",
        )
    )
    return terms


def _update_term(shape: ModelShape, settings: LabSettings, dbytes: int, seq_tokens: int, device: str, activations: str):
    """The update's row, from the model's shape (or, with activations="lesson", the lesson's arithmetic), and the
    one line saying how it differs from the lesson's table (None when it does not)."""
    lesson_gb, logits_gb = lesson_activations_gb(shape, settings, dbytes)
    if activations == "lesson":
        note = (
            f"{settings.per_device_train_batch_size} x {settings.max_completion_length} x {shape.vocab_size} vocab x "
            f"{dbytes} bytes = "
            f"{logits_gb:.2f} GB of logits, plus {lesson_gb - logits_gb:.2f} GB allowance for the other activations "
            "(the lesson's arithmetic)"
        )
        return ("Logits and activations for the update", lesson_gb, note), None
    update_gb, note = update_activations_gb(shape, settings, dbytes, seq_tokens, checkpointing=device != "cpu",
                                            triton_fold=folds_in_triton(device))
    differs = None
    if abs(round(update_gb, 1) - round(lesson_gb, 1)) >= 0.1:
        differs = (
            f"The lesson's table would put {lesson_gb:.1f} GB on the update's row (whole logits plus an allowance "
            "fitted to its "
            f"two tables); this estimate follows the model's shape and TRL's tiled log-probabilities: {update_gb:.2f} "
            "GB."
        )
    return ("Logits and activations for the update", update_gb, note), differs


# On a CPU the peak is the resident set, which the out-of-memory killer counts, and the meter leaves glibc's allocator
# as the run has it (setting its mmap threshold once halved the lab's speed, issue 22). glibc keeps freed heap
# resident, fragmented, and how much depends on the run's length, the model and the C library (measured here, the
# resident peak above the other terms, in copies of the update's activations: the tiny model at track c 0.03 after 3
# steps and 0.20 after 40 on the host's glibc 2.36, 0.17 after its 120 steps in the c image's glibc 2.41 and 0.37
# after the 120-step lab with its evaluations on the host; a random Qwen3-0.6B shape 0.99 after 2 steps and 1.08
# after 5, the lab on a 0.6B-shaped local folder 1.16 after 5). A quarter of a copy is the one fraction that keeps
# all of these 120-step tiny runs and 0.6B runs within 15% (docs/memory.md); a short run such as
# a smoke test is over-predicted. GPUs have no such term: max_memory_allocated is the live peak.
ALLOCATOR_RETAINED_FRACTION = 0.25


def allocator_term(update_gb: float) -> tuple[str, float, str]:
    """The freed heap glibc keeps resident on a CPU, as its own term (fitted, see ALLOCATOR_RETAINED_FRACTION)."""
    return ("Allocator's retained heap (glibc, CPU)", ALLOCATOR_RETAINED_FRACTION * update_gb,
            f"{ALLOCATOR_RETAINED_FRACTION:g} x the update's activations: freed heap glibc keeps resident over a run "
            "(fitted on the tiny model's lab and a Qwen3-0.6B shape, measured here)")


# transformers 5.17.0 (track n's trainer stack, which tracks n, s and cv ship, with torch 2.13.0) keeps more resident
# on a CPU than 5.24.0 (track c, torch 2.15.0), on which the terms above were fitted. What it keeps grows with the
# update's activations, not with the weights: the same Qwen3-0.6B-shaped folder kept 1.20 GB more than the other
# terms in a lab of 6 steps at 8 x 32 (update activations 1.42 GB) and 0.58 GB at 4 x 16 (0.49 GB), loaded from the
# folder or built from its config alike (3.769 and 3.774 GB). Like the allocator's term it is freed heap kept
# resident, more of it on this stack. Fitted, as a constant plus a fraction of the update's activations, on two
# in-process labs in track cv's venv, the measured peak above the other terms: the tiny model's default lab (0.216
# GB at 0.097 GB of activations, `git show d369336:bench/lab-colocate-20261202T004008Z.json`) and the 0.6B-shaped
# folder's lab above
# (1.197 GB, the mean of bench/lab-colocate-size-qwen3-0.6b-shape-causes.json's two in-process rounds). The runs it was
# not fitted on are in docs/rollout-paths.md ("Memory on the GPU tracks' stack"). Counted only where that transformers
# is
# installed and the run is on a CPU: a GPU's peak (max_memory_allocated) is another basis, not yet measured with it
# (images/gpu/memory_check.sh).
STACK_EXTRA_ON_CPU = {"5.17.0": (0.144, 0.744)}  # transformers version: (GB, x the update's activations)


def stack_term(update_gb: float, transformers_version: str | None) -> tuple[str, float, str] | None:
    """What the installed trainer stack keeps resident beyond the other terms on a CPU, where it was measured."""
    if transformers_version not in STACK_EXTRA_ON_CPU:
        return None
    constant_gb, fraction = STACK_EXTRA_ON_CPU[transformers_version]
    return (
        f"transformers {transformers_version}'s extra resident (CPU)",
        constant_gb + fraction * update_gb,
        f"{constant_gb:g} GB + {fraction:g} x the update's activations: freed heap track cv's in-process labs kept "
        "above the "
        "other terms, which were fitted on transformers 5.24 (fitted on the tiny model's lab and a Qwen3-0.6B-shaped "
        "lab)",
    )


def installed_transformers() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


# The body is the five terms in the lesson's order, each a line or a helper, kept together so the table reads top to
# bottom as the lesson's does.
def estimate_memory(
    model: str | dict | None,
    settings: LabSettings,
    device_total_gb: float | None = None,
    os_reserved_gb: float | None = None,
    *,
    runtime_baseline_gb: float | None = None,
    device_type: str | None = None,
    prompt_tokens: int | None = None,
    activations: str = "shape",
) -> MemoryEstimate:
    """The lesson's five terms for `model` (None: settings.model) under `settings` on a device of
    `device_total_gb` GB (this machine's, measured, when None).

    runtime_baseline_gb: what the process held before the model loaded (the meter's baseline), shown as its
        own line; the measured peak on CPU includes it, the five terms do not.
    device_type: where training runs (default: the track's device); gradient checkpointing is on off the CPU,
        as the lab's trainer sets it.
    prompt_tokens: the longest prompt of the run's data in tokens (default: max_prompt_length, an upper bound).
    activations: "shape" (from the model's shape and the settings) or "lesson" (the lesson's own arithmetic,
        which reproduces its tables).
    """
    shape = model_shape(settings.model if model is None else model)
    dtype = weights_dtype(settings.dtype, settings.track)
    dbytes = DTYPE_BYTES[dtype]
    label = DTYPE_LABEL[dtype]
    device_total_gb, total_source, os_reserved_gb = _device_budget(device_total_gb, os_reserved_gb)
    device = _device_of(settings, device_type)

    params = shape.num_parameters
    weights_gb = params * dbytes / GB
    # One update sees per_device_train_batch_size completions; TRL also generates that many per step
    # (steps_per_generation 1). At the lesson's settings both equal num_generations (8).
    completions = settings.per_device_train_batch_size
    prompt = settings.max_prompt_length if prompt_tokens is None else prompt_tokens
    seq_tokens = prompt + settings.max_completion_length
    terms: list[tuple[str, float, str]] = []

    terms += _weight_terms(shape, settings, label, dbytes, weights_gb)
    shared_gb = sum(gb for _, gb, _ in terms)

    kv_per_token = shape.kv_bytes_per_token(dbytes)
    kv_gb = completions * seq_tokens * kv_per_token / GB
    kv_note = f"{completions} sequences x {seq_tokens} tokens x {kv_per_token / 1024:g} KiB per token"
    # The rollout engine's rows are its path's (grpolab.common.rollout_paths); vLLM's CPU engine is worked out here.
    basis = MemoryBasis(settings, device, device_total_gb, label, weights_gb, kv_gb, kv_note, completions,
                        lambda: estimate_terms(settings.model if model is None else model, settings, prompt_tokens))
    engine_terms = rollout_path(settings.rollout).memory_terms(basis)
    terms += engine_terms

    update_terms, differs = _update_terms(shape, settings, dbytes, seq_tokens, device, activations)
    terms += update_terms
    apart = activations == "shape" and phases_apart(device, rollout_path(settings.rollout))
    phases = split_phases(shared_gb, engine_terms, update_terms, device, apart)
    completion_tokens = completions * settings.max_completion_length
    tile_gb = min(completion_tokens, TRL_TOKEN_TILE) * min(shape.vocab_size, TRL_VOCAB_TILE) * dbytes / GB

    used = sum(gb for _, gb, _ in terms) - phases["freed_before_update_gb"] + (runtime_baseline_gb or 0.0)
    inputs = _estimate_inputs(
        shape, settings, dtype, device, completions, prompt, device_total_gb, os_reserved_gb, activations
    )
    return MemoryEstimate(
        model=shape.name,
        model_source=shape.source,
        dtype=dtype,
        device_total_gb=device_total_gb,
        device_total_source=total_source,
        os_reserved_gb=os_reserved_gb,
        terms=terms,
        total_gb=device_total_gb,
        free_gb=device_total_gb - used - os_reserved_gb,
        inputs=inputs,
        runtime_baseline_gb=runtime_baseline_gb,
        lesson_difference=differs,
        cuda_terms=cuda_report(activations == "shape" and folds_in_triton(device), tile_gb, completion_tokens, apart),
        **phases,
    )


def _update_terms(
    shape: ModelShape, settings: LabSettings, dbytes: int, seq_tokens: int, device: str, activations: str
) -> tuple[list[tuple[str, float, str]], str | None]:
    """The update's rows: its activations, and on a CPU (activations "shape") the allocator's retained heap and the
    installed stack's extra where it was measured; with the line saying how the update's row differs from the
    lesson's (None when it does not)."""
    update_term, differs = _update_term(shape, settings, dbytes, seq_tokens, device, activations)
    terms = [update_term]
    if device == "cpu" and activations == "shape":
        terms.append(allocator_term(update_term[1]))
        extra = stack_term(update_term[1], installed_transformers())
        if extra:
            terms.append(extra)
    return terms, differs


def _estimate_inputs(
    shape: ModelShape,
    settings: LabSettings,
    dtype: str,
    device: str,
    completions: int,
    prompt: int,
    device_total_gb: float,
    os_reserved_gb: float,
    activations: str,
) -> dict:
    """The estimate's inputs, as the run log keeps them beside the terms."""
    return {
        "model": shape.name,
        "num_parameters": shape.num_parameters,
        "dtype": dtype,
        "device": device,
        "gradient_checkpointing": device != "cpu",
        "beta": settings.beta,
        "lora_rank": settings.lora_rank,
        "lora_target_modules": settings.lora_target_modules,
        "num_generations": settings.num_generations,
        "per_device_train_batch_size": completions,
        "prompt_tokens": prompt,
        "max_prompt_length": settings.max_prompt_length,
        "max_completion_length": settings.max_completion_length,
        "rollout": settings.rollout,
        "vllm_gpu_memory_utilization": settings.vllm_gpu_memory_utilization,
        "device_total_gb": device_total_gb,
        "os_reserved_gb": os_reserved_gb,
        "activations": activations,
    }


def longest_prompt_tokens(tokenizer, rows, sample: int = 256) -> int | None:
    """The longest prompt, in tokens, among the first `sample` rows as the trainer will see them (chat
    template applied). TRL pads every prompt of a batch to the longest. None when the rows have no prompt."""
    lengths = []
    rows = rows.select(range(min(sample, len(rows)))) if hasattr(rows, "select") else list(rows)[:sample]
    for row in rows:
        prompt = row.get("prompt")
        if prompt is None:
            continue
        text = (
            tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            if isinstance(prompt, list)
            else prompt
        )
        lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return max(lengths) if lengths else None


def run_estimate(
    model, settings: LabSettings, meter, tokenizer=None, rows=None, say=print, show_table: bool = True
) -> MemoryEstimate | None:
    """The estimate a run logs beside its measured peak: the meter's device and runtime baseline, the data's
    longest prompt. When no estimate can be made it says so and returns None: a run is never refused for that."""
    try:
        prompt_tokens = longest_prompt_tokens(tokenizer, rows) if tokenizer is not None and rows is not None else None
        estimate = estimate_memory(
            model,
            settings,
            runtime_baseline_gb=meter.baseline_gb,
            device_type=meter.device_type,
            prompt_tokens=prompt_tokens,
        )
    except (UnknownModel, ValueError, KeyError, OSError) as error:
        say(f"no memory estimate for this run ({error}); going on without one")
        return None
    if show_table:
        say(f"memory estimate (before the run):\n{estimate.render()}")
    return estimate
