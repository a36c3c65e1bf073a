"""The model-size part of the smoke test's projection, measured on this machine: what the lab's model adds to a step
over the smoke model's, at the lab's per-step shape.

A step is work that grows with the model (its decoder layers and its output layer, in the prefill, each decoded
token and the update) plus a cost that does not (Python, TRL, the rewards, the optimiser's bookkeeping). The
calibration measures the whole step on the smoke model. The probe times here, on the run's device and dtype, the
part that grows, for each model: one generation and one update at the lab's shape on a randomly initialised
model of that model's own shape (its config.json: depth, widths and vocabulary), with the model's own code
(transformers) and the run's LoRA adapter. The projection adds the difference:
lab step = calibration's step + probe(lab model) - probe(smoke model).

Why not the parameter ratio: measured here, the tiny model's step is almost all fixed cost, so scaling it by
1129x (the Qwen3-0.6B shape's parameters over the tiny model's) projected 5.1x the lab's step (docs/smoke-test.md).
Why the whole model and not a few of its layers scaled to its depth: measured on the Qwen3-0.6B
shape here, a 4-layer probe timed 0.27-0.32 s a layer and the output layer apart, and the projection came to 0.72
of the lab (`git show 03a54ee:bench/projection-20261202T104041Z.json`); the whole model's generation and update, timed
alone, came to
0.91 of the lab's step. Why timed and not FLOPs over a peak rate: a product's speed on a CPU depends on its rows
(a decoded token is 8 rows, the update a thousand), which only a timing at those rows gives.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..model.shape import ModelShape, local_model_config, model_shape

# What a projection across models came to against the lab it projected, measured here (docs/smoke-test.md:
# the tiny model's smoke test before a Qwen3-0.6B-shaped lab,
# bench/projection-c-in-process-qwen3-0.6b-shaped-folder-projected-from-the-tiny-model-host.json). Printed with
# every projection across models; measure it again when the probe changes.
MEASURED_PROJECTION_OVER_LAB = 0.96


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


def _timed(torch, device_type: str, work):
    """(seconds, what `work` returned), the device's queued work included."""
    _synchronise(torch, device_type)
    started = time.perf_counter()
    result = work()
    _synchronise(torch, device_type)
    return time.perf_counter() - started, result


def probe_config(base_config: dict, shape: ModelShape) -> dict:
    """A config.json of `shape` (depth, widths, vocabulary); the rest from `base_config` (the model's own config.json
    where there is one, else the smoke model's: same family on every track)."""
    config = {
        key: value
        for key, value in base_config.items()
        if key not in ("layer_types", "architectures", "_name_or_path", "auto_map")
    }
    config.update(
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        num_hidden_layers=shape.num_hidden_layers,
        vocab_size=shape.vocab_size,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        tie_word_embeddings=shape.tie_word_embeddings,
    )
    return config


def _random_model(config: dict, step: StepShape, dtype, device_type: str):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type = config.pop("model_type")
    built = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config), dtype=dtype).to(device_type)
    if step.recompute_forward:  # as TRL sets it up on an accelerator: the embeddings' output must carry a gradient
        built.gradient_checkpointing_enable()
        built.enable_input_require_grads()
    return get_peft_model(
        built,
        LoraConfig(r=step.lora_rank, lora_alpha=2 * step.lora_rank, target_modules="all-linear", lora_dropout=0.0),
    )


def model_step_seconds(config: dict, step: StepShape, dtype, device_type: str) -> float:
    """One step's generation and update at the lab's shape on a random model of `config`, timed after a short
    untimed run (a new model's first calls set up what the later ones reuse)."""
    import torch

    model = _random_model(dict(config), step, dtype, device_type)
    b, p, c = step.completions, step.prompt_tokens, step.completion_tokens
    prompts = torch.randint(1, config["vocab_size"], (b, p), device=device_type)

    def generate(tokens: int):
        with torch.no_grad():
            return model.generate(
                input_ids=prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=True,
                pad_token_id=0,
            )

    def update(sequences, tokens: int):
        if step.old_logprobs_forward:
            with torch.no_grad():
                model(input_ids=sequences, logits_to_keep=tokens + 1)
        logits = model(input_ids=sequences, logits_to_keep=tokens + 1).logits
        torch.log_softmax(logits.float(), dim=-1).mean().backward()

    update(generate(2), 2)  # untimed
    generate_s, sequences = _timed(torch, device_type, lambda: generate(c))
    update_s, _ = _timed(torch, device_type, lambda: update(sequences, c))
    return generate_s + update_s


def grown_part_seconds(base_config: dict, shape: ModelShape, step: StepShape, dtype, device_type: str) -> dict:
    """What a step costs on a random model of `shape`, at the lab's step."""
    seconds = model_step_seconds(probe_config(base_config, shape), step, dtype, device_type)
    return {"layers": shape.num_hidden_layers, "vocab_size": shape.vocab_size, "grown_s": round(seconds, 4)}


def probe(
    smoke_config: dict,
    smoke_shape: ModelShape,
    lab_config: dict,
    lab_shape: ModelShape,
    step: StepShape,
    dtype,
    device_type: str,
) -> dict:
    """Both models' grown part at the lab's step, timed here, and what the probe took."""
    started = time.perf_counter()
    smoke = grown_part_seconds(smoke_config, smoke_shape, step, dtype, device_type)
    lab = grown_part_seconds(lab_config, lab_shape, step, dtype, device_type)
    return {
        "smoke_model": smoke, "lab_model": lab, "lab_minus_smoke_s": round(lab["grown_s"] - smoke["grown_s"], 4),
        "step": step.as_record(), "dtype": str(dtype).removeprefix("torch."), "device": device_type,
        "cost_s": round(time.perf_counter() - started, 3),
    }


def measure(smoke_model_path: str, lab_model: str, step: StepShape, dtype, device_type: str) -> dict:
    """The probe for a smoke test on the model at `smoke_model_path` before a lab on `lab_model`; a probe that
    fails is recorded with why (the projection then says it is not scaled), never the smoke test's verdict."""
    started = time.perf_counter()
    try:
        smoke_config = json.loads((Path(smoke_model_path) / "config.json").read_text())
        lab_config, _ = local_model_config(
            lab_model
        )  # not here yet (a Hub model the lab downloads): the smoke model's family
        return probe(
            smoke_config,
            model_shape(smoke_config),
            lab_config or smoke_config,
            model_shape(lab_model),
            step,
            dtype,
            device_type,
        )
    except Exception as error:  # noqa: BLE001 - recorded with why; the smoke test's verdicts are its own
        return {
            "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}",
            "cost_s": round(time.perf_counter() - started, 3),
        }
