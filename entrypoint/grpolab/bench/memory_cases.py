"""The memory benchmark's cases: predicted against measured peak memory, on the same basis, per case.

    python -m grpolab.bench memory --case qwen3-0.6b-shape     # one case per process: a clean baseline

Each case runs a few real GRPO steps (TRL's GRPOTrainer, a LoRA adapter, in-process rollouts; the lab's own
make_trainer) under a PeakMemoryMeter started before the model loads, then makes the estimate for the same
model, settings and runtime baseline, and prints one JSON object: the predicted terms, the measured parts and
the ratio of the modelled part (predicted / measured, baseline excluded and given beside it).

The "-shape" cases build a randomly initialised model with the exact shape of a course model from its config
(the built-in table, no download), with the tiny model's tokenizer: the memory of a run depends on the shape,
the settings and the dtype, not on what the weights learned.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

from ..memory.estimate import estimate_memory, longest_prompt_tokens
from ..model.shape import QWEN3_MODELS
from ..settings.lab_settings import LabSettings

# Small settings that finish in minutes on 2 CPU cores and still exercise every term.
SHAPE_SETTINGS = dict(
    num_generations=4,
    per_device_train_batch_size=4,
    max_completion_length=16,
    max_steps=2,
    logging_steps=1,
    train_size=16,
    lora_rank=16,
)

# A Qwen3 small enough for the tests and the GPU script's dry run (about 4 M parameters, a 4096-entry vocabulary).
SMALL_SHAPE = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 768,
    "vocab_size": 4096,
    "tie_word_embeddings": True,
}

CASES = {
    # The lab's own settings and length: glibc's retained heap grows over a run (estimate.ALLOCATOR_RETAINED_FRACTION).
    "tiny-track-c": {"model": "tiny", "track": "c", "settings": {}},
    "qwen3-0.6b-shape": {
        "model": "Qwen/Qwen3-0.6B",
        "shape": QWEN3_MODELS["Qwen/Qwen3-0.6B"],
        "track": "c",
        "settings": SHAPE_SETTINGS,
    },
    "qwen3-1.7b-shape": {
        "model": "Qwen/Qwen3-1.7B",
        "shape": QWEN3_MODELS["Qwen/Qwen3-1.7B"],
        "track": "c",
        "settings": SHAPE_SETTINGS,
    },
    # A second real-width shape whose colocate run fits in 24 GiB (trainer + vLLM's copies of 1.0B float32 weights):
    # Qwen3-1.7B's layers, 14 of its 28. Not a course model: it checks the estimate's terms at a size not fitted on.
    "qwen3-1.7b-14-layers-shape": {
        "model": "qwen3-1.7b-14-layers",
        "track": "c",
        "settings": SHAPE_SETTINGS,
        "shape": {
            **{k: v for k, v in QWEN3_MODELS["Qwen/Qwen3-1.7B"].items() if k != "num_parameters"},
            "num_hidden_layers": 14,
        },
    },
    "small-shape": {"model": "small-shape", "shape": SMALL_SHAPE, "track": "c", "settings": SHAPE_SETTINGS},
}
# The GPU script's cases: bf16, the lesson's rollout count, on a CUDA device.
GPU_SETTINGS = dict(
    num_generations=8,
    per_device_train_batch_size=8,
    max_completion_length=128,
    max_steps=3,
    logging_steps=1,
    train_size=32,
    dtype="bfloat16",
)
GPU_CASES = {
    "qwen3-0.6b-shape-bf16": {
        "model": "Qwen/Qwen3-0.6B",
        "shape": QWEN3_MODELS["Qwen/Qwen3-0.6B"],
        "track": "n",
        "settings": GPU_SETTINGS,
    },
    "qwen3-1.7b-shape-bf16": {
        "model": "Qwen/Qwen3-1.7B",
        "shape": QWEN3_MODELS["Qwen/Qwen3-1.7B"],
        "track": "n",
        "settings": GPU_SETTINGS,
    },
}
ALL_CASES = {**CASES, **GPU_CASES}
FIT_MARGIN = 1.3  # a case runs only when 1.3 x its estimate is available: the machine is shared


def case_settings(case: dict) -> LabSettings:
    from ..settings.lab_settings import resolve_settings
    from ..common.tracks import get_track

    settings = resolve_settings(get_track(case["track"]), overrides={"rollout": "inprocess", **case["settings"]})
    return replace(settings, model=case["model"], heldout_size=0)


def case_tokenizer(case: dict):
    """(tokenizer, model folder): the tiny model's own, or for a "-shape" case the tiny model's tokenizer recipe
    trained here in a second (ids beyond its ~300 tokens decode to nothing) and no folder."""
    from ..run.training import load_tokenizer

    if case["model"] == "tiny":
        from ..model.tiny import verify_tiny_model

        tiny = str(verify_tiny_model())
        return load_tokenizer(tiny), tiny
    from ..task.problems import arithmetic_splits
    from ..model.tiny import build_tokenizer

    texts = [
        f"user\n{row['prompt'][0]['content']}\nassistant\n{row['answer']}\n" for row in arithmetic_splits()["train"]
    ]
    return build_tokenizer(texts), None


def case_model(case: dict, settings: LabSettings, device_type: str, tokenizer, model_path: str | None):
    """The tiny model as the lab loads it, or a randomly initialised model of a course model's exact shape."""
    from ..run.training import load_model, torch_dtype

    dtype = torch_dtype(settings, device_type)
    if model_path:
        return load_model(model_path, dtype)
    from transformers import AutoModelForCausalLM, Qwen3Config

    shape = {k: v for k, v in case["shape"].items() if k != "num_parameters"}
    config = Qwen3Config(
        **shape,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return AutoModelForCausalLM.from_config(config, dtype=dtype)


def mark_phases(trainer, meter) -> None:
    """Close a phase of the meter around every generation, so the JSON splits the peak into loading the model,
    rollouts and updates (which of the estimate's terms meet at the peak)."""
    generate = trainer._generate
    calls = []

    def marked(prompts):
        meter.mark("update" if calls else "load")
        calls.append(prompts)
        try:
            return generate(prompts)
        finally:
            meter.mark("rollout")

    trainer._generate = marked


def run_case(name: str, device_type: str, unified_memory: bool = False, say=print) -> dict:
    """Run one case; returns the benchmark's record for it."""
    from ..task.problems import load_lab_datasets
    from ..memory.peak import PeakMemoryMeter, host_available_gb
    from ..run.checks import check_rewards
    from ..run.training import add_adapter, make_trainer, step_recorder

    case = ALL_CASES[name]
    settings = case_settings(case)
    train, _ = load_lab_datasets(settings.dataset, settings.train_size, 0, settings.seed)
    reward_funcs, _ = check_rewards(settings, train.column_names)
    tokenizer, model_path = case_tokenizer(case)
    shape_source = case_shape_source(case, model_path)
    prompt_tokens = longest_prompt_tokens(tokenizer, train)
    available = host_available_gb() if device_type == "cpu" else None
    needed = (
        estimate_memory(shape_source, settings, device_type=device_type, prompt_tokens=prompt_tokens).modelled_gb
        * FIT_MARGIN
    )
    if available is not None and needed > available:
        return {
            "case": name,
            "model": case["model"],
            "skipped": f"needs about {needed:.1f} GB and this machine has {available:.1f} GB available",
        }
    with PeakMemoryMeter(device_type, unified_memory=unified_memory) as meter:
        model = case_model(case, settings, device_type, tokenizer, model_path)
        if device_type != "cpu":
            model.to(device_type)
        peft_model, trainable, _ = add_adapter(model, settings)
        recorder = step_recorder(reward_funcs)
        with tempfile.TemporaryDirectory() as out:
            trainer = make_trainer(
                settings, peft_model, tokenizer, train, reward_funcs, device_type, Path(out), {}, [recorder]
            )
            recorder.trainer = trainer
            mark_phases(trainer, meter)
            trainer.train()
            meter.mark("update")
    estimate = estimate_memory(
        shape_source,
        settings,
        runtime_baseline_gb=meter.baseline_gb,
        device_type=device_type,
        prompt_tokens=prompt_tokens,
    )
    say(estimate.render())
    measured = meter.fields(predicted_gb=estimate.modelled_gb)
    return case_record(name, settings, device_type, estimate, measured, trainable, recorder.records)


def case_shape_source(case: dict, model_path: str | None):
    """What the estimate reads the model's shape from: the tiny model's folder, or a "-shape" case's own shape, summed
    (not the model card's round count: the random model has exactly these parameters)."""
    if model_path:
        return model_path
    return {**{k: v for k, v in case["shape"].items() if k != "num_parameters"}, "_name_or_path": case["model"]}


# The estimate's phases and the meter's part for each (mark_phases closes them): generation is the rollout phase, update
# what runs between two generations and after the last.
PHASE_PARTS = {"generation": "peak_rollout_gb", "update": "peak_update_gb"}


def phase_table(estimate, fields: dict) -> dict:
    """Predicted against measured, GB above the runtime baseline, for each phase and in total (the estimate's modelled
    part against the meter's peak). A phase the meter did not close has no measured figure."""
    parts = fields["peak_memory_parts"]
    pairs = {phase: (estimate.phases_gb[phase], parts.get(part)) for phase, part in PHASE_PARTS.items()}
    pairs["total"] = (estimate.modelled_gb, fields["peak_memory_gb_measured"])
    return {
        phase: {"predicted_gb": round(predicted, 3), "measured_gb": None if measured is None else round(measured, 3),
                "ratio": round(predicted / measured, 3) if measured else None}
        for phase, (predicted, measured) in pairs.items()
    }


RECORDED_SETTINGS = ("num_generations", "per_device_train_batch_size", "max_prompt_length", "max_completion_length",
                     "max_steps", "lora_rank", "lora_target_modules", "beta")


def case_record(name: str, settings: LabSettings, device_type: str, estimate, fields: dict, trainable: int,
                records) -> dict:
    """The benchmark's record of one case that ran: the estimate's terms against the meter's `fields` (its
    PeakMemoryMeter.fields, the estimate's modelled part given as predicted), and the steps the trainer logged."""
    return {
        "case": name,
        "model": ALL_CASES[name]["model"],
        "device": device_type,
        "dtype": estimate.dtype,
        "settings": {k: getattr(settings, k) for k in RECORDED_SETTINGS},
        "trainable_parameters": trainable,
        "steps_run": len(records),
        "completion_mean_length": [r.metrics.get("completions/mean_length") for r in records],
        "predicted": {"terms": estimate.as_dict()["terms"], "modelled_gb": round(estimate.modelled_gb, 3),
                      "freed_before_update_gb": round(estimate.freed_before_update_gb, 3),
                      "cuda_terms": estimate.cuda_terms},
        "phases": phase_table(estimate, fields),
        "measured": fields,
        "ratio_predicted_over_measured": fields["peak_memory_ratio"],
        "within_15_percent": fields["peak_memory_ratio"] is not None and abs(fields["peak_memory_ratio"] - 1) <= 0.15,
    }


def predict_case(name: str, device_type: str) -> dict:
    """The estimate a case's run is judged against, made as run_case makes it (the data's longest prompt, the case's
    shape) without running anything: what a GPU case will be held to, known on a machine without one."""
    from ..task.problems import load_lab_datasets

    case = ALL_CASES[name]
    settings = case_settings(case)
    train, _ = load_lab_datasets(settings.dataset, settings.train_size, 0, settings.seed)
    tokenizer, model_path = case_tokenizer(case)
    estimate = estimate_memory(case_shape_source(case, model_path), settings, device_type=device_type,
                               prompt_tokens=longest_prompt_tokens(tokenizer, train))
    return {"case": name, "model": case["model"], "device": device_type, "dtype": estimate.dtype,
            "predicted": {"terms": estimate.as_dict()["terms"], "modelled_gb": round(estimate.modelled_gb, 3),
                          "phases_gb": estimate.as_dict()["phases_gb"],
                          "freed_before_update_gb": round(estimate.freed_before_update_gb, 3),
                          "cuda_terms": estimate.cuda_terms}}


def main(case: str, device: str, out: str | None, unified_memory: bool = False, predict_only: bool = False) -> int:
    record = predict_case(case, device) if predict_only else run_case(case, device, unified_memory)
    if "skipped" in record:
        print(f"{case}: skipped, {record['skipped']}")
    text = json.dumps(record, indent=2)
    if out:
        Path(out).write_text(text + "\n")
    print("MEMORY-BENCH " + json.dumps(record))
    return 0


def write_shape_folder(name: str, out: str) -> str:
    """A "-shape" case's randomly initialised model and its tokenizer saved as a local model folder (float32), for
    the paths that load a model by path (vLLM colocate: the engine reads the folder). Returns the folder."""
    case = ALL_CASES[name]
    settings = replace(case_settings(case), dtype="float32")
    tokenizer, _ = case_tokenizer(case)
    model = case_model(case, settings, "cpu", tokenizer, None)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
