"""The model-size part of the smoke test's projection, measured on this machine: what the lab's model adds to a step
over the smoke model's, at the lab's per-step shape.

A step is work that grows with the model (its decoder layers and its output layer, in the prefill, each decoded
token and the update) plus a cost that does not (Python, TRL, the rewards, the optimiser's bookkeeping). The
calibration measures the whole step on the smoke model. The probe times here, on the run's device and dtype, the
part that grows, for each model: its decoder layers by generating and updating at the lab's shape with the
model's own code (transformers, with the run's LoRA adapter) in a few layers of the model's layer shape, and its output layer (a product with the
vocabulary, its softmax and, in the update, its gradient). The projection adds the difference:
lab step = calibration's step + grown part(lab model) - grown part(smoke model).

Why not the parameter ratio: measured here, the tiny model's step is almost all fixed cost, so scaling it by
1129x (the Qwen3-0.6B shape's parameters over the tiny model's) projected 5.1x the lab's step (README, "The
smoke test"). Why timed and not FLOPs over a peak rate: a product's speed on a CPU depends on its rows (a decoded
token is 8 rows, the update a thousand), which only a timing at those rows gives.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from .modelshape import ModelShape, local_model_config, model_shape

# The probe model's depth: a layer costs its step over its layers. Its other parts (a 256-entry vocabulary's
# embedding and output layer, the generation loop) are counted in with its layers: measured on the Qwen3-0.6B shape
# here, 1, 3, 6 and 12 layers took 0.28-0.32, 0.27-0.28, 0.27 and 0.31 s a layer, so they are next to nothing;
# the difference of two depths, tried first, timed 0.16-0.31 s a layer from one run to the next (two short timings'
# noise in one small difference).
PROBE_LAYERS = 4
# What a projection across models came to against the lab it projected, measured here (README, "The smoke test":
# the tiny model's smoke test before a Qwen3-0.6B-shaped lab, bench/projection-20261202T104041Z.json). Printed
# with every projection across models, which is not yet within 25 %.
MEASURED_PROJECTION_OVER_LAB = 0.72
PROBE_VOCAB = 256  # the layers' probe models' vocabulary: the output layer is timed on its own
OUTPUT_COLUMNS = 16384  # the output layer's vocabulary entries timed at most, the rest scaled linearly


@dataclass(frozen=True)
class StepShape:
    """One lab step, in the sizes its work has."""

    completions: int  # per step (per_device_train_batch_size)
    prompt_tokens: int  # each completion's prompt, as padded in its batch (the data's longest prompt)
    completion_tokens: int  # max_completion_length: a batch decodes until its longest completion ends
    lora_rank: int
    recompute_forward: bool  # activation checkpointing (on accelerators): the update runs the forward twice
    old_logprobs_forward: bool  # the vLLM paths: a no-grad forward for the importance-sampling correction

    def as_record(self) -> dict:
        return dict(self.__dict__)


def _synchronise(torch, device_type: str) -> None:
    if device_type == "cuda":
        torch.cuda.synchronize()
    elif device_type == "mps":
        torch.mps.synchronize()


def _timed(torch, device_type: str, work) -> float:
    _synchronise(torch, device_type)
    started = time.perf_counter()
    work()
    _synchronise(torch, device_type)
    return time.perf_counter() - started


def probe_config(base_config: dict, shape: ModelShape, layers: int) -> dict:
    """A config.json of `shape`'s layers at `layers` deep, on a small vocabulary; the rest from `base_config` (the
    model's own config.json where there is one, else the smoke model's: same family on every track)."""
    config = {key: value for key, value in base_config.items() if key not in ("layer_types", "architectures", "_name_or_path", "auto_map")}
    config.update(hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size, num_attention_heads=shape.num_attention_heads,
                  num_key_value_heads=shape.num_key_value_heads, head_dim=shape.head_dim, num_hidden_layers=layers, vocab_size=PROBE_VOCAB,
                  bos_token_id=None, eos_token_id=None, pad_token_id=0, tie_word_embeddings=True)  # fmt: skip
    return config


def _layers_model(config: dict, step: StepShape, dtype, device_type: str):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type = config.pop("model_type")
    built = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config), dtype=dtype).to(device_type)
    if step.recompute_forward:  # as TRL sets it up on an accelerator: the embeddings' output must carry a gradient
        built.gradient_checkpointing_enable()
        built.enable_input_require_grads()
    return get_peft_model(built, LoraConfig(r=step.lora_rank, lora_alpha=2 * step.lora_rank, target_modules="all-linear", lora_dropout=0.0))


def layers_step_seconds(config: dict, step: StepShape, dtype, device_type: str) -> float:
    """One step's generation and update on a probe model (config from probe_config), timed after one untimed run."""
    import torch

    model = _layers_model(dict(config), step, dtype, device_type)
    b, p, c = step.completions, step.prompt_tokens, step.completion_tokens
    prompts = torch.randint(1, PROBE_VOCAB, (b, p), device=device_type)

    def generate():
        with torch.no_grad():
            return model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=c, min_new_tokens=c,
                                  do_sample=True, pad_token_id=0)  # fmt: skip

    def update(sequences):
        if step.old_logprobs_forward:
            with torch.no_grad():
                model(input_ids=sequences, logits_to_keep=c + 1)
        logits = model(input_ids=sequences, logits_to_keep=c + 1).logits
        torch.log_softmax(logits.float(), dim=-1).mean().backward()

    sequences = generate()  # untimed: a new model's first calls set up what the later ones reuse
    update(sequences)
    return _timed(torch, device_type, generate) + _timed(torch, device_type, lambda: update(sequences))


def output_layer_seconds(shape: ModelShape, step: StepShape, dtype, device_type: str) -> float:
    """The output layer: each decoded token's logits and sample, then the update's logits over the completions,
    their log-softmax and its gradient back to the hidden states; timed on at most OUTPUT_COLUMNS of the
    vocabulary and scaled to all of it (every part is linear in the vocabulary: each entry is the same work)."""
    import torch

    b, c, h = step.completions, step.completion_tokens, shape.hidden_size
    columns = min(shape.vocab_size, OUTPUT_COLUMNS)
    weight = torch.zeros(columns, h, dtype=dtype, device=device_type)  # values do not change a product's speed
    hidden = torch.full((b * c, h), 0.01, dtype=dtype, device=device_type, requires_grad=True)

    def decode(tokens: int):
        with torch.no_grad():
            for token in range(tokens):
                torch.multinomial(torch.softmax(torch.nn.functional.linear(hidden[token * b : (token + 1) * b], weight).float(), dim=-1), 1)

    def update():
        with torch.no_grad():
            for _ in range(step.recompute_forward + step.old_logprobs_forward):
                torch.nn.functional.linear(hidden, weight)
        torch.log_softmax(torch.nn.functional.linear(hidden, weight).float(), dim=-1).mean().backward()

    decode(1)
    seconds = _timed(torch, device_type, lambda: decode(c)) + _timed(torch, device_type, update)
    return seconds * shape.vocab_size / columns


def grown_part_seconds(base_config: dict, shape: ModelShape, step: StepShape, dtype, device_type: str) -> dict:
    """What a step of `shape` costs in its layers (per layer, from the probe model) and its output layer."""
    per_layer = layers_step_seconds(probe_config(base_config, shape, PROBE_LAYERS), step, dtype, device_type) / PROBE_LAYERS
    output = output_layer_seconds(shape, step, dtype, device_type)
    return {"layer_s": round(per_layer, 4), "layers": shape.num_hidden_layers, "output_layer_s": round(output, 4),
            "grown_s": round(per_layer * shape.num_hidden_layers + output, 4)}  # fmt: skip


def probe(smoke_config: dict, smoke_shape: ModelShape, lab_config: dict, lab_shape: ModelShape, step: StepShape, dtype, device_type: str) -> dict:
    """Both models' grown part at the lab's step, timed here, and what the probe took."""
    started = time.perf_counter()
    smoke = grown_part_seconds(smoke_config, smoke_shape, step, dtype, device_type)
    lab = grown_part_seconds(lab_config, lab_shape, step, dtype, device_type)
    return {
        "smoke_model": smoke, "lab_model": lab, "lab_minus_smoke_s": round(lab["grown_s"] - smoke["grown_s"], 4),
        "step": step.as_record(), "dtype": str(dtype).removeprefix("torch."), "device": device_type,
        "cost_s": round(time.perf_counter() - started, 3),
    }  # fmt: skip


def measure(smoke_model_path: str, lab_model: str, step: StepShape, dtype, device_type: str) -> dict:
    """The probe for a smoke test on the model at `smoke_model_path` before a lab on `lab_model`; a probe that
    fails is recorded with why (the projection then says it is not scaled), never the smoke test's verdict."""
    started = time.perf_counter()
    try:
        smoke_config = json.loads((Path(smoke_model_path) / "config.json").read_text())
        lab_config, _ = local_model_config(lab_model)  # not here yet (a Hub model the lab downloads): the smoke model's family
        return probe(smoke_config, model_shape(smoke_config), lab_config or smoke_config, model_shape(lab_model), step, dtype, device_type)
    except Exception as error:  # noqa: BLE001 - recorded with why; the smoke test's verdicts are its own
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}", "cost_s": round(time.perf_counter() - started, 3)}
